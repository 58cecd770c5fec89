"""Finding input files, reading them robustly (invalid UTF-8, JSON vs JSONL) and telling
their format apart by shape. Detection looks at keys only, never at file names, except the
documented pairing of V1 eval ``traj_<task>.json`` with ``eval_<task>.json``.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from trajstore.ingest.core import (  # noqa: F401 - HugeInt, find_huge_int, huge_int_reason: detect's API too
    HugeInt,
    Origin,
    Problem,
    find_huge_int,
    huge_int_reason,
    is_int_limit,
    loads_with_huge_ints,
)

InputFormat = Literal[
    "openhands-v0-events", "openhands-v0-session", "openhands-v0-eval", "openhands-v0-resolver",
    "openhands-v0-feedback", "openhands-swe-gym", "openhands-v1-events", "openhands-v1-eval",
    "openhands-v1-completions", "chat-messages", "swe-agent", "nebius-swe-agent", "nemo-gym",
    "mini-swe-agent", "swe-smith", "nebius-swe-rebench-openhands", "tau-bench", "atif", "verl-rollouts",
]
FORMATS: Final[tuple[str, ...]] = InputFormat.__args__  # type: ignore[attr-defined]
FORMAT_HELP: Final[dict[str, str]] = {
    "openhands-v0-events": "OpenHands V0 event list: saved trajectory, GUI export, events/ store",
    "openhands-v0-session": "OpenHands V0 sessions/<id>/events/<n>.json",
    "openhands-v0-eval": "OpenHands V0 evaluation output.jsonl",
    "openhands-v0-resolver": "OpenHands V0 resolver output.jsonl",
    "openhands-v0-feedback": "OpenHands 2024 feedback dataset rows",
    "openhands-swe-gym": "SWE-Gym OpenHands-Sampled-Trajectories rows",
    "openhands-v1-events": "OpenHands V1 persisted events",
    "openhands-v1-eval": "OpenHands V1 evaluation output",
    "openhands-v1-completions": "OpenHands V1 log_completions files",
    "chat-messages": "OpenAI chat messages: a JSON list of them, or per JSONL line a list or {\"messages\": [...]}",
    "swe-agent": "SWE-agent .traj files",
    "nebius-swe-agent": "nebius SWE-agent-trajectories rows",
    "nemo-gym": "NeMo Gym rollouts with engine token ids",
    "mini-swe-agent": "mini-swe-agent .traj.json, text (mini-swe-agent-1) or tool-call (mini-swe-agent-1.1) format",
    "swe-smith": "SWE-smith-trajectories rows (messages as a JSON string)",
    "nebius-swe-rebench-openhands": "nebius SWE-rebench-openhands rows (chat under 'trajectory', 'tools')",
    "tau-bench": "tau-bench results files (task results with 'traj', 'reward', 'info')",
    "atif": "ATIF trajectory.json (Harbor / Terminal-Bench), engine token ids kept",
    "verl-rollouts": "verl / SkyRL rollout dumps (input, output, score, step per line)",
}
"""One line per input format, for ``traj ingest --help``."""
INPUT_SUFFIXES: Final[tuple[str, ...]] = (".json", ".jsonl", ".traj", ".parquet")
"""Files a directory walk reads; others are counted as ignored (a file named explicitly is always read)."""
PARQUET_MAGIC: Final[bytes] = b"PAR1"
PARQUET_BATCH_ROWS: Final[int] = 64
"""Rows decoded at a time from a Parquet shard (published trajectory rows can be megabytes each)."""
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


def _event_sort_key(name: str) -> tuple[int, str]:
    stem = name.rsplit(".", 1)[0]
    digits = stem.split("-")[1] if stem.startswith("event-") and "-" in stem else stem
    return (int(digits), name) if digits.isdigit() else (1 << 62, name)


def discover(paths: list[str], ignored: Counter[str] | None = None) -> tuple[list[InputUnit], list[Problem]]:
    """Expand files and directories (recursively) into input units, sorted by path.

    A directory named ``events`` whose files are ``<n>.json`` is one unit (an event store).
    Inside directories only :data:`INPUT_SUFFIXES` are read; other files are counted in
    `ignored` by suffix (never dropped without a word), and a directory with no input file at
    all is a problem.

    Returns:
        (units, problems): a path that does not exist is a problem.
    """
    units: list[InputUnit] = []
    problems: list[Problem] = []
    ignored = ignored if ignored is not None else Counter()
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
                skipped.update(_suffix(f) for f in files if not f.endswith(INPUT_SUFFIXES))
                if os.path.basename(root) == EVENTS_DIR and cand and all(
                        _event_sort_key(f)[0] < (1 << 62) for f in cand):
                    units.append(InputUnit(root, [os.path.join(root, f) for f in sorted(cand, key=_event_sort_key)]))
                    continue
                units.extend(InputUnit(os.path.join(root, f)) for f in cand)
            ignored.update(skipped)
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


def special_file_kind(path: str) -> str | None:
    """What `path` is when it exists but is neither a regular file nor a directory (following
    symbolic links): ``a named pipe (FIFO)``, ``a socket``, ``a character device``, ``a block
    device``; None otherwise (regular file, directory, missing, unreadable). Never opens it:
    opening a named pipe blocks until a writer appears."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a special file")


