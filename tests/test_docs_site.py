"""The docs site's generated pages (docs/hooks/cli_reference.py): the command reference covers
every `traj` command with its own help text, and the home page (the README) links only to pages
the site has. `mkdocs build --strict` (.ci/run) checks every other link and the nav."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.helpers.paths import REPO_ROOT
from trajstore.cli.commands import COMMANDS

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")


def _hook():
    spec = importlib.util.spec_from_file_location("cli_reference", REPO_ROOT / "docs" / "hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_has_every_command_with_its_help() -> None:
    page = _hook().render()
    sections = re.findall(r"^## `traj ([a-z ]+)`$", page, flags=re.M)
    assert set(COMMANDS) <= set(sections), f"not in the reference: {sorted(set(COMMANDS) - set(sections))}"
    assert {"bench learning", "bench throughput"} <= set(sections)
    # the help text itself, options included, in plain text (no rich box drawing)
    assert "--skip-unreadable" in page.split("## `traj stats`")[1].split("## `traj")[0]
    assert "Usage: traj export [OPTIONS] STORE" in page and "╭" not in page


def test_the_home_page_links_only_to_pages_of_the_site() -> None:
    home = _hook().home()
    links = re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", home)
    assert links, "the home page links to no page"
    missing = [link for link in links if not (REPO_ROOT / "docs" / link).is_file() and link != "reference.md"]
    assert not missing, f"home page links to pages not in docs/: {missing}"
