"""The critical path of each step across ranks: which chain of work set the step's length.

Each rank's step is cut into segments (:mod:`overlapscope.analysis.segments`). The segments
of one rank follow each other; a collective joins the ranks: its last exposed segment on a
rank ends when the collective ends, which cannot happen before every rank has arrived (started
its transfer). So each step is a graph whose longest path ends at the step's end::

    rank 0  [compute A ][ comm (waits for rank 1) ....][transfer]
    rank 1  [compute A ][ compute B (late)  ]----------^
    path:   rank 1 compute A, rank 1 compute B, transfer      (rank 0's waiting is slack)

Walking back from the step's end, a collective's segment hands the path to whichever came
last: the rank's own previous segment, or the arrival of the last rank, after which the path
continues on that rank. Waiting for the last rank is thus never on the path (it is slack);
``wait`` links are local blocking with no transfer in flight (the rate limiter, a wait on a
collective not yet started). The step runs from the earliest rank's step start to the latest
rank's step end (aligned clocks); time before the path's first rank starts its step is
``idle``. The links tile the step: their durations sum to it.

What-if: a link shortened by 10% is replayed through the same graph (every segment starts when
its predecessors end), so when another chain becomes longest the saving says so: it is the
replayed step's change, not 10% of the link.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from overlapscope.analysis.critical_path.graph import (
    Events,
    FloatArray,
    IntArray,
    StepGraph,
    Windows,
    all_nodes,
    build_graph,
    replay,
    replay_ends,
)
from overlapscope.analysis.segments import SEGMENT_KINDS, column_in
from overlapscope.phases import Lane

OTHER_LANE = len(SEGMENT_KINDS) - 1  # lane code of every lane but compute, comm and wait
SHORTEN = 0.10
# Links per step whose shortening is replayed (the longest ones).
WHATIF_LINKS = 8
LINK_COLUMNS = [
    "step",
    "order",
    "rank",
    "kind",
    "unit",
    "phase",
    "group",
    "seq",
    "start_us",
    "end_us",
    "dur_us",
    "saving_us",
]
STEP_COLUMNS = [
    "step",
    "start_us",
    "end_us",
    "step_us",
    "path_us",
    "compute_us",
    "comm_us",
    "wait_us",
    "idle_us",
    "num_links",
    "num_hops",
]


INT = frozenset(("step", "num_links", "num_hops"))  # the integer columns of STEP_COLUMNS


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """``links``: the path of every step, latest link first (``order`` 0), with
    ``saving_us`` the replayed saving of shortening it by 10% (NaN: not replayed).
    ``steps``: per step, its length, the path's length and the time per link kind."""

    links: pd.DataFrame
    steps: pd.DataFrame

    @staticmethod
    def empty() -> CriticalPath:
        return CriticalPath(pd.DataFrame(columns=LINK_COLUMNS), pd.DataFrame(columns=STEP_COLUMNS))


def _windows(rows: Events) -> tuple[IntArray, FloatArray, FloatArray, IntArray]:
    """Per (rank, step), sorted by step then rank: ``(rank, start_us, end_us, step)``, from
    its ProfilerStep's start to the later of its ProfilerStep's end and its step's last
    event. ``rows``: the path's lanes and ProfilerSteps, ``step >= 0``."""
    span = int(rows.rank.max()) + 1 if len(rows.rank) else 1
    key = rows.step * span + rows.rank
    is_step = rows.lane == OTHER_LANE  # the only other lane among the path's rows
    keys, inv = np.unique(key[is_step], return_inverse=True)
    start = np.full(len(keys), np.inf)
    end = np.full(len(keys), -np.inf)
    np.minimum.at(start, inv, rows.ts[is_step])
    # every event of the step may end after its ProfilerStep (GPU work runs behind)
    pos = np.searchsorted(keys, key)
    hit = pos < len(keys)
    hit[hit] = keys[pos[hit]] == key[hit]
    np.maximum.at(end, pos[hit], rows.end[hit])
    return keys % span, start, end, keys // span


