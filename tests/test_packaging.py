"""What a user's `pip install trajstore` gets: every package and every data file of the checkout.

A folder left out of pyproject's explicit package list still imports in an editable install (the
checkout is on the path), so only an installed wheel shows the fault: a new subpackage then fails to
import, and `traj view` without its templates or static files fails at its first page.
`pip install -e .` warned ``Package 'trajstore.view.static' is absent from the packages
configuration`` (setuptools: "this leads to an ambiguous overall configuration"; data folders
without ``__init__.py`` are listed as packages of their own, with their files as package data)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.helpers.paths import REPO_ROOT

SETUPTOOLS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
FOLDERS = {"trajstore": "trajstore", "trainer": "trajstore.trainer", "cli": "trajstore.cli"}
"""Source folder -> the package it installs as (pyproject's package-dir)."""


def _shipped_folders() -> dict[str, Path]:
    """Dotted package name -> folder, for every folder under trajstore/, trainer/ and cli/ that
    holds a file to ship (a package's ``__init__.py``, or data such as the view's templates)."""
    out = {}
    for folder, name in FOLDERS.items():
        for d in [REPO_ROOT / folder, *sorted((REPO_ROOT / folder).rglob("*"))]:
            if not d.is_dir() or "__pycache__" in d.parts or not any(f.is_file() for f in d.iterdir()):
                continue
            out[".".join((name, *d.relative_to(REPO_ROOT / folder).parts))] = d
    return out


def _wheel_name(path: Path) -> str:
    """Where a checkout file lands inside the wheel."""
    rel = path.relative_to(REPO_ROOT)
    return "/".join((*FOLDERS[rel.parts[0]].split("."), *rel.parts[1:]))


def test_every_folder_that_ships_is_a_listed_package() -> None:
    # a package folder missing from the list imports in an editable install and is left out of a
    # wheel; a data folder missing from it is "ambiguous" to setuptools (warned, may be dropped)
    assert SETUPTOOLS["package-dir"] == {name: folder for folder, name in FOLDERS.items()}
    listed = set(SETUPTOOLS["packages"])
    found = _shipped_folders()
    assert set(found) == listed, (f"missing from pyproject's packages: {sorted(set(found) - listed)}; "
                                  f"listed without a folder: {sorted(listed - set(found))}")
    data = {name for name, d in found.items() if not (d / "__init__.py").exists()}
    assert data == {"trajstore.view.static", "trajstore.view.templates"}
    assert data <= set(SETUPTOOLS["package-data"]), "a data folder's files are its package's package-data"


def test_a_built_wheel_holds_every_package_and_data_file(tmp_path: Path) -> None:
    # built as a user's pip builds it (the backend in this environment: the dev extra pins it)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                          "--no-cache-dir", "-w", str(tmp_path / "dist"), str(REPO_ROOT)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    log = res.stdout + res.stderr
    assert "absent from the `packages` configuration" not in log, "setuptools: a folder is missing from packages"
    assert "BuildBackendWarning" not in log, [line for line in log.splitlines() if "BuildBackendWarning" in line]
    (wheel,) = (tmp_path / "dist").glob("trajstore-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {_wheel_name(f) for d in _shipped_folders().values() for f in d.iterdir()
                if f.is_file() and f.suffix != ".pyc"}
    view = REPO_ROOT / "trajstore" / "view"
    must = [*(view / "static").iterdir(), *(view / "templates").iterdir(), REPO_ROOT / "trajstore" / "py.typed"]
    assert {_wheel_name(f) for f in must} <= expected
    missing = sorted(expected - names)
    assert not missing, f"in the checkout but not in the wheel: {missing}"


@pytest.mark.parametrize("data", ["trajstore.view.static", "trajstore.view.templates"])
def test_data_folders_ship_all_their_files(data: str) -> None:
    # package-data patterns that match every file of the folder (a new .svg or .html ships too)
    folder = _shipped_folders()[data]
    patterns = SETUPTOOLS["package-data"][data]
    unmatched = [f.name for f in folder.iterdir() if not any(f.match(p) for p in patterns)]
    assert not unmatched, f"{data}: files no package-data pattern matches: {unmatched}"
