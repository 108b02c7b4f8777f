"""Profiler (and NVTX) ranges for engine phases, named by :mod:`overlapscope.trace.naming.ranges`.

Ranges are context managers that always close (``try/finally``); with ``enabled=False`` they
cost one branch. NVTX ranges are emitted only where CUDA is available (``torch.cuda.nvtx``
raises on a CPU build).

Profiler ranges are only opened while a profiler records (``_profiler_enabled``, a flag read in
C): a training step outside the profiled window pays for the NVTX range alone.

Compute ranges are opened in one hook and closed in another (a unit's forward runs between
its forward pre- and post-hook), so they follow a stack discipline: only the innermost
active unit has an open compute range, and a parent unit's range (the root's forward) is
split around the children it calls, never enclosing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch._C._autograd import _profiler_enabled
from torch.autograd.profiler import record_function

from overlapscope.phases import Phase
from overlapscope.trace.naming.ranges import format_range


class Instrument:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.nvtx = enabled and torch.cuda.is_available()
        self._stack: list[tuple[Phase, str]] = []  # compute spans; only the top may be open
        self._open = False  # the innermost compute span is open
        self._rf: record_function | None = None  # its profiler range, while one records
        self._names: dict[tuple[Phase, str], str] = {}

    def _name(self, phase: Phase, unit: str) -> str:
        name = self._names.get((phase, unit))
        if name is None:
            name = self._names[(phase, unit)] = format_range(phase, unit)
        return name

    @contextmanager
    def phase(self, phase: Phase, unit: str) -> Iterator[None]:
        """A range around a block of code (issue, wait, optimizer step)."""
        if not self.enabled:
            yield
            return
        name = self._name(phase, unit)
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            if _profiler_enabled():
                with record_function(name):
                    yield
            else:
                yield
        finally:
            if self.nvtx:
                torch.cuda.nvtx.range_pop()

    # -- compute spans across hooks ------------------------------------------------------
    def pause(self) -> None:
        """Close the open compute range (a hook is about to issue or wait)."""
        if not self._open:
            return
        self._open = False
        if self._rf is not None:
            self._rf.__exit__(None, None, None)
            self._rf = None
        if self.nvtx:
            torch.cuda.nvtx.range_pop()

    def resume(self) -> None:
        """Re-open the innermost compute span, if any and not open."""
        if not self.enabled or self._open or not self._stack:
            return
        name = self._name(*self._stack[-1])
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        self._open = True
        if _profiler_enabled():
            rf = record_function(name)
            rf.__enter__()
            self._rf = rf

    def push(self, phase: Phase, unit: str) -> None:
        """Start ``unit``'s compute span (the enclosing span is closed first)."""
        if not self.enabled:
            return
        self.pause()
        self._stack.append((phase, unit))
        self.resume()

    def pop(self, phase: Phase, unit: str) -> None:
        """End ``unit``'s compute span; call :meth:`resume` to continue the enclosing one."""
        if not self.enabled:
            return
        self.pause()
        key = (phase, unit)
        if key in self._stack:
            self._stack.remove(key)

    def close_all(self) -> None:
        self.pause()
        self._stack.clear()
