"""The dashboard's views, one module each, in the order of their tabs.

``VIEWS`` is the one list of them: the page's tabs (dashboards/layout.py), the tab values the
guard accepts (dashboards/values.py), the view callback's dispatch (``views.render_view``) and
each view's own callbacks (dashboards/callbacks.py) all read it when an app is built. To add
a view, write a module here that defines ``VIEW = View(...)`` (dashboards/tabs/base.py) and
add one line below (docs/DASHBOARD.md, "Adding a view").
"""

from __future__ import annotations

from dashboards.tabs import overview, ranks, timeline, tradeoff, units, whatif
from dashboards.tabs.base import Request, View

VIEWS: list[View] = [
    overview.VIEW,
    timeline.VIEW,
    units.VIEW,
    tradeoff.VIEW,
    ranks.VIEW,
    whatif.VIEW,
]

__all__ = ["VIEWS", "Request", "View", "register_view", "tab_keys", "view_of"]


def register_view(view: View) -> None:
    """Add ``view`` as the last tab of the apps built from now on (for a view defined
    outside this package; the package's own are listed in ``VIEWS``)."""
    if view_of(view.key) is not None:
        raise ValueError(f"a view with key {view.key!r} is already registered; pick another key")
    VIEWS.append(view)


def view_of(key: object) -> View | None:
    """The registered view whose tab value is ``key``, or None."""
    return next((v for v in VIEWS if v.key == key), None)


def tab_keys() -> tuple[str, ...]:
    """The tab values, in the order of the tabs."""
    return tuple(v.key for v in VIEWS)
