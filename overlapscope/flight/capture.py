"""Turn torch's Flight Recorder on for a rank and dump its ring buffer at the end of a run.

torch records the last ``TORCH_FR_BUFFER_SIZE`` collectives of every process group (gloo as
well as NCCL in torch 2.13); the size is read when the first process group is created, so
:func:`enable` runs before ``init_process_group``. :func:`write_dump` writes the pickle torch
returns to ``<dir>/comm_traces/rank_<K>`` (torchtitan's layout), through a temporary name.
"""

from __future__ import annotations

import os
from pathlib import Path

BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
DUMP_DIR = "comm_traces"
DUMP_PREFIX = "rank_"


def enable(num_entries: int | None) -> None:
    """Ask torch to keep the last ``num_entries`` collectives per rank (None: leave as is)."""
    if num_entries is not None:
        os.environ[BUFFER_ENV] = str(int(num_entries))


def dump_path(run_dir: Path, rank: int) -> Path:
    return run_dir / DUMP_DIR / f"{DUMP_PREFIX}{rank}"


def write_dump(run_dir: Path, rank: int) -> Path:
    """Write this rank's Flight Recorder dump (torch's pickle, as torch makes it)."""
    import torch

    data = torch._C._distributed_c10d._dump_fr_trace()  # type: ignore[attr-defined]
    out = dump_path(run_dir, rank)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, out)
    return out