def step_graphs(
    rows: Events, windows: Windows, window_step: IntArray
) -> Iterator[tuple[int, StepGraph]]:
    """The graph of each step of ``windows`` (sorted by step then rank; ``rows`` sorted by
    step), the segments of every step cut in one pass."""
    (start, end, kind, event, rank), offset = all_nodes(rows, windows, window_step)
    for step in np.unique(window_step).tolist():
        lo, hi = np.searchsorted(rows.step, [step, step + 1])
        a, b = np.searchsorted(window_step, [step, step + 1])
        n0, n1 = offset[a], offset[b]
        ev = event[n0:n1]
        nodes = (start[n0:n1], end[n0:n1], kind[n0:n1], np.where(ev >= 0, ev - lo, -1), rank[n0:n1])
        step_windows = (windows[0][a:b], windows[1][a:b], windows[2][a:b])
        yield int(step), build_graph(rows.take(slice(int(lo), int(hi))), step_windows, nodes)


def critical_path(events: pd.DataFrame) -> CriticalPath:
    """The critical path of every step seen on at least two ranks (pure)."""
    lanes = [Lane.COMPUTE.value, Lane.COMM.value, Lane.WAIT.value]
    used = column_in(events["lane"], [*lanes, Lane.STEP.value])
    used &= events["step"].to_numpy() >= 0
    rows = Events.of(events, np.flatnonzero(used))
    w_rank, w_start, w_end, w_step = _windows(rows)
    steps, num_ranks = np.unique(w_step, return_counts=True)
    multi = steps[num_ranks >= 2]
    if len(multi) == 0:
        return CriticalPath.empty()
    rows = rows.take(np.isin(rows.step, multi, kind="table"))
    in_multi = np.isin(w_step, multi, kind="table")
    windows = (w_rank[in_multi], w_start[in_multi], w_end[in_multi])
    link_frames, step_records = [], []
    for step, graph in step_graphs(rows, windows, w_step[in_multi]):
        links = _path_links(graph, step)
        link_frames.append(links)
        step_records.append(_step_record(graph, links, step))
    columns: dict[str, object] = {
        c: np.concatenate([f[c] for f in link_frames]) for c in LINK_COLUMNS
    }
    kinds = np.asarray(SEGMENT_KINDS, dtype=object)
    names = {"kind": kinds, "unit": rows.labels.unit, "phase": rows.labels.phase}
    for c, n in {**names, "group": rows.labels.group}.items():
        columns[c] = _label_column(np.concatenate([f[c] for f in link_frames]), n)
    links = pd.DataFrame(columns)
    steps = pd.DataFrame(
        {
            c: np.asarray([r[c] for r in step_records], dtype=np.int64 if c in INT else np.float64)
            for c in STEP_COLUMNS
        }
    )
    return CriticalPath(links, steps)


def _path_links(graph: StepGraph, step: int) -> dict[str, np.ndarray]:
    """The step's path as columns (LINK_COLUMNS), latest link first."""
    end, chosen = replay(graph, graph.weight)
    idx = _walk(graph, chosen, int(np.argmax(end)))
    keep = idx[graph.weight[idx] > 0]
    ev = graph.event[keep]
    at, has = np.maximum(ev, 0), ev >= 0
    rows = graph.rows
    lead = max(float(end[idx[-1]]) - graph.start_us, 0.0)
    extra = int(lead > 0)  # the idle lead before the path's first rank starts its step

    def col(values: np.ndarray, fill: object) -> np.ndarray:
        out = values.copy()
        out[~has] = fill
        return np.append(out, np.asarray([fill] * extra, dtype=out.dtype))

    no_event = -2  # the code of a link without an event (None, where a missing value is NaN)

    ends = np.append(end[keep], [graph.start_us + lead] * extra)
    kind_code = np.append(graph.kind[keep], np.full(extra, SEGMENT_KINDS.index("idle")))
    durs = np.append(graph.weight[keep], [lead] * extra)
    num = len(ends)
    return {
        "step": np.full(num, step, dtype=np.int64),
        "order": np.arange(num),
        "rank": np.append(graph.rank[keep], [graph.rank[idx[-1]]] * extra),
        "kind": kind_code,  # codes until critical_path names them (_label_column)
        "unit": col(rows.unit[at], no_event),
        "phase": col(rows.phase[at], no_event),
        "group": col(rows.group[at], no_event),
        "seq": col(rows.seq[at].astype(np.float64), np.nan),
        "start_us": ends - durs,
        "end_us": ends,
        "dur_us": durs,
        "saving_us": _savings(graph, keep, float(end.max()), num),
    }


