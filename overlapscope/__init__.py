"""overlapscope: see and fix exposed communication in sharded data-parallel training.

Vocabulary (used in every module, column and flag):

- ``rank``: a process of the job (0 .. world_size-1).
- ``unit``: a group of parameters sharded and all-gathered together (a transformer
  block, or ``root`` for the parameters outside every block).
- ``phase``: what a unit is doing in a time range (see :class:`overlapscope.trace.names.Phase`).
- ``lane``: where a phase runs: ``compute`` (the training thread / compute stream),
  ``comm`` (the communication thread / stream), ``wait`` (compute blocked on comm).
- ``step``: one optimizer step (one ``ProfilerStep#N`` in a trace).
- ``*_us`` times in microseconds, ``*_ns`` in nanoseconds, ``*_bytes`` sizes, ``num_*`` counts.
"""

__version__ = "0.1.0"