class NotARegularFile(OSError):
    """An input path is a named pipe, socket or device: refused before any read (a read of a
    named pipe blocks until a writer appears)."""


def read_bytes(path: str, limit: int | None = None, *, check: Callable[[bytes], None] | None = None) -> bytes:
    """The bytes of a regular file (the first `limit` only, when given).

    Opened without blocking and checked with ``fstat`` before reading, so a named pipe or a
    device (even one that replaced a regular file after the directory walk) is refused, never
    waited on. `check` sees the first :data:`BINARY_SNIFF_BYTES` before the rest is read (it
    raises to stop: a multi-GB binary file is never read whole).

    Raises:
        NotARegularFile: not a regular file (the message says what it is).
        OSError: it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(f"{special_file_kind(path) or 'a special file'}, not a regular file: not read")
        with os.fdopen(fd, "rb", closefd=False) as f:
            if limit is not None:
                return f.read(limit)
            if check is None:
                return f.read()
            head = f.read(BINARY_SNIFF_BYTES)
            check(head)
            return head + f.read()
    finally:
        os.close(fd)


_BINARY_MAGIC: Final[tuple[tuple[bytes, str], ...]] = (
    (b"\x1f\x8b", "gzip-compressed data (decompress it first)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data (decompress it first)"),
    (b"BZh", "bzip2-compressed data (decompress it first)"),
    (b"\xfd7zXZ\x00", "xz-compressed data (decompress it first)"),
    (b"PK\x03\x04", "a zip archive (extract it first)"),
    (b"\xff\xfe", "UTF-16 text (save it as UTF-8)"),
    (b"\xfe\xff", "UTF-16 text (save it as UTF-8)"),
)
BINARY_SNIFF_BYTES: Final[int] = 8192
"""Bytes looked at to tell text from binary content."""


def binary_kind(data: bytes) -> str | None:
    """Why `data` (a file's start) is not JSON / JSONL text: a compressed or archive format by
    its magic bytes, ``binary data`` when it holds NUL bytes or more than 10 % of characters
    that are invalid UTF-8 or control characters; None for text."""
    for magic, what in _BINARY_MAGIC:
        if data.startswith(magic) and (magic != b"BZh" or data[3:4].isdigit()):  # bzip2: "BZh" + block size
            return what
    head = data[:BINARY_SNIFF_BYTES]
    if b"\x00" in head:
        return "binary data"
    text = head.decode("utf-8", errors="replace")
    bad = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\t\n\r\f\b"))
    if text and bad > len(text) // 10:
        return "binary data"
    return None


def _suffix(name: str) -> str:
    stem, dot, ext = name.rpartition(".")
    return f".{ext}" if dot and stem else "(no suffix)"


def is_parquet(path: str) -> bool:
    """True when the file starts with the Parquet magic bytes (whatever its name); False for
    anything else, a named pipe or an unreadable file included (never blocks)."""
    try:
        return read_bytes(path, 4) == PARQUET_MAGIC
    except OSError:
        return False


def iter_parquet_rows(path: str, batch_rows: int = PARQUET_BATCH_ROWS) -> Iterator[tuple[int, Any]]:
    """Rows of a Parquet shard (e.g. a Hugging Face ``train-00000-of-00001.parquet``) as
    ``(row number from 1, dict)``, decoded `batch_rows` at a time with pyarrow, so the rows
    reach the same parsers as JSON / JSONL rows.

    Raises:
        pyarrow.ArrowException, OSError: the file is not readable Parquet.
    """
    import pyarrow.parquet as pq

    n = 0
    with pq.ParquetFile(path) as f:
        for batch in f.iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                n += 1
                yield n, row


def read_text(path: str) -> str:
    """File content as text; invalid UTF-8 bytes become U+FFFD, a UTF-8 BOM is dropped.

    Raises:
        NotARegularFile: a named pipe, socket or device (see :func:`read_bytes`).
        ValueError: binary content (compressed, an archive, random bytes: :func:`binary_kind`),
            named as such; a ``.parquet`` name without the Parquet magic bytes says so.
        OSError: the file cannot be read.
    """
    def refuse_binary(head: bytes) -> None:
        why = binary_kind(head)
        if why and path.endswith(".parquet"):
            raise ValueError(f"not valid Parquet (the file does not start with the Parquet magic bytes "
                             f"{PARQUET_MAGIC.decode()}): {why}")
        if why:
            raise ValueError(f"not a recognised format: {why}; traj ingest reads JSON, JSONL and Parquet")

    data = read_bytes(path, check=refuse_binary)
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


@dataclass
class Loaded:
    """A file's JSON content: `whole` (one document) or `lines` ((line number, value) per
    JSONL line), plus per-line problems. `huge_ints`: `whole` holds :class:`HugeInt` stand-ins
    (see :func:`find_huge_int`)."""

    whole: Any = None
    lines: list[tuple[int, Any]] | None = None
    problems: list[Problem] = field(default_factory=list)
    huge_ints: bool = False


def json_loads(text: str) -> Any:
    """``json.loads``, with nesting too deep for Python's parser as a ValueError (not a
    RecursionError that escapes every handler). An integer too long to convert is a ValueError
    naming its field (:func:`huge_int_reason`)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None
    except ValueError as e:
        if not is_int_limit(e) or isinstance(e, json.JSONDecodeError):
            raise
        hit = find_huge_int(loads_with_huge_ints(text))
        raise ValueError(huge_int_reason(hit) if hit else str(e)) from None


