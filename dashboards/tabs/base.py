"""What a dashboard view is: a :class:`View` (its tab, label, graphs, render function and
callbacks) and the :class:`Request` its render function is given.

A view is one module under ``dashboards/tabs/`` that defines ``VIEW = View(...)``, plus one
line in ``dashboards/tabs/__init__.py``'s ``VIEWS`` (docs/DASHBOARD.md, "Adding a view").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dash.development.base_component import Component

from dashboards.components import error_panel
from overlapscope.errors import UserError

if TYPE_CHECKING:
    from dash import Dash

    from dashboards.data import LoadedRun, RunRegistry

_KEY = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


@dataclass(frozen=True, slots=True)
class Request:
    """What the page asks of the shown view: the runs chosen (keys the registry knows; checked
    before ``render`` is called) and the pickers' values."""

    registry: RunRegistry
    run_a: str | None
    run_b: str | None
    step: int | None
    window_ms: tuple[float, float] | None = None  # the timeline's zoom, in ms
    clocks: str | None = None  # "aligned" or "raw" (dashboards/critical_path.py)
    ranks: object = None  # the ranks picker's value, for runs opened with --dask

    def selected(self) -> list[str | None]:
        """Run A, and Run B where it is another run."""
        return selected(self.run_a, self.run_b)

    def load(self, keys: Sequence[str | None]) -> tuple[list[LoadedRun], list[Component]]:
        """The runs of ``keys`` that load, and an error panel for each that does not."""
        return load_many(self.registry, keys)

    def load_all(self) -> tuple[list[LoadedRun], list[Component]]:
        """Every run the dashboard was opened on (as ``load``)."""
        return load_many(self.registry, [s.key for s in self.registry.sources])


Render = Callable[[Request], list[Component]]
Register = Callable[["Dash", "RunRegistry"], None]
Panel = Callable[["RunRegistry", "str | None", "str | None"], Component]
Check = Callable[[object], bool]  # as dashboards/values.py's


@dataclass(frozen=True, slots=True)
class View:
    """One tab of the dashboard.

    ``key``: the tab's value (its element id is ``tab-<key>``); ``label``: the tab's text;
    ``render``: the tab's content for a request (a ``UserError`` becomes an error panel);
    ``graphs``: the ids of the graphs it draws, its main one first; ``register``: wires the
    view's own callbacks (those of components it renders) into the app; ``panel``: a container
    kept in the page under the view's content (given the registry and the default runs), for a
    view whose state must outlive a change of tab (the what-if scenario); ``checks``: the value
    check of each ``(id, property)`` its callbacks read that dashboards/values.py does not
    already check (the guard refuses a request for a property without one).
    """

    key: str
    label: str
    render: Render
    graphs: tuple[str, ...] = ()
    register: Register | None = None
    panel: Panel | None = None
    checks: Mapping[tuple[str, str], Check] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _KEY.match(self.key):
            raise ValueError(
                f"View.key {self.key!r}: use 1-40 lowercase letters, digits or '-', "
                "starting with a letter (it is the tab's value and part of its id)"
            )
        if not self.label:
            raise ValueError(f"View {self.key!r}: give it a label (the tab's text)")


def selected(run_a: str | None, run_b: str | None) -> list[str | None]:
    return [run_a] if run_b in (None, run_a) else [run_a, run_b]


def load_many(
    registry: RunRegistry, keys: Sequence[str | None]
) -> tuple[list[LoadedRun], list[Component]]:
    """The runs of ``keys`` (None skipped) that load, and an error panel for each that does not."""
    runs: list[LoadedRun] = []
    errors: list[Component] = []
    for key in keys:
        if key is None:
            continue
        try:
            runs.append(registry.load(key))
        except UserError as e:
            errors.append(error_panel(str(e)))
    return runs, errors
