"""Clock alignment across ranks, estimated from the collectives themselves.
``alignment``: each rank's clock offset from the reference's, from the moments synchronising
collectives end together and sends precede their receives (``Clocks``, ``align_run``,
``offset_at``); ``bounds``: the interval each offset can lie in, from causality alone."""
