"""The typed run manifest (overlapscope/manifest.py): the shipped runs read back typed and
written back byte-for-byte the same JSON; damaged fields are one line naming the field;
configs and the trace loader need neither torch nor the engine."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from overlapscope.config import EngineConfig, Policy
from overlapscope.errors import UserError
from overlapscope.manifest import (
    RUN_JSON,
    Predicted,
    RunManifest,
    config_label,
    read_manifest,
    write_manifest,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p.parent for p in (REPO / "traces").glob("*/run.json"))


@pytest.mark.parametrize("run", SAMPLES, ids=lambda p: p.name)
def test_shipped_runs_read_typed_and_write_back_the_same_json(run: Path, tmp_path: Path) -> None:
    m = read_manifest(run)
    assert m is not None and m.config is not None and m.engine is m.config.engine
    doc = json.loads((run / RUN_JSON).read_text())
    assert m.world_size == doc["world_size"] == len(m.peak_mem_bytes) == len(m.traces)
    assert m.engine.policy.value == doc["config"]["engine"]["policy"]
    assert [u.name for u in m.units or ()] == [u["name"] for u in doc["units"]]
    if run.name.startswith("gpu-"):  # traces/gpu-engine-<what>: named for what it shows
        assert m.device == "cuda" and (m.engine.policy.value in run.name or "offload" in run.name)
    else:  # the CPU samples: named by their sweep label
        assert m.config_label().startswith(run.name.split("+")[0])
    write_manifest(tmp_path, m)
    assert json.loads((tmp_path / RUN_JSON).read_text()) == doc
    assert list(json.loads((tmp_path / RUN_JSON).read_text())) == list(doc)  # same order


def test_no_manifest_is_none(tmp_path: Path) -> None:
    assert read_manifest(tmp_path) is None


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"hosts": "vm"}, "'hosts'"),
        ({"units": [{"name": "u0"}]}, "'units'"),
        ({"step_time_us": [[1.0, "x"]]}, "'step_time_us'"),
        ({"losses": None}, "'losses'"),
        ({"config": {"engine": {"policy": "sideways"}}}, "'config'"),
        ({"config": {"link_gbit": -1}}, "'config.link_gbit'"),
        ({"predicted": "yes"}, "'predicted'"),
    ],
    ids=["hosts-str", "unit-fields", "step-time", "losses-null", "policy", "link", "predicted"],
)
def test_damaged_field_is_one_line_naming_it(tmp_path: Path, doc: object, field: str) -> None:
    (tmp_path / RUN_JSON).write_text(json.dumps(doc))
    with pytest.raises(UserError) as e:
        read_manifest(tmp_path)
    said = str(e.value)
    assert "\n" not in said and str(tmp_path / RUN_JSON) in said and field in said
    assert "repair it" in said  # the fix


def test_engine_section_alone_is_kept_without_making_a_recipe_up(tmp_path: Path) -> None:
    """What-if predictions of torch traces record the engine section and the link only."""
    m = RunManifest(
        engine=EngineConfig(policy=Policy.BACKWARD_POST, forward_prefetch=True),
        link_gbit=2.0,
        predicted=Predicted(source="/r", scenario="backward_post+fwd"),
    )
    write_manifest(tmp_path, m)
    back = read_manifest(tmp_path)
    assert back == m and back.config is None and not back.is_engine_run
    assert back.config_label() == "backward_post+fwd@2gbit"


def test_config_label_names_what_differs_from_the_defaults() -> None:
    e = EngineConfig(policy=Policy.BACKWARD_PRE, limit_all_gathers=2, checkpoint_units="all")
    assert config_label(e) == "backward_pre+limit=2+ckpt=all"
    assert config_label(dataclasses.replace(e, limit_all_gathers=None), 0.5) == (
        "backward_pre+ckpt=all@0.5gbit"
    )


def test_trace_loader_and_manifest_import_without_the_engine_or_torch() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith(('torch.', 'overlapscope.engine')):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import overlapscope.manifest, overlapscope.trace.run.loader, overlapscope.trace.run.discover\n"
        "assert not any(m.startswith(('torch', 'overlapscope.engine')) for m in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_trace_package_does_not_import_the_engine() -> None:
    offenders = [
        f"{p.relative_to(REPO)}:{i}"
        for p in sorted((REPO / "overlapscope" / "trace").rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if line.lstrip().startswith(("import ", "from ")) and "overlapscope.engine" in line
    ]
    assert not offenders


def test_phase_knows_its_lane_and_collective_kind() -> None:
    """One vocabulary: a phase says where it sits and which collective it stands for."""
    from overlapscope.phases import CollectiveKind, Lane, Phase

    kinds = {p: p.collective_kind for p in Phase}
    assert kinds[Phase.AG_FWD] is kinds[Phase.AG_BWD_WAIT] is CollectiveKind.ALL_GATHER
    assert kinds[Phase.RS] is kinds[Phase.RS_WAIT] is CollectiveKind.REDUCE_SCATTER
    assert kinds[Phase.AR] is CollectiveKind.ALL_REDUCE
    issued = {p for p in Phase if p.lane is Lane.ISSUE}
    assert {p for p, k in kinds.items() if k is not None and p.awaited is None} == issued
    assert all(isinstance(p.lane, Lane) for p in Phase)
