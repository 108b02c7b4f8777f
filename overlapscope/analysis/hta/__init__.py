"""Holistic Trace Analysis (HTA) figures beside ours, computed offline and
optional (``pip install overlapscope[hta]``). ``report``: HTA's figures for the ranks with GPU
kernels, set beside the same figures of ours; ``process``: HTA run in a fresh interpreter of
its own, so that its fork pool inherits nothing of the caller."""
