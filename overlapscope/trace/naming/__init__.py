"""The names a trace is read by. ``ranges``: the range-naming contract between
the engine, which emits ``ovs/<phase>/<unit>`` ranges, and the analysis, which parses them;
``generic``: what an event's name says whatever framework wrote the trace (NCCL kernels,
copies, syncs, profiler steps, collective kinds); ``files``: the file names of a run directory
and the run stamp's key. Leaves: they import nothing else of the trace package."""
