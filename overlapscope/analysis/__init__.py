"""Pure analyses over the event table: ``analyze(run) -> RunAnalysis``."""

from overlapscope.analysis.api import SCHEMA_VERSION, RunAnalysis, RunSummary, analyze
from overlapscope.analysis.findings import Finding, FindingKind
from overlapscope.analysis.hta.report import HtaReport, run_hta

__all__ = [
    "SCHEMA_VERSION",
    "Finding",
    "FindingKind",
    "HtaReport",
    "RunAnalysis",
    "RunSummary",
    "analyze",
    "run_hta",
]
