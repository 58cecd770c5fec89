"""The README's and the docs site's promises hold: the README's exit-status table is the code's,
every `traj` command they show parses, and every section they point to exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from tests.helpers.paths import REPO_ROOT
from trajstore.cli.errors import EXIT_ERROR, EXIT_REFUSED, EXIT_USAGE
from trajstore.cli.main import app

runner = CliRunner()

README = REPO_ROOT / "README.md"
PAGES = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
"""The README and the site's pages (``docs/*.md``; the generated reference page is built from the CLI)."""


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_readme_exit_status_table_matches_the_code(tmp_path: Path) -> None:
    # The table is what scripts rely on. Ingest's contract: 1 when any record was
    # refused; errors exit 1 too, told apart by the stderr lines the table names.
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", README.read_text(), flags=re.M))
    assert (EXIT_ERROR, EXIT_USAGE, EXIT_REFUSED) == (1, 2, 1)  # 1 when any record was refused
    assert rows["1"].startswith("error") and "not a store" in rows["1"]
    assert "`traj ingest` refused some records" in rows["1"] and "3" not in rows
    assert rows["2"].startswith("bad usage")
    res = runner.invoke(app, ["stats", str(tmp_path / "nope")])
    assert res.exit_code == 1 and "no store at" in res.stderr
    res = runner.invoke(app, ["stats", str(tmp_path), "--no-such-flag"])
    assert res.exit_code == 2
    # 1 for a shard the audits cannot read, named; --skip-unreadable goes on without it
    assert "cannot be read" in rows["1"] and "--skip-unreadable" in rows["1"]
    (tmp_path / "s" / "trajectories").mkdir(parents=True)
    (tmp_path / "s" / "trajectories" / "damaged.parquet").write_bytes(b"not parquet")
    for command in (["stats"], ["info"], ["sql", "SELECT count(*) FROM trajectories"]):
        res = runner.invoke(app, [command[0], str(tmp_path / "s"), *command[1:]])
        assert res.exit_code == 1 and "damaged.parquet" in res.stderr, (command, res.stderr)
        res = runner.invoke(app, [command[0], str(tmp_path / "s"), *command[1:], "--skip-unreadable"])
        assert res.exit_code == 0, (command, res.stderr)


def _readme_commands() -> list[str]:
    """Every `traj ...` command written out whole in the README and the docs pages: the first cell
    of each row of their tables and each line of their bash blocks (placeholder commands such as
    `traj stats STORE [--staleness ...]` in the Commands table are not runnable text and are left out)."""
    import shlex

    text = "\n".join(p.read_text() for p in PAGES)
    cells = re.findall(r"^\| `(traj [^`]+)`", text, flags=re.M)
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", text, flags=re.S)).replace("\\\n", " ")
    lines = [m for line in blocks.splitlines() for m in re.findall(r"(?:^|&& )(traj [^#&]+)", line.strip())]
    return [c.strip() for c in cells + lines if not re.search(r"\[|\||\.\.\.|<", c) and shlex.split(c)]


@pytest.mark.parametrize("command", _readme_commands())
def test_every_command_written_in_the_readme_parses(command):
    # the README's "one policy step on the demo's store" row lacked --run: a user copying it
    # got `error: missing option --run` (new-user walkthrough)
    import shlex

    args = shlex.split(command)[1:]
    group = typer.main.get_command(app)
    if args and args[0].startswith("-"):  # options of `traj` itself: `traj --help`, `traj --version`
        group.make_context("traj", list(args), resilient_parsing=True)
        return
    name, cmd, rest = group.resolve_command(group.make_context("traj", list(args), resilient_parsing=True), args)
    if hasattr(cmd, "commands"):  # traj bench learning
        name, cmd, rest = cmd.resolve_command(cmd.make_context(name, list(rest), resilient_parsing=True), rest)
    cmd.make_context(name, list(rest))  # raises a click error for a missing / unknown option


def test_every_section_the_readme_points_to_is_a_heading() -> None:
    # walkthrough: the Commands table said (see "Compaction") and (see "Retention"), but those were
    # bold paragraphs inside "Store layout": a reader looking in the table of contents (GitHub's,
    # built from the headings) did not find them
    # the same once the manual moved into docs/: a reference may name a heading on another page
    text = "\n".join(_prose(p.read_text()) for p in PAGES)
    headings = [h.replace("`", "") for h in re.findall(r"^#{1,4} (.+)$", text, flags=re.M)]
    refs = set(re.findall(r'see "([^"]+)"', text))
    assert {"Compaction", "Retention"} <= refs
    missing = [r for r in sorted(refs) if not any(h.startswith(r.replace("`", "")) for h in headings)]
    assert not missing, f"referenced but not a heading: {missing}"


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (a ``# comment`` in a bash block is no heading)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_ci_runs_the_readmes_test_command() -> None:
    # the README's "The tests" is what CI runs: .ci/run holds the same line between its markers, and
    # it installs from PyPI alone (CI machines cannot reach PyTorch's wheel index; the README's
    # CPU-build line comes before it, in the reader's set-up block)
    text = README.read_text()
    section = text.split("**The tests**", 1)[1]
    readme_line = re.search(r"```bash\n(.*?)\n```", section, flags=re.S).group(1).strip()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    between = ci.split("# --- the README's test command", 1)[1].split("# --- end of the README's test command", 1)[0]
    ci_lines = [line for line in between.splitlines()[1:] if line.strip()]
    assert ci_lines == [readme_line]
    assert "--index-url" not in readme_line and "download.pytorch.org" not in readme_line
    assert "python3 -m venv .venv" in ci and "python3 -m venv .venv && source .venv/bin/activate" in text
