"""The host side of GPU work. ``calls``: when and from which CPU thread each GPU
op was launched, and what a CPU thread was doing over a stretch of time (a sync, a
collective, data loading, the optimizer, Python hooks, other CPU work); ``syncs``: every
blocking host call of a rank with its CPU op chain and the time it held the GPU;
``step_boundary``: the time around a step's first GPU op that no step figure holds;
``phase_work``: what each part of a step (forward, backward, optimizer) cost a rank in the
three measures that tell a slow rank's cause apart (its GPU ops' time, its launch calls'
time, the idle between). Pure functions of one rank's rows."""
