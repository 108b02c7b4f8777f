"""Which unit each compute event of a torch FSDP rank belongs to (``unit``, ``phase``).

A unit's forward compute runs between its forward hooks, its gradient compute between its
backward hooks; a compute event (a CPU op, or a GPU kernel by the CPU call that launched
it) belongs to the innermost such region holding it, on the same thread:

* FSDP2: ``FSDP::pre_forward (<fqn>)`` ... ``FSDP::post_forward (<fqn>)`` is ``fwd`` of
  ``<fqn>``; ``FSDP::pre_backward (<fqn>)`` ... the first ``FSDP::post_backward_* (<fqn>)``
  after it is ``bwd``. The region runs from the end of the opening hook to the start of the
  closing one.
* FSDP1: ``FullyShardedDataParallel._pre_forward`` ... ``._post_forward`` (matched by
  nesting, as module calls nest) is ``fwd``; the last ``._pre_backward_hook`` before each
  ``._post_backward_hook`` opens a ``bwd`` region. FSDP1's ranges name no module: as for its
  collectives, units are ``unit<k>`` in forward order within the step (backward in reverse
  order); forward regions beyond the number of units (an outer wrapper without parameters
  of its own) come first in the step and get no unit.

Compute outside every region keeps no unit (the bound counts it as one more "unit"). The
regions come from the producers (``producers/fsdp2.py``, ``producers/fsdp1.py``); this
module holds what they share.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from overlapscope.phases import Lane
from overlapscope.trace.attribution import Labels, RowContext, innermost_containing

# Hook roles (per row, "" for other rows).
OPEN_FWD, CLOSE_FWD, OPEN_BWD, CLOSE_BWD = "open_fwd", "close_fwd", "open_bwd", "close_bwd"


def regions_frame(
    starts: list[float], ends: list[float], units: list[object], tids: list[int]
) -> pd.DataFrame:
    return pd.DataFrame({"start": starts, "end": ends, "unit": units, "tid": tids})


def label_compute(ctx: RowContext, out: Labels, regions: pd.DataFrame) -> None:
    """Give each compute row the unit and phase of the innermost region holding its anchor
    on its anchor's thread."""
    comp = np.flatnonzero((out.lane == Lane.COMPUTE.value) & (out.unit == None))  # noqa: E711
    if len(comp) == 0 or regions.empty:
        return
    regions = regions[regions["end"] > regions["start"]]
    for t, reg in regions.groupby("tid"):
        q = comp[ctx.anchor_tid[comp] == t]
        if len(q) == 0:
            continue
        hit = innermost_containing(
            reg["start"].to_numpy(dtype=np.float64),
            reg["end"].to_numpy(dtype=np.float64),
            ctx.anchor_ts[q],
        )
        ok = hit >= 0
        out.unit[q[ok]] = reg["unit"].to_numpy(dtype=object)[hit[ok]]
        out.phase[q[ok]] = reg["phase"].to_numpy(dtype=object)[hit[ok]]
