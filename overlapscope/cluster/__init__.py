"""Dask for ``--dask``: the executor that runs an analysis' tasks on a Dask cluster
(``client``), and large runs made from real ones for its tests and benchmarks (``synth``).

Needs the ``cluster`` extra (``pip install 'overlapscope[cluster]'``); nothing here imports
Dask until a round of tasks runs on it.
"""
