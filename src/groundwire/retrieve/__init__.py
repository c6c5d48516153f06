"""One turn's selection: eligibility, ranking, fusion, expansion and confidence."""

from groundwire.retrieve.confidence import classify_confidence
from groundwire.retrieve.pipeline import RetrievalRequest, Selection, lexical_text, retrieve

__all__ = ["RetrievalRequest", "Selection", "classify_confidence", "lexical_text", "retrieve"]
