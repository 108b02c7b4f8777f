"""The critical path of each step across ranks: which chain of work set
the step's length. ``graph``: the dependency graph of one step (per rank its segments in time
order, joined by the collectives) and its replay; ``arrivals``: which arrivals each sync node
waits on, O(ranks) per collective; ``path``: the longest path of each step and the links it
runs through; ``report``: what the CLI, the JSON and ``diagnose`` say about the clocks and the
path."""
