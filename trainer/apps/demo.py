"""``traj demo``: the whole asynchronous loop on real model output, on one machine.

The real topology, as child processes: ``traj serve`` samples, ``traj proxy`` records every
call into a local store and has the server load each version the trainer publishes, and the
trainer (``traj train --follow``) consumes trajectories as they arrive. Agents in this process
play guess-the-number through the proxy with the official ``openai`` client. At the end the
staleness and clip audits, the reward per policy version and the critic's explained variance
are read back from the store with DuckDB. This process never imports torch.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trajstore.errors import TrajstoreError
from trajstore.display import plural
from trajstore.hub import SMOLLM2_ALIAS
from trajstore.proxy.config import GRACEFUL_SHUTDOWN_S

from trajstore.trainer.loop.config import check_training_run_id
from trajstore.trainer.apps.envs.guess_chat import EpisodeSummary, GuessNumberEnv

if TYPE_CHECKING:
    from rich.console import Console

    from trajstore.trainer.loop.config import TrainConfig

DEFAULT_STORE = "demo-store"
TRAINER_LOG_FILE = "trainer.log"
"""The trainer child's stdout and stderr, kept at ``runs/<run_id>/trainer.log`` in the store."""
DEMO_CONFIG_FILE = "demo-config.json"
"""The resolved :class:`DemoConfig`, saved at ``runs/<run_id>/demo-config.json``."""
SERVE_LOG_FILE = "serve.log"
"""``traj serve``'s output, at ``runs/<run_id>/serve.log``."""
PROXY_LOG_FILE = "proxy.log"
"""``traj proxy``'s output, at ``runs/<run_id>/proxy.log``."""
DEMO_TRAIN_CONFIG_FILE = "demo-train-config.json"
"""The :class:`~trajstore.trainer.loop.config.TrainConfig` handed to the trainer child (the trainer
also saves its own resolved copy as ``runs/<run_id>/config.json``)."""


TRAINER_FINISH_S = 300.0
"""Once the agents are done, the trainer gets at least this long to train on what is stored
and exit (s)."""


class DemoError(TrajstoreError):
    """The demo could not run to the end (the trainer failed or timed out)."""


