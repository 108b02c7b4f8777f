"""Flags made from a configuration's fields, and the configuration made from parsed flags.

Each field declared with ``field_flags.flag`` is one argparse argument, as its
:class:`~overlapscope.field_flags.Flag` describes it (:func:`add_config_flags`, or
:func:`add_flag` for one field); :func:`config_from` builds the configuration back from the
parsed values. Every help text states its flag's default once (the parsers add none of their
own).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

from overlapscope.commands.flags import int_at_least, positive_float
from overlapscope.field_flags import MISSING, NESTED, SAME, Flag, flag_of

Target = argparse.ArgumentParser | argparse._ArgumentGroup


def _field(cls: type, name: str) -> dataclasses.Field[Any]:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _value_type(cls: type, name: str) -> Any:
    """The field's type, ``X`` for ``X | None``."""
    hint = typing.get_type_hints(cls)[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its ValueError is the flag's one-line error."""

    def checked(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    checked.__name__ = parse.__name__
    return checked


def _default(spec: Flag, f: dataclasses.Field[Any]) -> Any:
    default = f.default if spec.cli_default is SAME else spec.cli_default
    default = None if default is MISSING else default
    return default.value if isinstance(default, enum.Enum) else default


def _kinds(spec: Flag, kind: Any) -> dict[str, Any]:
    """argparse's ``type`` and ``choices`` for a value of type ``kind``."""
    if spec.parse is not None:
        return {"type": _checked(spec.parse)}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"choices": [m.value for m in kind]}
    if kind is int:
        return {"type": int if spec.low is None else int_at_least(spec.low, spec.hint, spec.high)}
    if kind is float:
        return {"type": positive_float}
    if kind is str:
        return {"choices": list(spec.choices)} if spec.choices else {}
    raise TypeError(f"no flag for a field of type {kind!r}: give its Flag a parse")


def add_flag(
    target: Target, cls: type, name: str, *, required: bool = False, **changes: Any
) -> argparse.Action:
    """The flag of ``cls``'s field ``name``; ``changes`` replace some of its :class:`Flag`'s
    attributes (another help, ...); a ``required`` flag has no default."""
    f = _field(cls, name)
    spec = flag_of(f)
    if spec is None:
        raise TypeError(f"{cls.__name__}.{name} has no flag")
    spec = dataclasses.replace(spec, **changes)
    option, text, kind = spec.option(name), spec.text(), _value_type(cls, name)
    if kind is bool:
        return target.add_argument(option, action="store_true", help=text)
    default = None if required else _default(spec, f)
    if default is not None and "default" not in text:
        text += " (default: %(default)s)"
    kw: dict[str, Any] = {"default": default, "help": text, **_kinds(spec, kind)}
    if spec.const is not None:
        kw.update(nargs="?", const=spec.const)
    if spec.metavar is not None:
        kw["metavar"] = spec.metavar
    if required:
        kw["required"] = True
    return target.add_argument(option, **kw)


def add_config_flags(
    p: argparse.ArgumentParser,
    cls: type,
    title: str = "",
    *,
    skip: Collection[str] = (),
    changes: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """A flag for each field of ``cls`` that has one, in field order, in the group ``title``
    (none: on ``p`` itself); a field holding a configuration adds its flags under its own
    group title, or among these. No flag for the fields named in ``skip``; ``changes[name]``
    replaces attributes of field ``name``'s :class:`Flag` (:func:`add_flag`)."""
    _add(p, cls, title, None, skip, changes or {})


def _add(
    p: argparse.ArgumentParser,
    cls: type,
    title: str,
    group: Target | None,
    skip: Collection[str],
    changes: Mapping[str, Mapping[str, Any]],
) -> Target | None:
    """:func:`add_config_flags`' walk; ``group`` is made when its first flag is added."""
    for f in dataclasses.fields(cls):
        if f.name in skip or (NESTED not in f.metadata and flag_of(f) is None):
            continue
        if NESTED in f.metadata:  # its own group, or this one (made when it adds a flag)
            inner = f.metadata[NESTED]
            sub = _value_type(cls, f.name)
            if inner:
                _add(p, sub, inner, None, skip, changes)
            else:
                group = _add(p, sub, title, group, skip, changes)
            continue
        if group is None:
            group = p.add_argument_group(title) if title else p
        add_flag(group, cls, f.name, **changes.get(f.name, {}))
    return group


def config_from(cls: type, values: Mapping[str, Any], **given: Any) -> Any:
    """``cls`` made from parsed flags (``vars(args)``): each field with a flag takes the
    flag's value (an enum's member for its value), an inverted switch the opposite, a field holding a configuration that
    configuration made the same way; ``given`` (by field name, at any depth) wins, and a
    field whose flag this command has not keeps its default. The configuration's own checks
    run (ValueError)."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        spec = flag_of(f)
        if f.name in given:
            kwargs[f.name] = given[f.name]
        elif NESTED in f.metadata:
            kwargs[f.name] = config_from(_value_type(cls, f.name), values, **given)
        elif spec is not None and spec.dest(f.name) in values:
            value, kind = values[spec.dest(f.name)], _value_type(cls, f.name)
            if isinstance(kind, type) and issubclass(kind, enum.Enum) and value is not None:
                value = kind(value)
            kwargs[f.name] = not value if spec.invert else value
    return cls(**kwargs)
