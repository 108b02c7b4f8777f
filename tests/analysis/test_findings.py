"""Diagnosis rules on small tables: each finding fires on its evidence and names its change."""

from __future__ import annotations

import pandas as pd

from overlapscope.analysis.findings import Evidence, Finding, FindingInput, FindingKind, Lever
from overlapscope.analysis.findings.registry import run_rules
from overlapscope.analysis.findings.text import finding_lines
from overlapscope.analysis.framework import Framework
from overlapscope.config import EngineConfig, Policy
from overlapscope.manifest import RunManifest


def ranks(limiter_us: float = 0.0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": [0, 1],
            "num_steps": [2, 2],
            "step_time_per_step_us": [1000.0, 1000.0],
            "limiter_per_step_us": [limiter_us / 2] * 2,
        }
    )


def units(
    phase: str, exposed_per_step: float, host_late: float = 0.0, peer_wait: float = 0.0
) -> pd.DataFrame:
    """Both ranks: one unit's collectives of ``phase``, ``exposed_per_step`` of them exposed,
    ``host_late`` and ``peer_wait`` of it issued late and waiting, the rest transfer."""
    transfer = exposed_per_step - host_late - peer_wait
    return pd.DataFrame(
        {
            "rank": [0, 1],
            "unit": ["b.0", "b.0"],
            "phase": [phase] * 2,
            "exposed_per_step_us": [exposed_per_step] * 2,
            "exposed_host_late_per_step_us": [host_late] * 2,
            "exposed_peer_wait_per_step_us": [peer_wait] * 2,
            "exposed_transfer_per_step_us": [transfer] * 2,
        }
    )


NO_COLL = pd.DataFrame(
    columns=[
        *("group", "step", "seq", "kind", "unit", "phase", "start_us"),
        "num_ranks",
        "straggler_rank",
        "peer_wait_us",
        "straggler_lag_us",
        "bytes",
        "busbw_gbps",
        "transfer_us",
        "exposed_transfer_us",
    ]
)


def find(ranks, units, collectives, manifest, *, has_gpu=True):  # type: ignore[no-untyped-def]
    """Every registered rule on the tables given (no steps, host ops or critical path)."""
    engine = manifest is not None and manifest.is_engine_run
    framework = Framework.ENGINE if engine else Framework.PLAIN
    empty = pd.DataFrame()
    return run_rules(
        FindingInput(
            ranks, empty, units, collectives, empty, manifest, has_gpu, framework=framework
        )
    )


def kinds(findings) -> list[FindingKind]:
    return [f.kind for f in findings]


def test_backward_all_gather_points_to_backward_pre():
    f = find(ranks(), units("ag_bwd", 200.0), NO_COLL, None)
    assert kinds(f) == [FindingKind.BACKWARD_ALL_GATHER_EXPOSED]
    assert f[0].stake_us == 200.0 and "backward_pre" in f[0].change and "b.0" in f[0].summary


def test_backward_finding_when_already_backward_pre():
    f = find(
        ranks(),
        units("ag_bwd", 200.0),
        NO_COLL,
        RunManifest(engine=EngineConfig(policy=Policy.BACKWARD_PRE)),
    )
    assert "already backward_pre" in f[0].change


def test_prefetch_is_recommended_only_for_the_transfer_part():
    """Issue 30 point 2: of 200 µs/step exposed, 120 issued late by the host and 30 waiting
    for the last rank: the prefetch finding's stake is the 50 µs/step of transfer, and its
    evidence names the rest; with all of it late, no prefetch finding at all."""
    f = find(ranks(), units("ag_bwd", 200.0, host_late=120.0, peer_wait=30.0), NO_COLL, None)
    assert kinds(f) == [FindingKind.BACKWARD_ALL_GATHER_EXPOSED]
    assert f[0].stake_us == 50.0
    assert "120 µs/step issued late by the host" in f[0].summary
    assert "30 µs/step waiting for the last rank" in f[0].summary
    assert find(ranks(), units("ag_fwd", 200.0, host_late=200.0), NO_COLL, None) == ()


def test_forward_all_gather_points_to_forward_prefetch():
    f = find(ranks(), units("ag_fwd", 50.0), NO_COLL, None)
    assert (
        kinds(f) == [FindingKind.FORWARD_ALL_GATHER_EXPOSED] and "forward_prefetch" in f[0].change
    )


def test_below_one_percent_of_the_step_is_not_a_finding():
    assert find(ranks(), units("ag_fwd", 5.0), NO_COLL, None) == ()


def test_rate_limiter_with_memory_evidence():
    f = find(
        ranks(limiter_us=600.0),
        units("ag_fwd", 0.0),
        NO_COLL,
        RunManifest(peak_mem_bytes=(2**30, 2**29)),
    )
    assert kinds(f) == [FindingKind.RATE_LIMITER]
    assert (
        f[0].stake_us == 300.0
        and "1,024 MiB" in f[0].summary
        and "limit_all_gathers" in f[0].change
    )


