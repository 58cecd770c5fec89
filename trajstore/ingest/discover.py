"""Finding the input of an ingest: files and directories expanded (recursively) into input units,
a file or an OpenHands ``events/`` directory each; files a walk does not read are counted by
suffix, and a path that is missing or not a regular file is a problem.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from trajstore.ingest.read import special_file_kind
from trajstore.ingest.records import Origin, Problem

INPUT_SUFFIXES: Final[tuple[str, ...]] = (".json", ".jsonl", ".traj", ".parquet")
"""Files a directory walk reads; others are counted as ignored (a file named explicitly is always read)."""
EVENTS_DIR: Final[str] = "events"
"""Name of the per-event directory of an OpenHands session store (``sessions/<id>/events/<n>.json``)."""


@dataclass
class InputUnit:
    """One thing that yields trajectories: a file, or an event-store directory (`files` in order)."""

    path: str
    files: list[str] = field(default_factory=list)

    @property
    def is_event_dir(self) -> bool:
        return bool(self.files)

    @property
    def file_count(self) -> int:
        """Input files it reads (each event file of an event directory counts)."""
        return len(self.files) if self.is_event_dir else 1


class IgnoredFiles:
    """The files a directory walk did not read, counted by suffix (:func:`suffix_of`) in `counts`,
    less those a reader opened beside its record (:meth:`read_beside`).

    Args:
        files: the paths :func:`discover` appended to its `ignored` list.
        counts: where they are counted (an ingest report's ``ignored_files``).
    """

    def __init__(self, files: list[str], counts: Counter[str]):
        self.counts = counts
        self.counts.update(suffix_of(f) for f in files)
        self._unread = {os.path.abspath(f) for f in files}

    def read_beside(self, files: tuple[str, ...]) -> None:
        """`files` were read for a record (a Harbor trial's ``verifier/reward.txt``): not ignored."""
        for f in map(os.path.abspath, files):
            if f in self._unread:
                self._unread.discard(f)
                sfx = suffix_of(f)
                self.counts[sfx] -= 1
                if not self.counts[sfx]:
                    del self.counts[sfx]


def _event_sort_key(name: str) -> tuple[int, str]:
    stem = name.rsplit(".", 1)[0]
    digits = stem.split("-")[1] if stem.startswith("event-") and "-" in stem else stem
    return (int(digits), name) if digits.isdigit() else (1 << 62, name)


def discover(paths: list[str], ignored: list[str] | None = None) -> tuple[list[InputUnit], list[Problem]]:
    """Expand files and directories (recursively) into input units, sorted by path.

    A directory named ``events`` whose files are ``<n>.json`` is one unit (an event store).
    Inside directories only :data:`INPUT_SUFFIXES` are read; the paths of other files are
    appended to `ignored` (never dropped without a word: the ingest counts them by
    :func:`suffix_of`, less those a reader opened beside its record), and a directory with no
    input file at all is a problem.

    Returns:
        (units, problems): a path that does not exist is a problem.
    """
    units: list[InputUnit] = []
    problems: list[Problem] = []
    ignored = ignored if ignored is not None else []
    for p in paths:
        p = os.fspath(p)
        if os.path.isfile(p):
            units.append(InputUnit(p))
        elif os.path.isdir(p):
            before = len(units)
            skipped: Counter[str] = Counter()
            for root, dirs, files in os.walk(p):
                dirs.sort()
                dirs[:] = [d for d in dirs if not d.startswith(".")]  # .git, .cache (HF snapshots)
                special = {f: k for f in files if (k := special_file_kind(os.path.join(root, f)))}
                for f in sorted(special):  # a named pipe would block the read forever: never opened
                    problems.append(Problem(Origin(os.path.join(root, f)), "no_trajectory",
                                            f"{special[f]}, not a regular file: skipped, never opened"))
                files = [f for f in files if f not in special]
                cand = sorted(f for f in files if f.endswith(INPUT_SUFFIXES))
                other = sorted(f for f in files if not f.endswith(INPUT_SUFFIXES))
                skipped.update(suffix_of(f) for f in other)
                ignored.extend(os.path.join(root, f) for f in other)
                if os.path.basename(root) == EVENTS_DIR and cand and all(
                        _event_sort_key(f)[0] < (1 << 62) for f in cand):
                    units.append(InputUnit(root, [os.path.join(root, f) for f in sorted(cand, key=_event_sort_key)]))
                    continue
                units.extend(InputUnit(os.path.join(root, f)) for f in cand)
            if len(units) == before:
                found = ", ".join(f"{n} {sfx}" for sfx, n in skipped.most_common(5)) or "no files"
                problems.append(Problem(Origin(p), "unsupported", f"no {'/'.join(INPUT_SUFFIXES)} file in this "
                                        f"directory ({found}); name the files to read them anyway"))
        elif kind := special_file_kind(p):
            problems.append(Problem(Origin(p), "unsupported", f"{kind}, not a regular file: not read "
                                    "(traj ingest reads files and directories)"))
        else:
            problems.append(Problem(Origin(p), "malformed", "no such file or directory"))
    units.sort(key=lambda u: u.path)
    return units, problems


def suffix_of(path: str) -> str:
    """How ignored files are counted: the suffix of `path`'s file name (``.md``, ``.png``, ...)
    or ``(no suffix)``."""
    stem, dot, ext = os.path.basename(path).rpartition(".")
    return f".{ext}" if dot and stem else "(no suffix)"
