"""``overlapscope bench-collectives``: the engine's collectives timed on the lab's links.

``collectives`` holds what is measured and how it is reported (nccl-tests' algbw and busbw);
``worker`` is one rank of the benchmark (``python -m overlapscope.bench.worker``), run by the
command in the lab's network namespaces or on loopback. It sits above both the engine (whose
collectives it times) and the lab (whose links it uses).
"""
