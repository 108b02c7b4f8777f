"""The dependency graph of one step across ranks, and its replay (longest path).

Nodes: per rank a source (the rank's step start) followed by its segments in time order
(:func:`overlapscope.analysis.segments.segments`). A node starts when its predecessor on the
same rank ends; a *sync* node (the last exposed segment of a collective on a rank, which ends
when the collective ends) also waits for the arrival of every other rank at that collective:
the node of that rank that ends where its transfer starts. Weights are set so the replay of the
recorded weights gives back the recorded ends: a plain node weighs its duration, a sync node
``end - max(start, latest arrival)`` (the transfer after the last rank arrived). An arrival
recorded after the collective's end (clock noise) is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapscope.analysis.segments import segments
from overlapscope.trace.schema import EventLane

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
NODE_COLUMNS = ["rank", "kind", "unit", "phase", "group", "seq", "start_us", "end_us"]


@dataclass(frozen=True, slots=True)
class StepGraph:
    nodes: pd.DataFrame  # NODE_COLUMNS, one row per node
    weight: FloatArray
    pred: IntArray  # previous node on the rank, -1 for a source
    base: FloatArray  # a source's time (the rank's step start); NaN otherwise
    arr_ptr: IntArray  # arrivals of node i: arr_idx[arr_ptr[i]:arr_ptr[i + 1]]
    arr_idx: IntArray
    anchors: IntArray  # sources and sync nodes, in a topological order
    anchor: IntArray  # per node: the last source or sync node at or before it on its rank
    start_us: float
    end_us: float


def _rank_nodes(ev: pd.DataFrame, rank: int, ws: float, we: float) -> pd.DataFrame:
    seg = segments(ev, (ws, we))
    labels = ev.index.to_numpy()
    event = np.where(seg["event"].to_numpy() >= 0, labels[seg["event"].clip(lower=0)], -1)
    src = pd.DataFrame({"start_us": [ws], "end_us": [ws], "kind": ["source"], "event": [-1]})
    nodes = pd.concat([src, seg.assign(event=event)], ignore_index=True)
    nodes["rank"] = rank
    return nodes


def build_graph(rows: pd.DataFrame, windows: pd.DataFrame) -> StepGraph:
    """``rows``: the events of one step, every rank; ``windows``: ``rank, start_us, end_us``
    of that step per rank."""
    parts = [
        _rank_nodes(rows[rows["rank"] == w.rank], int(w.rank), float(w.start_us), float(w.end_us))
        for w in windows.sort_values("rank").itertuples(index=False)
    ]
    nodes = pd.concat(parts, ignore_index=True)
    attrs = rows[["unit", "phase", "group", "seq"]].astype(
        {"unit": object, "phase": object, "group": object}
    )
    nodes = nodes.join(attrs, on="event")
    n = len(nodes)
    is_src = (nodes["kind"] == "source").to_numpy()
    pred = np.arange(n, dtype=np.int64) - 1
    pred[is_src] = -1
    base = np.where(is_src, nodes["start_us"].to_numpy(), np.nan).astype(np.float64)
    weight = (nodes["end_us"] - nodes["start_us"]).to_numpy(np.float64, copy=True)
    sync, arrival = _sync_edges(rows, nodes)
    if len(sync):
        latest = arrival.groupby("sync")["arr_end"].max()
        s_idx = latest.index.to_numpy()
        begin = np.maximum(nodes["start_us"].to_numpy()[s_idx], latest.to_numpy())
        weight[s_idx] = np.maximum(nodes["end_us"].to_numpy()[s_idx] - begin, 0.0)
    arrival = arrival.sort_values("sync")
    arr_ptr = np.searchsorted(arrival["sync"].to_numpy(), np.arange(n + 1)).astype(np.int64)
    is_sync = np.zeros(n, dtype=bool)
    is_sync[arrival["sync"].to_numpy()] = True
    is_anchor = is_src | is_sync
    order = np.lexsort((np.arange(n), is_sync, nodes["end_us"].to_numpy()))
    anchor = np.maximum.accumulate(np.where(is_anchor, np.arange(n), 0))
    return StepGraph(
        nodes=nodes[NODE_COLUMNS],
        weight=weight,
        pred=pred,
        base=base,
        arr_ptr=arr_ptr,
        arr_idx=arrival["arr"].to_numpy(np.int64),
        anchors=order[is_anchor[order]].astype(np.int64),
        anchor=anchor.astype(np.int64),
        start_us=float(windows["start_us"].min()),
        end_us=float(windows["end_us"].max()),
    )


def _sync_edges(rows: pd.DataFrame, nodes: pd.DataFrame) -> tuple[pd.Index, pd.DataFrame]:
    """Sync nodes and their arrival edges: ``sync, arr, arr_end``."""
    comm = rows[(rows["lane"] == EventLane.COMM.value) & (rows["seq"] >= 0)]
    comm = comm[["rank", "group", "seq", "ts_us", "end_us"]].astype({"group": object})
    empty = pd.DataFrame({"sync": [], "arr": [], "arr_end": []}).astype("int64")
    if comm.empty:
        return pd.Index([]), empty
    node_id = pd.Series(np.arange(len(nodes)), index=nodes.index)
    # Arrival: the last node of the rank ending at or before the transfer's start.
    arr = np.full(len(comm), -1, dtype=np.int64)
    for rank, grp in nodes.groupby("rank", sort=False):
        ends = grp["end_us"].to_numpy()
        mine = (comm["rank"] == rank).to_numpy()
        k = np.searchsorted(ends, comm["ts_us"].to_numpy()[mine], side="right") - 1
        ids = node_id[grp.index].to_numpy()
        arr[mine] = np.where(k >= 0, ids[np.maximum(k, 0)], -1)
    comm = comm.assign(label=comm.index, arr=arr)
    # Sync: the comm segment of that transfer that ends with it.
    seg = nodes[nodes["kind"] == "comm"].assign(node=lambda d: node_id[d.index].to_numpy())
    fin = seg.merge(comm[["label", "end_us"]], left_on="event", right_on="label")
    fin = fin[np.isclose(fin["end_us_x"], fin["end_us_y"], rtol=0, atol=1e-6)]
    fin = fin.merge(comm[["label", "rank", "group", "seq"]], on="label", suffixes=("", "_c"))
    pairs = fin[["node", "rank", "group", "seq", "end_us_x"]].merge(
        comm[comm["arr"] >= 0][["rank", "group", "seq", "arr"]],
        on=["group", "seq"],
        suffixes=("", "_peer"),
    )
    pairs = pairs[pairs["rank"] != pairs["rank_peer"]]
    pairs = pairs.assign(arr_end=nodes["end_us"].to_numpy()[pairs["arr"].to_numpy()])
    pairs = pairs[pairs["arr_end"] <= pairs["end_us_x"]]
    out = pairs.rename(columns={"node": "sync"})[["sync", "arr", "arr_end"]]
    return pd.Index(out["sync"].unique()), out.reset_index(drop=True)


def replay(graph: StepGraph, weight: FloatArray) -> tuple[FloatArray, IntArray]:
    """Longest path with ``weight``: every node's end and the predecessor that set it
    (-1 for sources). Between two anchors (sources, sync nodes) a rank's ends are a cumulative
    sum; only the anchors are walked, in topological order, since each one waits on the ends
    of others."""
    cum = np.cumsum(weight)
    anchor = graph.anchor
    a_end = np.full(len(weight), np.nan)
    pred = graph.pred.tolist()
    base = graph.base.tolist()
    ptr = graph.arr_ptr.tolist()
    arr = graph.arr_idx.tolist()
    anc = anchor.tolist()
    c = cum.tolist()
    w = weight.tolist()
    chosen = graph.pred.copy()
    for i in graph.anchors.tolist():
        p = pred[i]
        if p < 0:
            a_end[i] = base[i]
            continue
        best, arg = a_end[anc[p]] + c[p] - c[anc[p]], p
        for k in range(ptr[i], ptr[i + 1]):
            a = arr[k]
            e = a_end[anc[a]] + c[a] - c[anc[a]]
            if e > best:
                best, arg = e, a
        a_end[i] = best + w[i]
        chosen[i] = arg
    return a_end[anchor] + cum - cum[anchor], chosen
