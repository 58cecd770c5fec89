"""The run of ``traj demo``, start to end: start the child processes, let the agents play while the
trainer follows the store, stop everything, and return the audits as a :class:`DemoResult`."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajstore.wording import plural
from trajstore.trainer.apps.demo.agent import play_episode
from trajstore.trainer.apps.demo.audits import read_audits
from trajstore.trainer.apps.demo.children import (
    DemoChildren,
    DemoError,
    cpu_count,
    echo_new_lines,
    free_port,
    log_tail,
    start_traj_child,
    start_trainer,
    wait_ready,
)
from trajstore.trainer.apps.demo.config import (
    DEMO_CONFIG_FILE,
    DEMO_TRAIN_CONFIG_FILE,
    PROXY_LOG_FILE,
    SERVE_LOG_FILE,
    TRAINER_FINISH_S,
    TRAINER_LOG_FILE,
    DemoConfig,
    model_identity,
    tokenizer_identity,
    train_config,
)
from trajstore.trainer.apps.demo.prune import prune_weights
from trajstore.trainer.apps.demo.result import DemoResult
from trajstore.trainer.apps.envs.guess_chat import EpisodeSummary, GuessNumberEnv

if TYPE_CHECKING:
    from rich.console import Console


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

    cores = cpu_count()
    trainer_threads = max(1, cores - 1)
    say(f"[bold]traj demo[/] run [cyan]{run_id}[/], store [cyan]{store.uri}[/] ({cores} cores)")
    tcfg = train_config(cfg, run_id, store.uri)
    serve_port, proxy_port = free_port(), free_port()
    tiny = cfg.model.startswith("tiny-")
    children = DemoChildren()
    episodes: list[EpisodeSummary] = []
    stats: dict[str, Any] = {}
    try:
        say(f"starting traj serve --model {cfg.model} (loading the model takes a while) ...")
        children.procs["serve"] = start_traj_child(
            ["serve", "--model", cfg.model, "--tokenizer", cfg.tokenizer, "--port", str(serve_port),
             "--threads", "1", "--seed", str(cfg.seed), "--max-batch-size", str(cfg.batch_size)],
            run_dir / SERVE_LOG_FILE)
        say(f"starting traj train --follow ({plural(trainer_threads, 'thread')}): "
            f"{plural(cfg.steps, 'policy step')} of {plural(cfg.batch_size, 'trajectory', 'trajectories')} after "
            f"{plural(cfg.critic_warmup_steps, 'critic warm-up step')} ...", highlight=False)
        children.procs["trainer"] = start_trainer(tcfg, run_dir / DEMO_TRAIN_CONFIG_FILE, log_path, trainer_threads)
        serve_url = f"http://127.0.0.1:{serve_port}"
        wait_ready(serve_url + "/health", children.procs["serve"], run_dir / SERVE_LOG_FILE, "traj serve", deadline)
        say(f"traj serve is up at {serve_url}; starting traj proxy (weight sync on, at most "
            f"{plural(cfg.max_ahead_batches, 'batch', 'batches')} running or waiting for the trainer) ...")
        children.procs["proxy"] = start_traj_child(
            ["proxy", "--upstream", serve_url, "--store", store.uri, "--port", str(proxy_port), "--follow-run", run_id,
             "--tokenizer", tokenizer_identity(cfg) if tiny else model_identity(cfg), "--poll", "0.5",
             "--max-staleness", str(cfg.max_ahead_batches - 1), "--batch-size", str(cfg.batch_size),
             "--hold-timeout", str(int(cfg.timeout_s)), "--session-timeout", str(int(cfg.timeout_s))],
            run_dir / PROXY_LOG_FILE)
        proxy_url = f"http://127.0.0.1:{proxy_port}"
        wait_ready(proxy_url + "/health", children.procs["proxy"], run_dir / PROXY_LOG_FILE, "traj proxy", deadline)
        say(f"traj proxy is up: agents use base URL {proxy_url}/s/<session>/v1")

        needed = (cfg.steps + cfg.critic_warmup_steps) * cfg.batch_size
        max_episodes = cfg.episodes or 3 * needed
        rng = random.Random(cfg.seed)
        trainer = children.trainer
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
                log_pos = echo_new_lines(log_path, log_pos, say)
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
                    children.stop_proxy()  # held and in-flight episodes end (written as aborted)
        if cut_short:
            say(f"{plural(cut_short, 'episode')} in flight {'was' if cut_short == 1 else 'were'} cut short when the "
                "trainer finished and the demo stopped the proxy (expected: those with recorded calls are stored as "
                "aborted, and not trained on)", highlight=False)
        # the trainer often finishes first (it made its steps): its last lines first, then no waiting
        log_pos = echo_new_lines(log_path, log_pos, say)
        say(f"agents done: {len(episodes)} episodes; "
            + ("waiting for the trainer ..." if trainer.poll() is None else "the trainer had already finished"))
        try:
            code = children.finish_trainer(max(TRAINER_FINISH_S, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise DemoError(f"the trainer did not finish within {cfg.timeout_s:.0f}s (+{TRAINER_FINISH_S:.0f}s); "
                            f"log: {log_path}\n{log_tail(log_path)}") from None
        echo_new_lines(log_path, log_pos, say)
    finally:
        children.stop_all()
    if code != 0:
        raise DemoError(f"the trainer exited with code {code}; log: {log_path}\n{log_tail(log_path)}")
    result = DemoResult(store=store.uri, run_id=run_id, episodes=episodes,
                        versions_loaded=[w["version"] for w in stats.get("weight_loads", [])],
                        steps_asked=cfg.steps)
    read_audits(result)
    if result.shortfall:
        say(f"[bold red]WARNING: {result.shortfall}[/]")
    if not cfg.keep_weights:
        result.freed_bytes = prune_weights(store, run_id)
    result.seconds = time.monotonic() - t0
    return result
