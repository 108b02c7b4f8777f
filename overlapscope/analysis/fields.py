"""How overlapscope names figures in every table and JSON document it writes.

One convention, so a per-step figure cannot be read as a total or the other way round:

* ``<figure>_total_us``: summed over the counted steps of a rank (or of a run);
* ``<figure>_per_step_us``: the mean per counted step (the total divided by ``num_steps``);
* ``<figure>_us`` without either suffix only in tables with one row per step (the ``steps``
  table, a what-if replay's per-step rows) or per event / interval, where the row is the scope;
* ``_bytes`` likewise (``bytes_total``, ``bytes_per_step``), ``null`` when unknown;
* ``num_*`` counts, ``*_pct`` percentages in [0, 100], ``*_gbps`` GB/s;
* the same suffixes with ``_ms`` where a table is in milliseconds (the sweep summary:
  ``step_time_per_step_ms``).

``analyze``, ``whatif`` and ``sweep`` import the suffixes from here.
"""

from __future__ import annotations

TOTAL = "_total_us"
PER_STEP = "_per_step_us"


def total(figure: str) -> str:
    """``total("compute") == "compute_total_us"``."""
    return f"{figure}{TOTAL}"


def per_step(figure: str) -> str:
    """``per_step("compute") == "compute_per_step_us"``."""
    return f"{figure}{PER_STEP}"
