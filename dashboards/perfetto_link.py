"""The "download for Perfetto" link of each run shown: the run's export (what
``overlapscope analyze RUN --perfetto FILE --steps S --ranks R`` writes) for the step chosen
in the page and the ranks its timeline shows.

The link is ``perfetto/<run key>?steps=S&ranks=R``; the route checks the key (a run the app
was started with) and the lists, writes the file into a temporary file and sends it. A run
opened with ``--dask`` is exported as ``analyze --dask --perfetto`` does (each rank's part
written by its task); another is loaded once more for its source files' events.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import flask
from dash import Dash, Input, Output, html

from dashboards import ids
from dashboards.big_run import choose_ranks
from dashboards.data import RunRegistry, UnknownRunError
from overlapscope.errors import UserError
from overlapscope.perfetto.export import write_perfetto
from overlapscope.perfetto.numbers import parse_numbers

ROUTE = "perfetto/"
LINK_CLASS = "perfetto-link"


def file_name(label: str) -> str:
    """The downloaded file's name: the run's label, made safe for a file name."""
    return re.sub(r"[^A-Za-z0-9._+=-]+", "_", label).strip("._") or "run"


def _listed(numbers: list[int]) -> str:
    return ",".join(str(n) for n in numbers)


def shown_ranks(registry: RunRegistry, key: str, step: int | None, asked: object) -> list[int]:
    """The ranks the link exports: those the timeline shows for a run opened with --dask
    (chosen in the picker, else the step's critical path), every rank otherwise."""
    loaded = registry.load(key)
    if loaded.timelines is not None and step is not None:
        return list(choose_ranks(loaded.analysis, step, asked).shown)
    return [int(r) for r in loaded.analysis.summary.ranks]


def links(
    registry: RunRegistry,
    prefix: str,
    runs: list[str | None],
    step: int | None,
    asked: object,
) -> list[Any]:
    """One link per run shown (Run A, Run B)."""
    out: list[Any] = []
    for key in dict.fromkeys(k for k in runs if k is not None):
        try:
            ranks = shown_ranks(registry, key, step, asked)
        except UserError:
            continue  # the view says why the run cannot be shown
        query = {"ranks": _listed(ranks)}
        if step is not None:
            query["steps"] = str(step)
        label = registry.source(key).label
        where = f"step {step}, " if step is not None else ""
        out.append(
            html.A(
                f"⤓ {label} for Perfetto ({where}{len(ranks)} ranks)",
                href=f"{prefix}{ROUTE}{key}?{urlencode(query)}",
                download=f"{file_name(label)}.perfetto.json.gz",
                className=LINK_CLASS,
                style={"marginRight": "16px", "fontSize": "13px"},
            )
        )
    return out


def export_run(
    registry: RunRegistry,
    key: str,
    steps: tuple[int, ...] | None,
    ranks: tuple[int, ...] | None,
    out: Path,
) -> None:
    """The run's export into ``out``, of the analysis of the one entry point
    (:func:`~overlapscope.pipeline.run.analyse`): from the run loaded here (the in-process
    executor), or (a run opened with --dask) each rank's part written by its task from the
    cache."""
    from overlapscope.pipeline.perfetto import export_stored
    from overlapscope.pipeline.plan import Inputs
    from overlapscope.pipeline.run import IN_PROCESS, analyse

    src = registry.source(key)
    inputs = Inputs((src.path,), progress=False)
    if registry.dask is None or registry.cache is None:
        done = analyse(inputs, IN_PROCESS)
        assert done.run is not None  # (the in-process executor keeps the run)
        write_perfetto(out, done.analysis, done.run, steps, ranks)
        return
    registry.load(key)  # (the analysis the registry made, read back from the cache)
    done = analyse(inputs, registry.dask, registry.cache, timeline_files=True)
    export_stored(out, done, registry.dask, registry.cache, (steps, ranks))


def _numbers(name: str) -> tuple[int, ...] | None:
    text = flask.request.args.get(name)
    return None if text is None else parse_numbers(text)


def install(app: Dash, registry: RunRegistry) -> None:
    """The links (following the runs, step and ranks picked) and the route they point to."""
    prefix = app.config.requests_pathname_prefix or "/"

    @app.callback(
        Output(ids.PERFETTO_LINKS, "children"),
        Input(ids.RUN_A, "value"),
        Input(ids.RUN_B, "value"),
        Input(ids.STEP, "value"),
        Input(ids.RANKS, "value"),
    )
    def _links(run_a: Any, run_b: Any, step: Any, ranks: Any) -> Any:
        return links(registry, prefix, [run_a, run_b], step, ranks)

    @app.server.route(f"{prefix}{ROUTE}<key>")
    def _perfetto(key: str) -> Any:
        try:
            label = registry.source(key).label
            steps, ranks = _numbers("steps"), _numbers("ranks")
        except UnknownRunError as e:
            return flask.Response(f"{e}\n", status=404, mimetype="text/plain")
        except argparse.ArgumentTypeError as e:
            return flask.Response(f"{e}\n", status=400, mimetype="text/plain")
        fd, name = tempfile.mkstemp(prefix=".perfetto-", suffix=".json.gz")
        os.close(fd)
        tmp = Path(name)
        try:
            export_run(registry, key, steps, ranks, tmp)
        except UserError as e:
            tmp.unlink(missing_ok=True)
            return flask.Response(f"{e}\n", status=400, mimetype="text/plain")
        response = flask.send_file(
            tmp,
            mimetype="application/gzip",
            as_attachment=True,
            download_name=f"{file_name(label)}.perfetto.json.gz",
        )
        response.call_on_close(lambda: _remove(tmp))
        return response


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
