"""The registry of findings: every rule ``diagnose`` runs, in the order ties are reported.

A new finding is one module of this package that defines ``RULE`` (a
:class:`~overlapscope.analysis.findings.FindingRule`) and one line in :data:`BUILT_IN`;
outside the package, one call to :func:`register` in its own module. ``diagnose``'s text, its
"no findings" sentence, the JSON and the dashboard's findings view are all made from the
findings of the registered rules. A whole analysis is cached with the findings in it, so the
cache's key names the rules registered beyond the built-in ones (:func:`registry_digest`).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect

from overlapscope.analysis.findings import (
    Finding,
    FindingInput,
    FindingRule,
    backward_gathers,
    critical_path,
    dimensions,
    forward_gathers,
    host_starved,
    host_sync,
    network,
    rate_limiter,
    step_boundary,
    straggler,
    threshold_words,
)
from overlapscope.analysis.findings.evidence import placed

BUILT_IN: tuple[FindingRule, ...] = (
    backward_gathers.RULE,
    forward_gathers.RULE,
    rate_limiter.RULE,
    straggler.RULE,
    network.RULE,
    critical_path.RULE,
    host_starved.RULE,
    host_sync.RULE,
    step_boundary.RULE,
    dimensions.REDUCE_SCATTER_RULE,
    dimensions.REPLICA_ALL_REDUCE_RULE,
    dimensions.TP_RULE,
)
_registered: list[FindingRule] = list(BUILT_IN)


def register(rule: FindingRule) -> FindingRule:
    """Add ``rule``, run after those registered before it; refuses a second rule of one kind."""
    if rule.kind in {r.kind for r in _registered}:
        raise ValueError(f"a finding of kind {rule.kind!r} is registered already")
    _registered.append(rule)
    return rule


def unregister(kind: str) -> None:
    """Remove the rule registered as ``kind`` (not a built-in one)."""
    if kind in {r.kind for r in BUILT_IN}:
        raise ValueError(f"{kind!r} is a built-in finding")
    _registered[:] = [r for r in _registered if r.kind != kind]


def rules() -> tuple[FindingRule, ...]:
    """Every registered rule, in the order they run."""
    return tuple(_registered)


def run_rules(inp: FindingInput) -> tuple[Finding, ...]:
    """Every registered rule's findings, largest stake first (ties: in registry order)."""
    found = [placed(f, inp.steps) for r in _registered for f in r.find(inp)]
    return tuple(sorted(found, key=lambda f: -f.stake_us))


def no_findings_sentence() -> str:
    """What ``diagnose`` says when no rule finds anything: what each looked for."""
    said = [r.looks_for for r in _registered]
    listed = ", ".join(said[:-1]) + f" and {said[-1]}" if len(said) > 1 else "".join(said)
    return f"no findings above {threshold_words()}: looked for {listed}"


def registry_digest() -> str:
    """Names the rules registered beyond the built-in ones (with their modules' source), for
    the cache's key of a whole analysis: one made without a rule is not served once it is
    registered."""
    h = hashlib.sha256()
    for r in _registered[len(BUILT_IN) :]:
        h.update(f"{r.kind}|{r.find.__module__}.{r.find.__qualname__}".encode())
        with contextlib.suppress(OSError, TypeError):  # (no source file: its name only)
            h.update(inspect.getsource(inspect.getmodule(r.find) or r.find).encode())
    return h.hexdigest()[:16]
