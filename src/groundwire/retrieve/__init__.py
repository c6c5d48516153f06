"""One turn's selection: eligibility, ranking, fusion, expansion, confidence and evidence."""

from groundwire.retrieve.confidence import classify_confidence
from groundwire.retrieve.evidence import EvidenceSelection, select_evidence
from groundwire.retrieve.pipeline import RetrievalRequest, Selection, lexical_text, retrieve

__all__ = [
    "EvidenceSelection",
    "RetrievalRequest",
    "Selection",
    "classify_confidence",
    "lexical_text",
    "retrieve",
    "select_evidence",
]
