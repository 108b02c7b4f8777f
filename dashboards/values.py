"""What each property a callback reads may hold: the guard (dashboards/guard.py) refuses a
request with any other value (HTTP 400) before the callback runs.

One check per ``(component id, property)`` that a callback takes as an input or state;
``tests/reliability/test_dashboard_requests.py`` checks that every registered callback's
inputs and state have one, so a new callback cannot leave its values unchecked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection

from dashboards import ids, tabs
from dashboards.big_run import MAX_SHOWN_RANKS
from dashboards.whatif import LIMIT_CHOICES, LIMIT_OFF, NetworkMode
from overlapscope.config import Policy

Check = Callable[[object], bool]
_RANGE_KEY = re.compile(r"^[xy]axis\d*\.range(\[[01]\])?$")
CLOCK_MODES = ("aligned", "raw")
MAX_RANKS_ASKED = 4 * MAX_SHOWN_RANKS  # more is no click in the picker


def _is_int(v: object) -> bool:
    return type(v) is int


def _is_number(v: object) -> bool:
    return type(v) in (int, float) and math.isfinite(float(v))  # type: ignore[arg-type]


def _one_of(choices: Collection[object], nullable: bool = True) -> Check:
    allowed = {c for c in choices}
    return lambda v: (
        (v is None and nullable)
        or (isinstance(v, (str, int)) and not isinstance(v, bool) and v in allowed)
    )


def _zoom(v: object) -> bool:
    """Plotly's ``relayoutData``: an object; its axis ranges numbers (the timeline's axes are
    numeric), a pair of them where given as a list."""
    if v is None:
        return True
    if not isinstance(v, dict):
        return False
    for key, value in v.items():
        if not _RANGE_KEY.match(key):
            continue
        bounds = value if key.endswith("range") else [value]
        if not isinstance(bounds, list) or len(bounds) != (2 if key.endswith("range") else 1):
            return False
        if not all(_is_number(b) for b in bounds):
            return False
    return True


def _ranks(v: object) -> bool:
    return v is None or (
        isinstance(v, list) and len(v) <= MAX_RANKS_ASKED and all(_is_int(r) for r in v)
    )


def value_checks(run_keys: Collection[str]) -> dict[tuple[str, str], Check]:
    """The check of every property a callback reads, for an app over ``run_keys``."""
    run = _one_of(run_keys)
    checks: dict[tuple[str, str], Check] = {
        (ids.RUN_A, "value"): run,
        (ids.RUN_B, "value"): run,
        (ids.WHATIF_TARGET, "value"): run,
        (ids.STEP, "value"): lambda v: v is None or _is_int(v),
        (ids.TABS, "value"): _one_of(tabs.tab_keys()),
        (ids.CLOCKS, "value"): _one_of(CLOCK_MODES),
        (ids.RANKS, "value"): _ranks,
        # a group's name is only compared with the run's (dashboards/groups.py)
        (ids.GROUP, "value"): lambda v: v is None or (isinstance(v, str) and len(v) <= 512),
        (ids.TIMELINE_GRAPH, "relayoutData"): _zoom,
        (ids.WHATIF_POLICY, "value"): _one_of([p.value for p in Policy]),
        (ids.WHATIF_FORWARD_PREFETCH, "value"): lambda v: (
            v is None or (isinstance(v, list) and all(x == "on" for x in v))
        ),
        (ids.WHATIF_LIMIT, "value"): _one_of([LIMIT_OFF, *LIMIT_CHOICES]),
        (ids.WHATIF_NETWORK_MODE, "value"): _one_of([m.value for m in NetworkMode]),
        (ids.WHATIF_NETWORK_VALUE, "value"): lambda v: v is None or _is_number(v),
    }
    for view in tabs.VIEWS:  # those a view's own callbacks add (``View.checks``)
        checks.update({key: check for key, check in view.checks.items() if key not in checks})
    return checks
