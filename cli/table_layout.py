"""How ``traj`` lays one result table out for the console width.

- columns whose value is the same in every row (two rows or more) are dropped and shown in the
  title, e.g. ``clip.by_step (run_id=r1)``;
- a table that fits is printed as is; one too wide because of long text columns (ids, JSON
  metadata, paths) is printed whole with those shortened to one width of at least
  :data:`KEEP_WHOLE_WIDTH` characters; a table with few rows but many columns is transposed (one
  row per column; values shortened if need be, and numbered ``row 1..n`` when the keys are too
  long to head them); otherwise its columns are cut into parts that fit, and each part repeats
  the table's key columns (``step``, ``source``, ...);
- titles are printed on their own line at full width (never squeezed into a narrow table).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajstore.cli.cells import SIZE_TEXT, as_number, column_formatter
from trajstore.tables import TableData

if TYPE_CHECKING:
    from rich.console import Console

MAX_TRANSPOSED_ROWS: int = 8
"""A table with at most this many rows may be printed transposed when it is too wide."""
MIN_CELL_WIDTH: int = 12
"""A text column is never shortened below this many characters."""
KEEP_WHOLE_WIDTH: int = 24
"""A table too wide because of long text columns (ids, JSON metadata, shard paths) is printed whole
with those columns shortened, as long as each keeps this many characters: cut into parts that each
repeat the key columns, the same columns had to be shortened anyway (``{"exit…``)."""


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


def print_title(console: Console, title: str) -> None:
    """A table's title, bold, on its own line at full width."""
    from rich.text import Text  # rich loads when a table is drawn, not at every command's start-up

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
    from rich.table import Table  # when a table is drawn, not at start-up (see print_title)
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


def print_table(console: Console, table: TableData, *, whole: bool = False) -> None:
    """Print one non-empty table laid out for ``console.width`` (see the module docstring).

    Args:
        whole: always one table of ``len(rows) + 4`` lines under its title (a short
            overview that must fit a screen): never transposed or cut into parts; text columns
            (the keys included) are shortened in the middle to fit, down to :data:`MIN_CELL_WIDTH`
            characters.
    """
    width = console.width
    rows = [tuple(r) for r in table.rows]
    cols = []
    for i, name in enumerate(table.columns):
        values = [r[i] for r in rows]
        fmt = column_formatter(name, values, share=True if name in table.shares else None)
        right = any(as_number(v) is not None for v in values) or (
            any(isinstance(v, str) for v in values) and all(v is None or SIZE_TEXT.match(str(v)) for v in values))
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
        print_title(console, title)
        console.print(_rich_table(cols))
        return

    if whole:
        caps = _shorten_to_fit(cols, width, floor=MIN_CELL_WIDTH)
        if caps is None:  # even that is too wide: every text column at the floor, rich squeezes the rest
            caps = {k: MIN_CELL_WIDTH for k, c in enumerate(cols) if not c.right and not c.wrap}
        # cut in the middle: ids that differ at the end (run-seed1, run-seed2) stay told apart
        cols = [_Col(c.name, [_middle(x, caps[k]) for x in c.cells], c.right, c.wrap) if k in caps else c
                for k, c in enumerate(cols)]
        print_title(console, title)
        console.print(_rich_table(cols))
        return

    caps = _shorten_to_fit(cols, width)
    if caps is not None:  # long text columns (ids, JSON metadata, paths): shortened, the table whole
        print_title(console, title)
        console.print(_rich_table(cols, caps))
        console.print(SHORTENED_NOTE, style="dim", markup=False, highlight=False)
        return

    if len(rows) <= MAX_TRANSPOSED_ROWS and not any(c.wrap for c in cols):
        heads = [" / ".join(k.cells[i] for k in key_cols) if key_cols else ("value" if len(rows) == 1 else
                 f"row {i + 1}") for i in range(len(rows))]
        transposed = [_Col(" / ".join(k.name for k in key_cols), [c.name for c in rest])]
        transposed += [_Col(heads[i], [c.cells[i] for c in rest], right=True) for i in range(len(rows))]
        if _table_width(transposed) <= width:
            print_title(console, title)
            console.print(_rich_table(transposed))
            return
        caps = _shorten_to_fit(transposed, width, floor=MIN_CELL_WIDTH, numbers_too=True, whole=[0])
        if caps is not None and key_cols and any(len(h) > min(caps.values()) for h in heads):
            # long keys (trajectory ids) shortened alike in the header: rows 1..n, the keys as rows
            transposed = [_Col("column", [c.name for c in cols])]
            transposed += [_Col(f"row {i + 1}", [c.cells[i] for c in cols], right=True) for i in range(len(rows))]
            caps = _shorten_to_fit(transposed, width, floor=MIN_CELL_WIDTH, numbers_too=True, whole=[0])
        if caps is not None:  # the column names stay whole, the values are shortened
            print_title(console, title)
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
        print_title(console, (title if i == 0 else table.name) + label)
        console.print(_rich_table(shown, max_widths))
        if max_widths:
            console.print(SHORTENED_NOTE, style="dim", markup=False, highlight=False)


def print_inline(console: Console, table: TableData) -> None:
    """A one-row table as one paragraph wrapped at ``console.width``: its name, then each column
    and its value as a table would show it (``overview.totals: shards 3, trajectories 15, ...``).
    Takes two or three lines where a table of one row per column takes one per column plus four."""
    from rich.text import Text  # when a table is drawn, not at start-up (see print_title)

    (row,) = table.rows
    cells = [f"{name} {column_formatter(name, [v], share=True if name in table.shares else None)(v)}"
             for name, v in zip(table.columns, row)]
    lines = textwrap.wrap(f"{table.name}: {', '.join(cells)}", console.width, subsequent_indent="  ",
                          break_long_words=False, break_on_hyphens=False)
    text = Text("\n".join(lines))
    text.stylize("bold", 0, len(table.name) + 1)
    console.print(text, highlight=False, soft_wrap=True)


def print_fields(console: Console, title: str, fields: Mapping[str, str]) -> None:
    """One record as a two-column table (``field``, ``value``; values already formatted, and
    wrapped when long) under its title."""
    print_title(console, title)
    names, values = list(fields), list(fields.values())
    # the values always show: a field name too long to leave them FIELD_VALUE_MIN_WIDTH characters
    # (a long not-trainable reason is a key of the export summary) is wrapped instead
    value_need = min(FIELD_VALUE_MIN_WIDTH, max([len("value")] + [len(ln) for v in values for ln in v.split("\n")]))
    room = console.width - 2 * _PAD - 1  # two columns: borders and padding
    name_width = max([len("field")] + [len(n) for n in names])
    if name_width + value_need <= room:
        console.print(_rich_table([_Col("field", names), _Col("value", values, wrap=True)]))
        return
    table = _rich_table([_Col("field", names, wrap=True), _Col("value", values, wrap=True)],
                        {0: max(len("field"), room - value_need)})
    table.columns[1].min_width = value_need
    console.print(table)


FIELD_VALUE_MIN_WIDTH = 24
"""Characters a record's value column keeps (:func:`print_fields`) before long field names are wrapped."""


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


def _middle(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut in the middle (``sao-2026-12…lr3e-6-seed5``)."""
    if len(text) <= width:
        return text
    tail = (width - 1) // 2
    return text[:width - 1 - tail] + "…" + text[len(text) - tail:]


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
