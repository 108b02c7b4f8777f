"""Hand-built multi-rank GPU runs with known answers: each rank a compute stream and an
NCCL stream, every op with its CPU launch, and the CPU ops around the launches."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.trace.kineto import kernel, launch, step, trace, write, x

GEMM = "void gemm_kernel<float>()"
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)"
COMPUTE_STREAM, COMM_STREAM = 7, 20
MAIN = 1


@dataclass
class Rank:
    """One rank's trace, op by op (times in µs of one clock for every rank)."""

    rank: int
    events: list[dict[str, Any]] = field(default_factory=list)
    corr: int = 0

    def _op(self, name: str, start: float, dur: float, at: float, stream: int, **args: Any) -> None:
        self.corr += 1
        c = self.rank * 100_000 + self.corr
        self.events.append(launch(at, c))
        self.events.append(kernel(name, start, dur, c, stream=stream, extra=args or None))

    def compute(self, start: float, dur: float, at: float) -> Rank:
        """A compute kernel on the compute stream, launched at ``at``."""
        self._op(GEMM, start, dur, at, COMPUTE_STREAM)
        return self

    def all_gather(self, start: float, dur: float, at: float, nelems: int = 1 << 20) -> Rank:
        """An NCCL all-gather on the NCCL stream, launched at ``at``."""
        args = {"Collective name": "_allgather_base", "Process Group Name": "0"}
        args |= {"In msg nelems": nelems // 2, "Out msg nelems": nelems, "dtype": "Float"}
        self._op(AG, start, dur, at, COMM_STREAM, **args)
        return self

    def cpu(self, name: str, start: float, dur: float) -> Rank:
        """A CPU op of the launching thread."""
        self.events.append(x(name, start, dur, tid=MAIN, cat="cpu_op"))
        return self

    def steps(self, *spans: tuple[int, float, float]) -> Rank:
        self.events += [step(n, s, d) for n, s, d in spans]
        return self


def write_run(folder: Path, ranks: list[Rank]) -> Path:
    """Every rank's trace in ``folder`` (``rank-<r>.json``), on one clock."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        write(folder / f"rank-{r.rank}.json", trace(r.rank, len(ranks), r.events, backend="nccl"))
    return folder
