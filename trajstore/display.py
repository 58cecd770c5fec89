"""How trajstore prints results: one number format and one width-aware table layout for every
command (``traj stats``, ``traj sql``, ``traj info``, the demo's audits, ...), plus JSON and CSV
for programs. Presentation only: callers hand over columns and rows they already computed.

Number format (the ``table`` output; JSON and CSV keep full precision):

- shares (columns named ``share*``, ``*_share``, ``*_frac``, ``*_fraction``, ``masked*``) always
  have :data:`SHARE_DECIMALS` decimals: ``0.000``, ``0.250``, ``1.000``;
- other float columns get one number of decimals per column from their largest magnitude: 3
  between 0.1 and 10, one fewer per power of ten above (``35.00``, ``777.6``, ``14160``), one more
  per power of ten below (``0.0145``), at most :data:`MAX_DECIMALS`; a value that would show
  fewer than two significant digits at its column's decimals gets its own (``1505`` above
  ``0.498``, never ``0``); integer columns print as integers. Scientific notation only for a
  non-zero value too small for :data:`MAX_DECIMALS` (``-2.76e-09``, never ``-0.000000``);
- missing values print as ``-``, times as ``YYYY-MM-DD HH:MM:SS+00:00``.

Table layout (``render_tables``), chosen from the console width:

- columns whose value is the same in every row (two rows or more) are dropped and shown in the
  title, e.g. ``clip.by_step (run_id=r1)``;
- a table that fits is printed as is; one too wide because of long text columns (ids, JSON
  metadata, paths) is printed whole with those shortened to one width of at least
  :data:`KEEP_WHOLE_WIDTH` characters; a table with few rows but many columns is transposed (one
  row per column; values shortened if need be, and numbered ``row 1..n`` when the keys are too
  long to head them); otherwise its columns are cut into parts that fit, and each part repeats
  the table's key columns (``step``, ``source``, ...);
- tables without rows are not drawn: one line per report says so, after the tables;
- titles are printed on their own line at full width (never squeezed into a narrow table).

Commands a user is meant to copy go through :func:`print_command`: their own line, unstyled,
never wrapped.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


class OutputFormat(str, Enum):
    """What ``--format`` selects on every command: ``table`` for people, ``json`` / ``csv`` for programs."""

    table = "table"
    json = "json"
    csv = "csv"


SHARE_DECIMALS: int = 3
"""Decimals of every share (a fraction in [0, 1]) in table output."""
MAX_DECIMALS: int = 6
"""At most this many decimals in a float column (smaller values round to 0.000000)."""
MAX_TRANSPOSED_ROWS: int = 8
"""A table with at most this many rows may be printed transposed when it is too wide."""
MIN_CELL_WIDTH: int = 12
"""A text column is never shortened below this many characters."""
KEEP_WHOLE_WIDTH: int = 24
"""A table too wide because of long text columns (ids, JSON metadata, shard paths) is printed whole
with those columns shortened, as long as each keeps this many characters: cut into parts that each
repeat the key columns, the same columns had to be shortened anyway (``{"exit…``)."""

_SHARE_NAME = re.compile(r"(^|_)(share|frac|fraction)(_|$)|^masked")


def is_share_column(name: str) -> bool:
    """True when the column holds a share in [0, 1] by its name (the last ``/`` part):
    ``share_with_logprob``, ``share``, ``masked_below``, ``perf/data_wait_frac``."""
    return bool(_SHARE_NAME.search(name.rsplit("/", 1)[-1]))


_SIZE = re.compile(r"^-?[0-9][0-9.,]* ?(?:[kKMGTP]i?)?B$")
"""A size already formatted for people (``6.4 KB``, ``512 B``, ``1.5 GiB``): aligned right like numbers."""


def _number(v: Any) -> float | int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, decimal.Decimal):  # DuckDB's SUM of integers, DECIMAL columns
        return int(v) if v.is_finite() and v.as_tuple().exponent >= 0 else float(v)
    if isinstance(v, (int, float)):
        return v
    return None


def format_share(v: float | None) -> str:
    """A share in table output: ``0.250`` (:data:`SHARE_DECIMALS` decimals); ``-`` for missing."""
    if v is None:
        return "-"
    return f"{v:.{SHARE_DECIMALS}f}" if math.isfinite(v) else str(v)


def format_value(v: Any) -> str:
    """One cell outside a column context (text, times, lists); numbers as :func:`column_formatter`
    would print a column holding only `v`."""
    return column_formatter("", [v])(v)


def _plain(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ", timespec="seconds")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return json.dumps(jsonable(v), separators=(",", ":"))
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def _decimals(values: Iterable[float | int]) -> int:
    """Decimals for a float column, from its largest magnitude m: 3 for m in [0.1, 10) (like
    shares), one fewer per power of ten above (35.0 -> 2: ``35.00``; 29710 -> 0: ``29710``), one
    more per power of ten below 0.1 (0.0145 -> 4: ``0.0145``), at most MAX_DECIMALS. A float
    column keeps its decimals even when every value is whole (``8.000``): the type says it is
    a measurement, and the same column never prints ``1`` in one run and ``1.000`` in another."""
    biggest = max((abs(float(x)) for x in values if math.isfinite(x)), default=0.0)
    if biggest == 0.0:
        return SHARE_DECIMALS
    e = math.floor(math.log10(biggest))
    return max(0, min(MAX_DECIMALS, SHARE_DECIMALS - e if e >= 0 else SHARE_DECIMALS - 1 - e))


def column_formatter(name: str, values: Sequence[Any], *, share: bool | None = None) -> Callable[[Any], str]:
    """The cell formatter of one column: shares with SHARE_DECIMALS decimals, other float columns
    with one shared number of decimals (see :func:`_decimals`), ints as they are, missing as ``-``.

    Args:
        share: the column holds shares in [0, 1]; None: decide by its name (:func:`is_share_column`).
    """
    nums = [_number(v) for v in values]
    floats = [x for x in nums if isinstance(x, float)]
    share_col = bool(floats) and (is_share_column(name) if share is None else share)
    if share_col:
        places = SHARE_DECIMALS
    elif floats:
        places = _decimals(x for x in nums if x is not None)
    else:
        places = None

    def fmt(v: Any) -> str:
        x = _number(v)
        if x is None:
            return _plain(v)
        if isinstance(x, float) and not math.isfinite(x):
            return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        if places is None:
            return str(x)
        if not share_col and x != 0 and abs(x) < 10 ** (1 - places):
            # fewer than two significant digits at the column's decimals (0.498 next to 1504.7
            # would print 0): this value gets its own, as a column holding only it would
            own = _decimals([x])
            if abs(x) < 10 ** (1 - own):  # below MAX_DECIMALS' reach (a KL of -2.8e-9): never a false 0
                return f"{x:.2e}"
            return f"{x:.{own}f}"
        return f"{x:.{places}f}"

    return fmt


def jsonable(v: Any) -> Any:
    """`v` as JSON-able data: non-finite floats -> None, times -> ISO strings, Decimal -> float."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):  # DuckDB's SUM of integers, DECIMAL columns
        return int(v) if v.is_finite() and v.as_tuple().exponent >= 0 else float(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v


@dataclass(frozen=True)
class TableData:
    """One result table to print.

    Attributes:
        name: shown as the title (``staleness.by_run``); the part before the first ``.`` groups
            tables of one report in the note about empty ones.
        columns: column names.
        rows: one tuple per row, raw values (formatting happens here).
        keys: columns that identify a row, kept in every part of a wide table. None: the
            shortest leading run of text/integer columns (at most three) whose values are unique
            per row.
        empty_note: why the table can be empty, printed instead of it (e.g. "no training run
            consumed the selected trajectories").
        wrap: prose columns that may wrap at spaces (a description); every other cell stays on
            one line.
        shares: columns holding shares in [0, 1] whose names do not say so (``solved``); they
            print like ``share_*`` columns.
        note: what a column counts when its name cannot say it, printed (dim) under the table
            in ``table`` output only.
    """

    name: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    keys: Sequence[str] | None = None
    empty_note: str | None = None
    wrap: Sequence[str] = ()
    shares: Sequence[str] = ()
    note: str | None = None


def infer_keys(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> tuple[str, ...]:
    """The shortest leading run of non-float columns (at most 3) whose values identify each row;
    ``()`` for a single row or when no such run exists."""
    if len(rows) < 2:
        return ()
    for n in range(1, min(3, len(columns)) + 1):
        if any(isinstance(r[n - 1], float) for r in rows):
            return ()
        if len({tuple(r[:n]) for r in rows}) == len(rows):
            return tuple(columns[:n])
    return ()


# -- output ---------------------------------------------------------------------------------


def render_tables(tables: Sequence[TableData], fmt: OutputFormat | str, *, console: Console | None = None,
                  out: IO[str] | None = None) -> None:
    """Print tables: rich tables laid out for the console width (see the module docstring), one
    JSON object ``{name: [row objects]}``, or CSV sections each headed by ``# name`` (a single
    table: plain CSV).

    Args:
        console: where ``table`` output goes (default: a new stdout console).
        out: where ``json`` / ``csv`` output goes (default: sys.stdout).
    """
    import sys

    fmt = OutputFormat(fmt)
    out = out or sys.stdout
    if fmt is OutputFormat.json:
        doc = {t.name: [{c: jsonable(v) for c, v in zip(t.columns, r)} for r in t.rows] for t in tables}
        out.write(json.dumps(doc, indent=2) + "\n")
        return
    if fmt is OutputFormat.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for i, t in enumerate(tables):
            if len(tables) > 1:
                buf.write(("\n" if i else "") + f"# {t.name}\n")
            w.writerow(t.columns)
            w.writerows([["" if v is None else jsonable(v) if not isinstance(v, (list, dict)) else
                          json.dumps(jsonable(v)) for v in r] for r in t.rows])
        out.write(buf.getvalue())
        return
    console = console or _stdout_console()
    empty: list[TableData] = []
    for t in tables:
        if t.rows:
            print_table(console, t)
            if t.note:
                console.print(f"({t.note})", style="dim", markup=False, highlight=False)
        else:
            empty.append(t)
    for line in _empty_notes(tables, empty):
        console.print(line, style="dim", markup=False, highlight=False)


def render_record(name: str, record: Mapping[str, Any], fmt: OutputFormat | str, *,
                  console: Console | None = None, out: IO[str] | None = None) -> None:
    """Print one result object (a command's summary): JSON as it is; CSV as one header and one
    row with nested objects flattened to dotted names; a table with one row per field."""
    import sys

    fmt = OutputFormat(fmt)
    out = out or sys.stdout
    if fmt is OutputFormat.json:
        out.write(json.dumps(jsonable(dict(record)), indent=2) + "\n")
        return
    flat = flatten(record)
    if fmt is OutputFormat.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(flat)
        w.writerow(["" if v is None else json.dumps(jsonable(v)) if isinstance(v, list) else jsonable(v)
                    for v in flat.values()])
        out.write(buf.getvalue())
        return
    console = console or _stdout_console()
    _print_title(console, name)
    console.print(_rich_table([_Col("field", list(flat)),
                               _Col("value", [_cell_for(k, v) for k, v in flat.items()], wrap=True)]))


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level with dotted keys: ``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _cell_for(name: str, v: Any) -> str:
    if isinstance(v, (list, tuple, dict)) and not v:  # `shards │ []` in traj migrate: nothing, like a missing value
        return "-"
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):  # names (shards): one per line
        return "\n".join(v)
    return column_formatter(name, [v])(v)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 iteration``, ``2 iterations``, ``0 batches`` (`many`: an irregular plural)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def print_command(console: Console, command: str) -> None:
    """Print a command the user is meant to copy: on its own line, unstyled, never wrapped."""
    console.print(command, markup=False, highlight=False, soft_wrap=True, style=None, emoji=False)


def _stdout_console() -> Console:
    from rich.console import Console

    return Console()


def _empty_notes(tables: Sequence[TableData], empty: Sequence[TableData]) -> list[str]:
    """One line per report whose tables are all empty (``clip: no rows (why)``); otherwise one
    line per run of empty tables that share a reason."""
    lines: list[str] = []
    seen: set[str] = set()
    pending: list[TableData] = []

    def flush() -> None:
        if pending:
            note = pending[0].empty_note or f"columns: {', '.join(pending[0].columns)}"
            lines.append(f"{', '.join(t.name for t in pending)}: no rows ({note})")
            pending.clear()

    for t in empty:
        group = t.name.split(".", 1)[0]
        members = [x for x in tables if x.name.split(".", 1)[0] == group]
        if len(members) > 1 and all(not x.rows for x in members):
            if group not in seen:
                seen.add(group)
                flush()
                notes = list(dict.fromkeys(x.empty_note for x in members if x.empty_note))
                lines.append(f"{group}: no rows" + (f" ({'; '.join(notes)})" if notes else ""))
            continue
        if pending and (pending[0].empty_note != t.empty_note or t.empty_note is None):
            flush()
        pending.append(t)
    flush()
    return lines


def _print_title(console: Console, title: str) -> None:
    from rich.text import Text

    console.print(Text(title, style="bold"), highlight=False)


WRAP_WIDTH: int = 24
"""A prose column (``TableData.wrap``) counts as at most this wide when laying a table out (it
then takes whatever width is left and wraps at spaces)."""

# Width a column needs: its text, one space of padding either side and the border on its left;
# a table is one character wider (its right border).
_PAD = 3


@dataclass
class _Col:
    name: str
    cells: list[str]
    right: bool = False
    wrap: bool = False

    @property
    def width(self) -> int:
        natural = max([len(self.name)] + [len(c) for c in self.cells])
        return (min(natural, WRAP_WIDTH) if self.wrap else natural) + _PAD


def _table_width(cols: Sequence[_Col]) -> int:
    return sum(c.width for c in cols) + 1


def _rich_table(cols: Sequence[_Col], max_widths: Mapping[int, int] | None = None) -> Any:
    from rich.table import Table
    from rich.text import Text

    # Names and cells are data (paths, ids, SQL results), never rich markup: as plain strings a
    # value such as "[/tmp/store/x.parquet]" raised MarkupError and "[bold]" vanished.
    t = Table(header_style="bold")
    for i, c in enumerate(cols):
        t.add_column(Text(c.name), justify="right" if c.right else "left", no_wrap=not c.wrap,
                     overflow="fold" if c.wrap else "ellipsis", max_width=(max_widths or {}).get(i))
    for r in zip(*(c.cells for c in cols)):
        t.add_row(*(Text(v) for v in r))
    return t


def _family(name: str) -> str:
    """Columns of one family are kept in the same part when possible: the part before ``/``
    (``policy/loss``) or before a statistic suffix (``token_p50`` -> ``token``)."""
    if "/" in name:
        return name.split("/", 1)[0]
    m = re.match(r"(.+?)_(p\d+|mean|max|min|std|lo|hi)$", name)
    return m.group(1) if m else name


def print_table(console: Console, table: TableData) -> None:
    """Print one non-empty table laid out for ``console.width`` (see the module docstring)."""
    width = console.width
    rows = [tuple(r) for r in table.rows]
    cols = []
    for i, name in enumerate(table.columns):
        values = [r[i] for r in rows]
        fmt = column_formatter(name, values, share=True if name in table.shares else None)
        right = any(_number(v) is not None for v in values) or (
            any(isinstance(v, str) for v in values) and all(v is None or _SIZE.match(str(v)) for v in values))
        cols.append(_Col(name, [fmt(v) for v in values], right=right, wrap=name in table.wrap))
    keys = list(table.keys) if table.keys is not None else list(infer_keys(table.columns, rows))

    constants: list[tuple[str, str]] = []
    if len(rows) >= 2:
        varying = [c for c in cols if len(set(c.cells)) > 1]
        if varying:
            constants = [(c.name, c.cells[0]) for c in cols if len(set(c.cells)) == 1]
            cols = varying
    note = _constants_note(constants)
    # one pair of brackets: "paper claims (1 seed, 0.3 min; comparison=...)", not "(...) (...)"
    title = table.name[:-1] + "; " + note[2:] if note and table.name.endswith(")") else table.name + note
    key_cols = [c for c in cols if c.name in keys]
    rest = [c for c in cols if c.name not in keys]

    if _table_width(cols) <= width or not rest:
        _print_title(console, title)
        console.print(_rich_table(cols))
        return

    caps = _shorten_to_fit(cols, width)
    if caps is not None:  # long text columns (ids, JSON metadata, paths): shortened, the table whole
        _print_title(console, title)
        console.print(_rich_table(cols, caps))
        console.print(SHORTENED_NOTE, style="dim", markup=False, highlight=False)
        return

    if len(rows) <= MAX_TRANSPOSED_ROWS and not any(c.wrap for c in cols):
        heads = [" / ".join(k.cells[i] for k in key_cols) if key_cols else ("value" if len(rows) == 1 else
                 f"row {i + 1}") for i in range(len(rows))]
        transposed = [_Col(" / ".join(k.name for k in key_cols), [c.name for c in rest])]
        transposed += [_Col(heads[i], [c.cells[i] for c in rest], right=True) for i in range(len(rows))]
        if _table_width(transposed) <= width:
            _print_title(console, title)
            console.print(_rich_table(transposed))
            return
        caps = _shorten_to_fit(transposed, width, floor=MIN_CELL_WIDTH, numbers_too=True, whole=[0])
        if caps is not None and key_cols and any(len(h) > min(caps.values()) for h in heads):
            # long keys (trajectory ids) shortened alike in the header: rows 1..n, the keys as rows
            transposed = [_Col("column", [c.name for c in cols])]
            transposed += [_Col(f"row {i + 1}", [c.cells[i] for c in cols], right=True) for i in range(len(rows))]
            caps = _shorten_to_fit(transposed, width, floor=MIN_CELL_WIDTH, numbers_too=True, whole=[0])
        if caps is not None:  # the column names stay whole, the values are shortened
            _print_title(console, title)
            console.print(_rich_table(transposed, caps))
            console.print(SHORTENED_NOTE, style="dim", markup=False, highlight=False)
            return

    parts = _pack(key_cols, rest, width)
    for i, (family, part) in enumerate(parts):
        shown = key_cols + part
        excess = _table_width(shown) - width
        max_widths = {}
        if excess > 0:  # one column alone is too wide: shorten the widest one-line text column
            text = [k for k in range(len(shown)) if not shown[k].right and not shown[k].wrap]
            if text:
                j = max(text, key=lambda k: shown[k].width)
                max_widths[j] = max(MIN_CELL_WIDTH, shown[j].width - _PAD - excess)
        label = f" [{i + 1}/{len(parts)}{': ' + family if family else ''}]" if len(parts) > 1 else ""
        # the constants once, with the first part (they were repeated over all 8 parts of step_metrics)
        _print_title(console, (title if i == 0 else table.name) + label)
        console.print(_rich_table(shown, max_widths))
        if max_widths:
            console.print(SHORTENED_NOTE, style="dim", markup=False, highlight=False)


SHORTENED_NOTE = "(… = shortened; --format csv or json prints every value in full)"


def _shorten_to_fit(cols: Sequence[_Col], width: int, *, floor: int = KEEP_WHOLE_WIDTH,
                    numbers_too: bool = False, whole: Sequence[int] = ()) -> dict[int, int] | None:
    """Widths (by column index) to which the longest one-line text columns (with `numbers_too`,
    any one-line column: a transposed table's value columns) are cut, longest first and to one
    common cap, so the whole table fits `width`; None when that cap would fall below `floor`
    characters. Columns in `whole` are never cut."""
    text = sorted((k for k, c in enumerate(cols) if (numbers_too or not c.right) and not c.wrap and k not in whole),
                  key=lambda k: -cols[k].width)
    excess = _table_width(cols) - width
    content = [cols[k].width - _PAD for k in text]
    for n in range(1, len(text) + 1):  # cut the n longest to one cap
        cap = (sum(content[:n]) - excess) // n
        if cap >= (content[n] if n < len(content) else 0):
            return {k: cap for k in text[:n]} if cap >= floor else None
    return None


def _constants_note(constants: Sequence[tuple[str, str]]) -> str:
    """`` (run_id=r1, status=completed; no values: token_{p50,p90,max}, traj_max)`` for a title:
    columns with one value, and those without any value (all ``-``) named once, families folded
    (``staleness.by_source`` listed eleven ``name=-``)."""
    if not constants:
        return ""
    valued = [f"{n}={v}" for n, v in constants if v != "-"]
    empty: dict[str, list[str]] = {}
    for n, v in constants:
        if v == "-":
            empty.setdefault(_family(n), []).append(n)
    names = [ns[0] if len(ns) == 1 else f"{fam}{'/' if '/' in ns[0] else '_'}{{{','.join(_short(n) for n in ns)}}}"
             for fam, ns in empty.items()]
    parts = [", ".join(valued)] if valued else []
    if names:
        parts.append("no values: " + ", ".join(names))
    return " (" + "; ".join(parts) + ")"


def _short(name: str) -> str:
    """`name` without its family prefix (``token_p50`` -> ``p50``, ``policy/loss`` -> ``loss``)."""
    fam = _family(name)
    return name[len(fam) + 1:] if fam != name else name


def _pack(keys: Sequence[_Col], rest: Sequence[_Col], width: int) -> list[tuple[str | None, list[_Col]]]:
    """Cut `rest` into consecutive parts that fit `width` next to the key columns.

    Column families (``token_p50 .. token_max``, ``policy/...``) stay together: a family that
    does not fit in the current part starts the next one; a part holding one family alone
    shows short headers (``p50``) and names the family (returned with the part); only a family
    wider than a whole part is split column by column.
    """
    budget = width - 1 - sum(c.width for c in keys)
    units: list[list[_Col]] = []
    for c in rest:
        if units and _family(units[-1][-1].name) == _family(c.name) and _family(c.name) != c.name:
            units[-1].append(c)
        else:
            units.append([c])

    def short_width(unit: list[_Col]) -> int:
        return sum(max([len(_short(c.name))] + [len(x) for x in c.cells]) + _PAD for c in unit)

    parts: list[list[list[_Col]]] = []
    for unit in units:
        if parts and sum(c.width for u in parts[-1] for c in u) + sum(c.width for c in unit) <= budget:
            parts[-1].append(unit)
        elif len(unit) > 1 and short_width(unit) > budget:
            for c in unit:  # a family wider than a whole part: column by column, full names
                if parts and len(parts[-1]) and sum(x.width for u in parts[-1] for x in u) + c.width <= budget:
                    parts[-1].append([c])
                else:
                    parts.append([[c]])
        else:
            parts.append([unit])
    out: list[tuple[str | None, list[_Col]]] = []
    for part in parts:
        if len(part) == 1 and len(part[0]) > 1:
            fam = _family(part[0][0].name)
            out.append((fam, [_Col(_short(c.name), c.cells, c.right, c.wrap) for c in part[0]]))
        else:
            out.append((None, [c for u in part for c in u]))
    return out
