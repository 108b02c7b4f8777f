"""Capture (profiler schedule, atomic trace files) and loading of Kineto traces."""
