"""Command-line options generated from a typed pydantic config: one typer option per field of the
model and of its nested sections, with the field's description as help, its default and its
``Literal`` choices, and the parsed values put back into the nested config."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from trajstore.cli.app import click_exceptions


@dataclass(frozen=True)
class ConfigOption:
    """One config field as a command-line option.

    Attributes:
        path: where the field sits in the config, e.g. ``("algo", "gamma")``.
        flag: its flag, ``--gamma`` (``--follow/--no-follow`` for a switch).
        field: the pydantic field (description, default, type).
    """

    path: tuple[str, ...]
    flag: str
    field: FieldInfo

    @property
    def name(self) -> str:
        """The field's name; also the command's parameter name (so unique over the model)."""
        return self.path[-1]

    @property
    def on_flag(self) -> str:
        """The flag without a switch's ``--no-`` form (``--follow``), as error messages name it."""
        return self.flag.split("/")[0]

    @property
    def is_switch(self) -> bool:
        """A ``bool`` or ``bool | None`` field: an on/off pair of flags."""
        return _value_type(self.field.annotation) is bool


def flag_of(name: str) -> str:
    """The flag a field gets when the alias table names none: ``--`` + its name, ``_`` as ``-``
    (``max_grad_norm`` -> ``--max-grad-norm``)."""
    return "--" + name.replace("_", "-")


def config_options(model: type[BaseModel], *, flags: Mapping[str, str] | None = None,
                   skip: Collection[str] = ()) -> list[ConfigOption]:
    """One :class:`ConfigOption` per leaf field of `model`, in declaration order; a field whose
    type is itself a model (a section) contributes its own fields.

    Args:
        model: the config class.
        flags: dotted field path -> flag, for fields whose flag is not :func:`flag_of` its name
            (``{"model.name": "--model"}``).
        skip: dotted paths of fields the command declares itself (``store``, an argument).

    Raises:
        ValueError: two fields would share a name or flag; an entry of `flags` or `skip` names no
            field (the table went stale after a rename).
    """
    flags = dict(flags or {})
    out: list[ConfigOption] = []
    seen: set[str] = set()

    def walk(cls: type[BaseModel], prefix: tuple[str, ...]) -> None:
        for name, field in cls.model_fields.items():
            path = (*prefix, name)
            dotted = ".".join(path)
            section = _value_type(field.annotation)
            if isinstance(section, type) and issubclass(section, BaseModel):
                walk(section, path)
                continue
            if dotted in skip:
                seen.add(dotted)
                continue
            option = ConfigOption(path, flags.pop(dotted, None) or flag_of(name), field)
            if option.is_switch:
                option = ConfigOption(path, f"{option.flag}/--no-{option.flag[2:]}", field)
            out.append(option)
            seen.add(dotted)

    walk(model, ())
    stale = [p for p in [*flags, *skip] if p not in seen]
    if stale:
        raise ValueError(f"no field {', '.join(stale)} in {model.__name__}")
    for attr in ("name", "flag"):
        values = [getattr(o, attr) for o in out]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"{model.__name__}: fields share the {attr} {', '.join(twice)}")
    return out


LONGEST_SHOWN_DEFAULT = 40
"""Longer text defaults are not shown as ``[default: ...]`` (characters); the help says them."""


def typer_parameters(options: list[ConfigOption], *, panel: bool = True,
                     optional: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """The keyword-only parameters that make typer declare `options`: the field's type (a
    ``Literal`` becomes a choice), its default (none for a required field), and its description as
    help, where a field named in backticks (`` `max_seq_len` ``) reads as its flag
    (``--max-seq-len``).

    Args:
        panel: group the options by section (``Model options``, ``Data options``, ...) in the
            wide ``--help`` layout.
        optional: required fields declared with the default None all the same (a mode of the
            command does without them; it checks them itself with :func:`require_options`).
    """
    flag_by_name = {o.name: o.on_flag for o in options}

    def help_of(o: ConfigOption) -> str:
        text = o.field.description or ""
        return re.sub(r"`([a-z_]+)`", lambda m: flag_by_name.get(m.group(1), m.group(0)), text)

    params = []
    for o in options:
        default = (None if o.name in optional else inspect.Parameter.empty) if o.field.is_required() else \
            o.field.get_default(call_default_factory=True)
        value_type = _value_type(o.field.annotation)
        info = typer.Option(
            o.flag, help=help_of(o),
            # a long default (a regex) is said in words by the description: shown, it filled four lines
            show_default=not (isinstance(default, str) and len(default) > LONGEST_SHOWN_DEFAULT),
            metavar=" ".join(f"<{t.__name__}>" for t in typing.get_args(value_type))
            if typing.get_origin(value_type) is tuple else None,  # `--betas <float> <float>`: two values
            rich_help_panel=f"{o.path[0].capitalize()} options" if panel and len(o.path) > 1 else None)
        params.append(inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[_typer_type(o.field.annotation), info]))
    return params


def with_config_options(options: list[ConfigOption], *, after: str, optional: tuple[str, ...] = ()) -> Any:
    """Decorate a command whose last parameter is ``**options``: typer sees `options` declared
    (:func:`typer_parameters`, `optional` as there) right after its parameter `after`, and the
    command receives their parsed values, keyed by field name, in ``options``."""
    def decorate(fn: Any) -> Any:
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(fn, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        at = next(i for i, p in enumerate(own) if p.name == after) + 1
        fn.__signature__ = inspect.Signature([*own[:at], *typer_parameters(options, optional=optional), *own[at:]])
        return fn

    return decorate


def config_data(options: list[ConfigOption], values: Mapping[str, Any]) -> dict[str, Any]:
    """The nested data of a config from the parsed values of `options` (keyed by field name), to
    be completed with the fields the command declared itself and then validated by the model.
    An empty value of an optional field is None (``--critic-trainable-pattern ''``)."""
    data: dict[str, Any] = {}
    for o in options:
        value = values[o.name]
        if value == "" and _allows_none(o.field.annotation):
            value = None
        node = data
        for key in o.path[:-1]:
            node = node.setdefault(key, {})
        node[o.name] = value
    return data


def _allows_none(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation) and typing.get_origin(annotation) in (Union, types.UnionType)


def _value_type(annotation: Any) -> Any:
    """``X`` for ``X | None``; the annotation itself otherwise."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _typer_type(annotation: Any) -> Any:
    """The annotation typer declares the option with (``Optional[X]`` for ``X | None``).

    Raises:
        TypeError: a type typer cannot parse from the command line (a dict, a union of two types).
    """
    inner = _value_type(annotation)
    origin = typing.get_origin(inner)
    ok = (inner in (bool, int, float, str) or origin is Literal
          or (origin is tuple and all(a in (int, float, str) for a in typing.get_args(inner))))
    if not ok:
        raise TypeError(f"no command-line option for a field of type {annotation!r}")
    return Optional[inner] if inner is not annotation else inner  # noqa: UP045 - typer reads Optional


def require_options(ctx: typer.Context, values: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """Refuse a missing value of a field declared `optional` (:func:`typer_parameters`) as click
    refuses a missing required option (``error: missing option --model``, exit status 2).

    Raises:
        click.MissingParameter: the first of `names` whose value is None.
    """
    for name in names:
        if values.get(name) is None:
            param = next(p for p in ctx.command.params if p.name == name)
            raise click_exceptions().MissingParameter(ctx=ctx, param=param)
