"""Loading a run: a directory of per-rank traces, or trace files, into one event
table. ``loader.load_run`` is the single entry point; ``discover`` says which files a run is,
``runmeta`` what its ``run.json`` says about them, ``ranks`` which rank each trace is and
``same_run`` whether the traces given can be the ranks of one run."""
