"""The levers that depend on the framework that ran the job, in its own API words (docs/
ANALYSIS.md, "Levers"): a lever is offered only where the framework has it.

Where the framework is not recognised (plain collectives), a lever names the torch APIs of
both FSDP versions, as the trace's phases (all-gathers, reduce-scatters) suggest FSDP.
"""

from __future__ import annotations

from overlapscope.analysis.framework import Framework

_E, _F1, _F2 = Framework.ENGINE, Framework.FSDP1, Framework.FSDP2
_DDP_LIKE = (Framework.DDP, Framework.TORCHREC)


def backward_prefetch(framework: Framework, policy: object) -> str:
    """The lever for backward all-gathers issued too late to be hidden."""
    if framework is _E and policy == "backward_pre":
        return (
            "already --policy backward_pre, which prefetches one unit ahead: use fewer, "
            "larger units so each backward hides its successor's all-gather, or a faster link"
        )
    if framework is _E:
        return (
            "prefetch the next unit's all-gather before each unit's backward: --policy backward_pre"
        )
    if policy == "backward_pre":
        return (
            "already backward_pre: prefetch deeper (FSDP2 set_modules_to_backward_prefetch) "
            "or use larger units so each backward hides its successor's all-gather"
        )
    if framework is _F1:
        return (
            "prefetch the next unit's all-gather before each unit's backward: "
            "backward_prefetch=BackwardPrefetch.BACKWARD_PRE"
        )
    if framework is _F2:
        return (
            "prefetch further ahead in the backward: "
            "module.set_modules_to_backward_prefetch([...]) (FSDP2 prefetches one unit by "
            "default), or fully_shard larger modules so each backward hides the next all-gather"
        )
    return (
        "prefetch the next unit's all-gather before each unit's backward: FSDP1 "
        "backward_prefetch=BackwardPrefetch.BACKWARD_PRE (FSDP2 prefetches one unit "
        "by default; set_modules_to_backward_prefetch for more)"
    )


def forward_prefetch(framework: Framework, already: bool) -> str:
    """The lever for forward all-gathers issued too late to be hidden."""
    if already:
        return (
            "already forward prefetch: make units larger or overlap the first all-gather "
            "with the data loading"
        )
    if framework is _E:
        return (
            "issue the next unit's all-gather during the current unit's forward: --forward-prefetch"
        )
    if framework is _F1:
        return "issue the next unit's all-gather during the current unit's forward: forward_prefetch=True"
    if framework is _F2:
        return (
            "issue the next units' all-gathers during the current unit's forward: "
            "module.set_modules_to_forward_prefetch([...])"
        )
    return (
        "issue the next unit's all-gather during the current unit's forward: FSDP1 "
        "forward_prefetch=True (FSDP2: set_modules_to_forward_prefetch)"
    )


def rate_limiter(framework: Framework) -> str:
    if framework is _E:
        return (
            "if there is memory headroom, relax the rate limiter: a larger K in "
            "--limit-all-gathers K, or leave the flag out"
        )
    if framework is _F1:
        return "if there is memory headroom, relax the rate limiter: limit_all_gathers=False"
    return (
        "if there is memory headroom, relax the rate limiter: FSDP1 "
        "limit_all_gathers=False (or allow more in-flight all-gathers)"
    )


def hooks(framework: Framework) -> str:
    """The lever for host time in the framework's per-module hooks."""
    if framework is _F1:
        return "wrap fewer, larger modules (a coarser auto_wrap_policy) or fuse kernels"
    if framework is _F2:
        return "fully_shard fewer, larger modules, or fuse kernels"
    if framework in _DDP_LIKE:
        return (
            "fewer gradient buckets and hooks: a larger DDP bucket_cap_mb, "
            "gradient_as_bucket_view=True, or fused kernels"
        )
    return "fewer and larger units (FSDP wrapping) or fused kernels"


def more_work_per_launch() -> str:
    """The first lever where GPU work is a small share of the step."""
    return "more work per launch: a larger batch per GPU, fused ops"
