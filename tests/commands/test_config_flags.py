"""The engine, lab and sweep flags are the configurations' fields (issue 41, point 4): each
field declared with ``field_flags.flag`` is one flag, made from its metadata, and the parsed
flags make the configuration back; no command spells one of those flags by hand."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import re
from collections.abc import Iterator
from typing import Any

import pytest

from overlapscope.bench.collectives import BenchConfig
from overlapscope.cli import build_parser
from overlapscope.commands import bench_collectives
from overlapscope.commands.config_flags import _value_type, add_config_flags, config_from
from overlapscope.commands.engine_flags import config_from_args
from overlapscope.config import RunConfig
from overlapscope.field_flags import NESTED, flag, flag_of, nested
from tests.conftest import REPO

CONFIGS = (RunConfig, BenchConfig)


def flagged(cls: type) -> Iterator[tuple[type, dataclasses.Field[Any]]]:
    """(configuration, field) of every field with a flag, nested configurations' included."""
    for f in dataclasses.fields(cls):
        if NESTED in f.metadata:
            yield from flagged(_value_type(cls, f.name))
        elif flag_of(f) is not None:
            yield cls, f


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def commands() -> dict[str, argparse.ArgumentParser]:
    parser, _ = build_parser(every=True)
    sub = next(a for a in parser._actions if a.dest == "command")
    return dict(sub.choices)  # type: ignore[arg-type]


def test_every_field_is_a_flag_of_the_commands_that_set_it() -> None:
    cmds = commands()
    run_flags = {flag_of(f).option(f.name) for _, f in flagged(RunConfig)}  # type: ignore[union-attr]
    assert run_flags <= options(cmds["run"])
    assert run_flags - {"--policy"} <= options(cmds["sweep"])  # (its --policies sets it)
    assert {"--policy", "--forward-prefetch", "--limit-all-gathers", "--link-gbit"} <= options(
        cmds["whatif"]
    )
    bench = {flag_of(f).option(f.name) for _, f in flagged(BenchConfig)}  # type: ignore[union-attr]
    assert (
        bench
        == {"--nproc", "--link-gbit", "--iters", "--warmup"}
        <= options(cmds["bench-collectives"])
    )


# Where the flag's own default is ``auto``: the value asked for (CUDA and NCCL need a GPU).
ASKED = {"device": "cpu", "backend": "gloo"}


def _other_value(cls: type, f: dataclasses.Field[Any]) -> tuple[list[str], Any]:
    """Words that set field ``f`` to a value other than the command line's default, and the
    value they give it."""
    spec = flag_of(f)
    assert spec is not None
    option, kind = spec.option(f.name), _value_type(cls, f.name)
    if kind is bool:
        return [option], not f.default
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        member = next(m for m in kind if m != f.default)
        return [option, member.value], member
    if f.name in ASKED:
        return [option, ASKED[f.name]], ASKED[f.name]
    if f.name == "checkpoint_units":
        return [option, "every-2"], "every-2"
    if kind is float:
        return [option, "2.5"], 2.5
    # Doubled: --dim still divides by --heads.
    value = int(f.default or spec.low or 0) * 2 or 1  # type: ignore[arg-type]
    return [option, str(value)], value


@pytest.mark.parametrize("name", [f.name for _, f in flagged(RunConfig)])
def test_each_run_flag_sets_its_field(name: str) -> None:
    """``run --FLAG VALUE`` makes the configuration with that field so."""
    cls, f = next((c, f) for c, f in flagged(RunConfig) if f.name == name)
    words, value = _other_value(cls, f)
    batch = ["--global-batch", str(value * 8 if name == "nproc" else 8)]
    args = commands()["run"].parse_args(
        [*batch, "--out", "x", "--device", "cpu", "--backend", "gloo", *words]
    )
    cfg = config_from_args(args)
    holder = {RunConfig: cfg, type(cfg.engine): cfg.engine, type(cfg.model): cfg.model}
    holder[type(cfg.window)] = cfg.window
    assert getattr(holder[cls], name) == value


def test_defaults_are_the_configurations() -> None:
    """Flags left out give the configuration's defaults (but the command line's ``auto``s)."""
    args = commands()["run"].parse_args(
        ["--out", "x", "--device", "cpu", "--threads-per-rank", "1"]
    )
    cfg = config_from_args(args)
    assert cfg == RunConfig(backend="gloo", device="cpu", threads_per_rank=1)
    bench = bench_collectives._config(commands()["bench-collectives"].parse_args([]))
    assert dataclasses.replace(bench, sizes_bytes=(1,)) == BenchConfig(sizes_bytes=(1,))


def test_sweep_takes_its_policy_from_its_first_point() -> None:
    args = commands()["sweep"].parse_args(["--out", "x", "--device", "cpu"])
    assert config_from_args(args, policy="none").engine.policy.value == "none"


def test_no_command_spells_a_config_flag_by_hand() -> None:
    """The flags the fields make appear in no ``add_argument`` of the commands that set a
    configuration (analyze's --steps, Perfetto's steps, is another flag)."""
    owned = {flag_of(f).option(f.name) for c in CONFIGS for _, f in flagged(c)}  # type: ignore[union-attr]
    setters = ("run", "sweep", "whatif", "bench_collectives", "engine_flags", "config_flags")
    spelled = {
        (name, m)
        for name in setters
        for m in re.findall(
            r"add_argument\(\s*\"(--[a-z-]+)\"",
            (REPO / "overlapscope" / "commands" / f"{name}.py").read_text(),
        )
    }
    assert {(name, m) for name, m in spelled if m in owned} == set()


@dataclasses.dataclass(frozen=True)
class _Inner:
    depth: int = flag(3, low=1, high=9, metavar="D", help="how deep")


class _Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class _Outer:
    color: _Color = flag(_Color.RED, help="which")
    inner: _Inner = nested(_Inner, "inner things")
    quiet: bool = flag(True, name="--loud", invert=True, help="say more")
    rate: float | None = flag(None, metavar="R", unit="Gbit/s", help="at {metavar} {unit}")
    label: str = "kept"  # no flag


def test_a_new_configuration_field_is_a_flag() -> None:
    """A configuration a user declares gets its flags, help and checks with no parser code."""
    p = argparse.ArgumentParser(prog="t")
    add_config_flags(p, _Outer, "outer")
    text = p.format_help()
    assert "which (default: red)" in text and "how deep (default: 3)" in text
    assert "at R Gbit/s" in text and "--label" not in text
    assert text.index("outer:") < text.index("inner things:")  # (its own group, in field order)
    ns = p.parse_args(["--color", "blue", "--depth", "5", "--loud", "--rate", "0.5"])
    assert config_from(_Outer, vars(ns)) == _Outer(_Color.BLUE, _Inner(5), False, 0.5)
    assert config_from(_Outer, vars(p.parse_args([]))) == _Outer()
    for bad in (["--depth", "10"], ["--color", "green"], ["--rate", "-1"]):
        with pytest.raises(SystemExit):
            p.parse_args(bad)
