"""The processes of the benchmark, the real topology: ``traj serve`` (the policy, random tiny
weights) and the trainer (``traj train --follow``'s library entry, see trainer_host.py) are shared
by the arms of a suite (:class:`Services`), and each arm starts its own ``traj proxy``
(:class:`ArmTopology`) that records every call into the arm's store, has the server load each
version the arm's run publishes (v0 first: the previous arm's weights are replaced before the
first call), and for ``async`` arms gates new episodes with ``--max-staleness``. Started with the
helpers of ``traj demo`` (:mod:`trajstore.trainer.apps.demo.children`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from trajstore.hub import load_tokenizer, resolve_model
from trajstore.lifeline import child_lifeline
from trajstore.store.layout import TRAJECTORIES_DIR, run_app_config_file, run_dir, run_log_file
from trajstore.trainer.apps.demo.children import (
    DemoError,
    exit_message,
    free_port,
    start_traj_child,
    stop_child,
    stop_proxy_process,
    wait_ready,
)
from trajstore.trainer.apps.throughput.agent import TokenChat
from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig, ThroughputError
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig

SERVE_LOG, TRAINER_LOG, PROXY_LOG = "serve.log", "trainer.log", "proxy"
"""serve's and the trainer's logs in the suite's folder; each proxy's at ``runs/<run_id>/proxy.log``
of its arm's store."""
TRAIN_CONFIG = "throughput-train"
"""An arm's trainer config as handed over, at ``runs/<run_id>/throughput-train-config.json``."""
HOLD_S = 3600
"""The proxy's ``--hold-timeout`` and ``--session-timeout`` (s): never the limit (``arm_timeout_s`` is)."""
TRAINER_READY = "trainer host ready"
"""The trainer host's first line: torch is imported, it reads configs."""


def train_config(cfg: ThroughputConfig, run_id: str, store: str, seed: int) -> TrainConfig:
    """The trainer of an arm: follow the store, B trajectories a step, no critic warm-up (every step
    is a policy step), publish every step, stop after N steps."""

    tiny = cfg.model.startswith("tiny-")
    return TrainConfig(
        store=store,
        model=ModelConfig(name=cfg.model, tokenizer=resolve_model(cfg.tokenizer).name if tiny else None,
                          tiny_vocab_size=len(load_tokenizer(cfg.tokenizer)) if tiny else 256, seed=seed),
        data=DataConfig(batch_size=cfg.batch_size, micro_batch_size=cfg.batch_size, max_seq_len=4096,
                        where="status = 'completed'", follow=True, poll_interval_s=cfg.poll_s, idle_timeout_s=None),
        optim=OptimConfig(policy_lr=cfg.policy_lr, critic_lr=5 * cfg.policy_lr),
        algo=AlgoConfig(critic_warmup_steps=0),
        run=RunConfig(run_id=run_id, max_steps=cfg.steps, publish_every=1, checkpoint_every=10**6, keep_versions=2,
                      progress=False))


def proxy_argv(cfg: ThroughputConfig, arm: Arm, *, upstream: str, store: Path, port: int, run_id: str,
               tokenizer: str) -> list[str]:
    """The ``traj`` arguments of an arm's proxy: it records into `store`, has `upstream` load the
    versions `run_id` publishes, polls for them (and, for an ``async`` arm, re-reads the consumed
    records while its ``--max-staleness`` gate holds an episode) every ``cfg.poll_s`` seconds."""
    gate = ["--max-staleness", str(arm.max_staleness)] if arm.kind == "async" else []
    return ["proxy", str(store), "--upstream", upstream, "--port", str(port), "--run", run_id,
            "--tokenizer", tokenizer, "--poll-interval", str(cfg.poll_s), "--batch-size", str(cfg.batch_size), *gate,
            "--hold-timeout", str(HOLD_S), "--session-timeout", str(HOLD_S)]


def _log_has(path: Path, text: str) -> bool:
    try:
        return text in path.read_text(errors="replace")
    except OSError:
        return False


