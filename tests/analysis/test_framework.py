"""What ran the job, recognised from the trace (analysis/framework.py), and levers that
exist in it, in its own API words: known-answer hand-built GPU runs (DDP, TorchRec-style)
and the torch FSDP2 fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from overlapscope.analysis import analyze
from overlapscope.analysis.findings import FindingKind
from overlapscope.analysis.framework import Framework
from overlapscope.trace.run.loader import load_run
from tests.analysis.gpu_runs import Rank, write_run
from tests.conftest import REPO

DDP_FORWARD = "DistributedDataParallel.forward"
FSDP_WORDS = ("FSDP", "fully_shard", "auto_wrap_policy", "backward_prefetch", "limit_all_gathers")


def launch_bound(*outer: tuple[str, float, float]) -> list[Rank]:
    """Two ranks, one step [0, 1000): inside the CPU ops ``outer`` (name, start, dur), eight
    10 µs kernels, each launched 50 µs after the last one ended: the GPU computes 80 µs of
    the step and waits for its host the rest."""
    ranks = []
    for r in (0, 1):
        k = Rank(r).steps((1, 0.0, 1000.0))
        for name, start, dur in outer:
            k.cpu(name, start, dur)
        for i in range(8):
            k.compute(100 * i + 60, 10, at=100 * i + 50)
        ranks.append(k)
    return ranks


def _host_finding(a):  # type: ignore[no-untyped-def]
    (f,) = [f for f in a.findings if f.kind is FindingKind.HOST_STARVED]
    return f


def test_a_ddp_job_gets_ddp_levers_and_more_work_per_launch_first(tmp_path: Path) -> None:
    a = analyze(load_run(write_run(tmp_path, launch_bound((DDP_FORWARD, 0.0, 900.0)))))
    assert a.summary.framework is Framework.DDP
    assert a.to_json_dict()["run"]["framework"] == "ddp"
    f = _host_finding(a)
    levers = [lv.lever for lv in f.levers]
    # the GPU computes 8% of the step: more work per launch first, with the figures
    assert levers[0].startswith("more work per launch: a larger batch per GPU")
    assert "GPU compute is 80 µs of a" in f.levers[0].why and "8 GPU ops" in f.levers[0].why
    assert any("bucket_cap_mb" in lv for lv in levers)
    assert not [lv for lv in levers for w in FSDP_WORDS if w in lv]
    assert all(lv.stake_us is not None and lv.stake_us > 0 for lv in f.levers)


def test_sparse_all_to_alls_beside_ddp_are_torchrec_style(tmp_path: Path) -> None:
    outer = (
        (DDP_FORWARD, 0.0, 900.0),
        ("fbgemm::permute_sparse_features", 5.0, 20.0),
        ("nccl:all_to_all", 30.0, 10.0),
    )
    a = analyze(load_run(write_run(tmp_path, launch_bound(*outer))))
    assert a.summary.framework is Framework.TORCHREC
    assert not [lv.lever for lv in _host_finding(a).levers for w in FSDP_WORDS if w in lv.lever]


def test_plain_collectives_without_a_framework_mark(tmp_path: Path) -> None:
    ranks = launch_bound()
    for k in ranks:
        k.all_gather(900, 50, at=890)
    a = analyze(load_run(write_run(tmp_path, ranks)))
    assert a.summary.framework is Framework.PLAIN


def test_an_fsdp2_job_gets_fsdp2_words_only() -> None:
    a = analyze(load_run(REPO / "traces" / "gpu-torch-fsdp2-many-small-units"))
    assert a.summary.framework is Framework.FSDP2
    levers = [lv.lever for f in a.findings for lv in f.levers]
    assert any("fully_shard" in lv for lv in levers)
    fsdp1 = ("auto_wrap_policy", "BackwardPrefetch", "limit_all_gathers", "FSDP1", "bucket_cap_mb")
    assert not [lv for lv in levers for w in fsdp1 if w in lv]


def test_the_engine_is_named_by_its_run_json() -> None:
    assert analyze(load_run(REPO / "traces" / "none")).summary.framework is Framework.ENGINE


EXTERNAL = REPO / ".." / "shared" / "external-traces"


@pytest.mark.parametrize(
    ("name", "framework"),
    [
        ("hta-nccl-parser-config-rank0.json.gz", Framework.DDP),
        ("hta-trace-diff-test-rank1.json.gz", Framework.TORCHREC),
    ],
)
def test_real_ddp_and_torchrec_captures_get_no_fsdp_lever(name: str, framework: Framework) -> None:
    """Captures of real jobs (HTA's test traces): the framework is recognised and no lever
    names FSDP."""
    if not (EXTERNAL / name).is_file():
        pytest.skip(f"shared external traces absent ({EXTERNAL})")
    a = analyze(load_run(EXTERNAL / name))
    assert a.summary.framework is framework
    levers = [lv.lever for f in a.findings for lv in f.levers]
    assert levers and not [lv for lv in levers for w in FSDP_WORDS if w in lv]
