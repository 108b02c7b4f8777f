"""One clock-aligned, annotated trace of every rank, for Perfetto and chrome://tracing.

``overlapscope analyze RUN --perfetto FILE`` writes one gzipped Chrome-trace JSON file::

    {"overlapscope_export": {...}, "displayTimeUnit": "ms", "traceEvents": [
    ...  head: the run's own process (findings of the whole run)
    ...  one part per rank: its process and threads named, its source trace's events moved
    ...      onto the run's aligned clock, and the analysis' tracks (exposed communication by
    ...      phase and unit, waiting for a peer, GPU idle by cause, the critical path and its
    ...      flow arrows, the rank's findings)
    ...  tail: one closing event
    ]}

Each part is made from one rank's source file and that rank's rows of the analysis' tables
(:class:`~overlapscope.perfetto.part.RankPart`), compressed on its own
(:mod:`~overlapscope.perfetto.deflate`) and appended: the writer never holds more than one
rank's events, locally or on a Dask worker (where each rank's task writes its part).

Modules: ``events`` (the trace-event vocabulary: pids, tids, flow ids, records), ``numbers``
(the flags' lists of numbers), ``select`` (``--steps`` / ``--ranks``), ``source`` (a rank's
own events on the aligned clock), ``tracks`` (the added tracks of a rank), ``path`` (the
critical path's track and arrows), ``part`` (one rank's part), ``plan`` (from an analysis to
the parts), ``deflate`` (parts into one gzip member), ``export`` (the file). The parts
written by the pipeline's tasks: :mod:`overlapscope.pipeline.perfetto`. Reading the file
back into per-rank traces is the loader's (:mod:`overlapscope.trace.read.merged`).
"""
