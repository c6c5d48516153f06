"""How sure one turn's selection is: none, low, medium or high."""

from __future__ import annotations

from collections.abc import Sequence

from groundwire.config import CONFIDENCE_DOMINANCE_RATIO, RelevanceGate
from groundwire.model import Confidence, ScoredEntry

__all__ = ["classify_confidence", "coverage_confidence", "gated_confidence"]

_BOOSTS = ("exact", "alias")


def classify_confidence(candidates: Sequence[ScoredEntry]) -> Confidence:
    """Classify a ranked candidate list (best first).

    ``none``: no candidate. ``high``: the top candidate matched an id, title or alias
    phrase. ``medium``: the top candidate matched two or more lexical fields, or its
    score is at least ``CONFIDENCE_DOMINANCE_RATIO`` times the next one's.
    ``low``: anything else (a single field's weak lexical signal).
    """
    if not candidates:
        return "none"
    top = candidates[0]
    if top.exact or top.alias:
        return "high"
    fields = sum(1 for name, value in top.breakdown.items() if name not in _BOOSTS and value > 0)
    if fields >= 2:
        return "medium"
    if len(candidates) > 1 and top.score >= CONFIDENCE_DOMINANCE_RATIO * candidates[1].score:
        return "medium"
    return "low"


def gated_confidence(
    kept: Sequence[ScoredEntry], settings: RelevanceGate, *, outranked: bool = False
) -> Confidence:
    """Classify what the relevance gate kept (best first), from the top entry's coverage.

    ``none``: nothing kept. ``high``: the top entry holds at least ``high_coverage`` of
    the query's information, or matched an id, title or alias phrase while holding at
    least ``min_coverage``. ``medium``: it holds at least ``min_coverage``. ``low``: it
    passed on partial evidence (two strong or several informative terms, a smaller
    share), or ``outranked``: an entry outside the request's integration scope would
    have ranked first.
    """
    if not kept:
        return "none"
    if outranked:
        return "low"
    top = kept[0]
    return coverage_confidence(top.coverage or 0.0, top.exact or top.alias, settings)


def coverage_confidence(coverage: float, phrase: bool, settings: RelevanceGate) -> Confidence:
    """The confidence of a kept top candidate with this ``coverage`` (``phrase``: it matched
    an id, title or alias phrase): ``high``, ``medium`` or ``low`` as in
    :func:`gated_confidence`."""
    if coverage >= settings.high_coverage:
        return "high"
    if coverage >= settings.min_coverage:
        return "high" if phrase else "medium"
    return "low"
