"""Recognising what each event of one rank is. ``table`` turns the rank's
raw columns into the event table (lanes, steps, phases, units, collectives), with the rules of
the producer that wrote the trace (``overlapscope.trace.producers``, which says how each
framework is recognised); ``collective_copies`` says which GPU copies are NCCL's collective
work, ``p2p`` folds the engine's point-to-point transfers into one collective each, and
``unlaunched`` places GPU work whose launch the trace lost."""
