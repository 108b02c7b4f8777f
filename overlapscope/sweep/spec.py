"""What a sweep varies: one :class:`SweepPoint` per ``--policies`` token.

Token grammar: ``<policy>[+limit[=K]][+fwd][+ckpt[=all|every-N]][+offload]``, e.g. ``none``,
``backward_pre``, ``backward_pre+limit`` (rate limiter at ``--limit-all-gathers K``, else its
default window), ``backward_pre+limit=3``, ``backward_post+fwd`` (also prefetch in forward),
``backward_pre+ckpt`` (activation checkpointing of every unit; ``+ckpt=every-2`` for every
other), ``backward_pre+offload`` (CPU offload of shards). ``--forward-prefetch`` adds ``+fwd``
to every point. Everything else (model, seed, batch, link) is the same for all points.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from overlapscope.config import DEFAULT_LIMIT_WINDOW, Policy, RunConfig, check_checkpoint_units

_POLICIES = ", ".join(p.value for p in Policy)
# Every modifier a token may carry after its policy (the help and every error list them all).
MODIFIERS = "+limit[=K], +fwd, +ckpt[=all|every-N], +offload"
GRAMMAR = "<policy>[+limit[=K]][+fwd][+ckpt[=all|every-N]][+offload]"


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One configuration of the sweep; ``label`` names it in every output."""

    label: str
    policy: Policy
    forward_prefetch: bool = False
    limit_all_gathers: int | None = None
    checkpoint_units: str | None = None  # None: the sweep's --checkpoint-units
    cpu_offload: bool = False  # True: on for this point (else the sweep's --cpu-offload)

    def __post_init__(self) -> None:
        if self.limit_all_gathers is not None and self.limit_all_gathers < 1:
            raise ValueError(f"--policies: {self.label}: +limit=K needs K >= 1")

    def apply(self, base: RunConfig) -> RunConfig:
        """``base`` with this point's schedule; model, seed, batch and link unchanged."""
        engine = dataclasses.replace(
            base.engine,
            policy=self.policy,
            forward_prefetch=self.forward_prefetch,
            limit_all_gathers=self.limit_all_gathers,
            checkpoint_units=self.checkpoint_units or base.engine.checkpoint_units,
            cpu_offload=self.cpu_offload or base.engine.cpu_offload,
        )
        return dataclasses.replace(base, engine=engine)


def parse_point(
    token: str, *, forward_prefetch: bool = False, default_limit: int = DEFAULT_LIMIT_WINDOW
) -> SweepPoint:
    """Read one ``--policies`` token (see the module docstring); ValueError names the fix."""
    parts = [p.strip() for p in token.strip().split("+")]
    try:
        policy = Policy(parts[0])
    except ValueError:
        raise ValueError(
            f"--policies: {parts[0]!r} is not a policy; use one of {_POLICIES}, "
            f"each optionally followed by {MODIFIERS}"
        ) from None
    limit: int | None = None
    forward = forward_prefetch
    ckpt: str | None = None
    offload = False
    for mod in parts[1:]:
        name, _, value = mod.partition("=")
        if name == "limit":
            try:
                limit = int(value) if value else default_limit
            except ValueError:
                raise ValueError(f"--policies: {mod!r}: K in +limit=K must be an integer") from None
        elif name == "fwd" and not value:
            forward = True
        elif name == "ckpt":
            ckpt = value or "all"
            try:
                check_checkpoint_units(ckpt)
            except ValueError:
                raise ValueError(
                    f"--policies: {mod!r} in {token!r}: use +ckpt (every unit) or "
                    "+ckpt=all|every-N with N >= 1 (e.g. +ckpt=every-2)"
                ) from None
        elif name == "offload" and not value:
            offload = True
        else:
            raise ValueError(f"--policies: unknown modifier {mod!r} in {token!r}; use {MODIFIERS}")
    label = policy.value
    if limit is not None:
        label += f"+limit={limit}"
    if forward:
        label += "+fwd"
    if ckpt is not None:
        label += f"+ckpt={ckpt}"
    if offload:
        label += "+offload"
    return SweepPoint(label, policy, forward, limit, ckpt, offload)


def parse_points(
    text: str, *, forward_prefetch: bool = False, default_limit: int = DEFAULT_LIMIT_WINDOW
) -> list[SweepPoint]:
    """A comma-separated ``--policies`` list; duplicates (same label) are an error."""
    points = [
        parse_point(t, forward_prefetch=forward_prefetch, default_limit=default_limit)
        for t in text.split(",")
        if t.strip()
    ]
    if not points:
        raise ValueError("--policies must name at least one policy, e.g. none,backward_pre")
    labels = [p.label for p in points]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"--policies names {', '.join(dupes)} more than once")
    return points
