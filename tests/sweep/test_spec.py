"""``--policies`` tokens -> sweep points (table-driven)."""

from __future__ import annotations

import pytest

from overlapscope.config import Policy, RunConfig
from overlapscope.sweep import SweepPoint, parse_point, parse_points
from overlapscope.sweep.spec import MODIFIERS


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("none", SweepPoint("none", Policy.NONE)),
        ("backward_post", SweepPoint("backward_post", Policy.BACKWARD_POST)),
        ("backward_pre+limit", SweepPoint("backward_pre+limit=2", Policy.BACKWARD_PRE, False, 2)),
        ("backward_pre+limit=3", SweepPoint("backward_pre+limit=3", Policy.BACKWARD_PRE, False, 3)),
        ("backward_pre+fwd", SweepPoint("backward_pre+fwd", Policy.BACKWARD_PRE, True)),
        (
            "backward_pre+ckpt",
            SweepPoint("backward_pre+ckpt=all", Policy.BACKWARD_PRE, False, None, "all"),
        ),
        (
            "backward_post+ckpt=every-2+offload",
            SweepPoint(
                "backward_post+ckpt=every-2+offload",
                Policy.BACKWARD_POST,
                False,
                None,
                "every-2",
                True,
            ),
        ),
        (
            " backward_pre + limit=1 + fwd ",
            SweepPoint("backward_pre+limit=1+fwd", Policy.BACKWARD_PRE, True, 1),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_parse_point(token: str, expected: SweepPoint) -> None:
    assert parse_point(token) == expected


def test_global_flags_reach_every_point() -> None:
    points = parse_points("none,backward_pre+limit", forward_prefetch=True, default_limit=4)
    assert [p.label for p in points] == ["none+fwd", "backward_pre+limit=4+fwd"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("eager", "'eager' is not a policy"),
        ("none+turbo", "unknown modifier 'turbo'"),
        ("backward_pre+limit=x", "must be an integer"),
        ("backward_pre+limit=0", "--policies: .*K >= 1"),
        ("backward_pre+ckpt=bogus", "--policies: 'ckpt=bogus'.*every-N"),
        ("backward_pre+ckpt=every-0", "--policies: 'ckpt=every-0'.*N >= 1"),
        ("none,none", "more than once"),
        (" , ", "at least one policy"),
    ],
)
def test_bad_tokens_name_the_fix(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_points(text)


def test_apply_changes_only_the_schedule() -> None:
    base = RunConfig(seed=7, global_batch=4)
    cfg = parse_point("backward_post+limit=3+fwd").apply(base)
    assert cfg.engine.policy is Policy.BACKWARD_POST
    assert cfg.engine.limit_all_gathers == 3 and cfg.engine.forward_prefetch
    assert (cfg.seed, cfg.global_batch, cfg.model) == (7, 4, base.model)


@pytest.mark.parametrize("text", ["eager", "none+turbo"])
def test_errors_list_every_modifier(text: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_points(text)
    for mod in MODIFIERS.split(", "):
        assert mod in str(e.value)
    assert "+ckpt[=all|every-N]" in str(e.value) and "+offload" in str(e.value)
