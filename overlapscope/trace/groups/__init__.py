"""Process groups. ``assign``: which process group each collective ran in,
from ``record_param_comms``, the header's ``pg_config``, the gloo runloop threads and
NCCL's per-communicator streams (``streams``); ``issuing``: the ``c10d::`` op that issued
each gloo collective (its kind, its size, its group's size); ``dimensions``: which parallel
dimension each group serves (FSDP shard, HSDP replicate, TP, ...) and the phases that follow
from it."""
