"""overlapscope: see and fix exposed communication in sharded data-parallel training.

Vocabulary (used in every module, column and flag):

- ``rank``: a process of the job (0 .. world_size-1).
- ``unit``: a group of parameters sharded and all-gathered together (a transformer
  block, or ``root`` for the parameters outside every block).
- ``phase``: what a unit is doing in a time range: a row of the phase table,
  :class:`overlapscope.phases.Phase` (its lane, collective, colour and words).
- ``lane``: what an event is for the analysis (:class:`overlapscope.phases.Lane`):
  ``compute`` (the training thread / compute stream), ``comm`` (the transfer), ``wait``
  (compute blocked on comm), ``issue``, ``memory``, ``step``, ``other``.
- ``step``: one optimizer step (one ``ProfilerStep#N`` in a trace).
- ``*_us`` times in microseconds, ``*_ns`` in nanoseconds, ``*_bytes`` sizes, ``num_*`` counts.
"""

__version__ = "0.1.0"
