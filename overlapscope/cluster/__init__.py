"""Per-rank work on a Dask cluster, with the parsed ranks cached (``--dask``, ``--cache``).

Needs the ``cluster`` extra (``pip install 'overlapscope[cluster]'``); nothing here imports
Dask until a run is loaded with ``--dask``.
"""
