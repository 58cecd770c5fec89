"""The run of ``traj demo``, start to end: start the child processes, let the agents play while the
trainer follows the store, stop everything, and return the audits as a :class:`DemoResult`, also
when the demo stops early (``--time-limit``, a child that failed, agents done with fewer steps)."""

from __future__ import annotations

import random
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajstore.lifeline import signals_stop
from trajstore.store import TRAJECTORIES_DIR, open_store
from trajstore.store.layout import run_app_config_file, run_log_file
from trajstore.store.layout import run_dir as run_dir_of
from trajstore.trainer.apps.demo.agent import play_episode
from trajstore.trainer.apps.demo.audits import read_audits
from trajstore.trainer.apps.demo.children import (
    DemoChildren,
    DemoError,
    cpu_count,
    echo_new_lines,
    exit_message,
    free_port,
    start_trainer,
    start_traj_child,
    wait_ready,
)
from trajstore.trainer.apps.demo.config import (
    DEMO_CONFIG,
    DEMO_TRAIN_CONFIG,
    PROXY_HOLD_S,
    PROXY_LOG,
    SERVE_LOG,
    TRAINER_LOG,
    TRAINER_STOP_S,
    DemoConfig,
    model_identity,
    tokenizer_identity,
    train_config,
)
from trajstore.trainer.apps.demo.prune import prune_weights, run_has_weights
from trajstore.trainer.apps.demo.result import DemoResult, DemoStop
from trajstore.trainer.apps.envs.guess_chat import EpisodeSummary, GuessNumberEnv
from trajstore.wording import plural

if TYPE_CHECKING:
    from rich.console import Console

LESS_WORK = "fewer --steps, a smaller --batch-size or --max-new-tokens"
"""The options that make a demo shorter, named in the hints of early stops."""


def run_demo(cfg: DemoConfig, *, console: Console | None = None) -> DemoResult:
    """Run the asynchronous loop as its real topology: ``traj serve`` (the rollout server),
    ``traj proxy`` (records every call, has the server load each published version, bounds
    staleness) and ``traj train --follow`` (consumes the store, publishes versions) as child
    processes; agents play episodes through the proxy with the official ``openai`` client.

    There is no wall unless ``cfg.time_limit_s`` sets one. However the demo ends, every child is
    stopped (the proxy so that its flush of open episodes finishes), the audits of what the store
    holds are read, superseded weights are pruned (unless ``cfg.keep_weights``, and never those of
    a run that had weights before this demo), and an early end is ``result.stop``.

    Args:
        cfg: sizes and paths.
        console: rich console for progress lines (None = quiet).

    Returns:
        The :class:`DemoResult` with the audits read back from the store.

    Raises:
        ValueError: the store is not local.
    """
    t0 = time.monotonic()
    run_id = cfg.resolved_run_id()
    store = open_store(cfg.store)
    if not store.is_local:
        raise ValueError(f"traj demo runs on a local store; got {cfg.store!r}")
    had_weights = run_has_weights(store, run_id)  # an existing run's weights are never pruned by this demo
    run_dir = Path(store.path(run_dir_of(run_id)))
    run_dir.mkdir(parents=True, exist_ok=True)
    # an empty trajectories/ (what StoreWriter makes) marks the folder as a store before the demo's
    # `traj proxy STORE` child checks it: runs/<id>/ holds only logs until the trainer writes config.json
    Path(store.path(TRAJECTORIES_DIR)).mkdir(exist_ok=True)
    Path(store.path(run_app_config_file(run_id, DEMO_CONFIG))).write_text(cfg.model_copy(update={"run_id": run_id}).model_dump_json(indent=2))
    run = _DemoRun(cfg, run_id, store, run_dir, console, t0)
    run.say(f"[bold]traj demo[/] run [cyan]{run_id}[/], store [cyan]{store.uri}[/] ({cpu_count()} cores)")
    # SIGTERM too unwinds through the finally that stops the children (trajstore.lifeline.Stopped)
    with signals_stop():
        try:
            try:
                stop = run.start_children() or run.play()
            except DemoError as e:  # a child exited before it was ready
                stop = DemoStop("child_failed", str(e), "read its log for the cause")
            stop = run.end_trainer(stop)
        finally:
            run.children.stop_all()
    result = DemoResult(store=store.uri, run_id=run_id, episodes=run.episodes,
                        versions_loaded=[w["version"] for w in run.stats.get("weight_loads", [])],
                        steps_asked=cfg.steps, proxy_shutdown=run.children.proxy_shutdown,
                        episodes_cut=run.cut_short)
    read_audits(result)
    result.stop = run.settle(stop, result)
    if not cfg.keep_weights and not had_weights:
        result.freed_bytes = prune_weights(store, run_id)
    result.seconds = time.monotonic() - t0
    return result


