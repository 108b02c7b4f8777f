"""One analysis on any executor: the tasks of an analysis (``tasks``), the client's plan
(``plan``), where they run (``executor``; Dask's in ``overlapscope.cluster``) and the rounds
through the one cache (``run``: :func:`~overlapscope.pipeline.run.analyse`, the one entry point of every
analysis);
``timeline`` reads a cached rank's timeline a step at a time. What is computed is the
analysis' registry (``overlapscope/analysis/registry.py``)."""
