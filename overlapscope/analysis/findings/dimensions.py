"""Findings per parallel dimension: the gradients' reductions and tensor parallel.

Each finding's stake is the exposed transfer of its phase's collectives (waiting/comm_causes.py: the
part the compute meant to hide it does not cover, issued on time, not waiting for the last
rank), per step, mean over the ranks that run them, and it is ranked with the others by it:

* ``rs`` (FSDP's reduce-scatter of the gradients) and ``ar_rep`` (HSDP's all-reduce across
  replicas; trace/groups/dimensions.py): reduce in a narrower dtype, all-reduce across fewer
  replicas (HSDP), and with gradient accumulation reduce only on the last micro-batch;
* ``tp_fwd`` / ``tp_bwd`` (a block's tensor-parallel collectives): sequence parallel where
  TP still all-reduces, and async TP.

Levers are in torch's own API words, FSDP1's or FSDP2's as the trace's framework is; no FSDP
lever is given for a TP collective, nor a TP lever for FSDP's. overlapscope's engine runs get
none of these (they have no such switches).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd

from overlapscope.analysis.findings import (
    Finding,
    FindingInput,
    FindingKind,
    FindingRule,
    Lever,
)
from overlapscope.analysis.findings.evidence import collective_items, main_part
from overlapscope.phases import CollectiveKind, Phase
from overlapscope.trace.groups.assign import parse_label

_TP = (Phase.TP_FWD.value, Phase.TP_BWD.value)


def _exposure(units: pd.DataFrame, phases: tuple[str, ...]) -> tuple[float, pd.Series]:
    """Exposed transfer per step, mean over the ranks that run ``phases``, and per unit."""
    rows = units[units["phase"].astype(object).isin(phases)]
    if rows.empty:
        return 0.0, pd.Series(dtype=float)
    per_rank = rows.groupby("rank")["exposed_transfer_per_step_us"].sum()
    per_unit = rows.groupby("unit", dropna=False)["exposed_transfer_per_step_us"].mean()
    return float(per_rank.mean()), per_unit.sort_values(ascending=False)


def _top(per_unit: pd.Series, n: int = 3) -> str:
    return ", ".join(
        f"{u if isinstance(u, str) else '?'} {v:,.0f} µs" for u, v in per_unit.head(n).items()
    )


def _replicas(collectives: pd.DataFrame) -> int | None:
    rows = collectives[collectives["phase"].astype(object) == Phase.AR_REP.value]
    sizes = {len(p[1]) for g in rows["group"].unique() if (p := parse_label(g))}
    return max(sizes) if sizes else None


def _placed(inp: FindingInput, phases: tuple[str, ...], finding: Finding) -> Finding:
    """``finding`` with its structured evidence: the collectives of ``phases`` on each rank,
    most exposed transfer first, their ranks and steps, and the part of the step most of it
    lies in."""
    mine = inp.collectives[inp.collectives["phase"].astype(object).isin(phases)]
    per_rank = inp.table("collective_ranks")
    items, steps, at = collective_items(mine, per_rank, "exposed_transfer_us")
    keys = ["group", "step", "seq"]
    part = None
    if items:
        exposed = mine[[*keys, "phase"]].merge(per_rank[[*keys, "exposed_transfer_us"]], on=keys)
        part = main_part(exposed["phase"], exposed["exposed_transfer_us"])
    return dataclasses.replace(finding, ranks=at, steps=steps, evidence=items, phase=part)


def _reduce_change(framework: str, replicate: bool, replicas: int | None) -> str:
    if framework == "fsdp1":
        dtype = "MixedPrecision(reduce_dtype=torch.bfloat16)"
        skip = "wrap all but the last micro-batch in model.no_sync()"
    else:
        dtype = "fully_shard(..., mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.bfloat16))"
        skip = (
            "call model.set_requires_all_reduce(False) on all but the last micro-batch (it "
            "still reduce-scatters within each replica)"
            if replicate
            else "call model.set_requires_gradient_sync(False) on all but the last micro-batch"
        )
    out = f"reduce the gradients in bf16 ({dtype}) to halve an fp32 reduction's bytes"
    if replicate:
        shown = f" ({replicas} now)" if replicas else ""
        out += (
            f"; all-reduce across fewer replicas{shown}: a device mesh with a larger shard "
            "and a smaller replicate dimension"
        )
    return f"{out}; with gradient accumulation, {skip}"


def _tp_change(units: pd.DataFrame) -> str:
    tp = units[units["phase"].astype(object).isin(_TP)]
    sequence = bool(
        tp["kind"].astype(object).isin([CollectiveKind.ALL_GATHER.value,
                                        CollectiveKind.REDUCE_SCATTER.value]).any()
    )  # fmt: skip
    asynchronous = (
        "async TP: torch.compile with torch._inductor.config._micro_pipeline_tp = True (and "
        "symmetric memory for the TP group) overlaps each TP collective with its matmul"
    )
    if sequence:
        return f"already sequence parallel: {asynchronous}"
    return (
        "sequence parallel (SequenceParallel() on the norms, ColwiseParallel(input_layouts="
        "Shard(1)) / RowwiseParallel(output_layouts=Shard(1))) turns each all-reduce into a "
        f"reduce-scatter and an all-gather of a sequence shard; then {asynchronous}"
    )


def dimension_findings(inp: FindingInput) -> list[Finding]:
    """The findings of the gradients' reductions and of TP (module doc), unranked."""
    ranks, units = inp.ranks, inp.units
    if ranks.empty or units.empty or inp.is_engine_run:
        return []
    framework = inp.framework.value
    out = []
    for kind, phase, title in (
        (FindingKind.REDUCE_SCATTER_EXPOSED, Phase.RS, "gradient reduce-scatters are exposed"),
        (FindingKind.REPLICA_ALL_REDUCE_EXPOSED, Phase.AR_REP,
         "HSDP's replica all-reduces are exposed"),
    ):  # fmt: skip
        stake, per_unit = _exposure(units, (phase.value,))
        if inp.at_stake(stake):
            replicate = phase is Phase.AR_REP
            change = _reduce_change(framework, replicate, _replicas(inp.collectives))
            evidence = (
                f"{stake:,.0f} µs/step of {phase.words} transfer runs longer than the compute "
                f"meant to hide it; most exposed units: {_top(per_unit)}"
            )
            why = f"{stake:,.0f} µs/step of {phase.words} exposed"
            levers = (Lever(change, why),)
            found = Finding(kind, stake, title, evidence, levers, cause="exposed_transfer")
            out.append(_placed(inp, (phase.value,), found))
    stake, per_unit = _exposure(units, _TP)
    if inp.at_stake(stake):
        evidence = (
            f"{stake:,.0f} µs/step of tensor-parallel collectives (forward and backward) "
            f"runs uncovered by compute; most exposed blocks: {_top(per_unit)}"
        )
        found = Finding(FindingKind.TP_EXPOSED, stake, "tensor-parallel communication is exposed",
                        evidence,
                        (Lever(_tp_change(units), f"{stake:,.0f} µs/step of TP exposed"),),
                        cause="exposed_transfer")  # fmt: skip
        out.append(_placed(inp, _TP, found))
    return out


def _of(kind: FindingKind) -> FindingRule:
    """The registry's rule for one of this module's kinds."""

    def find(inp: FindingInput) -> Sequence[Finding]:
        return [f for f in dimension_findings(inp) if f.kind is kind]

    looks_for = {
        FindingKind.REDUCE_SCATTER_EXPOSED: "exposed gradient reduce-scatters",
        FindingKind.REPLICA_ALL_REDUCE_EXPOSED: "exposed HSDP replica all-reduces",
        FindingKind.TP_EXPOSED: "exposed tensor-parallel communication",
    }[kind]
    return FindingRule(kind.value, looks_for, f"{looks_for} above the threshold", find)


REDUCE_SCATTER_RULE = _of(FindingKind.REDUCE_SCATTER_EXPOSED)
REPLICA_ALL_REDUCE_RULE = _of(FindingKind.REPLICA_ALL_REDUCE_EXPOSED)
TP_RULE = _of(FindingKind.TP_EXPOSED)
