"""``traj schema``: the trajectory schema's columns (and those of the training records), or what
changed between two schema versions (``--diff``)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_tables
from trajstore.cli.errors import InvalidOptionError, friendly_errors
from trajstore.cli.options import FormatOption
from trajstore.schema import schema_json
from trajstore.schema_diff import schema_diff
from trajstore.tables import TableData

commands = TrajTyper()



@commands.command("schema")
@friendly_errors
def schema_cmd(fmt: FormatOption = OutputFormat.table,
               diff: tuple[int, int] | None = typer.Option(
                   None, "--diff", metavar="VERSION VERSION",
                   help="what changed between two schema versions (e.g. --diff 1 2): columns and span fields "
                   "added, removed, retyped, or whose meaning changed")) -> None:
    """The trajectory schema: its columns and those of the training records (--format json: the
    JSON description that schemas/ holds)."""
    if diff is not None:
        a, b = diff
        try:
            changes = schema_diff(a, b)
        except ValueError as e:
            raise InvalidOptionError(f"invalid option --diff: {e}") from None
        render_tables([TableData(f"schema.diff_v{a}_v{b}", ["change", "field", "before", "after"],
                                 [(c.change, c.field, c.before, c.after) for c in changes], keys=["change", "field"],
                                 wrap=["before", "after"], empty_note=f"schema v{a} and v{b} are the same")], fmt)
        return
    text = schema_json()
    if fmt is OutputFormat.json:
        sys.stdout.write(text)
        return
    doc = json.loads(text)

    def type_name(t: Any) -> str:  # nested types: large_list<int32>, large_list<struct>
        if not isinstance(t, dict):
            return str(t)
        item = t.get("item")
        return f"{t.get('type')}<{'struct' if isinstance(item, dict) else type_name(item)}>" if item else str(t["type"])

    cols = ["name", "type", "nullable", "doc"]
    render_tables([TableData(f"schema.{name}", cols,
                             [(f.get("name"), type_name(f.get("type")), f.get("nullable"), f.get("doc"))
                              for f in doc.get(key, [])], keys=["name"], wrap=["doc"])
                   for name, key in (("trajectories", "fields"), ("run_steps", "run_steps_fields"),
                                     ("run_consumed", "run_consumed_fields"))], fmt)
