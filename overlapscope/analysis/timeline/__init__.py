"""The time model and the tables built on it. Each step of each rank is
partitioned into parts that add up (``partition``: compute, exposed communication, exposed
memory, other, idle); ``metrics`` makes the per-rank, per-step and timeline tables from it,
``units`` the per-unit tables of collectives and compute, ``bound`` how far a run is from the
overlap bound, and ``levers`` the memory levers (recomputation, offload copies) in the
timeline. Pure functions of the event table."""
