"""The design notes the code cites live in the repository (``docs/``): every citation of a note
names a file that exists, and every ``docs/sao.md eq. (N)`` an equation numbered there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("trajstore", "trainer", "cli", "tests", "bench", "examples")
NOTE = re.compile(r"docs/([a-z_]+\.md)")
EQUATION = re.compile(r"docs/sao\.md,? eqs?\. \((\d+)\)(?:-\((\d+)\))?")


def _sources() -> list[Path]:
    files = [p for d in SCANNED for p in (ROOT / d).rglob("*") if p.suffix in {".py", ".md"}]
    return [*files, ROOT / "README.md"]


def _numbered_equations() -> set[int]:
    text = (ROOT / "docs" / "sao.md").read_text()
    return {int(n) for n in re.findall(r"^\s+\((\d+)\)\s", text, flags=re.MULTILINE)}


def test_cited_notes_exist() -> None:
    missing = sorted({f"{p.relative_to(ROOT)}: docs/{m}" for p in _sources()
                      for m in NOTE.findall(p.read_text(errors="replace")) if not (ROOT / "docs" / m).is_file()})
    assert not missing, "citations of design notes not in docs/:\n" + "\n".join(missing)


def test_cited_sao_equations_are_numbered() -> None:
    numbered = _numbered_equations()
    assert numbered == set(range(1, max(numbered) + 1)), f"docs/sao.md numbers its equations 1..N, got {sorted(numbered)}"
    bad = []
    for p in _sources():
        for first, last in EQUATION.findall(p.read_text(errors="replace")):
            cited = range(int(first), int(last or first) + 1)
            bad += [f"{p.relative_to(ROOT)}: eq. ({n})" for n in cited if n not in numbered]
    assert not bad, "equations cited but not numbered in docs/sao.md:\n" + "\n".join(bad)


def test_no_citation_of_notes_outside_the_repository() -> None:
    outside = re.compile(r"shared/docs|\bSAO\.md|\bDESIGN\.md")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _sources() if p.name != "test_docs.py"
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if outside.search(line)]
    assert not hits, "citations of notes a clone does not have:\n" + "\n".join(hits)
