"""overlapscope's web dashboard (Dash): the only place that draws.

Vocabulary as in the analysis: ``rank``, ``step``, ``unit``, ``phase``, ``lane``; times in µs
(``_us``) in tables, shown in ms. Modules:

* ``data``: run discovery (``RunSource``), the run registry and the cached analysis loader;
* ``tables``: overview / findings rows built from ``RunAnalysis`` tables;
* ``tabs``: the views, one module each (render, figures, callbacks), and ``tabs.VIEWS``,
  the ordered registry the page's tabs and the view dispatch read;
* ``figures``: the timeline figures built from ``RunAnalysis`` tables (no metric is re-derived);
* ``palette``: one colour per phase, shared by every view;
* ``ids``, ``layout``, ``callbacks``, ``app``: the Dash app (``create_app(runs)``).
"""

from dashboards.app import create_app
from dashboards.data import RunSource, discover_runs

__all__ = ["RunSource", "create_app", "discover_runs"]