def test_straggler_and_network_ranked_by_stake():
    coll = pd.DataFrame(
        {
            "group": ["g"] * 3,
            "step": [3, 4, 4],
            "seq": [0, 0, 1],
            "kind": ["all_gather"] * 3,
            "unit": ["b.0"] * 3,
            "phase": ["ag_bwd"] * 3,
            "start_us": [100.0, 2100.0, 2600.0],
            "num_ranks": [2, 2, 2],
            "straggler_rank": [1, 1, 0],
            "peer_wait_us": [400.0, 400.0, 10.0],
            "straggler_lag_us": [400.0, 400.0, 10.0],
            "bytes": [8 << 20] * 3,
            "busbw_gbps": [0.01] * 3,  # 0.08 Gbit/s on a 10 Gbit/s link
            "transfer_us": [100.0] * 3,
            "exposed_transfer_us": [80.0] * 3,
        }
    )
    f = find(ranks(), units("ag_fwd", 0.0), coll, RunManifest(link_gbit=10))
    assert kinds(f) == [FindingKind.STRAGGLER, FindingKind.NETWORK]
    assert f[0].rank == 1 and f[0].stake_us == 800 / 2 / 2
    # its evidence: the two collectives it was last at, the steps and the phase of them
    assert [(e.rank, e.step, e.start_us, e.dur_us) for e in f[0].evidence] == [
        (1, 3, 100.0, 400.0),
        (1, 4, 2100.0, 400.0),
    ]
    assert (f[0].ranks, f[0].steps, f[0].phase, f[0].cause) == (
        (1,),
        (3, 4),
        "backward",
        "slow_rank",
    )
    assert f[1].stake_us < f[0].stake_us
    assert "GPU clocks" in f[0].change
    on_cpu = find(ranks(), units("ag_fwd", 0.0), coll, None, has_gpu=False)
    assert "GPU" not in on_cpu[0].change and "cores it shares" in on_cpu[0].change
    # no link speed known: no network finding
    assert FindingKind.NETWORK not in kinds(find(ranks(), units("ag_fwd", 0.0), coll, None))


ENGINE_RUN = RunManifest(units=(), engine=EngineConfig(policy=Policy.NONE))


def test_an_engine_run_is_told_its_own_flags_and_torch_runs_torch_knobs():
    both = pd.concat([units("ag_bwd", 200.0), units("ag_fwd", 150.0)])
    engine = {f.kind: f.change for f in find(ranks(limiter_us=400.0), both, NO_COLL, ENGINE_RUN)}
    torch = {f.kind: f.change for f in find(ranks(limiter_us=400.0), both, NO_COLL, None)}
    assert "--policy backward_pre" in engine[FindingKind.BACKWARD_ALL_GATHER_EXPOSED]
    assert "--forward-prefetch" in engine[FindingKind.FORWARD_ALL_GATHER_EXPOSED]
    assert "--limit-all-gathers" in engine[FindingKind.RATE_LIMITER]
    assert not [c for c in engine.values() if "FSDP" in c or "set_modules" in c]
    assert "BackwardPrefetch.BACKWARD_PRE" in torch[FindingKind.BACKWARD_ALL_GATHER_EXPOSED]
    assert "forward_prefetch=True" in torch[FindingKind.FORWARD_ALL_GATHER_EXPOSED]
    assert "limit_all_gathers=False" in torch[FindingKind.RATE_LIMITER]
    assert not [c for c in torch.values() if "--" in c]


def test_the_text_is_made_from_the_fields():
    """diagnose's lines: title and stake, where (ranks, steps, phase, cause), the summary,
    the strongest items (their start from the step's first GPU op) and each lever with why."""
    f = Finding(
        "k",
        300.0,
        "a title",
        "the summary",
        (Lever("lever one", "why one", 200.0), Lever("lever two", "why two")),
        ranks=(4, 5),
        steps=(3, 4, 5),
        phase="backward",
        cause="slow_rank",
        evidence=(Evidence(4, 3, 1000.0, 534.0, ("A.forward", "aten::copy_"), "all_gather", 20.0),),
    )
    assert finding_lines(2, f) == [
        "2. a title: 300 µs/step at stake",
        "   ranks 4, 5 · steps 3-5 · phase backward · cause slow_rank",
        "   evidence: the summary",
        "     - rank 4, step 3 +20 µs: 534 µs, CPU A.forward > aten::copy_, GPU all_gather",
        "   try: lever one (why one; 200 µs/step at stake)",
        "   try: lever two (why two)",
    ]
    assert f.to_dict()["levers"][1] == {"lever": "lever two", "why": "why two", "stake_us": 300.0}
