"""Reading one input file robustly: never blocking on a named pipe or device, binary and
compressed content named as such, invalid UTF-8 replaced, JSON told apart from JSON Lines (one
bad line costs only itself) and Parquet shards read row by row.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow.parquet as pq

from trajstore.ingest.huge_ints import find_huge_int, huge_int_reason, is_int_limit, loads_with_huge_ints
from trajstore.ingest.records import Origin, Problem

PARQUET_MAGIC: Final[bytes] = b"PAR1"
PARQUET_BATCH_ROWS: Final[int] = 64
"""Rows decoded at a time from a Parquet shard (published trajectory rows can be megabytes each)."""


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
    (see :func:`~trajstore.ingest.huge_ints.find_huge_int`). `line`: the line `whole` stands on,
    when it is the file's only non-empty line (a JSONL file of one record)."""

    whole: Any = None
    lines: list[tuple[int, Any]] | None = None
    problems: list[Problem] = field(default_factory=list)
    huge_ints: bool = False
    line: int | None = None


def json_loads(text: str) -> Any:
    """``json.loads``, with nesting too deep for Python's parser as a ValueError (not a
    RecursionError that escapes every handler). An integer too long to convert is a ValueError
    naming its field (:func:`~trajstore.ingest.huge_ints.huge_int_reason`)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None
    except ValueError as e:
        if not is_int_limit(e):
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
            if not is_int_limit(e):
                raise
            return Loaded(whole=loads_with_huge_ints(text), huge_ints=True)
        rows = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip()]
        return Loaded(whole=whole, line=rows[0] if len(rows) == 1 else None)
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
            raise ValueError(f"no line is valid JSON (first error: {out.problems[0].reason})") from None
        return out


def _document_error(err: json.JSONDecodeError, text: str) -> str:
    """One line for a file that fails to parse as one JSON document: the parser's message with
    its line and column, and a note when the document is cut off (the parse fails at its end, or
    inside a string that never closes)."""
    cut = err.msg.startswith("Unterminated string") or err.pos >= len(text.rstrip())
    return (f"not valid JSON: {err.msg.removesuffix(' at')} at line {err.lineno} column {err.colno}"
            + (" (the document ends early: the file looks truncated)" if cut else ""))