def load_json_or_jsonl(path: str) -> Loaded:
    """Parse a file as one JSON document, or else as JSON Lines (one value per non-empty line).

    Raises:
        ValueError: neither (the message gives the JSON error's line and column).
    """
    text = read_text(path)
    if not text.strip():
        raise ValueError("empty file")
    try:
        try:
            whole = json.loads(text)
        except ValueError as e:  # an integer too long to convert: read the rest, refuse its record
            if isinstance(e, json.JSONDecodeError) or not is_int_limit(e):
                raise
            return Loaded(whole=loads_with_huge_ints(text), huge_ints=True)
        rows = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip()]
        if path.endswith(".jsonl") and isinstance(whole, dict) and len(rows) == 1 and not not_a_trajectory(whole):
            return Loaded(lines=[(rows[0], whole)])  # a JSONL file of one line: its record keeps its line number
        return Loaded(whole=whole)
    except (json.JSONDecodeError, RecursionError) as whole_err:
        # too deep a nesting on one JSONL line costs that line only, not the file's other lines
        rows = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
        if len(rows) < 2:
            if isinstance(whole_err, RecursionError):
                raise ValueError("JSON nested too deeply to parse") from None
            raise ValueError(_document_error(whole_err, text)) from None
        out = Loaded(lines=[])
        for n, ln in rows:
            try:
                out.lines.append((n, json_loads(ln)))  # type: ignore[union-attr]
            except ValueError as e:
                snippet = ln.strip()[:40]
                if isinstance(e, json.JSONDecodeError):  # msg may end in "at" ("... starting at")
                    why = f"not valid JSON ({e.msg.removesuffix(' at')} at column {e.colno}): {snippet!r}"
                else:  # nested too deeply, an integer too long (naming its field)
                    why = str(e) if str(e).startswith("field ") else f"not valid JSON ({e}): {snippet!r}"
                out.problems.append(Problem(Origin(path, n), "malformed", why))
        if not out.lines:
            if isinstance(whole_err, RecursionError):
                raise ValueError("JSON nested too deeply to parse") from None
            if text.lstrip()[:1] in "{[":  # one document (a .json, a SWE-agent .traj) that does not parse
                raise ValueError(_document_error(whole_err, text)) from None
            raise ValueError(f"no line is valid JSON (first error: {out.problems[0].reason})")
        return out


def _document_error(err: json.JSONDecodeError, text: str) -> str:
    """One line for a file that fails to parse as one JSON document: the parser's message with
    its line and column, and a note when the document is cut off (the parse fails at its end, or
    inside a string that never closes)."""
    cut = err.msg.startswith("Unterminated string") or err.pos >= len(text.rstrip())
    return (f"not valid JSON: {err.msg.removesuffix(' at')} at line {err.lineno} column {err.colno}"
            + (" (the document ends early: the file looks truncated)" if cut else ""))


def is_chat(v: Any) -> bool:
    """A non-empty list whose first item looks like an OpenAI chat message."""
    return (isinstance(v, list) and bool(v) and isinstance(v[0], dict) and "role" in v[0]
            and ("content" in v[0] or "tool_calls" in v[0]))


def is_message_list(v: Any) -> bool:
    """A list that reads as ONE conversation rather than an array of records: every item an
    object that is no record of a known format, and some item a chat message (a role and a
    content or tool calls). Its first message may be the broken one (no role), which
    :func:`is_chat` alone misread as an array of records, each refused as not a chat record."""
    return (isinstance(v, list) and bool(v) and all(isinstance(m, dict) and detect_record(m) is None for m in v)
            and any("role" in m and ("content" in m or "tool_calls" in m) for m in v))