class DemoConfig(BaseModel):
    """Sizes of the demo; the defaults finish in a few minutes on 2 CPU cores with SmolLM2-135M."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str | None) -> str | None:  # refused before anything starts, as traj train does
        return v if v is None else check_training_run_id(v)

    store: str = Field(DEFAULT_STORE, description="local store directory (created; reused across demos)")
    model: str = Field(SMOLLM2_ALIAS, description="policy: 'smollm2-135m', a local HF directory, a .gguf file, "
                                                  "or 'tiny-llama' (random weights, for tests)")
    tokenizer: str = Field(SMOLLM2_ALIAS, description="tokenizer that renders the chats (the model's own for "
                                                      "real models; SmolLM2's for the tiny test model)")
    run_id: str | None = Field(None, description="training run id (default demo-<UTC time>)")
    steps: int = Field(4, ge=1, description="policy updates the trainer makes")
    critic_warmup_steps: int = Field(1, ge=0, description="critic-only batches before the policy updates")
    batch_size: int = Field(4, ge=1, description="trajectories per training step")
    micro_batch_size: int = Field(2, ge=1, description="trajectories per forward/backward pass")
    episodes: int | None = Field(None, ge=1, description="episodes the agents play at most (default: until the "
                                                         "trainer finishes, at most 3x what it consumes)")
    max_ahead_batches: int = Field(2, ge=1, description="the proxy holds new episodes while this many step "
                                                        "batches are running or waiting for the trainer "
                                                        "(its --max-staleness is this minus 1, AReaL's eta)")
    max_new_tokens: int = Field(24, ge=1, description="tokens per action at most")
    max_turns: int = Field(4, ge=3, description="guesses per episode (turns)")
    high: int = Field(20, ge=2, description="the hidden number is in [1, high]")
    policy_lr: float = Field(1e-5, gt=0, description="policy learning rate (10x SAO's 1e-6: over a few "
                                                     "steps SAO's rate leaves every ratio at 1.000)")
    critic_lr: float = Field(5e-5, gt=0, description="critic learning rate")
    keep_weights: bool = Field(False, description="keep every published policy version and the trainer's "
                                                  "checkpoint (about 0.5 GB per SmolLM2 version, 2 GB per "
                                                  "checkpoint); by default only the final version is kept")
    seed: int = Field(0, description="seeds tasks, sampling and (tiny models) initial weights")
    timeout_s: float = Field(1800.0, gt=0, description="no new episode starts after this many seconds; the "
                                                       "trainer then has at most 5 more minutes to finish")

    def resolved_run_id(self) -> str:
        return self.run_id or "demo-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


@dataclass
class DemoResult:
    """What a demo produced (everything is also in the store).

    Attributes:
        store: absolute path of the store.
        run_id: the training run.
        episodes: one summary per episode the worker played, in order.
        versions_loaded: policy versions the rollout server loaded (weight sync), in order.
        calls_by_version: model calls the proxy recorded per policy version, counted in the store
            (action spans of the run's trajectories, aborted ones included) once the proxy has
            stopped: its live /proxy/stats, read once a second, missed the last calls.
        reward_by_version: rows {policy_version, trajectories, mean_reward, solved, consumed}.
        staleness: rows of the staleness audit for the run (``staleness_report(...).by_run``).
        clip: rows of the clip audit per step (``clip_report(...).by_step``).
        explained_variance: rows {step, explained_variance} of the critic before each update
            (1 - Var(R - V) / Var(R); above 0 means the critic predicts returns better than their mean).
        freed_bytes: bytes of superseded policy versions and checkpoints removed at the end.
        seconds: wall time (s).
        steps_asked: policy steps the trainer was asked for (``DemoConfig.steps``).
        steps_done: policy steps it made (from the run's ``step_metrics``); fewer than asked
            when the agents stopped (``timeout_s``, ``episodes``) before enough completed
            trajectories existed: see :attr:`shortfall`.
    """

    store: str
    run_id: str
    episodes: list[EpisodeSummary]
    versions_loaded: list[int]
    calls_by_version: dict[int, int] = field(default_factory=dict)
    reward_by_version: list[dict[str, Any]] = field(default_factory=list)
    staleness: list[dict[str, Any]] = field(default_factory=list)
    staleness_histogram: list[dict[str, Any]] = field(default_factory=list)
    clip: list[dict[str, Any]] = field(default_factory=list)
    explained_variance: list[dict[str, Any]] = field(default_factory=list)
    freed_bytes: int = 0
    seconds: float = 0.0
    steps_asked: int = 0
    steps_done: int = 0

    @property
    def shortfall(self) -> str | None:
        """A plain sentence when the trainer made fewer policy steps than asked, or when the
        rollout server never loaded a version the trainer published (weight sync failed), else None."""
        if self.steps_done < self.steps_asked:
            return (f"the trainer made {self.steps_done} of the {self.steps_asked} policy steps asked for: the "
                    f"agents stopped before enough completed episodes existed (see runs/{self.run_id}/trainer.log); "
                    "the audits below cover only what was trained")
        if self.steps_done >= 2 and not any(v >= 1 for v in self.versions_loaded):
            return (f"the rollout server never loaded a policy version the trainer published (see "
                    f"runs/{self.run_id}/proxy.log and serve.log): every episode ran on v0, so the staleness "
                    "below comes from the trainer moving ahead alone")
        return None

    @property
    def policy_versions_seen(self) -> list[int]:
        """Distinct policy versions that generated actions in this demo."""
        return sorted({v for e in self.episodes for v in e.policy_versions})


def demo_filter(run_id: str) -> str:
    """DuckDB predicate selecting this demo's trajectories (the store may hold earlier demos)."""
    return f"json_extract_string(metadata, '$.demo_run') = '{run_id}'"


def proxy_run_filter(run_id: str) -> str:
    """DuckDB predicate selecting every trajectory the demo's proxy wrote, aborted ones included:
    the proxy tags them with its --follow-run (metadata ``run_id``), while ``demo_run`` comes with
    an agent's /finish, which an episode cut short never sent."""
    from trajstore.proxy.recorder import PROXY_SOURCE

    return f"source = '{PROXY_SOURCE}' AND json_extract_string(metadata, '$.run_id') = '{run_id}'"


def _model_identity(cfg: DemoConfig) -> str:
    from trajstore.hub import resolve_model

    return resolve_model(cfg.model).name


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def train_config(cfg: DemoConfig, run_id: str, store: str) -> TrainConfig:
    """The trainer's config for a demo: follow the store, stop after `cfg.steps` policy steps,
    publish every step, read only this demo's trajectories."""
    from trajstore.trainer.loop.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig

    tiny = cfg.model.startswith("tiny-")
    return TrainConfig(
        store=store,
        model=ModelConfig(name=cfg.model, tokenizer=_tokenizer_identity(cfg) if tiny else None,
                          tiny_vocab_size=_vocab_size(cfg) if tiny else 256, seed=cfg.seed),
        # no idle timeout: the trainer waits as long as the demo's agents play (an episode batch
        # took 165 s on a loaded 2-core machine); the demo tells it when they are done
        # (:func:`stop_waiting_when_closed`)
        data=DataConfig(batch_size=cfg.batch_size, micro_batch_size=cfg.micro_batch_size, max_seq_len=4096,
                        where=f"{demo_filter(run_id)} AND status = 'completed'", follow=True, poll_interval_s=0.5,
                        idle_timeout_s=None),
        optim=OptimConfig(policy_lr=cfg.policy_lr, critic_lr=cfg.critic_lr),
        algo=AlgoConfig(critic_warmup_steps=cfg.critic_warmup_steps),
        run=RunConfig(run_id=run_id, max_steps=cfg.steps, publish_every=1, checkpoint_every=10**6,
                      progress=False),
    )


def _tokenizer_identity(cfg: DemoConfig) -> str:
    from trajstore.hub import resolve_model

    return resolve_model(cfg.tokenizer).name


def _vocab_size(cfg: DemoConfig) -> int:
    from trajstore.hub import load_tokenizer

    return len(load_tokenizer(cfg.tokenizer))


def _start_trainer(config: TrainConfig, config_path: Path, log_path: Path, threads: int) -> subprocess.Popen[bytes]:
    """Start ``traj train``'s library entry (:func:`trajstore.trainer.loop.train.train`) in a child
    process with `threads` torch threads, its output going to `log_path`. The child waits for
    data while its stdin (a pipe from this process) is open; close it when no more episodes
    will come."""
    config_path.write_text(config.to_json())
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1")
    cmd = [sys.executable, "-m", "trajstore.trainer.apps.demo", "train-child", str(config_path), str(threads)]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env)


PRODUCERS_DONE_GRACE_S = 10.0
"""Once the demo's agents are done, the trainer stops after this long without new data (every
finished episode is already durable then: ``/finish`` returns after the write)."""


def stop_waiting_when_closed(fd: int, data: Any, grace_s: float = PRODUCERS_DONE_GRACE_S) -> threading.Thread:
    """Let a following trainer wait for data as long as the pipe `fd` is open, then at most `grace_s`.

    A daemon thread reads file descriptor `fd` (the demo's end of the pipe stays open while its
    agents play; it also closes when the demo process dies) and at end of file sets
    ``data.idle_timeout_s`` (the live :class:`~trajstore.trainer.loop.config.DataConfig` of the
    trainer's stream, which reads it at every empty poll) to `grace_s`. It reads the raw
    descriptor: a daemon thread blocked inside ``sys.stdin.buffer.read`` holds the buffer's lock
    and aborts the interpreter at exit ("could not acquire lock for <stdin>"). Returns the thread.
    """

    def watch() -> None:
        while os.read(fd, 4096):
            pass
        data.idle_timeout_s = grace_s

    th = threading.Thread(target=watch, name="demo-producers-watch", daemon=True)
    th.start()
    return th


def _train_child(config_path: str, threads: int) -> None:
    """The trainer process of a demo: load the saved config and train while the demo plays."""
    import torch

    from trajstore.trainer.loop.config import TrainConfig
    from trajstore.trainer.loop.setup import setup
    from trajstore.trainer.loop.train import train

    torch.set_num_threads(threads)
    cfg = TrainConfig.from_json(Path(config_path).read_text())
    tr = setup(cfg)
    stop_waiting_when_closed(sys.stdin.fileno(), tr.stream.cfg)
    summary = train(cfg, trainer=tr)
    print(f"trainer done: {plural(summary.iterations, 'iteration')}, {plural(summary.steps, 'policy step')}, "
          f"final version v{summary.version}", flush=True)


def _echo_new_lines(path: Path, pos: int, say: Any) -> int:
    """Print the trainer log's complete lines after byte `pos`; return the new position."""
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            data = fh.read()
    except OSError:
        return pos
    from rich.markup import escape

    end = data.rfind(b"\n") + 1
    for line in data[:end].decode(errors="replace").split("\n"):
        line = line.rsplit("\r", 1)[-1]  # a progress bar redraws with carriage returns
        if line.strip():
            say(f"[dim]trainer |[/] {escape(line)}", highlight=False)
    return pos + end


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no trainer log)"


