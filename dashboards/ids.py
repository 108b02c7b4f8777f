"""Component IDs: every callback and test refers to these constants, never to literals."""

from __future__ import annotations

TABS = "view-tabs"
VIEW = "view-content"
RUN_A = "run-a"
RUN_B = "run-b"
STEP = "step"
WINDOW = "timeline-window"
CLOCKS = "clock-mode"  # timeline: aligned or raw clocks (dashboards/critical_path.py)
# Runs opened with --dask: the ranks whose step the timeline reads (dashboards/big_run.py);
# the picker is shown only for such runs.
RANKS = "timeline-ranks"
RANKS_PICKER = "timeline-ranks-picker"
RANKS_NOTE = "timeline-ranks-note"
# "download for Perfetto": a link per run shown, for the chosen step and shown ranks
PERFETTO_LINKS = "perfetto-links"

OVERVIEW_TABLE = "overview-table"
FINDINGS = "findings"
TIMELINE_GRAPH = "timeline-graph"
UNITS_GRAPH = "units-graph"
TRADEOFF_GRAPH = "tradeoff-graph"
RANKS_GRAPH = "ranks-graph"
GROUP = "group-filter"  # ranks tab: the collectives of one process group (dashboards/groups.py)
STRAGGLERS = "stragglers"
WAITS_GRAPH = "waits-graph"  # ranks tab: idle and exposed comm by cause
HOST_OPS = "host-ops"  # ranks tab: what the host did while the GPU waited
UNITS_SPLIT = "units-split"  # units tab: each unit's exposed time by cause

# What-if panel: always in the page (hidden on other tabs) so the scenario survives a change of
# tab or run.
WHATIF_PANEL = "whatif-panel"
WHATIF_POLICY = "whatif-policy"
WHATIF_FORWARD_PREFETCH = "whatif-forward-prefetch"
WHATIF_LIMIT = "whatif-limit"
WHATIF_NETWORK_MODE = "whatif-network-mode"
WHATIF_NETWORK_VALUE = "whatif-network-value"
WHATIF_TARGET = "whatif-target"
WHATIF_OUTPUT = "whatif-output"
WHATIF_TABLE = "whatif-table"
WHATIF_SUMMARY = "whatif-summary"
WHATIF_GRAPH = "whatif-graph"
ERROR_PANEL_CLASS = "error-panel"
WARNING_PANEL_CLASS = "warning-panel"

# Tab values of the package's views (dashboards/tabs/; their order is ``tabs.VIEWS``'s). A
# view may keep its ids in its own module instead (tests/dashboard/test_add_view.py).
TAB_OVERVIEW = "overview"
TAB_TIMELINE = "timeline"
TAB_UNITS = "units"
TAB_TRADEOFF = "tradeoff"
TAB_RANKS = "ranks"
TAB_WHATIF = "whatif"
