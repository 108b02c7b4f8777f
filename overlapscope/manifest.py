"""The run manifest: ``run.json``, written by rank 0 once every rank is done, read back typed.

:func:`read_manifest` is the one place that reads it and :func:`write_manifest` the one that
writes it. A file that is not valid JSON, or a field of the wrong type, is a one-line
:class:`~overlapscope.errors.UserError` naming the file, the field and the fix. Fields a run
did not record (older runs, what-if predictions of torch traces) are None or empty: the
manifest never makes a value up. Torch-free: it needs neither torch nor the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overlapscope.config import EngineConfig, MixedPrecision, RunConfig, Sharding
from overlapscope.errors import UserError
from overlapscope.outputs import write_file

RUN_JSON = "run.json"
SCHEMA_VERSION = 1
# Largest world size believed (a larger one is a corrupt file, not a run).
MAX_WORLD_SIZE = 1 << 20
FIX = "repair it from the run's copy, or delete it to analyse the traces as plain traces"
# Fields that may be null (as absent); a null list or count is a damaged file.
NULLABLE = frozenset({"tool", "schema_version", "created", "host", "config", "backend", "device",
                      "versions", "predicted", "run_id"})  # fmt: skip
# Per-rank lists, in the order the worker writes them after the common fields.
PER_RANK = ("step_time_us", "peak_mem_bytes", "max_alive_units", "max_alive_in_backward",
            "deferred_prefetches", "hosts")  # fmt: skip


@dataclass(frozen=True, slots=True)
class UnitSize:
    """One unit of the engine's model: its parameters, full and per-rank shard."""

    name: str
    numel: int
    full_bytes: int
    shard_bytes: int


@dataclass(frozen=True, slots=True)
class Predicted:
    """A what-if prediction's origin (``overlapscope whatif --trace``), not a measured run."""

    source: str  # ``from``: the measured run it was calibrated on
    scenario: str
    bandwidth_scale: float | None = None
    link_gbit: float | None = None
    measured_config: str | None = None


