"""The grounding engine: lifecycle, readiness, timeouts and fail-open turns."""

from groundwire.ground.engine import GroundingEngine, create_grounding_engine

__all__ = ["GroundingEngine", "create_grounding_engine"]
