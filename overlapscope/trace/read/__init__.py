"""Reading one trace file into raw columns, with no interpretation yet.
``parse.read_trace`` is the entry point: the file is read with bounded memory (``reader``),
decoded with msgspec into the few fields the analysis uses (``fields``, ``decode``,
``columns``; ``comm_args`` for the events that can carry collective arguments), its header
typed once (``header``), its unusable events counted and left out (``events``) and a broken
document located to its byte and event (``json_error``); ``fingerprint`` keeps what the file
says about its job, and ``merged`` reads a trace of every rank in one file back as per-rank
traces."""