@dataclass(frozen=True, slots=True)
class RunManifest:
    """``run.json``. ``config`` is the whole recipe where the file holds one; ``engine`` its
    engine section (also where only that was recorded). Per-rank lists are indexed by rank."""

    tool: str | None = None
    schema_version: int | None = None
    created: str | None = None
    host: str | None = None
    config: RunConfig | None = None
    engine: EngineConfig | None = None
    link_gbit: float | None = None  # the config's, also where no whole recipe was recorded
    world_size: int | None = None
    backend: str | None = None
    device: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    units: tuple[UnitSize, ...] | None = None
    losses: tuple[float, ...] = ()
    profiled_steps: tuple[int, ...] = ()
    traces: tuple[str, ...] = ()
    step_time_us: tuple[tuple[float, ...], ...] = ()
    peak_mem_bytes: tuple[int, ...] = ()
    max_alive_units: tuple[int, ...] = ()
    max_alive_in_backward: tuple[int, ...] = ()
    deferred_prefetches: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    predicted: Predicted | None = None
    run_id: str | None = None
    # each listed trace's run stamp (its run id, its rank), as the trace's header holds it
    trace_stamps: tuple[tuple[str, int], ...] = ()

    @property
    def is_engine_run(self) -> bool:
        """Written by overlapscope's engine (it lists the units it sharded)."""
        return self.units is not None

    def config_label(self) -> str:
        """The configuration in one line, the way every view shows it (:func:`config_label`)."""
        return (
            "unknown configuration"
            if self.engine is None
            else config_label(self.engine, self.link_gbit)
        )

    def config_dict(self) -> dict[str, Any] | None:
        """The ``config`` object as ``run.json`` holds it (JSON outputs repeat it)."""
        return _config_dict(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document, fields in the order the worker writes them; unset ones left out."""
        doc: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "created": self.created,
            "host": self.host,
            "config": _config_dict(self),
            "world_size": self.world_size,
            "backend": self.backend,
            "device": self.device,
            "versions": self.versions or None,
            "units": None if self.units is None else [_plain(u) for u in self.units],
            "losses": list(self.losses) or None,
            "profiled_steps": list(self.profiled_steps) or None,
            "traces": list(self.traces) or None,
            "step_time_us": [list(v) for v in self.step_time_us] or None,
            **{k: list(getattr(self, k)) or None for k in PER_RANK[1:]},
            "predicted": None if self.predicted is None else _predicted_dict(self.predicted),
            "run_id": self.run_id,
            "trace_stamps": [{"run_id": r, "rank": k} for r, k in self.trace_stamps] or None,
        }
        return {k: v for k, v in doc.items() if v is not None}


def config_label(engine: EngineConfig, link_gbit: float | None = None) -> str:
    """``backward_pre+limit=2+fwd+ckpt=all+offload+shard_grad_op+bf16@0.5gbit``: the policy,
    then only what differs from the defaults, in the form ``sweep --policies`` reads and the
    what-if scenarios are named."""
    e = engine
    parts = [
        e.policy.value,
        f"+limit={e.limit_all_gathers}" if e.limit_all_gathers is not None else "",
        "+fwd" if e.forward_prefetch else "",
        f"+ckpt={e.checkpoint_units}" if e.checkpoint_units != "none" else "",
        "+offload" if e.cpu_offload else "",
        f"+{e.sharding.value}" if e.sharding is not Sharding.FULL_SHARD else "",
        f"+{e.mixed_precision.value}" if e.mixed_precision is not MixedPrecision.NONE else "",
        f"@{link_gbit:g}gbit" if link_gbit is not None else "",
    ]
    return "".join(parts)


def _plain(u: UnitSize) -> dict[str, Any]:
    return {"name": u.name, "numel": u.numel, "full_bytes": u.full_bytes,
            "shard_bytes": u.shard_bytes}  # fmt: skip


def _predicted_dict(p: Predicted) -> dict[str, Any]:
    return {"from": p.source, "scenario": p.scenario, "bandwidth_scale": p.bandwidth_scale,
            "link_gbit": p.link_gbit, "measured_config": p.measured_config}  # fmt: skip


def _config_dict(m: RunManifest) -> dict[str, Any] | None:
    if m.config is not None:
        return m.config.to_dict()
    if m.engine is None:
        return None
    engine = RunConfig(engine=m.engine).to_dict()["engine"]
    return {"engine": engine, **({} if m.link_gbit is None else {"link_gbit": m.link_gbit})}


def write_manifest(run_dir: Path, manifest: RunManifest) -> Path:
    """Write ``run_dir/run.json`` (to a temporary name, then renamed: never half a file)."""
    path = run_dir / RUN_JSON
    write_file(path, json.dumps(manifest.to_dict(), indent=1) + "\n")
    return path


def read_manifest(run_dir: Path) -> RunManifest | None:
    """The run directory's ``run.json`` (None when there is none), every field checked."""
    path = run_dir / RUN_JSON
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_bytes().decode("utf-8-sig"))
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e}); {FIX}") from e
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path}: not valid JSON ({e}); {FIX}") from e
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not a JSON object; {FIX}")
    return _parse(path, doc)


def _bad(path: Path, name: str, value: object, expected: str) -> UserError:
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return UserError(f"{path}: field {name!r} is {shown}, expected {expected}; {FIX}")


