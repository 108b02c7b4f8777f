"""Which framework issued a Flight Recorder entry, and in which phase, from its ``frames``
(the Python stack that issued the collective, innermost first) and ``profiling_name``.

The rules name each framework's own functions:

* FSDP2 (``torch.distributed.fsdp._fully_shard``): ``foreach_all_gather`` under
  ``pre_forward`` (forward all-gather) or under ``pre_backward`` / ``_prefetch_unshard``
  (backward all-gather); ``foreach_reduce`` (reduce-scatter).
* FSDP1 (``FullyShardedDataParallel``): ``_all_gather_flat_param`` under
  ``_pre_forward_unshard`` (forward) or ``_pre_backward_hook`` / ``_prefetch_handle``
  (backward); ``_reduce_grad`` / ``_post_backward_hook`` (reduce-scatter).
* this project's engine (``overlapscope/engine/``): ``_reduce`` (reduce-scatter),
  ``_issue_all_gather`` under autograd's ``_engine_run_backward`` (backward) or not (forward).
  The engine's gloo traffic goes over its own lane, which the Flight Recorder does not record;
  these rules meet its NCCL runs.

A stack that matches none keeps framework and phase None (unknown stays unknown). The unit
is not in a stack (FSDP's hooks are the same frames for every unit): it comes from a
profiler trace of the same steps (join.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.phases import Phase

# (framework, the frame that says it, the frames that say the phase, the phase)
_RULES: tuple[tuple[str, str, tuple[str, ...], Phase], ...] = (
    ("fsdp2", "foreach_all_gather", ("pre_forward",), Phase.AG_FWD),
    ("fsdp2", "foreach_all_gather", ("pre_backward", "_prefetch_unshard"), Phase.AG_BWD),
    ("fsdp2", "foreach_reduce", ("foreach_reduce",), Phase.RS),
    ("fsdp1", "_all_gather_flat_param", ("_pre_forward_unshard",), Phase.AG_FWD),
    ("fsdp1", "_all_gather_flat_param", ("_pre_backward_hook", "_prefetch_handle"), Phase.AG_BWD),
    ("fsdp1", "_post_backward_hook", ("_reduce_grad", "_post_backward_hook"), Phase.RS),
)
_ENGINE_FILE = "overlapscope/engine/"
# the engine (engine/sharded.py) issues through _issue_all_gather / _reduce from hooks that
# are all named ``hook``; autograd's frames say a hook ran in backward
_BACKWARD = frozenset({"_engine_run_backward", "_pre_backward", "backward"})
INNER_FRAMES = 3  # the call that issued the collective
CALLER_FRAMES = 3  # ... of FSDP's (or the engine's) frames, and of the code that called torch


def classify(names: Sequence[str], files: Sequence[str]) -> tuple[str | None, Phase | None]:
    """``(framework, phase)`` of a stack given as its functions' names and files, innermost
    first; Nones where no rule matches."""
    have = set(names)
    for framework, marker, phase_frames, phase in _RULES:
        if marker in have and have.intersection(phase_frames):
            return framework, phase
    if any(_ENGINE_FILE in f for f in files):
        if "reduce_scatter_mean" in have or "_reduce" in have:
            return "engine", Phase.RS
        if "_issue_all_gather" in have:
            return "engine", Phase.AG_BWD if have & _BACKWARD else Phase.AG_FWD
        return "engine", None
    return None, None


def _frame(f: dict[str, object]) -> str:
    file = str(f.get("filename", "?")).rsplit("/", 2)
    return f"{f.get('name', '?')} ({'/'.join(file[-2:])}:{f.get('line', '?')})"


def stack_text(frames: Sequence[dict[str, object]]) -> str:
    """The stack, innermost first, joined by `` <- ``: the first :data:`INNER_FRAMES` (the
    library call that issued it), the first :data:`CALLER_FRAMES` of FSDP's or the engine's
    own frames (which unshard or reduce it was), and as many of the code outside torch that
    called it; ``...`` where frames are left out."""
    files = [str(f.get("filename", "")) for f in frames]
    framework = [i for i, f in enumerate(files) if "/fsdp/" in f or _ENGINE_FILE in f]
    outside = [i for i, f in enumerate(files) if "/torch/" not in f]
    keep = sorted(
        {
            *range(min(INNER_FRAMES, len(frames))),
            *framework[:CALLER_FRAMES],
            *outside[:CALLER_FRAMES],
        }
    )
    parts: list[str] = []
    for j, i in enumerate(keep):
        if j and i != keep[j - 1] + 1:
            parts.append("...")
        parts.append(_frame(frames[i]))
    return " <- ".join(parts)