@dataclass
class _DemoRun:
    """One demo's state while it runs: its children, the episodes played, the proxy's stats."""

    cfg: DemoConfig
    run_id: str
    store: Any
    run_dir: Path
    console: Console | None
    t0: float
    children: DemoChildren = field(default_factory=DemoChildren)
    episodes: list[EpisodeSummary] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    cut_short: int = 0
    log_pos: int = 0
    deadline: float | None = field(init=False)
    """``time.monotonic()`` at the time limit (None = no limit)."""
    max_episodes: int = field(init=False)
    """Episodes the agents play at most: ``--episodes``, or 3x what the trainer consumes."""
    proxy_url: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.deadline = None if self.cfg.time_limit_s is None else self.t0 + self.cfg.time_limit_s
        needed = (self.cfg.steps + self.cfg.critic_warmup_steps) * self.cfg.batch_size
        self.max_episodes = self.cfg.episodes or 3 * needed

    def store_file(self, rel: str) -> Path:
        """A file of the (local) store by its layout path."""
        return Path(self.store.path(rel))

    @property
    def trainer_log(self) -> Path:
        return self.store_file(run_log_file(self.run_id, TRAINER_LOG))

    def say(self, *args: Any, **kw: Any) -> None:  # soft wrap: rich never breaks a line mid-phrase
        if self.console is not None:
            self.console.print(*args, soft_wrap=True, **kw)

    def echo_trainer(self) -> None:
        self.log_pos = echo_new_lines(self.trainer_log, self.log_pos, self.say, polls=self.cfg.verbose)

    def time_limit_stop(self, during: str) -> DemoStop:
        return DemoStop("time_limit", f"the time limit of {self.cfg.time_limit_s:g} s (--time-limit) was reached "
                                      f"{during}",
                        f"a longer --time-limit (or none: the demo then runs until the trainer has made its steps), "
                        f"or less work: {LESS_WORK}")

    def start_children(self) -> DemoStop | None:
        """Start serve and the trainer, then the proxy once serve answers; a stop if the time limit
        came first. Raises :class:`DemoError` when a child exits before it is ready."""
        cfg, c = self.cfg, self.children
        cores = cpu_count()
        trainer_threads = max(1, cores - 1)
        serve_port, proxy_port = free_port(), free_port()
        self.say(f"starting traj serve --model {cfg.model} (loading the model takes a while) ...")
        c.start("serve", start_traj_child(
            ["serve", "--model", cfg.model, "--tokenizer", cfg.tokenizer, "--port", str(serve_port),
             "--threads", "1", "--seed", str(cfg.seed), "--max-batch-size", str(cfg.batch_size)],
            self.store_file(run_log_file(self.run_id, SERVE_LOG))), self.store_file(run_log_file(self.run_id, SERVE_LOG)))
        self.say(f"starting traj train --follow ({plural(trainer_threads, 'thread')}): "
                 f"{plural(cfg.steps, 'policy step')} of {plural(cfg.batch_size, 'trajectory', 'trajectories')} "
                 f"after {plural(cfg.critic_warmup_steps, 'critic warm-up step')} ...", highlight=False)
        tcfg = train_config(cfg, self.run_id, self.store.uri)
        c.start("trainer", start_trainer(tcfg, self.store_file(run_app_config_file(self.run_id, DEMO_TRAIN_CONFIG)), self.trainer_log,
                                         trainer_threads), self.trainer_log)
        serve_url = f"http://127.0.0.1:{serve_port}"
        if not wait_ready(serve_url + "/health", c.procs["serve"], c.logs["serve"], "traj serve", self.deadline):
            return self.time_limit_stop("while traj serve was loading the model")
        self.say(f"traj serve is up at {serve_url}; starting traj proxy (weight sync on, at most "
                 f"{plural(cfg.max_ahead_batches, 'batch', 'batches')} running or waiting for the trainer) ...")
        c.start("proxy", start_traj_child(
            ["proxy", self.store.uri, "--upstream", serve_url, "--port", str(proxy_port),
             "--run", self.run_id,
             "--tokenizer", tokenizer_identity(cfg) if cfg.model.startswith("tiny-") else model_identity(cfg), "--poll-interval", "0.5",
             "--max-staleness", str(cfg.max_ahead_batches - 1), "--batch-size", str(cfg.batch_size),
             "--hold-timeout", str(PROXY_HOLD_S), "--session-timeout", str(PROXY_HOLD_S)],
            self.store_file(run_log_file(self.run_id, PROXY_LOG))), self.store_file(run_log_file(self.run_id, PROXY_LOG)))
        self.proxy_url = f"http://127.0.0.1:{proxy_port}"
        if not wait_ready(self.proxy_url + "/health", c.procs["proxy"], c.logs["proxy"], "traj proxy", self.deadline):
            return self.time_limit_stop("while traj proxy was starting")
        self.say(f"traj proxy is up: agents use base URL {self.proxy_url}/s/<session>/v1")
        return None

    def stop_now(self) -> DemoStop | None:
        """A reason to stop the agents now: the time limit, or serve / proxy gone."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return self.time_limit_stop("while the agents played: no new episode started after it, and the "
                                        "trainer was stopped after its step in progress")
        name = self.children.exited("serve", "proxy")
        if name is not None:
            return DemoStop("child_failed", exit_message(f"traj {name}", self.children.procs[name].returncode,
                                                         self.children.logs[name]) + " while the agents played",
                            "read its log for the cause (the machine out of memory, the model failing on a request)")
        return None

    def play(self) -> DemoStop | None:
        """Agents play until the trainer exits, the episodes allowed are played, or :meth:`stop_now`
        gives a reason; then the proxy is stopped (its open episodes are flushed)."""
        import httpx  # the proxy extra, needed once agents play

        cfg, children = self.cfg, self.children
        rng = random.Random(cfg.seed)
        trainer = children.trainer
        loads_seen, started, stopping = 0, 0, False
        stop: DemoStop | None = None
        with ThreadPoolExecutor(max_workers=cfg.batch_size, thread_name_prefix="agent") as pool:
            running: set[Future[EpisodeSummary]] = set()
            number: dict[Future[EpisodeSummary], int] = {}  # the N of session <run>-epN (the stored id)
            while True:
                if not stopping:
                    stop = self.stop_now()
                    stopping = stop is not None or trainer.poll() is not None
                    if stopping:
                        if stop is not None and stop.kind == "time_limit":
                            children.request_trainer_stop()  # it finishes its step in progress meanwhile
                        self.say(f"stopping traj proxy ({plural(len(running), 'episode')} in flight) ...",
                                 highlight=False)
                        children.stop_proxy()
                while not stopping and started < self.max_episodes and len(running) < cfg.batch_size:
                    env = GuessNumberEnv.sample(rng, high=cfg.high, max_turns=cfg.max_turns)
                    started += 1
                    fut = pool.submit(play_episode, f"{self.proxy_url}/s/{self.run_id}-ep{started}/v1", env,
                                      model=cfg.model, max_new_tokens=cfg.max_new_tokens,
                                      metadata={"demo_run": self.run_id})
                    running.add(fut)
                    number[fut] = started
                if not running:
                    break
                finished, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                self.echo_trainer()
                try:
                    self.stats = httpx.get(self.proxy_url + "/proxy/stats", timeout=5).json()
                except (httpx.HTTPError, ValueError):
                    pass
                for load in self.stats.get("weight_loads", [])[loads_seen:]:
                    self.say(f"[green]traj serve loaded policy v{load['version']}[/] ({load['seconds']:.1f}s)")
                loads_seen = len(self.stats.get("weight_loads", []))
                for f in finished:
                    self.collect(f, number.pop(f), stopping)
        if self.cut_short and children.proxy_shutdown is not None:  # what the proxy stored: in the summary, once
            self.say(f"{plural(self.cut_short, 'episode')} in flight {'was' if self.cut_short == 1 else 'were'} cut "
                     "short when the demo stopped the proxy", highlight=False)
        self.echo_trainer()  # the trainer often finishes first (it made its steps): its last lines first
        return stop

    def collect(self, f: Future[EpisodeSummary], n: int, stopping: bool) -> None:
        """Record a finished episode (numbered as stored: trajectory id <run>-epN, not in finishing order)."""
        try:
            e = f.result()
        except Exception as exc:  # noqa: BLE001 - an episode cut short when the demo stops
            if stopping:  # expected: counted and explained once, not one alarming line each
                self.cut_short += 1
            else:
                from rich.markup import escape  # rich: not at every traj command's start-up

                self.say(f"[yellow]episode ended early: {escape(f'{type(exc).__name__}: {exc}')}[/]")
            return
        self.episodes.append(e)
        vs = sorted(set(e.policy_versions))
        self.say(f"episode {n:3d}  policy v{','.join(map(str, vs)):<4} reward {e.reward:.2f} "
                 f"{'solved' if e.solved else '      '} {e.num_actions} turns {e.num_tokens:4d} tokens "
                 f"{e.seconds:5.1f}s", highlight=False)

    def end_trainer(self, stop: DemoStop | None) -> DemoStop | None:
        """Let the trainer finish: at the time limit it is stopped after its step in progress;
        otherwise it trains on what is stored (bounded by the time limit, if any). A trainer
        that exits with an error is the stop when nothing else is."""
        children = self.children
        if "trainer" not in children.procs:
            return stop
        if stop is None or stop.kind != "time_limit":
            self.say(f"agents done: {len(self.episodes)} episodes; "
                     + ("waiting for the trainer ..." if children.trainer.poll() is None
                        else "the trainer had already finished"))
            left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            code = children.finish_trainer(left)
            if code is None:  # the time limit came while it trained on what was stored
                stop = stop or self.time_limit_stop("while the trainer trained on the stored episodes: it was "
                                                    "stopped after its step in progress")
        if stop is not None and stop.kind == "time_limit":
            self.say(f"stopping the trainer after its step in progress (at most {TRAINER_STOP_S:.0f} s) ...")
            code = children.stop_trainer(TRAINER_STOP_S)
        self.echo_trainer()
        if code != 0 and stop is None:
            stop = DemoStop("trainer_failed", exit_message("the trainer", code, self.trainer_log),
                            "read the trainer's log for the cause; fix it and run traj demo again")
        return stop

    def settle(self, stop: DemoStop | None, result: DemoResult) -> DemoStop | None:
        """The stop to report once the audits are read: a time limit reached after the last step
        is no early stop; a trainer that made fewer steps with no other reason ran out of episodes."""
        if stop is not None and stop.kind == "time_limit" and result.steps_done >= result.steps_asked:
            return None
        if stop is None and result.steps_done < result.steps_asked:
            cfg = self.cfg
            allowed = (f"--episodes {cfg.episodes}" if cfg.episodes else
                       "three times the trajectories the trainer consumes")
            return DemoStop("agents_done", f"the agents played every episode allowed ({self.max_episodes}: {allowed}; "
                                           f"{len(self.episodes)} completed) before the trainer had "
                                           f"{cfg.batch_size} completed trajectories for each step",
                            "a larger --episodes (or none), or fewer --steps; if episodes ended early, "
                            f"see {self.store_file(run_log_file(self.run_id, PROXY_LOG))} and "
                            f"{self.store_file(run_log_file(self.run_id, SERVE_LOG))}")
        return stop