def _traj_child(args: list[str], log_path: Path, threads: int | None = None) -> subprocess.Popen[bytes]:
    """A ``traj`` command of this interpreter as a child process, its output going to `log_path`."""
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1")
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", *args]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, what: str, deadline: float) -> None:
    import httpx

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"{what} exited with code {proc.returncode}; log: {log}\n{_tail(log)}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise DemoError(f"{what} did not start in time; log: {log}\n{_tail(log)}")


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
    """SIGTERM (the proxy then writes its open episodes as aborted), SIGKILL after `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def play_episode(base_url: str, env: GuessNumberEnv, *, model: str, max_new_tokens: int,
                 metadata: dict[str, Any]) -> EpisodeSummary:
    """One guess-the-number episode by an agent written against the official ``openai`` client,
    whose only setting is the base URL (``.../s/<session>/v1`` of ``traj proxy``; the key is a
    placeholder the client insists on). The proxy records the calls; the agent ends the episode
    with ``POST .../s/<session>/finish`` and its reward.

    Raises:
        openai.APIError: a call failed (the proxy then records the episode as failed or aborted).
    """
    import httpx
    import openai

    t0 = time.perf_counter()
    client = openai.OpenAI(base_url=base_url, api_key="unused")
    messages: list[dict[str, str]] = [dict(m) for m in env.reset()]
    while True:
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=max_new_tokens,
                                           temperature=1.0, top_p=1.0)
        text = r.choices[0].message.content or ""
        reply = env.step(text)
        if reply.done:
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": reply.text}]
    raw = {"reward": reply.reward, "solved": reply.reward == 1.0, "guesses": env.guesses, "verdict": reply.text}
    done = httpx.post(base_url.removesuffix("/v1") + "/finish", timeout=120, json={
        "status": "completed", "reward": reply.reward, "reward_raw": raw, "prompt_id": env.prompt_id,
        "metadata": {**metadata, "env": "guess-number", "target": env.target, "low": env.low, "high": env.high,
                     "max_turns": env.max_turns}}).json()
    ids = done.get("trajectories") or ["?"]
    return EpisodeSummary(ids[0], env.prompt_id, float(reply.reward or 0.0), reply.reward == 1.0,
                          len(done.get("policy_versions") or []), list(done.get("policy_versions") or []),
                          int(done.get("num_tokens") or 0), time.perf_counter() - t0)


def run_demo(cfg: DemoConfig, *, console: Console | None = None) -> DemoResult:
    """Run the asynchronous loop as its real topology: ``traj serve`` (the rollout server),
    ``traj proxy`` (records every call, has the server load each published version, bounds
    staleness) and ``traj train --follow`` (consumes the store, publishes versions) as child
    processes; agents play episodes through the proxy with the official ``openai`` client.

    Args:
        cfg: sizes and paths.
        console: rich console for progress lines (None = quiet).

    Returns:
        The :class:`DemoResult` with the audits read back from the store.

    Raises:
        DemoError: a child process failed (its log tail is in the message) or the demo ran past
            ``cfg.timeout_s``.
    """
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    import httpx

    from trajstore.store import RUNS_DIR, TRAJECTORIES_DIR, open_store

    t0 = time.monotonic()
    deadline = t0 + cfg.timeout_s
    run_id = cfg.resolved_run_id()
    store = open_store(cfg.store)
    if not store.is_local:
        raise ValueError(f"traj demo runs on a local store; got {cfg.store!r}")
    run_dir = Path(store.path(RUNS_DIR, run_id))
    run_dir.mkdir(parents=True, exist_ok=True)
    # an empty trajectories/ (what StoreWriter makes) marks the folder as a store before the demo's
    # `traj proxy --store` child checks it: runs/<id>/ holds only logs until the trainer writes config.json
    Path(store.path(TRAJECTORIES_DIR)).mkdir(exist_ok=True)
    log_path = run_dir / TRAINER_LOG_FILE
    (run_dir / DEMO_CONFIG_FILE).write_text(cfg.model_copy(update={"run_id": run_id}).model_dump_json(indent=2))
    def say(*args: Any, **kw: Any) -> None:  # soft wrap: rich never breaks a line mid-phrase
        if console is not None:
            console.print(*args, soft_wrap=True, **kw)

    cores = _cpu_count()
    trainer_threads = max(1, cores - 1)
    say(f"[bold]traj demo[/] run [cyan]{run_id}[/], store [cyan]{store.uri}[/] ({cores} cores)")
    tcfg = train_config(cfg, run_id, store.uri)
    serve_port, proxy_port = _free_port(), _free_port()
    tiny = cfg.model.startswith("tiny-")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    episodes: list[EpisodeSummary] = []
    stats: dict[str, Any] = {}
    try:
        say(f"starting traj serve --model {cfg.model} (loading the model takes a while) ...")
        procs["serve"] = _traj_child(
            ["serve", "--model", cfg.model, "--tokenizer", cfg.tokenizer, "--port", str(serve_port),
             "--threads", "1", "--seed", str(cfg.seed), "--max-batch-size", str(cfg.batch_size)],
            run_dir / SERVE_LOG_FILE)
        say(f"starting traj train --follow ({plural(trainer_threads, 'thread')}): "
            f"{plural(cfg.steps, 'policy step')} of {plural(cfg.batch_size, 'trajectory', 'trajectories')} after "
            f"{plural(cfg.critic_warmup_steps, 'critic warm-up step')} ...", highlight=False)
        procs["trainer"] = _start_trainer(tcfg, run_dir / DEMO_TRAIN_CONFIG_FILE, log_path, trainer_threads)
        serve_url = f"http://127.0.0.1:{serve_port}"
        _wait_ready(serve_url + "/health", procs["serve"], run_dir / SERVE_LOG_FILE, "traj serve", deadline)
        say(f"traj serve is up at {serve_url}; starting traj proxy (weight sync on, at most "
            f"{plural(cfg.max_ahead_batches, 'batch', 'batches')} running or waiting for the trainer) ...")
        procs["proxy"] = _traj_child(
            ["proxy", "--upstream", serve_url, "--store", store.uri, "--port", str(proxy_port), "--follow-run", run_id,
             "--tokenizer", _tokenizer_identity(cfg) if tiny else _model_identity(cfg), "--poll", "0.5",
             "--max-staleness", str(cfg.max_ahead_batches - 1), "--batch-size", str(cfg.batch_size),
             "--hold-timeout", str(int(cfg.timeout_s)), "--session-timeout", str(int(cfg.timeout_s))],
            run_dir / PROXY_LOG_FILE)
        proxy_url = f"http://127.0.0.1:{proxy_port}"
        _wait_ready(proxy_url + "/health", procs["proxy"], run_dir / PROXY_LOG_FILE, "traj proxy", deadline)
        say(f"traj proxy is up: agents use base URL {proxy_url}/s/<session>/v1")

        needed = (cfg.steps + cfg.critic_warmup_steps) * cfg.batch_size
        max_episodes = cfg.episodes or 3 * needed
        rng = random.Random(cfg.seed)
        trainer = procs["trainer"]
        log_pos, loads_seen = 0, 0
        started, cut_short, stopping = 0, 0, False
        with ThreadPoolExecutor(max_workers=cfg.batch_size, thread_name_prefix="agent") as pool:
            running: set[Future[EpisodeSummary]] = set()
            number: dict[Future[EpisodeSummary], int] = {}  # the N of session <run>-epN (the stored id)
            while True:
                while (trainer.poll() is None and started < max_episodes and len(running) < cfg.batch_size
                       and time.monotonic() < deadline):
                    env = GuessNumberEnv.sample(rng, high=cfg.high, max_turns=cfg.max_turns)
                    started += 1
                    fut = pool.submit(play_episode, f"{proxy_url}/s/{run_id}-ep{started}/v1", env,
                                      model=cfg.model, max_new_tokens=cfg.max_new_tokens,
                                      metadata={"demo_run": run_id})
                    running.add(fut)
                    number[fut] = started
                if not running:
                    break
                finished, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                log_pos = _echo_new_lines(log_path, log_pos, say)
                try:
                    stats = httpx.get(proxy_url + "/proxy/stats", timeout=5).json()
                except (httpx.HTTPError, ValueError):
                    pass
                for load in stats.get("weight_loads", [])[loads_seen:]:
                    say(f"[green]traj serve loaded policy v{load['version']}[/] ({load['seconds']:.1f}s)")
                loads_seen = len(stats.get("weight_loads", []))
                for f in finished:
                    try:
                        e = f.result()
                    except Exception as exc:  # noqa: BLE001 - an episode cut short when the demo stops
                        if stopping:  # expected: counted and explained once below, not one alarming line each
                            cut_short += 1
                        else:
                            from rich.markup import escape

                            say(f"[yellow]episode ended early: {escape(f'{type(exc).__name__}: {exc}')}[/]")
                        continue
                    episodes.append(e)
                    vs = sorted(set(e.policy_versions))
                    # numbered as stored (trajectory id <run>-epN...), not in finishing order
                    say(f"episode {number.pop(f):3d}  policy v{','.join(map(str, vs)):<4} reward {e.reward:.2f} "
                        f"{'solved' if e.solved else '      '} {e.num_actions} turns {e.num_tokens:4d} tokens "
                        f"{e.seconds:5.1f}s", highlight=False)
                if trainer.poll() is not None or time.monotonic() >= deadline:
                    stopping = True
                    # held and in-flight episodes end (written as aborted); wait past the proxy's
                    # own graceful shutdown, or the SIGKILL lost the episodes it was about to write
                    _stop(procs.get("proxy"), timeout=GRACEFUL_SHUTDOWN_S + 30)
        if cut_short:
            say(f"{plural(cut_short, 'episode')} in flight {'was' if cut_short == 1 else 'were'} cut short when the "
                "trainer finished and the demo stopped the proxy (expected: those with recorded calls are stored as "
                "aborted, and not trained on)", highlight=False)
        # the trainer often finishes first (it made its steps): its last lines first, then no waiting
        log_pos = _echo_new_lines(log_path, log_pos, say)
        say(f"agents done: {len(episodes)} episodes; "
            + ("waiting for the trainer ..." if trainer.poll() is None else "the trainer had already finished"))
        if trainer.stdin is not None:  # no more episodes: the trainer stops once the store has no more
            trainer.stdin.close()
        try:
            code = trainer.wait(timeout=max(TRAINER_FINISH_S, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise DemoError(f"the trainer did not finish within {cfg.timeout_s:.0f}s (+{TRAINER_FINISH_S:.0f}s); "
                            f"log: {log_path}\n{_tail(log_path)}") from None
        _echo_new_lines(log_path, log_pos, say)
    finally:
        for name in ("proxy", "serve", "trainer"):
            _stop(procs.get(name), timeout=GRACEFUL_SHUTDOWN_S + 30 if name == "proxy" else 30.0)
    if code != 0:
        raise DemoError(f"the trainer exited with code {code}; log: {log_path}\n{_tail(log_path)}")
    result = DemoResult(store=store.uri, run_id=run_id, episodes=episodes,
                        versions_loaded=[w["version"] for w in stats.get("weight_loads", [])],
                        steps_asked=cfg.steps)
    _read_audits(result)
    if result.shortfall:
        say(f"[bold red]WARNING: {result.shortfall}[/]")
    if not cfg.keep_weights:
        result.freed_bytes = prune_weights(store, run_id)
    result.seconds = time.monotonic() - t0
    return result


def _tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def prune_weights(store: Any, run_id: str) -> int:
    """Remove a finished demo run's superseded policy versions (all but the latest) and its
    checkpoints (a demo is never resumed); return the bytes freed. Local stores only."""
    import shutil

    from trajstore.store import RUNS_DIR
    from trajstore.trainer.loop.checkpoint import CHECKPOINTS_DIR
    from trajstore.policies import latest_policy_version, list_policy_versions, version_dir

    latest = latest_policy_version(store, run_id)
    doomed = [store.path(version_dir(run_id, v)) for v in list_policy_versions(store, run_id) if v != latest]
    doomed.append(store.path(RUNS_DIR, run_id, CHECKPOINTS_DIR))
    freed = 0
    for path in doomed:
        if os.path.isdir(path):
            freed += _tree_bytes(path)
            shutil.rmtree(path)
    return freed


def _rows(rel: Any) -> list[dict[str, Any]]:
    cols = rel.columns
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def _read_audits(result: DemoResult) -> None:
    from trajstore import audit

    conn = audit.connect(result.store)
    where = demo_filter(result.run_id)
    st = audit.staleness_report(conn, where=where, run=result.run_id)
    result.staleness = _rows(st.by_run)
    result.staleness_histogram = _rows(st.histogram)
    result.clip = _rows(audit.clip_report(conn, where=where, run=result.run_id).by_step)
    result.reward_by_version = _rows(audit.sql(conn, reward_by_version_sql(result.run_id)))
    result.explained_variance = _rows(audit.sql(conn, (
        "SELECT step, \"value/explained_variance\" AS explained_variance FROM step_metrics WHERE run_id = "
        f"'{result.run_id}' ORDER BY step")))
    result.calls_by_version = {int(r["policy_version"]): int(r["calls"]) for r in _rows(audit.sql(conn, (
        "SELECT policy_version, count(*) AS calls FROM spans WHERE kind = 'action' AND policy_version IS NOT NULL "
        f"AND trajectory_id IN (SELECT trajectory_id FROM trajectories WHERE {proxy_run_filter(result.run_id)}) "
        "GROUP BY 1 ORDER BY 1")))}
    # critic warm-up iterations are recorded as step -1; policy steps count from 0
    result.steps_done = len({r["step"] for r in result.explained_variance if r["step"] is not None and r["step"] >= 0})


def reward_by_version_sql(run_id: str) -> str:
    """Per policy version that generated a completed demo trajectory (its newest action span): trajectories,
    mean reward, share solved (reward = 1) and how many the run consumed."""
    return (
        "SELECT t.max_policy_version AS policy_version, count(*) AS trajectories, "
        "round(avg(t.reward), 3) AS mean_reward, round(avg(CAST(t.reward = 1 AS DOUBLE)), 3) AS solved, "
        f"count(c.trajectory_id) AS consumed FROM trajectories t LEFT JOIN (SELECT DISTINCT trajectory_id FROM "
        f"consumed WHERE run_id = '{run_id}') c USING (trajectory_id) WHERE {demo_filter(run_id)} "
        "AND t.status = 'completed' "
        "GROUP BY ALL ORDER BY policy_version")


def print_summary(result: DemoResult, console: Console) -> None:
    """Render the audits and where to look next (tables through :mod:`trajstore.display`, as
    every command prints them)."""
    from trajstore.display import TableData, print_command, render_tables

    from trajstore.audit.reports import STALENESS_HISTOGRAM_NOTE

    def table(title: str, rows: list[dict[str, Any]], cols: list[str], keys: list[str],
              note: str | None = None) -> TableData:
        return TableData(title, cols, [tuple(r.get(c) for c in cols) for r in rows], keys=keys, shares=["solved"],
                         note=note)

    warmup_note = ("step -1: critic warm-up, the critic trained alone before the first policy step"
                   if any(r.get("step") == -1 for r in result.clip + result.explained_variance) else None)
    render_tables([
        table("reward per policy version", result.reward_by_version,
              ["policy_version", "trajectories", "mean_reward", "solved", "consumed"], ["policy_version"]),
        table("model calls per policy version, as recorded by traj proxy",
              [{"policy_version": v, "calls": n} for v, n in sorted(result.calls_by_version.items())],
              ["policy_version", "calls"], ["policy_version"]),
        table("staleness of trained data (trainer version - policy version, in versions)", result.staleness,
              ["consumed", "versioned_action_tokens", "token_p50", "token_mean", "token_max", "traj_max",
               "mixed_version_actions"], []),
        table("staleness histogram", result.staleness_histogram, ["staleness", "trajectories", "action_tokens"],
              ["staleness"], note=STALENESS_HISTOGRAM_NOTE),
        table("DIS clip audit per step: share of action tokens masked", result.clip,
              ["step", "trainer_version", "trajectories", "action_tokens", "masked_below", "masked_above",
               "ratio_mean"], ["step"], note=warmup_note),
        table("critic explained variance per step: 1 - Var(R - V) / Var(R), > 0 is better than the mean return",
              result.explained_variance, ["step", "explained_variance"], ["step"], note=warmup_note),
    ], "table", console=console)
    versions = result.policy_versions_seen
    max_stale = max((r.get("token_max") or 0 for r in result.staleness), default=0)
    plain = {"soft_wrap": True, "markup": False, "highlight": False}
    stored = sum(int(r.get("trajectories") or 0) for r in result.reward_by_version)
    split = (f" (stored as {stored} completed trajectories: an episode whose next prompt did not extend "
             "the tokens already sampled is split at that context break)") if stored > len(result.episodes) else ""
    console.print(f"{len(result.episodes)} episodes{split} from policy versions {versions}; the server loaded "
                  f"versions {result.versions_loaded}; max staleness {max_stale}; {result.seconds:.0f}s", **plain)
    if result.freed_bytes:
        console.print(f"removed {result.freed_bytes / 2**30:.1f} GiB of superseded policy versions and checkpoints "
                      "(keep them with --keep-weights)", **plain)
    console.print(f"store: {result.store} (run {result.run_id}); look closer with:", **plain)
    print_command(console, f"traj stats {result.store} --run {result.run_id}")
    print_command(console, f"traj sql {result.store} \"SELECT * FROM step_metrics WHERE run_id = '{result.run_id}' "
                           "ORDER BY step\"")
    if result.shortfall:  # last, where it cannot be missed (traj demo also exits with code 1)
        console.print(f"WARNING: {result.shortfall}", style="bold red", soft_wrap=True, markup=False,
                      highlight=False)


def result_to_dict(result: DemoResult) -> dict[str, Any]:
    """The result as plain JSON-able data (what ``traj demo --format json`` prints)."""
    from dataclasses import asdict

    d = asdict(result)
    d["policy_versions_seen"] = result.policy_versions_seen
    d["shortfall"] = result.shortfall
    return json.loads(json.dumps(d, default=str))


if __name__ == "__main__":  # python -m trajstore.trainer.apps.demo train-child CONFIG THREADS (started by run_demo)
    if len(sys.argv) != 4 or sys.argv[1] != "train-child":
        sys.exit("usage: python -m trajstore.trainer.apps.demo train-child CONFIG.json THREADS (use `traj demo`)")
    _train_child(sys.argv[2], int(sys.argv[3]))