def _wait_health(url: str, proc: subprocess.Popen[bytes], log: Path, what: str, timeout_s: float,
                 deadline: float) -> None:
    """Wait until `what` (a child serving `url`) answers ``/health``.

    Raises:
        ThroughputError: it exited first, or did not answer by `deadline` (the message names its log).
    """
    try:
        if not wait_ready(url + "/health", proc, log, what, deadline):
            raise ThroughputError(f"{what} was not ready after {timeout_s:g} s (log: {log})")
    except DemoError as e:
        raise ThroughputError(str(e)) from None


@dataclass
class Services:
    """``traj serve`` and the trainer host, shared by the arms of a suite, logging into `root`."""

    cfg: ThroughputConfig
    root: Path
    serve: subprocess.Popen[bytes] | None = None
    trainer: subprocess.Popen[bytes] | None = None
    serve_url: str = ""
    _chat: TokenChat | None = None

    @property
    def chat(self) -> TokenChat:
        """The agents' token-id conversations (the tokenizer is loaded once)."""
        if self._chat is None:

            self._chat = TokenChat(load_tokenizer(self.cfg.tokenizer))
        return self._chat

    @property
    def serve_log(self) -> Path:
        return self.root / SERVE_LOG

    @property
    def trainer_log(self) -> Path:
        return self.root / TRAINER_LOG

    def ensure(self) -> float:
        """Start serve and the trainer host unless they run; wait until both are ready; return the
        seconds that took (0 when both were up).

        Raises:
            ThroughputError: one exited first, or was not ready within ``startup_timeout_s``.
        """
        t0 = time.monotonic()
        deadline = t0 + self.cfg.startup_timeout_s
        if self.serve is None or self.serve.poll() is not None:
            port = free_port()
            self.serve_url = f"http://127.0.0.1:{port}"
            self.serve = start_traj_child(
                ["serve", "--model", self.cfg.model, "--tokenizer", self.cfg.tokenizer, "--port", str(port),
                 "--threads", "1", "--max-batch-size", str(self.cfg.workers)], self.serve_log)
        if self.trainer is None or self.trainer.poll() is not None:
            lifeline, fds = child_lifeline()  # it ends when this process dies, however that happens
            env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                       TQDM_DISABLE="1", **lifeline)
            with open(self.trainer_log, "ab") as log:
                self.trainer = subprocess.Popen(
                    [sys.executable, "-m", "trajstore.trainer.apps.throughput", "trainer-host", "1"],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=fds)
        _wait_health(self.serve_url, self.serve, self.serve_log, "traj serve", self.cfg.startup_timeout_s, deadline)
        while not _log_has(self.trainer_log, TRAINER_READY):
            if self.trainer.poll() is not None:
                raise ThroughputError(exit_message("the trainer", self.trainer.returncode, self.trainer_log))
            if time.monotonic() > deadline:
                raise ThroughputError(f"the trainer was not ready after {self.cfg.startup_timeout_s:g} s "
                                      f"(log: {self.trainer_log})")
            time.sleep(0.2)
        return time.monotonic() - t0

    def submit(self, tcfg: TrainConfig, config_path: Path, status_path: Path) -> None:
        """Have the trainer host train `tcfg` (saved at `config_path`); it writes `status_path` when done."""
        assert self.trainer is not None and self.trainer.stdin is not None
        config_path.write_text(tcfg.to_json())
        self.trainer.stdin.write(f"{config_path}\t{status_path}\n".encode())
        self.trainer.stdin.flush()

    def alive(self) -> str | None:
        """Why no arm can go on (serve or the trainer exited), or None."""
        for what, proc, log in (("traj serve", self.serve, self.serve_log),
                                ("the trainer", self.trainer, self.trainer_log)):
            if proc is not None and proc.poll() is not None:
                return exit_message(what, proc.returncode, log)
        return None

    def stop_trainer(self) -> None:
        """Stop the trainer host now (an arm failed while it trained); the next arm starts another."""
        stop_child(self.trainer)

    def close(self) -> None:
        """End the trainer host (end of its stdin) and stop serve."""
        if self.trainer is not None:
            if self.trainer.stdin is not None and not self.trainer.stdin.closed:
                self.trainer.stdin.close()
            try:
                self.trainer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_child(self.trainer)
        stop_child(self.serve)