def _label_column(codes: IntArray, names: np.ndarray) -> object:
    """The column of names of ``codes`` (-1: NaN, -2: None) as pandas would infer it from
    those objects: strings with a missing value become its string type, built here from
    the few names rather than from one Python string per link."""
    named = (codes >= 0).any()
    if named and pd.api.types.infer_dtype(names, skipna=True) == "string":
        return pd.array(names, dtype="str").take(np.where(codes >= 0, codes, -1), allow_fill=True)
    values = np.concatenate([names, np.asarray([None, np.nan], dtype=object)])[codes]
    # nothing named: pandas would keep the objects (None, NaN) after scanning them all
    return values if named else pd.Series(values, dtype=object, copy=False)


def _walk(graph: StepGraph, chosen: IntArray, last: int) -> IntArray:
    """The nodes of the path ending at node ``last``, latest first. Between two anchors a
    rank's nodes follow each other (a node's predecessor is the one before it), so the walk
    jumps from anchor to anchor, taking the run of nodes in between whole."""
    runs: list[IntArray] = []
    i = last
    while i >= 0:
        a = int(graph.anchor[i])
        runs.append(np.arange(i, a - 1, -1, dtype=np.int64))
        i = int(chosen[a])
    return np.concatenate(runs)


def _savings(graph: StepGraph, keep: np.ndarray, step_end: float, num_links: int) -> np.ndarray:
    """Replayed saving of the longest links shortened by 10%. A collective is shortened on
    every rank (all its comm nodes); compute, waits and idle on the link's rank only."""
    out = np.full(num_links, np.nan)
    top = np.argsort(-graph.weight[keep], kind="stable")[:WHATIF_LINKS]
    if len(top) == 0:
        return out
    # one column of weights per what-if, all replayed together
    weights = np.repeat(graph.weight[:, None], len(top), axis=1)
    for col, pos in enumerate(top.tolist()):
        i = keep[pos]
        if graph.key[i] >= 0:
            weights[graph.key == graph.key[i], col] *= 1.0 - SHORTEN
        else:
            weights[i, col] *= 1.0 - SHORTEN
    out[top] = step_end - replay_ends(graph, weights)
    return out


def _step_record(graph: StepGraph, links: dict[str, np.ndarray], step: int) -> dict[str, object]:
    kinds, durs, ranks = links["kind"], links["dur_us"], links["rank"]
    return {
        "step": step,
        "start_us": graph.start_us,
        "end_us": graph.end_us,
        "step_us": graph.end_us - graph.start_us,
        "path_us": float(durs.sum()),
        **{f"{k}_us": float(durs[kinds == code].sum()) for code, k in enumerate(SEGMENT_KINDS)},
        "num_links": len(durs),
        "num_hops": int((ranks[1:] != ranks[:-1]).sum()),
    }


def join_paths(parts: Sequence[CriticalPath]) -> CriticalPath:
    """Per-step critical paths (steps in order) as :func:`critical_path` gives the run's."""
    found = [p for p in parts if len(p.steps)]
    if not found:
        return CriticalPath.empty()
    links = pd.DataFrame(
        {c: np.concatenate([p.links[c].to_numpy() for p in found]) for c in LINK_COLUMNS}
    )
    records = [r for p in found for r in p.steps.to_dict("records")]
    return CriticalPath(links, pd.DataFrame.from_records(records, columns=STEP_COLUMNS))
