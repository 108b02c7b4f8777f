"""Collectives matched across ranks. ``tables``: one collective is the
set of its transfers with the same ``(group, step, seq)`` on different ranks, split into
transfer and waiting for peers, with bandwidth and stragglers; ``matched``: each synchronising
collective's start and end per rank as a matrix, and each send matched with its receives, as
the clocks read them."""