def _is_int(v: object, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Fields:
    """Typed reads of one document's fields; a wrong type raises naming the field."""

    def __init__(self, path: Path, doc: dict[str, Any]) -> None:
        self.path, self.doc = path, doc

    def get(self, name: str, ok: Any, expected: str) -> Any:
        """The field (None when absent); present, it must pass ``ok`` (null only where
        :data:`NULLABLE`)."""
        if name not in self.doc:
            return None
        v = self.doc[name]
        if (v is not None or name not in NULLABLE) and not ok(v):
            raise _bad(self.path, name, v, expected)
        return v

    def text(self, name: str) -> str | None:
        return self.get(name, lambda v: isinstance(v, str), "a string")

    def items(self, name: str, ok: Any, expected: str) -> tuple[Any, ...]:
        v = self.get(name, lambda v: isinstance(v, list) and all(ok(x) for x in v), expected)
        return tuple(v or ())


def _parse(path: Path, doc: dict[str, Any]) -> RunManifest:
    f = _Fields(path, doc)
    world = f.get("world_size", lambda v: _is_int(v, 1) and v <= MAX_WORLD_SIZE,
                  f"an integer from 1 to {MAX_WORLD_SIZE}")  # fmt: skip
    config, engine, link = _parse_config(path, f.get("config", lambda v: isinstance(v, dict),
                                                     "an object"))  # fmt: skip
    return RunManifest(
        tool=f.text("tool"),
        schema_version=f.get("schema_version", _is_int, "an integer"),
        created=f.text("created"),
        host=f.text("host"),
        config=config,
        engine=engine,
        link_gbit=link,
        world_size=world,
        backend=f.text("backend"),
        device=f.text("device"),
        versions=dict(f.get("versions", lambda v: isinstance(v, dict), "an object") or {}),
        units=_parse_units(f),
        losses=f.items("losses", _is_num, "a list of numbers"),
        profiled_steps=f.items("profiled_steps", _is_int, "a list of step numbers"),
        traces=f.items("traces", lambda v: isinstance(v, str) and v, "a list of trace file names"),
        step_time_us=f.items(
            "step_time_us",
            lambda v: isinstance(v, list) and all(_is_num(x) for x in v),
            "a list of per-step times per rank",
        ),
        peak_mem_bytes=f.items("peak_mem_bytes", _is_int, "a list of byte counts per rank"),
        max_alive_units=f.items("max_alive_units", _is_int, "a list of counts per rank"),
        max_alive_in_backward=f.items(
            "max_alive_in_backward", _is_int, "a list of counts per rank"
        ),
        deferred_prefetches=f.items("deferred_prefetches", _is_int, "a list of counts per rank"),
        hosts=f.items("hosts", lambda v: isinstance(v, str), "a list of host names per rank"),
        predicted=_parse_predicted(f),
        run_id=f.text("run_id"),
        trace_stamps=_parse_stamps(f),
    )


def _parse_stamps(f: _Fields) -> tuple[tuple[str, int], ...]:
    """``trace_stamps``: one ``{run_id, rank}`` per listed trace."""
    stamps = f.items(
        "trace_stamps",
        lambda v: isinstance(v, dict) and isinstance(v.get("run_id"), str)
        and _is_int(v.get("rank")),
        "a list of {run_id, rank}, one per trace",
    )  # fmt: skip
    traces = f.doc.get("traces") or []
    if stamps and len(stamps) != len(traces):
        raise _bad(f.path, "trace_stamps", f.doc["trace_stamps"], f"one per trace ({len(traces)})")
    return tuple((str(v["run_id"]), int(v["rank"])) for v in stamps)


def _parse_units(f: _Fields) -> tuple[UnitSize, ...] | None:
    keys = ("name", "numel", "full_bytes", "shard_bytes")
    if "units" in f.doc and not isinstance(f.doc["units"], list):
        raise _bad(f.path, "units", f.doc["units"], "a list of units")
    units = f.doc.get("units")
    if units is None:
        return None
    if not all(isinstance(u, dict) and set(keys) <= u.keys() for u in units):
        raise _bad(f.path, "units", units, f"a list of units with {', '.join(keys)}")
    return tuple(UnitSize(**{k: u[k] for k in keys}) for u in units)


def _parse_predicted(f: _Fields) -> Predicted | None:
    p = f.get("predicted", lambda v: isinstance(v, dict), "an object")
    if p is None:
        return None
    return Predicted(
        source=str(p.get("from", "")),
        scenario=str(p.get("scenario", "")),
        bandwidth_scale=p.get("bandwidth_scale") if _is_num(p.get("bandwidth_scale")) else None,
        link_gbit=p.get("link_gbit") if _is_num(p.get("link_gbit")) else None,
        measured_config=p.get("measured_config"),
    )


def _parse_config(
    path: Path, cfg: dict[str, Any] | None
) -> tuple[RunConfig | None, EngineConfig | None, float | None]:
    """(the whole recipe where recorded, its engine section, its link_gbit)."""
    if cfg is None:
        return None, None, None
    link = cfg.get("link_gbit")
    if link is not None and not (_is_num(link) and link > 0):
        raise _bad(path, "config.link_gbit", link, "a number > 0 or null")
    engine = cfg.get("engine")
    if engine is not None and not isinstance(engine, dict):
        raise _bad(path, "config.engine", engine, "an object")
    try:
        if {"engine", "model", "window"} <= cfg.keys():
            whole = RunConfig.from_dict(cfg)
            return whole, whole.engine, whole.link_gbit
        return None, None if engine is None else EngineConfig(**engine), link
    except (TypeError, ValueError, KeyError) as e:
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{path}: field 'config' is not a run configuration ({what}); {FIX}") from e
