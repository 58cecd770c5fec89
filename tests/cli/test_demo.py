"""trajstore/cli/demo.py: the demo's summary (the demo itself: tests/trainer/test_demo.py)."""

from __future__ import annotations


def test_demo_summary_shows_the_explained_variance_of_every_step() -> None:
    """Build 7: the demo prints the critic's explained variance per step (warm-up steps negative),
    so a critic that adds noise to the advantages is visible in its summary."""
    import io

    from rich.console import Console

    from trajstore.cli.demo import print_summary
    from trajstore.trainer.apps.demo import DemoResult

    evs = [(-1, -0.4126), (0, 0.0631), (1, 0.3119)]
    result = DemoResult(store="/tmp/s", run_id="d", episodes=[], versions_loaded=[0], steps_asked=2, steps_done=2,
                        explained_variance=[{"step": s, "explained_variance": ev} for s, ev in evs])
    buf = io.StringIO()
    print_summary(result, Console(file=buf, width=120, force_terminal=False))
    out = buf.getvalue()
    head = out.index("critic explained variance per step")
    rows = [[c.strip() for c in line.split("\u2502")[1:-1]] for line in out[head:].splitlines()
            if line.startswith("\u2502")]  # the table's body rows, between its vertical bars
    # one row per step, in step order, each with its value (tables show 3 decimals)
    assert rows[:3] == [["-1", "-0.413"], ["0", "0.063"], ["1", "0.312"]], out[head:]
    # step -1 is said to be the warm-up, under the table
    assert "(step -1: critic warm-up, the critic trained alone before the first policy step)" in out[head:]
