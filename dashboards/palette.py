"""Each phase's colour, timeline row and name, as the phase table (``overlapscope/phases.py``)
gives them, keyed by the phase value the tables hold; what is drawn beside the phases."""

from __future__ import annotations

from overlapscope.phases import Phase, Row

# Rows of the timeline, top to bottom within a rank (the labels shown).
LANES: tuple[str, ...] = tuple(r.value for r in Row)
LANE_COMPUTE = Row.COMPUTE.value
LANE_EXPOSED = Row.EXPOSED.value

# phase value -> (row, colour): a wait keeps its collective's hue in the wait row (lighter).
PHASE_STYLE: dict[str, tuple[str, str]] = {p.value: (p.row.value, p.colour) for p in Phase}
PHASE_NAMES: dict[str, str] = {p.value: p.words for p in Phase}
UNKNOWN_PHASE = "other"
UNKNOWN_STYLE: tuple[str, str] = (LANE_COMPUTE, "#A0A0A0")
EXPOSED_COLOUR = "#222222"  # exposed communication: dark, unlike any phase

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


# Where the GPU waits (overlapscope/analysis/waiting/idle.py, analysis/waiting/comm_causes.py): each
# part's colour.
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
