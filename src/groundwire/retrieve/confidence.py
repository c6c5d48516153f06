"""How sure one turn's selection is: none, low, medium or high."""

from __future__ import annotations

from collections.abc import Sequence

from groundwire.config import CONFIDENCE_DOMINANCE_RATIO
from groundwire.model import Confidence, ScoredEntry

__all__ = ["classify_confidence"]

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
