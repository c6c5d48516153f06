"""The grounding engine: lifecycle, readiness, timeouts and fail-open turns; evidence."""

from groundwire.ground.engine import GroundingEngine, create_grounding_engine
from groundwire.ground.evidence import EvidenceResult, retrieve_evidence

__all__ = ["EvidenceResult", "GroundingEngine", "create_grounding_engine", "retrieve_evidence"]
