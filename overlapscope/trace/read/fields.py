"""The fields of a Kineto trace that the analysis reads, as msgspec Structs.

Decoding into these skips every other key while parsing, without building Python objects
for it: most of a CPU trace's bytes are the shapes and inputs in the ``args`` of every CPU op,
which the analysis reads only for collectives. Values are typed ``Any`` so that a field of an
odd type decodes as it is and is judged by the column builders (:mod:`overlapscope.trace.read.
decode`), as for any other JSON decoder: the types decide nothing here. The Structs are not
tracked by the garbage collector (``gc=False``: decoded JSON holds no reference cycles): the
collections that hundreds of thousands of tracked objects would set off took a third of the
decoding time (measured).
"""

from __future__ import annotations

from typing import Any, ClassVar, Union

import msgspec

from overlapscope.trace.naming.files import RUN_STAMP_KEY

# A JSON null, for the tensor lists an event does not carry.
NULL = msgspec.Raw(b"null")


class Args(msgspec.Struct, gc=False):
    """An event's ``args`` object: the GPU stream, the launch <-> kernel correlation, a
    thread's name (metadata events) and a collective's arguments."""

    stream: Any = -1
    correlation: Any = -1
    name: Any = ""
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    group_size: Any = msgspec.field(default=None, name="Group size")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Desc")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq_arg: Any = msgspec.field(default=None, name="Seq")
    # Every CPU op carries these (with record_shapes); they are decoded (orjson) only for
    # the few events that may be collectives (comm_args), so they stay raw JSON here.
    dims: msgspec.Raw = msgspec.field(default=NULL, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=NULL, name="Input type")


class MemoryArgs(msgspec.Struct, gc=False):
    """A ``[memory]`` instant event's ``args``: the allocator's total after it, on which
    device (of an :class:`Instant`: a struct of these two alone, no other field to fill)."""

    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    device_type: Any = msgspec.field(default=0, name="Device Type")


class EventArgs(Args, gc=False):
    """The ``args`` of an :class:`Event` (a slice decoded one event at a time): any phase's,
    the memory fields included."""

    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    device_type: Any = msgspec.field(default=0, name="Device Type")


EMPTY_ARGS = Args()
NO_MEMORY = MemoryArgs()


class Event(msgspec.Struct, gc=False):
    """One entry of ``traceEvents``; a missing field is None, as a ``dict.get`` would give
    it to the column builders (which count it: trace.events.BAD_REASONS). The fields are
    declared in the order Kineto writes the keys
    (``ph, cat, name, pid, tid, ts, dur, args``): msgspec tries the field after the last
    one matched first, so keys in that order are found at once (decoding 5% faster on a
    33 MB GPU trace than in another order, measured)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    # An object, or any other JSON value (left out later as "args that are not an object").
    args: EventArgs | list[Any] | str | int | float | bool | None = None


_ArgsValue = Args | list[Any] | str | int | float | bool | None


class Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """An :class:`Event` of phase ``"X"`` as :data:`BY_PHASE` decodes it (``ph`` is the
    class's, not stored). Its keys are required and typed, checked by msgspec while it
    decodes: a slice holding an event without one, or with one of another type (``"ts":
    "1e3"``, ``"tid": null``), is decoded again as :class:`Event` s, whose values the column
    builders check one by one (and count the odd ones, trace.events.BAD_REASONS)."""

    ph: ClassVar[str] = "X"
    cat: str
    name: str
    tid: int | str
    ts: float
    dur: float
    args: _ArgsValue = None


class Metadata(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    """An :class:`Event` of phase ``"M"`` (a process's or thread's name) as :data:`BY_PHASE`
    decodes it: the fields the thread names are read from."""

    ph: ClassVar[str] = "M"
    name: Any = None
    tid: Any = 0
    args: _ArgsValue = None


class Instant(msgspec.Struct, tag_field="ph", tag="i", gc=False):
    """An :class:`Event` of phase ``"i"`` as :data:`BY_PHASE` decodes it: the profiler's
    ``[memory]`` events are instants (the allocator's total in their args)."""

    ph: ClassVar[str] = "i"
    name: Any = None
    ts: Any = None
    args: MemoryArgs | list[Any] | str | int | float | bool | None = None


# The other phases of the trace event format: events the analysis does not read (flows,
# counters ...), decoded to an empty object each, none of their values built.
OTHER_PHASES = tuple("BEICbnestfPNODVvRc()")  # (each one character)
PHASES = frozenset({"X", "M", "i", *OTHER_PHASES})  # every phase of the format
_OTHERS = tuple(
    msgspec.defstruct(f"Phase{i}", [], tag_field="ph", tag=ph, gc=False, namespace={"ph": ph})
    for i, ph in enumerate(OTHER_PHASES)
)


# A header field the document does not hold (told apart from one that is null).
_Header = msgspec.Raw | msgspec.UnsetType
# Each header field the analysis reads: its key in the document, its attribute below.
HEADER_FIELDS = {
    "distributedInfo": "distributedInfo",
    "baseTimeNanoseconds": "baseTimeNanoseconds",
    "deviceProperties": "deviceProperties",
    RUN_STAMP_KEY: "run_stamp",
}


class Trace(msgspec.Struct, gc=False):
    """The document: its events and the top-level fields the analysis reads (typed by
    :mod:`overlapscope.trace.read.header`)."""

    traceEvents: list[Event]  # Kineto's key names
    # Raw: decoded with orjson, as the rest of the top level is in the sliced path.
    distributedInfo: _Header = msgspec.UNSET
    baseTimeNanoseconds: _Header = msgspec.UNSET
    deviceProperties: _Header = msgspec.UNSET
    run_stamp: _Header = msgspec.field(default=msgspec.UNSET, name=RUN_STAMP_KEY)


class Outline(msgspec.Struct, gc=False):
    """The document with each event left as raw JSON: one pass finds the events' bounds, so
    that they can be decoded a batch at a time."""

    traceEvents: list[msgspec.Raw]
    distributedInfo: _Header = msgspec.UNSET
    baseTimeNanoseconds: _Header = msgspec.UNSET
    deviceProperties: _Header = msgspec.UNSET
    run_stamp: _Header = msgspec.field(default=msgspec.UNSET, name=RUN_STAMP_KEY)


TRACE = msgspec.json.Decoder(Trace)
OUTLINE = msgspec.json.Decoder(Outline)
EVENTS = msgspec.json.Decoder(list[Event])
# Events by their phase (a tagged union on ``ph``): what a GPU trace's flow events cost to
# decode (a third of its events) is their keys' scan alone. Refuses a phase outside the
# format's, a missing or repeated ``ph``: such a slice is decoded by :data:`EVENTS`.
_BY_PHASE = (Complete, Metadata, Instant, *_OTHERS)
BY_PHASE = msgspec.json.Decoder(list[Union[_BY_PHASE]])  # type: ignore[valid-type]  # noqa: UP007


_INT_MIN, _INT_END = -(2**63), 2**64


def orjson_number(value: Any) -> Any:
    """``value`` as orjson reads it: an integer beyond 64 bits is a float there (msgspec
    keeps it an int). Raises OverflowError beyond the float range, where orjson refuses the
    document."""
    if type(value) is int and not _INT_MIN <= value < _INT_END:
        return float(value)
    return value
