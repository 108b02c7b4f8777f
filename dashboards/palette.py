"""One colour per phase and the lane each phase is drawn in, shared by every view."""

from __future__ import annotations

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
PHASE_STYLE: dict[str, tuple[str, str]] = {
    "fwd": (LANE_COMPUTE, "#4C78A8"),
    "bwd": (LANE_COMPUTE, "#72B7B2"),
    "recompute": (LANE_COMPUTE, "#9D755D"),
    "optim": (LANE_COMPUTE, "#B279A2"),
    "ag_fwd": (LANE_ALL_GATHER, "#F58518"),
    "ag_bwd": (LANE_ALL_GATHER, "#E45756"),
    "rs": (LANE_REDUCE, "#54A24B"),
    "ar": (LANE_REDUCE, "#2E7D32"),
    "h2d": (LANE_MEMORY, "#BAB0AC"),
    "d2h": (LANE_MEMORY, "#8C8C8C"),
    "ag_fwd.wait": (LANE_WAIT, "#FBC58C"),
    "ag_bwd.wait": (LANE_WAIT, "#F2A5A4"),
    "rs.wait": (LANE_WAIT, "#A8D5A2"),
    "ar.wait": (LANE_WAIT, "#8FC792"),
    "h2d.wait": (LANE_WAIT, "#DDDDDD"),
    "d2h.wait": (LANE_WAIT, "#CCCCCC"),
    "limiter": (LANE_WAIT, "#EECA3B"),
}
UNKNOWN_PHASE = "other"
UNKNOWN_STYLE: tuple[str, str] = (LANE_COMPUTE, "#A0A0A0")
EXPOSED_COLOUR = "#222222"  # exposed communication: dark, unlike any phase

# Human names for the legend.
PHASE_NAMES: dict[str, str] = {
    "fwd": "forward compute",
    "bwd": "backward compute",
    "recompute": "recompute",
    "optim": "optimizer",
    "ag_fwd": "all-gather (forward)",
    "ag_bwd": "all-gather (backward)",
    "rs": "reduce-scatter",
    "ar": "all-reduce",
    "h2d": "copy host→device",
    "d2h": "copy device→host",
    "ag_fwd.wait": "wait: forward all-gather",
    "ag_bwd.wait": "wait: backward all-gather",
    "rs.wait": "wait: reduce-scatter",
    "ar.wait": "wait: all-reduce",
    "h2d.wait": "wait: copy",
    "d2h.wait": "wait: copy",
    "limiter": "rate limiter",
}

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
