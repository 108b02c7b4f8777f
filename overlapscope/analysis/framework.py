"""Which framework ran the job, recognised from the trace: the levers a finding offers are
those that exist there, in its own API words.

Per rank (:func:`rank_marks`, a per-rank figure): whether the trace's names show DDP (its
``DistributedDataParallel.forward`` range) and TorchRec-style model parallelism (FBGEMM's
sparse-feature ops, ``fbgemm::*``, beside all-to-alls). Over the run (:func:`run_framework`):
this project's engine where its run.json lists the units, else the producer that read the
traces (trace/producers: torch FSDP1 or FSDP2) where it is one of those, else DDP or
TorchRec-style from the marks, else plain collectives (or none at all).
"""

from __future__ import annotations

import enum
import re

import numpy as np
import pandas as pd

from overlapscope.trace.run.loader import RunTraces

MARK_COLUMNS = ["rank", "num_ddp_names", "num_sparse_names", "num_all_to_all_names"]
_DDP = re.compile(r"^DistributedDataParallel\.(?:forward|_pre_forward|_post_forward)")
_SPARSE = re.compile(r"^fbgemm::|ShardedEmbedding|KeyedJaggedTensor|^KJT")
_ALL_TO_ALL = re.compile(r"all_to_all|alltoall", re.IGNORECASE)


class Framework(enum.Enum):
    """What ran the job: its value (the JSON's ``run.framework``) and its words."""

    words: str

    def __new__(cls, value: str, words: str) -> Framework:
        obj = object.__new__(cls)
        obj._value_ = value
        obj.words = words
        return obj

    ENGINE = ("overlapscope", "this project's engine")
    FSDP2 = ("fsdp2", "torch FSDP2 (fully_shard)")
    FSDP1 = ("fsdp1", "torch FSDP1 (FullyShardedDataParallel)")
    TORCHREC = ("torchrec", "TorchRec-style model parallelism (sparse all-to-alls, DDP dense)")
    DDP = ("ddp", "torch DDP (DistributedDataParallel)")
    PLAIN = ("plain", "plain collectives")
    NONE = ("none", "no collectives (one process)")


# (the engine is recognised by its run.json, which lists its units: its flags change it)
_BY_PRODUCER = {"fsdp2": Framework.FSDP2, "fsdp1": Framework.FSDP1}


def rank_marks(run: RunTraces) -> pd.DataFrame:
    """One row per rank of a one-rank run: how many distinct names of its trace mark DDP,
    sparse embeddings and all-to-alls (MARK_COLUMNS)."""
    names = run.events["name"]
    present = (
        names.cat.categories[np.unique(names.cat.codes[names.cat.codes >= 0])]
        if isinstance(names.dtype, pd.CategoricalDtype)
        else pd.Index(names.unique())
    )
    text = pd.Series(present.astype(str))
    counts = [int(text.str.contains(r).sum()) for r in (_DDP, _SPARSE, _ALL_TO_ALL)]
    rank = [info.rank for info in run.ranks][:1]
    return pd.DataFrame([[*rank, *counts]] if rank else [], columns=MARK_COLUMNS)


def run_framework(ranks: pd.DataFrame, marks: pd.DataFrame, is_engine_run: bool) -> Framework:
    """The framework of the run: its producer's where it reads an FSDP schedule or our engine
    (the one most ranks were read by), else what the marks of any rank show."""
    if is_engine_run:
        return Framework.ENGINE
    producers = ranks["framework"].value_counts() if "framework" in ranks else pd.Series()
    if len(producers) and producers.index[0] in _BY_PRODUCER:
        return _BY_PRODUCER[str(producers.index[0])]
    has = {c: bool(len(marks)) and bool((marks[c] > 0).any()) for c in MARK_COLUMNS[1:]}
    if has["num_sparse_names"] and has["num_all_to_all_names"]:
        return Framework.TORCHREC
    if has["num_ddp_names"]:
        return Framework.DDP
    comm = "comm_total_us" in ranks and bool((ranks["comm_total_us"] > 0).any())
    return Framework.PLAIN if comm or has["num_all_to_all_names"] else Framework.NONE
