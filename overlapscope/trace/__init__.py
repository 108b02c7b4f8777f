"""Capture (profiler schedule, atomic trace files) and loading of Kineto traces.

From files to the event table (``schema``): ``read`` reads one file into raw columns,
``producers`` and ``groups`` say what a framework's ranges and a collective's process group
are, ``recognize`` makes one rank's event table, and ``run`` loads a run's files into one
(``load_run``); ``naming`` holds the names all of them read by.
"""
