"""traj proxy records what its upstream's log-probs are on every action span: what the upstream
reports (traj serve), else ``--logprob-mode``, else null with a start-up warning naming the flag;
a flag that contradicts the upstream stops it."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from trajstore.errors import TrajstoreError
from trajstore.http.server import ServerThread
from trajstore.proxy.logprob_mode import LogprobMode, reported_mode
from trajstore.proxy.testing import fake_app
from trajstore.reader import read_trajectories


def _one_call(px_url: str, session: str, **sampling) -> None:
    r = httpx.post(f"{px_url}/s/{session}/v1/chat/completions",
                   json={"model": "fake", "messages": [{"role": "user", "content": "hi"}], **sampling})
    assert r.status_code == 200, r.text
    assert httpx.post(f"{px_url}/s/{session}/finish", json={"reward": 1.0}).json()["status"] == "completed"


def _modes(store: str) -> list[str | None]:
    return [s["logprob_mode"] for row in read_trajectories(store).to_pylist() for s in row["spans"]
            if s["kind"] == "action"]


@pytest.mark.parametrize(("reported", "flag", "expected", "source"), [
    ("processed", "auto", "processed", "upstream"),       # traj serve says it
    (None, "raw", "raw", "--logprob-mode"),                # vLLM started without --logprobs-mode
    ("processed", "processed", "processed", "upstream"),   # the flag agrees with the upstream
])
def test_every_action_span_records_the_mode_the_proxy_learnt(start_proxy, tmp_path, reported, flag, expected,
                                                             source):
    with ServerThread(fake_app(config={"logprob_mode": reported})) as up:
        px = start_proxy(up.url, logprob_mode=flag)
        stats = httpx.get(f"{px.url}/proxy/stats").json()
        assert (stats["logprob_mode"], stats["logprob_mode_source"]) == (expected, source)
        _one_call(px.url, "a", temperature=0.7, top_p=0.8)
        _one_call(px.url, "b")
    assert _modes(str(tmp_path / "store")) == [expected, expected]


def test_an_engine_that_does_not_say_gets_a_warning_naming_the_flag_and_null_spans(start_proxy, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="trajstore.proxy")
    with ServerThread(fake_app()) as up:
        px = start_proxy(up.url)
        assert httpx.get(f"{px.url}/health").json()["logprob_mode"] is None
        _one_call(px.url, "a", temperature=0.7)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "logprob" in r.getMessage()]
    assert len(warned) == 1
    assert "--logprobs-mode processed_logprobs" in warned[0] and "--logprob-mode processed" in warned[0]
    assert "logprob_mode null" in warned[0] and "trains as processed" in warned[0]
    assert _modes(str(tmp_path / "store")) == [None]


def _ask(app, option: str) -> LogprobMode:
    async def run() -> LogprobMode:
        m = LogprobMode(option, "vllm")  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://up") as client:
            await m.ask(client, {})
        return m
    return asyncio.run(run())


def test_a_flag_that_contradicts_the_upstream_stops_the_proxy() -> None:
    with pytest.raises(TrajstoreError, match=r"--logprob-mode raw but the upstream reports logprob_mode 'processed'"):
        _ask(fake_app(config={"logprob_mode": "processed"}), "raw")
    m = _ask(fake_app(), "auto")
    assert m.asked and m.mode is None and "does not report it" in m.describe()
    with pytest.raises(TrajstoreError, match="not one of"):
        reported_mode({"data": [{"id": "m", "logprob_mode": "logits"}]})


def test_an_unreachable_upstream_is_asked_again() -> None:
    async def run() -> LogprobMode:
        m = LogprobMode("auto", "sglang")
        async with httpx.AsyncClient(base_url="http://127.0.0.1:9", timeout=1.0) as client:  # nothing listens
            await m.ask(client, {})
        return m
    m = asyncio.run(run())
    assert not m.asked and m.mode is None
    assert "did not answer" in m.describe() and "--logprob-mode tempered" in m.describe()


def test_a_store_from_a_raw_mode_engine_with_top_p_is_refused_by_traj_train_in_one_line(start_proxy, tmp_path):
    """vLLM's default (raw_logprobs) behind the proxy, sampled with top-p: traj train refuses the
    store before writing anything, in one line naming the spans and the engine setting."""
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from tests.helpers.training import assert_nothing_written
    from trajstore.cli.main import app

    with ServerThread(fake_app()) as up:  # reports no mode, as vLLM
        px = start_proxy(up.url, logprob_mode="raw", tokenizer="tiny-llama")
        for i in range(2):
            _one_call(px.url, f"s{i}", temperature=1.0, top_p=0.9)
    store = tmp_path / "store"
    assert _modes(str(store)) == ["raw", "raw"]
    r = CliRunner().invoke(app, ["train", str(store), "--model", "tiny-llama", "--run", "r", "--batch-size", "2",
                                 "--critic-warmup-steps", "0"], env={"TRAJ_TRACEBACK": ""})
    assert r.exit_code == 1, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert "2 trajectories (2 action spans) with raw log-probs" in line
    assert "span 1;" in line and "--logprobs-mode processed_logprobs" in line and "nothing was written" in line
    assert "Traceback" not in r.output
    assert_nothing_written(store)