@dataclass
class ArmTopology:
    """One arm's proxy and its run on the shared services, around the local store `store`."""

    services: Services
    arm: Arm
    seed: int
    store: Path
    run_id: str
    proxy: subprocess.Popen[bytes] | None = None
    proxy_url: str = ""
    status_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.status_path = self.services.root / f"{self.run_id}.trainer-status.json"

    @property
    def proxy_log(self) -> Path:
        return self.store / run_log_file(self.run_id, PROXY_LOG)

    def start(self) -> float:
        """Hand the arm's run to the trainer, start its proxy and wait until the server holds the
        run's v0; return the seconds that took.

        Raises:
            ThroughputError: a process exited first, or not ready within ``startup_timeout_s``.
        """
        s = self.services
        cfg = s.cfg
        t0 = time.monotonic()
        deadline = t0 + cfg.startup_timeout_s
        (self.store / TRAJECTORIES_DIR).mkdir(parents=True, exist_ok=True)  # a store before the proxy checks it
        (self.store / run_dir(self.run_id)).mkdir(parents=True, exist_ok=True)
        tcfg = train_config(cfg, self.run_id, str(self.store), self.seed)
        s.submit(tcfg, self.store / run_app_config_file(self.run_id, TRAIN_CONFIG), self.status_path)
        port = free_port()
        self.proxy = start_traj_child(
            proxy_argv(cfg, self.arm, upstream=s.serve_url, store=self.store, port=port, run_id=self.run_id,
                       tokenizer=tcfg.model.tokenizer or cfg.tokenizer), self.proxy_log)
        self.proxy_url = f"http://127.0.0.1:{port}"
        _wait_health(self.proxy_url, self.proxy, self.proxy_log, "traj proxy", cfg.startup_timeout_s, deadline)
        self._wait_v0(deadline)
        return time.monotonic() - t0

    def _wait_v0(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            gone = self.alive()
            if gone is not None:
                raise ThroughputError(gone + " before the arm started")
            try:
                if httpx.get(self.proxy_url + "/health", timeout=2).json().get("policy_version") == 0:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.1)
        raise ThroughputError(f"the server had not loaded run {self.run_id}'s v0 after "
                              f"{self.services.cfg.startup_timeout_s:g} s (logs: {self.services.trainer_log}, "
                              f"{self.proxy_log})")

    def pids(self) -> dict[str, int | None]:
        """Process ids of the arm's processes by role: ``agents`` (this process: the rollout
        side), ``proxy``, ``serve``, ``trainer``."""
        s = self.services
        return {"agents": os.getpid(), "proxy": self.proxy.pid if self.proxy else None,
                "serve": s.serve.pid if s.serve else None, "trainer": s.trainer.pid if s.trainer else None}

    def trainer_status(self) -> dict | None:
        """What the trainer host wrote when the arm's run ended (None = not yet)."""
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return None

    def alive(self) -> str | None:
        """Why the arm cannot go on: a process exited, or the run's trainer ended with an error."""
        gone = self.services.alive()
        if gone is None and self.proxy is not None and self.proxy.poll() is not None:
            gone = exit_message("traj proxy", self.proxy.returncode, self.proxy_log)
        st = self.trainer_status()
        if gone is None and st is not None and not st.get("ok"):
            gone = f"the trainer failed: {st.get('error')} (log: {self.services.trainer_log})"
        return gone

    def stop(self, *, failed: bool) -> dict | None:
        """Stop the arm's proxy (its open episodes are stored as aborted) and wait for the trainer's
        status (it made its steps and is checkpointing); after a failure the trainer host is stopped
        instead. Returns the trainer's status (None if it never came)."""
        if self.proxy is not None:
            stop_proxy_process(self.proxy, self.proxy_log)
        if failed:
            self.services.stop_trainer()
            return self.trainer_status()
        deadline = time.monotonic() + self.services.cfg.startup_timeout_s
        while (st := self.trainer_status()) is None:
            if self.services.alive() is not None or time.monotonic() > deadline:
                self.services.stop_trainer()
                return None
            time.sleep(0.2)
        return st
