"""``traj train``: parse options into a :class:`~trajstore.trainer.loop.config.TrainConfig`, run the
streaming SAO trainer, print a summary (``--format json|csv`` for programs)."""

from __future__ import annotations

import typer

from trajstore.cli.main import FormatOption, StorageOptions, StoreArgument, app, friendly_errors, invalid_options
from trajstore.display import OutputFormat
from trajstore.trainer.loop.config import CRITIC_TRAINABLE_PATTERN


@app.command("train")
@friendly_errors
def train_cmd(
    store: StoreArgument,
    model: str = typer.Option(..., "--model", help="HF directory, .gguf file, 'smollm2-135m', or "
                                                   "'tiny-llama' / 'tiny-qwen3-moe' (random, for tests)"),
    run_id: str = typer.Option(..., "--run-id", help="run id: records in runs/<id>/, weights in policies/<id>/"),
    batch_size: int = typer.Option(128, "--batch-size", help="trajectories per policy step (all ranks)"),
    micro_batch_size: int = typer.Option(8, "--micro-batch-size", help="trajectories per forward pass"),
    max_batch_tokens: int = typer.Option(1 << 21, "--max-batch-tokens", help="token budget of one policy step "
                                                                              "(all micro-batches together)"),
    micro_batch_tokens: int | None = typer.Option(None, "--micro-batch-tokens",
                                                  help="most tokens in one forward/backward pass (default: "
                                                       "--max-seq-len on CPU; the plan is printed at the start)"),
    max_seq_len: int = typer.Option(8192, "--max-seq-len", help="longest trajectory trained (tokens)"),
    overlong: str = typer.Option("skip", "--overlong", help="longer trajectories: skip | error (never truncated)"),
    max_steps: int | None = typer.Option(None, "--max-steps", help="policy steps to run (default: until "
                                                                   "the data ends)"),
    where: str | None = typer.Option(None, "--where", help="DuckDB predicate over scalar columns, e.g. "
                                                           "\"status = 'completed'\""),
    follow: bool = typer.Option(False, "--follow/--no-follow", help="keep waiting for new shards"),
    idle_timeout: float | None = typer.Option(None, "--idle-timeout", help="with --follow: stop after this "
                                                                           "many seconds without data"),
    poll_interval: float = typer.Option(2.0, "--poll-interval", help="seconds between listings with --follow"),
    resume: bool = typer.Option(False, "--resume/--no-resume",
                                help="continue the run from its latest checkpoint; a run with no checkpoint and no "
                                     "records starts fresh with a warning (so a supervisor may always pass it)"),
    publish_every: int = typer.Option(1, "--publish-every", help="publish the policy every N steps "
                                                                 "(0: only v0 and the final one)"),
    checkpoint_every: int = typer.Option(10, "--checkpoint-every", help="checkpoint every N iterations"),
    keep_checkpoints: int = typer.Option(2, "--keep-checkpoints", help="committed checkpoints kept"),
    keep_versions: int = typer.Option(3, "--keep-versions", help="published versions kept (0 = all; at least 2: "
                                                                 "the latest and the one before)"),
    behaviour_logprobs: str = typer.Option("engine", "--behaviour-logprobs",
                                           help="engine | initial-policy (opt-in for text-only data: "
                                                "computed once with the initial weights)"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="tokenizer name the store must record "
                                                                   "(default: the model's name)"),
    advantage: str = typer.Option("sao-gae", "--advantage", help="sao-gae | grpo | running-mean"),
    policy_loss: str = typer.Option("dis", "--policy-loss", help="dis | ppo-clip"),
    critic_updates: int = typer.Option(2, "--critic-updates", help="K critic updates per policy update"),
    critic_warmup_steps: int = typer.Option(10, "--critic-warmup-steps", help="budget of critic-only batches "
                                                                          "before the first policy step"),
    critic_warmup_until: str = typer.Option("explained-variance", "--critic-warmup-until",
                                            help="explained-variance (end once the critic's EV on an unseen batch "
                                                 "is > 0, or at the budget) | budget (always the full budget)"),
    policy_lr: float = typer.Option(1e-6, "--policy-lr", help="policy learning rate"),
    critic_lr: float = typer.Option(5e-6, "--critic-lr", help="critic learning rate"),
    eps_low: float = typer.Option(0.3, "--eps-low", help="DIS lower band"),
    eps_high: float = typer.Option(5.0, "--eps-high", help="DIS upper band"),
    critic_trainable_pattern: str = typer.Option(CRITIC_TRAINABLE_PATTERN, "--critic-trainable-pattern",
                                                 help="regex of the critic parameters that train (default: "
                                                      "MLP / MoE projections + value head; '' = all)"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | cuda:N"),
    strategy: str = typer.Option("ddp", "--strategy", help="ddp (whole models on every rank; small models) | fsdp "
                                                            "(FSDP2: parameters, gradients and optimiser state "
                                                            "sharded over the ranks; run under torchrun)"),
    activation_checkpointing: bool | None = typer.Option(
        None, "--activation-checkpointing/--no-activation-checkpointing",
        help="recompute decoder layers in the backward pass (less memory, slower; default: on when a "
             "--max-seq-len trajectory would not fit the memory available without it)"),
    bf16: bool = typer.Option(True, "--bf16/--no-bf16", help="bf16 compute on CUDA (no effect on CPU, which computes "
                                                             "in float32)"),
    publish_dtype: str = typer.Option("auto", "--publish-dtype", help="auto (bfloat16 when computing in bf16 on "
                                                                      "CUDA, else float32) | bfloat16 | float32"),
    tensorboard: bool = typer.Option(False, "--tensorboard/--no-tensorboard", help="also write TensorBoard events"),
    seed: int = typer.Option(0, "--seed", help="random seed"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Train a policy with SAO on the trajectories of STORE, as they arrive."""
    from pydantic import ValidationError

    from trajstore.display import print_command, render_record
    from trajstore.extras import INSTALL_TRAIN_EXTRA, require

    try:
        cfg = _config(**locals())
    except ValidationError as e:
        raise invalid_options(e, _FLAG_OF) from None
    require(("torch", "transformers", "safetensors"), what="traj train", install=INSTALL_TRAIN_EXTRA)
    from trajstore.trainer.loop.train import train

    # Without --follow a missing store trains nothing: a mistyped path is an error. With it the
    # store may not exist yet, but a folder that is not a store is refused either way.
    from trajstore.cli.main import open_existing_store

    open_existing_store(store, cfg.storage_options, missing_ok=follow)
    from trajstore.trainer.loop.stop import TrainingInterrupted

    try:
        summary = train(cfg, resume=resume)
    except TrainingInterrupted as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(143) from None
    last = summary.history[-1] if summary.history else {}
    out = {"store": store, "run_id": run_id, "iterations": summary.iterations, "steps": summary.steps,
           "policy_version": summary.version, "last_metrics": last}
    out["warnings"] = summary.warnings
    for w in summary.warnings:
        typer.echo(f"warning: {w}", err=True)
    if fmt is not OutputFormat.table:
        render_record("traj train", out, fmt)
        return
    from rich.console import Console

    from trajstore.display import plural

    console = Console()
    console.print(f"run {run_id}: {plural(summary.iterations, 'iteration')}, {plural(summary.steps, 'policy step')}, "
                  f"policy v{summary.version} published under {store}/policies/{run_id}/", highlight=False,
                  soft_wrap=True)  # never cut a path in two: the terminal wraps it, or a log keeps it whole
    console.print(f"records: runs/{run_id}/steps and runs/{run_id}/consumed; per step:", highlight=False,
                  soft_wrap=True)
    print_command(console, f"traj sql {store} \"SELECT * FROM step_metrics WHERE run_id = '{run_id}' ORDER BY step\"")


_FLAG_OF = {"name": "--model", "progress": "--format"}
"""Config fields whose command-line flag is not the one :func:`invalid_options` derives."""


def _config(*, store, model,  # noqa: ANN001, ANN202 - the command's parsed options
            run_id, batch_size, micro_batch_size, max_batch_tokens, max_seq_len, overlong, max_steps,
            where, follow, idle_timeout, poll_interval, publish_every, checkpoint_every, keep_checkpoints,
            keep_versions, behaviour_logprobs, tokenizer, advantage, policy_loss, critic_updates,
            critic_warmup_steps, critic_warmup_until, policy_lr, critic_lr, eps_low,
            eps_high, critic_trainable_pattern, device, strategy, activation_checkpointing, publish_dtype, tensorboard,
            seed, fmt, storage_option=(), bf16=True, micro_batch_tokens=None, **_ignored):
    """The TrainConfig for the parsed options (pydantic validates every field)."""
    from trajstore.cli.audit import parse_storage_options
    from trajstore.trainer.loop.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig

    return TrainConfig(
        store=store,
        storage_options=parse_storage_options(list(storage_option or []), store),
        model=ModelConfig(name=model, tokenizer=tokenizer, seed=seed,
                          critic_trainable_pattern=critic_trainable_pattern or None),
        data=DataConfig(batch_size=batch_size, micro_batch_size=micro_batch_size, max_batch_tokens=max_batch_tokens,
                        micro_batch_tokens=micro_batch_tokens,
                        max_seq_len=max_seq_len, overlong=overlong, where=where, follow=follow,
                        idle_timeout_s=idle_timeout, poll_interval_s=poll_interval,
                        behaviour_logprobs=behaviour_logprobs),
        optim=OptimConfig(policy_lr=policy_lr, critic_lr=critic_lr),
        algo=AlgoConfig(advantage=advantage, policy_loss=policy_loss, critic_updates=critic_updates,
                        critic_warmup_steps=critic_warmup_steps, critic_warmup_until=critic_warmup_until,
                        eps_low=eps_low, eps_high=eps_high),
        run=RunConfig(run_id=run_id, max_steps=max_steps, publish_every=publish_every,
                      checkpoint_every=checkpoint_every, keep_checkpoints=keep_checkpoints,
                      keep_versions=keep_versions, device=device, strategy=strategy,
                      activation_checkpointing=activation_checkpointing, bf16=bf16, publish_dtype=publish_dtype,
                      tensorboard=tensorboard,
                      progress=fmt is OutputFormat.table),
    )


def _size(n: int) -> str:
    """Bytes for people in binary units (``512 B``, ``6.4 KiB``, ``3.6 GiB``), as the memory plan,
    the README and bench/RESULTS.md give them (``traj runs`` printed MB / GB beside them)."""
    f = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if f < 1024 or unit == "TiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return f"{n} B"  # pragma: no cover


@app.command("runs")
@friendly_errors
def runs_cmd(
    store: StoreArgument,
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Training runs in STORE: published versions, checkpoints and records, with their sizes
    (prune with `traj train --keep-versions N --keep-checkpoints N`). A damaged checkpoint or
    LATEST pointer is named on stderr, one line each."""
    import dataclasses

    from trajstore.cli.audit import parse_storage_options
    from trajstore.cli.main import open_existing_store
    from trajstore.display import TableData, render_record, render_tables
    from trajstore.trainer.loop.runs import list_runs

    report = list_runs(open_existing_store(store, parse_storage_options(storage_option, store)))
    for r in report.runs:
        for problem in r.problems:
            typer.echo(f"warning: run {r.run_id}: {problem}", err=True)
    if fmt is OutputFormat.json:
        out = dataclasses.asdict(report)
        for r, info in zip(out["runs"], report.runs):
            r.update(versions_bytes=info.versions_bytes, checkpoints_bytes=info.checkpoints_bytes,
                     total_bytes=info.total_bytes)
        render_record("traj runs", out, fmt)
        return
    table = fmt is OutputFormat.table
    size = _size if table else (lambda n: n)
    rows = []
    for r in report.runs:
        vs = [v.version for v in r.versions]
        versions = ("-" if not vs else f"v{vs[0]}" if len(vs) == 1 else f"{len(vs)}: v{vs[0]} .. v{vs[-1]}")
        incomplete = sum(not v.complete for v in r.versions)
        if incomplete:
            versions += f" ({incomplete} incomplete)"
        ckpts = ", ".join(f"it{c.iteration}{'*' if c.latest else ''}" for c in r.checkpoints) or "-"
        rows.append((r.run_id, r.model, versions, r.latest_version, size(r.versions_bytes), ckpts,
                     size(r.checkpoints_bytes), size(r.records_bytes), size(r.total_bytes),
                     (f"{len(r.problems)} (on stderr)" if table else "; ".join(r.problems)) if r.problems else
                     ("-" if table else "")))
    unit = "" if table else "_bytes"
    columns = ["run", "model", "versions", "latest_version", "versions" + (unit or "_size"), "checkpoints",
               "checkpoints" + (unit or "_size"), "records" + (unit or "_size"), "total" + (unit or "_size"),
               "problems"]
    if table and not any(r.problems for r in report.runs):  # a column of dashes says nothing
        columns, rows = columns[:-1], [row[:-1] for row in rows]
    render_tables([TableData(f"training runs in {report.store}", columns, rows, keys=["run"],
                             empty_note="no run has trained on this store yet")], fmt)
    if table and any(c.latest for r in report.runs for c in r.checkpoints):
        typer.echo("* = the checkpoint LATEST names (what --resume continues from)")
    if table and report.tmp_bytes:
        typer.echo(f"temporary files under _tmp/: {_size(report.tmp_bytes)} (removed by the next writer or trainer "
                   "once an hour old)")
