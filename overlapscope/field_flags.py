"""What a configuration field says about its command-line flag, kept in the field itself.

A field of a configuration dataclass (``overlapscope/config.py``, the lab's
``bench.collectives.BenchConfig``) declared with :func:`flag` carries a :class:`Flag` in its
metadata: the help text, the flag's name where it is not ``--field-name``, the metavar, the
range of an integer, the choices of a string, the unit, and the command line's own default
where it differs from the field's. ``commands/config_flags.py`` adds the argparse arguments
from these and builds the configuration back from the parsed flags, so a flag is written
once, beside the value it sets. A field declared with :func:`nested` holds a configuration
of its own, whose flags are added too (under its own group title, or in its parent's).

Torch-free and argparse-free: the configurations import this, not the commands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FLAG = "overlapscope.flag"  # the metadata key of a field's Flag
NESTED = "overlapscope.nested"  # ... of a field holding a configuration: its group title
MISSING: Any = dataclasses.MISSING


class _Same:
    """``Flag.cli_default`` when the command line's default is the field's."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()


@dataclass(frozen=True, slots=True)
class Flag:
    """How one field is set on the command line.

    ``help`` may name ``{metavar}`` and ``{unit}``; where it says nothing of the default and
    the default is a value (not None), `` (default: <default>)`` is added. A ``bool`` field is
    a switch: ``--name`` sets it, or clears it with ``invert`` (``--no-instrument``). An
    ``int`` field takes an integer from ``low`` to ``high`` (``hint``, e.g. what 0 means,
    added to the error); a ``float`` field a finite number > 0; an enum field one of its values; a ``str``
    field one of ``choices``, or what ``parse`` accepts (a ValueError is the flag's error).
    ``const``: the flag may be given bare, meaning ``const``. ``cli_default``: the command
    line's default where it is not the field's (``--device auto``, resolved when the run
    starts).
    """

    help: str
    name: str | None = None
    metavar: str | None = None
    low: int | None = None
    high: int | None = None
    hint: str = ""
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None
    const: Any = None
    cli_default: Any = SAME
    invert: bool = False
    unit: str | None = None

    def option(self, field_name: str) -> str:
        """The flag's spelling: ``name``, else ``--`` and the field's name, dashed."""
        return self.name or "--" + field_name.replace("_", "-")

    def dest(self, field_name: str) -> str:
        """Where argparse keeps the flag's value."""
        return self.option(field_name).removeprefix("--").replace("-", "_")

    def text(self) -> str:
        """The help with its metavar and unit filled in."""
        return self.help.format(metavar=self.metavar, unit=self.unit)


def flag(
    default: Any = MISSING, *, default_factory: Any = MISSING, **spec: Any
) -> Any:  # (a dataclasses.field, typed as dataclasses.field is)
    """A dataclass field whose flag ``spec`` describes (the arguments of :class:`Flag`)."""
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={FLAG: Flag(**spec)}
    )


def flag_like(cls: type, name: str, **changes: Any) -> Any:
    """A field as ``cls``'s field ``name`` (its default, its flag), with ``changes`` to its
    :class:`Flag` (another help, ...): one value with one meaning in two configurations."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    spec = flag_of(f)
    assert spec is not None, f"{cls.__name__}.{name} has no flag"
    return dataclasses.field(
        default=f.default,
        default_factory=f.default_factory,
        metadata={FLAG: dataclasses.replace(spec, **changes)},
    )


def nested(factory: Callable[[], Any], group: str = "") -> Any:
    """A field holding a configuration whose flags the command line has too: under the group
    ``group``, or (empty) among its parent's."""
    return dataclasses.field(default_factory=factory, metadata={NESTED: group})


def flag_of(f: dataclasses.Field[Any]) -> Flag | None:
    """The field's :class:`Flag`; None for a field with no flag."""
    found = f.metadata.get(FLAG)
    return found if isinstance(found, Flag) else None
