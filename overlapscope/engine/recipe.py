"""A run's recipe, defined in :mod:`overlapscope.config` (torch-free)."""

from overlapscope.config import DEFAULT_LIMIT_WINDOW, ProfileWindow, RunConfig

__all__ = ["DEFAULT_LIMIT_WINDOW", "ProfileWindow", "RunConfig"]
