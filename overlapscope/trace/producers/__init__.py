"""Trace producers as plug-ins: one module per producer, one registry.

A producer (:class:`~overlapscope.trace.producers.base.Producer`) is everything overlapscope
knows of one framework's traces: its name (the framework, as reports name it), whether its
traces show an FSDP schedule the what-if can infer, how it recognises a trace (``recognizes``),
the lanes, phases and units its range names carry (``rule``, once per distinct name) and the
labels only the rows' nesting and order tell (``label``). The first registered producer that
recognises a rank's trace reads it; the generic one reads the rest.

A new producer (Megatron, DeepSpeed) is one module here and one line in :data:`BUILT_IN`;
outside the package, one call to :func:`register` in its own module. A producer registered at
run time is seen by parsing in this process and in worker processes forked from it (the local
analysis' pool); a Dask worker or a spawned process sees it once the module registering it is
imported there.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect

import numpy as np
import numpy.typing as npt

from overlapscope.trace.producers.base import Producer
from overlapscope.trace.producers.fsdp1 import Fsdp1
from overlapscope.trace.producers.fsdp2 import Fsdp2
from overlapscope.trace.producers.generic import Generic
from overlapscope.trace.producers.ours import Ours

BUILT_IN: tuple[Producer, ...] = (Ours(), Fsdp2(), Fsdp1())
FALLBACK: Producer = Generic()
_registered: list[Producer] = list(BUILT_IN)


def register(producer: Producer) -> Producer:
    """Add ``producer``, tried after those registered before it and before the generic one;
    refuses a second producer of one name."""
    if producer.name in {p.name for p in producers()}:
        raise ValueError(f"a producer named {producer.name!r} is registered already")
    _registered.append(producer)
    return producer


def unregister(name: str) -> None:
    """Remove the producer registered as ``name`` (not a built-in one)."""
    if name in {p.name for p in (*BUILT_IN, FALLBACK)}:
        raise ValueError(f"{name!r} is a built-in producer")
    _registered[:] = [p for p in _registered if p.name != name]


def producers() -> tuple[Producer, ...]:
    """Every producer, in the order they are tried (the generic one last)."""
    return (*_registered, FALLBACK)


def by_name(name: str) -> Producer:
    for p in producers():
        if p.name == name:
            return p
    raise KeyError(f"no producer named {name!r}; registered: {[p.name for p in producers()]}")


def detect(cats: list[str], present: npt.NDArray[np.bool_]) -> Producer:
    """The first producer that recognises the names."""
    return next(p for p in producers() if p.recognizes(cats, present))


def registry_digest() -> str:
    """Names the producers registered beyond the built-in ones (with their modules' source),
    for the cache's keys: a parse made without a producer is not served once it is there."""
    h = hashlib.sha256()
    for p in _registered[len(BUILT_IN) :]:
        h.update(f"{p.name}|{type(p).__module__}.{type(p).__qualname__}".encode())
        with contextlib.suppress(OSError, TypeError):  # (no source file: its name only)
            h.update(inspect.getsource(inspect.getmodule(p) or type(p)).encode())
    return h.hexdigest()[:16]


__all__ = ["Producer", "by_name", "detect", "producers", "register", "unregister"]
