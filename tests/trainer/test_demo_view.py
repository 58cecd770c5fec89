"""`traj demo`'s store in `traj view`: the demo's trainer records every trained token's annotations
(its TrainConfig), so the viewer's trainer colourings (importance ratio, DIS band, advantage, value)
have values on a demo-like store: synthetic tiny-model trajectories tagged as a demo's, trained for
one policy step with the demo's run settings. And the summary says what a few steps show and where
learning is measured."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from rich.console import Console  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from tests.helpers.stores import write_synthetic_store  # noqa: E402
from tests.helpers.trajectories import VOCAB  # noqa: E402
from trajstore import audit  # noqa: E402
from trajstore.cli.demo import print_summary  # noqa: E402
from trajstore.trainer.apps.demo import DemoConfig, DemoResult  # noqa: E402
from trajstore.trainer.apps.demo.audits import demo_filter  # noqa: E402
from trajstore.trainer.apps.demo.children import echo_new_lines  # noqa: E402
from trajstore.trainer.apps.demo.config import train_config  # noqa: E402
from trajstore.trainer.config import DataConfig, ModelConfig, TrainConfig  # noqa: E402
from trajstore.trainer.loop.train import train  # noqa: E402
from trajstore.view import ViewConfig, create_app  # noqa: E402

RUN = "demo-view"
TRAINER_COLOURINGS = ("ratio", "band", "adv", "value")


def _demo_config(store: str) -> TrainConfig:
    """The demo's own trainer config (what `traj demo` hands its trainer): one warm-up, one policy step."""
    cfg = DemoConfig(store=store, run_id=RUN, model="smollm2-135m", steps=1, batch_size=4, critic_warmup_steps=1)
    return train_config(cfg, RUN, store)


def test_the_viewer_shows_the_trainer_colourings_on_a_demo_store(tmp_path):
    store = str(tmp_path / "s")
    demo = _demo_config(store)
    assert demo.run.record_tokens == 1.0  # before: 0, and every trainer colouring was greyed out on the demo's store
    write_synthetic_store(store, 8, metadata={"demo_run": RUN}, reward=1.0)
    train(TrainConfig(store=store, model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                      data=DataConfig(batch_size=4, micro_batch_size=2, max_seq_len=512, where=demo_filter(RUN)),
                      algo=demo.algo, run=demo.run))
    annotated = audit.connect(store).sql(f"SELECT DISTINCT trajectory_id FROM token_annotations WHERE run_id = '{RUN}' "
                                         "ORDER BY 1").fetchall()
    assert len(annotated) == 4, annotated  # the policy step's batch (the critic warm-up records none)
    client = TestClient(create_app(ViewConfig(store=store)))
    html = client.get(f"/t/{annotated[0][0]}?view=tokens&run={RUN}").text
    buttons = dict(re.findall(r'data-mode="(\w+)" title="[^"]*" ?(disabled)?', html))
    assert all(buttons[k] == "" for k in TRAINER_COLOURINGS), buttons  # none greyed out
    numbers = json.loads(re.search(r'<script id="numbers" type="application/json">(.*?)</script>', html).group(1))
    for k in TRAINER_COLOURINGS:
        assert sum(v is not None for v in numbers[k]) == len(numbers["lp"]), k  # every action token annotated
    assert set(numbers["band"]) <= {-1, 0, 1}


def test_the_summary_says_what_its_steps_show_and_where_learning_is_measured():
    r = DemoResult(store="/tmp/s", run_id="demo-x", episodes=[], versions_loaded=[0, 1, 2, 3, 4], steps_asked=4,
                   steps_done=4)
    buf = io.StringIO()
    print_summary(r, Console(file=buf, width=300))
    text = buf.getvalue()
    assert "These 4 policy steps show the loop running" in text and "`traj bench learning`" in text
    assert "traj view /tmp/s --run demo-x" in text.splitlines()


def test_demo_echoes_trainer_poll_lines_only_when_verbose(tmp_path: Path) -> None:
    # 89 of a demo's 464 lines were the trainer's "waiting for new trajectories" polls
    log = tmp_path / "trainer.log"
    log.write_text("memory plan: ...\nwaiting for new trajectories in s: 4 seen so far\nstep 0: critic values\n"
                   "waiting for new trajectories in s: 9 seen so far\n")
    quiet: list[str] = []
    assert echo_new_lines(log, 0, lambda m, **kw: quiet.append(m)) == log.stat().st_size
    assert [m.split("[/] ", 1)[1] for m in quiet] == ["memory plan: ...", "step 0: critic values"]
    loud: list[str] = []
    echo_new_lines(log, 0, lambda m, **kw: loud.append(m), polls=True)
    assert len(loud) == 4
