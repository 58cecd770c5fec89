"""cli/config_options.py on a small hand-written config: flags, switches, choices, help and the
round trip from a command line back into the nested model."""

from __future__ import annotations

from typing import Any, Literal

import pytest
import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from trajstore.cli.app import TrajTyper
from trajstore.cli.config_options import config_data, config_options, typer_parameters, with_config_options


class Inner(BaseModel):
    rate_s: float = Field(2.0, gt=0, description="seconds between polls")
    mode: Literal["fast", "slow"] = Field("fast", description="how; see `rate_s`")
    on: bool = Field(False, description="switch")
    pattern: str | None = Field("x.*", description="regex; None = all")
    pair: tuple[float, float] = Field((0.5, 0.25), description="two numbers")


class Outer(BaseModel):
    label: str = Field(description="required label")
    where: str = Field("here", description="the place")
    inner: Inner = Field(default_factory=Inner)


def test_one_option_per_leaf_with_aliases_and_switch_pairs():
    opts = config_options(Outer, flags={"inner.rate_s": "--rate"}, skip=("where",))
    assert [(o.path, o.flag) for o in opts] == [
        (("label",), "--label"), (("inner", "rate_s"), "--rate"), (("inner", "mode"), "--mode"),
        (("inner", "on"), "--on/--no-on"), (("inner", "pattern"), "--pattern"), (("inner", "pair"), "--pair")]
    assert opts[3].on_flag == "--on"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"flags": {"inner.rate": "--rate"}}, "no field inner.rate in Outer"),  # an alias table gone stale
    ({"skip": ("nowhere",)}, "no field nowhere in Outer"),
    ({"flags": {"label": "--mode"}}, "fields share the flag --mode"),
])
def test_stale_or_clashing_tables_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        config_options(Outer, **kwargs)


def test_two_sections_with_a_field_of_one_name_are_refused():
    class A(BaseModel):
        n: int = 1

    class B(BaseModel):
        n: int = 2

    class Both(BaseModel):
        a: A = Field(default_factory=A)
        b: B = Field(default_factory=B)

    with pytest.raises(ValueError, match="fields share the name n"):
        config_options(Both)


def test_a_field_without_a_command_line_form_is_refused():
    class WithDict(BaseModel):
        options: dict[str, Any] = Field(default_factory=dict)

    with pytest.raises(TypeError, match="no command-line option"):
        typer_parameters(config_options(WithDict))


def _app(seen: dict[str, Any]) -> typer.Typer:
    opts = config_options(Outer, flags={"inner.rate_s": "--rate"})
    app = TrajTyper()  # traj's help layout: plain (one list, in declaration order) below 120 columns

    @app.command("cmd")
    @with_config_options(opts, after="first")
    def cmd(first: str = typer.Argument(...), last: bool = typer.Option(False, "--last"), **options: Any) -> None:
        seen["model"] = Outer.model_validate(config_data(opts, options))
        seen["first"], seen["last"] = first, last

    return app


def test_the_command_line_fills_the_nested_model():
    seen: dict[str, Any] = {}
    res = CliRunner().invoke(_app(seen), ["A", "--label", "l", "--rate", "0.5", "--mode", "slow", "--on",
                                          "--pattern", "", "--pair", "1", "2", "--last"])
    assert res.exit_code == 0, res.output
    # --pattern '': None, an optional field's "unset"
    assert seen["model"] == Outer(label="l", inner=Inner(rate_s=0.5, mode="slow", on=True, pattern=None, pair=(1, 2)))
    assert (seen["first"], seen["last"]) == ("A", True)
    res = CliRunner().invoke(_app(seen), ["A", "--label", "l"])
    assert seen["model"] == Outer(label="l")  # defaults are the model's


def test_help_orders_and_describes_the_options():
    res = CliRunner().invoke(_app({}), ["--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    out = res.output
    # the argument's neighbours first, then the fields, then the command's other options
    assert out.index("--label") < out.index("--rate") < out.index("--pair") < out.index("--last")
    assert "how; see --rate" in out  # a `field` in a description reads as its flag
    assert "[default: 2.0]" in out and "--on / --no-on" in out and "fast|slow" in out
    res = CliRunner().invoke(_app({}), ["X", "--label", "l", "--mode", "medium"], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "'medium' is not one of 'fast', 'slow'" in res.output