def detect_record(d: Any) -> str | None:
    """Format of one record (a dict that is a whole trajectory / row), or None.

    Keys only, most specific first: a harness's own marker (``trajectory_format``,
    ``schema_version``) before shapes that several harnesses share (``messages`` + ``resolved``).
    """
    if not isinstance(d, dict):
        return None
    if isinstance(d.get("trajectory_format"), str) and d["trajectory_format"].startswith("mini-swe-agent"):
        return "mini-swe-agent"
    if isinstance(d.get("schema_version"), str) and d["schema_version"].startswith("ATIF") and "steps" in d:
        return "atif"
    if "responses_create_params" in d and "response" in d:
        return "nemo-gym"
    if "trajectory" in d and "history" in d and "info" in d:
        return "swe-agent"
    if "messages" in d and isinstance(d.get("response"), dict):
        return "openhands-v1-completions"  # a LiteLLM response object; a chat row may carry a text "response"
    if "traj" in d and "reward" in d and ("task_id" in d or "info" in d):
        return "tau-bench"
    if any(k in d for k in rollout_dump_keys("input")) and any(k in d for k in rollout_dump_keys("output")) \
            and ("score" in d or "step" in d):
        return "verl-rollouts"
    if "history" in d and isinstance(d["history"], list):
        if ("issue" in d or "success" in d) and "instance_id" not in d:
            return "openhands-v0-resolver"
        if any(isinstance(e, dict) and "kind" in e for e in d["history"][:5]):
            return "openhands-v1-eval"
        return "openhands-v0-eval"
    if "feedback" in d and "trajectory" in d:
        return "openhands-v0-feedback"
    if "messages" in d and isinstance(d["messages"], list) and isinstance(d.get("info"), dict) \
            and "mini_version" in d["info"]:
        return "mini-swe-agent"
    if "messages" in d and ("traj_id" in d or ("patch" in d and "model" in d)):
        return "swe-smith"
    if "messages" in d and ("resolved" in d or "instance_id" in d):
        return "openhands-swe-gym"
    if "trajectory" in d and (is_chat(d["trajectory"]) or (isinstance(d["trajectory"], str) and "resolved" in d)) \
            and ("resolved" in d or "tools" in d):
        return "nebius-swe-rebench-openhands"
    if "trajectory" in d and isinstance(d["trajectory"], list) and ("target" in d or "model_name" in d):
        return "nebius-swe-agent"
    if "messages" in d and is_chat(d["messages"]):  # last: the shape every chat format shares
        return "chat-messages"
    return None


def detect_row(v: Any) -> str | None:
    """Format of one row of a JSONL file or JSON array: :func:`detect_record`, or
    ``chat-messages`` for a row that is itself a list of chat messages."""
    return detect_record(v) or ("chat-messages" if is_chat(v) else None)


def rollout_dump_keys(which: str) -> tuple[str, ...]:
    """Field names of a verl / SkyRL rollout dump's ``input`` or ``output`` text."""
    return ("input", "input_prompt") if which == "input" else ("output", "output_response")


def detect_event(d: Any) -> str | None:
    """``openhands-v1-events`` for a V1 event (``kind``), ``openhands-v0-events`` for a V0 event."""
    if not isinstance(d, dict):
        return None
    if isinstance(d.get("kind"), str) and ("id" in d or "source" in d):
        return "openhands-v1-events"
    if "action" in d or "observation" in d:
        return "openhands-v0-events"
    return None


def not_a_trajectory(d: Any) -> str | None:
    """Why a known non-trajectory file holds no trajectory, or None."""
    if isinstance(d, dict):
        if "final_score" in d or "checkpoints" in d:
            return "evaluation score only (its trajectory is the matching traj_<task>.json)"
        if "error" in d and "traceback" in d:
            return f"evaluator crash report, no trajectory and no score: {str(d['error'])[:120]}"
        if "conversation_id" in d and ("llm_model" in d or "title" in d):
            return "conversation metadata only (its events are in the events/ directory next to it)"
        if "execution_status" in d and isinstance(d.get("agent"), dict):
            return "conversation state (OpenHands V1 base_state.json: read with the events/ directory next to it)"
    return None


def detect_document(d: Any) -> str | None:
    """Format of a whole JSON document (object or array), or None when unknown."""
    fmt = detect_record(d)
    if fmt:
        return fmt
    if isinstance(d, list) and d:
        first = next((x for x in d if isinstance(x, dict)), None)
        if first is None:
            return None
        fmt = detect_record(first)
        if fmt:
            return fmt
        ev = detect_event(first)
        if ev:
            return ev
        if is_message_list(d):
            return "chat-messages"
    return None
