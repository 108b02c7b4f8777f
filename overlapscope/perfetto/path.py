"""The critical path in the file: each link a slice on its rank's path track, and each hop
from one rank to another a flow arrow from the earlier link to the later one.

The hops are found once for the run (:func:`hops`, on the client: the path's links are a
small table); each rank's part then draws its own links and the ends of the hops that leave
or reach it (:func:`draw`), so the two ends of an arrow are written by two parts and still
pair up. A hop to a rank left out of the file (``--ranks``) is an instant on the path track
naming the rank the path continues on, instead of an arrow with one end.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from overlapscope.perfetto import events as ev
from overlapscope.perfetto.tracks import Tracks

HOP_COLUMNS = ["flow_id", "step", "from_rank", "from_order", "to_rank", "to_order"]
LINK_ARGS = ["step", "order", "kind", "unit", "phase", "group", "seq", "dur_us", "saving_us"]


def _whole_ns(start_us: np.ndarray, end_us: np.ndarray) -> np.ndarray:
    """Whether a slice is at least a nanosecond long as written (tracks.ns)."""
    return np.round(end_us * 1000.0) - np.round(start_us * 1000.0) >= 1


def hops(links: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Every change of rank along the path of every step, earliest first: from the link
    ``(step, from_order)`` on ``from_rank`` to the next one, ``(step, to_order)`` on
    ``to_rank``; ``flow_id`` numbers them. And how many hops were left out: those with an
    end under a nanosecond long, where no arrow can be bound."""
    if not len(links):
        return pd.DataFrame({c: np.empty(0, np.int64) for c in HOP_COLUMNS}), 0
    ordered = links.sort_values(["step", "order"], ascending=[True, False], kind="stable")
    step = ordered["step"].to_numpy(np.int64)
    order = ordered["order"].to_numpy(np.int64)
    rank = ordered["rank"].to_numpy(np.int64)
    whole = _whole_ns(
        ordered["start_us"].to_numpy(np.float64), ordered["end_us"].to_numpy(np.float64)
    )
    hop = (step[1:] == step[:-1]) & (rank[1:] != rank[:-1])
    at = np.flatnonzero(hop & whole[1:] & whole[:-1])
    table = pd.DataFrame(
        {
            "flow_id": ev.PATH_FLOW_BASE + np.arange(len(at), dtype=np.int64),
            "step": step[at],
            "from_rank": rank[at],
            "from_order": order[at],
            "to_rank": rank[at + 1],
            "to_order": order[at + 1],
        }
    )
    return table, int(hop.sum()) - len(at)


def of_rank(hop_table: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The hops that leave or reach ``rank``."""
    mine = (hop_table["from_rank"] == rank) | (hop_table["to_rank"] == rank)
    return hop_table[mine.to_numpy()].reset_index(drop=True)


def _name(link: dict[str, Any]) -> str:
    what = str(link.get("kind", "?"))
    unit, phase = link.get("unit"), link.get("phase")
    if isinstance(unit, str):
        what += f" {unit}"
    if isinstance(phase, str):
        what += f" ({phase})"
    return what


def draw(
    tracks: Tracks, links: pd.DataFrame, hop_table: pd.DataFrame, shown: tuple[int, ...] | None
) -> int:
    """The rank's links on its path track, and its ends of ``hop_table`` (its hops: a start
    at the earlier link, a finish at the later one, each bound to its slice); the number of
    hops drawn."""
    if not len(links):
        return 0
    table = links.loc[:, ["start_us", "end_us", *LINK_ARGS]]
    tids = tracks.slices("critical path", table, _name, "path")
    where = {
        (int(s), int(o)): (int(t), a, b)
        for s, o, t, a, b in zip(
            table["step"], table["order"], tids, table["start_us"], table["end_us"], strict=True
        )
    }
    drawn = 0
    for hop in hop_table.to_dict("records"):
        for end, role in (("from", "s"), ("to", "f")):
            if int(hop[f"{end}_rank"]) != tracks.rank:
                continue
            tid, a, b = where[(int(hop["step"]), int(hop[f"{end}_order"]))]
            other = int(hop["to_rank" if role == "s" else "from_rank"])
            _end(tracks, hop, role, (tid, a, b), other, shown)
            drawn += 1
    return drawn


def _end(
    tracks: Tracks,
    hop: dict[str, Any],
    role: str,
    slice_: tuple[int, float, float],
    other: int,
    shown: tuple[int, ...] | None,
) -> None:
    """One end of a hop: an arrow's end inside its slice (a start three quarters in, a
    finish a quarter in), or, when the other rank is not in the file, an instant saying
    where the path goes."""
    tid, a, b = slice_
    start, dur = round(a * 1000), round(b * 1000) - round(a * 1000)
    inside = start + (dur * 3 // 4 if role == "s" else dur // 4)
    if shown is not None and other not in shown:
        where = "continues on" if role == "s" else "comes from"
        text = f"critical path {where} rank {other} (not in this file)"
        tracks.sink(ev.instant(text, tracks.pid, tid, inside / 1000, {"rank": other}))
        return
    tracks.sink(ev.flow_end(role, int(hop["flow_id"]), tracks.pid, tid, inside / 1000))
