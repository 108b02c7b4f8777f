"""One colour per phase and the lane each phase is drawn in, shared by every view."""

from __future__ import annotations

from overlapscope.trace.names import Phase

# Lanes of the timeline, top to bottom within a rank.
LANE_COMPUTE = "compute"
LANE_ALL_GATHER = "all-gather"
LANE_REDUCE = "reduce-scatter"
LANE_WAIT = "wait"
LANE_MEMORY = "memory"
LANE_EXPOSED = "exposed comm"
LANES: tuple[str, ...] = (
    LANE_COMPUTE,
    LANE_ALL_GATHER,
    LANE_REDUCE,
    LANE_WAIT,
    LANE_MEMORY,
    LANE_EXPOSED,
)

# Phase -> (lane, colour). Communication phases keep their hue in the wait lane (lighter).
STYLE_BY_PHASE: dict[Phase, tuple[str, str]] = {
    Phase.FWD: (LANE_COMPUTE, "#4C78A8"),
    Phase.BWD: (LANE_COMPUTE, "#72B7B2"),
    Phase.RECOMPUTE: (LANE_COMPUTE, "#9D755D"),
    Phase.OPTIM: (LANE_COMPUTE, "#B279A2"),
    Phase.AG_FWD: (LANE_ALL_GATHER, "#F58518"),
    Phase.AG_BWD: (LANE_ALL_GATHER, "#E45756"),
    Phase.RS: (LANE_REDUCE, "#54A24B"),
    Phase.AR: (LANE_REDUCE, "#2E7D32"),
    Phase.H2D: (LANE_MEMORY, "#BAB0AC"),
    Phase.D2H: (LANE_MEMORY, "#8C8C8C"),
    Phase.AG_FWD_WAIT: (LANE_WAIT, "#FBC58C"),
    Phase.AG_BWD_WAIT: (LANE_WAIT, "#F2A5A4"),
    Phase.RS_WAIT: (LANE_WAIT, "#A8D5A2"),
    Phase.AR_WAIT: (LANE_WAIT, "#8FC792"),
    Phase.H2D_WAIT: (LANE_WAIT, "#DDDDDD"),
    Phase.D2H_WAIT: (LANE_WAIT, "#CCCCCC"),
    Phase.LIMITER: (LANE_WAIT, "#EECA3B"),
}
# Keyed by the phase value, as the tables hold it (a test checks every Phase has a style).
PHASE_STYLE: dict[str, tuple[str, str]] = {p.value: v for p, v in STYLE_BY_PHASE.items()}
UNKNOWN_PHASE = "other"
UNKNOWN_STYLE: tuple[str, str] = (LANE_COMPUTE, "#A0A0A0")
EXPOSED_COLOUR = "#222222"  # exposed communication: dark, unlike any phase

# Human names for the legend.
NAME_BY_PHASE: dict[Phase, str] = {
    Phase.FWD: "forward compute",
    Phase.BWD: "backward compute",
    Phase.RECOMPUTE: "recompute",
    Phase.OPTIM: "optimizer",
    Phase.AG_FWD: "all-gather (forward)",
    Phase.AG_BWD: "all-gather (backward)",
    Phase.RS: "reduce-scatter",
    Phase.AR: "all-reduce",
    Phase.H2D: "copy host→device",
    Phase.D2H: "copy device→host",
    Phase.AG_FWD_WAIT: "wait: forward all-gather",
    Phase.AG_BWD_WAIT: "wait: backward all-gather",
    Phase.RS_WAIT: "wait: reduce-scatter",
    Phase.AR_WAIT: "wait: all-reduce",
    Phase.H2D_WAIT: "wait: copy",
    Phase.D2H_WAIT: "wait: copy",
    Phase.LIMITER: "rate limiter",
}

PHASE_NAMES: dict[str, str] = {p.value: v for p, v in NAME_BY_PHASE.items()}

# Series colours for runs (trade-off view) and the heat map scale.
RUN_COLOURS: tuple[str, ...] = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#E45756",
    "#B279A2",
    "#72B7B2",
    "#EECA3B",
    "#9D755D",
)
HEATMAP_SCALE = "Reds"


def phase_lane(phase: str) -> str:
    return PHASE_STYLE.get(phase, UNKNOWN_STYLE)[0]


def phase_colour(phase: str) -> str:
    return PHASE_STYLE.get(phase, UNKNOWN_STYLE)[1]


def phase_name(phase: str) -> str:
    return PHASE_NAMES.get(phase, phase)


# Where the GPU waits (overlapscope/analysis/idle.py, comm_causes.py): each part's colour.
WAIT_PARTS: tuple[tuple[str, str, str], ...] = (  # (ranks column, legend name, colour)
    ("idle_host_bound_per_step_us", "idle: host-bound", "#D62728"),
    ("idle_sync_per_step_us", "idle: host sync", "#FF7F0E"),
    ("idle_peer_per_step_us", "idle: host in a CPU collective", "#BCBD22"),
    ("idle_cross_stream_per_step_us", "idle: cross-stream", "#9467BD"),
    ("idle_other_per_step_us", "idle: other (launch latency)", "#C7C7C7"),
    ("exposed_comm_host_late_per_step_us", "exposed comm: issued late", "#8C564B"),
    ("exposed_comm_peer_wait_per_step_us", "exposed comm: waiting for the last rank", "#E377C2"),
    ("exposed_comm_transfer_per_step_us", "exposed comm: transfer", "#222222"),
)
