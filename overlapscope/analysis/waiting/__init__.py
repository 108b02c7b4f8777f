"""Where and why the GPU waits. ``idle``: every GPU idle gap of a step traced
to its cause (host bound, a sync, a peer, another stream, other); ``comm_causes``: each
collective's exposed time split into issued late by the host, waiting for peers and the
transfer; ``host_path``: the critical path continued on the CPU thread where it meets a GPU
waiting for its host; ``tables``: the per-rank tables of all three, made once for the local
analysis and the Dask reduce task."""
