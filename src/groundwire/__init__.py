"""groundwire: ground LLM calls in a team's own knowledge.

Everything a user needs is importable from here; submodules are internals.
"""

from groundwire.config import (
    AnalyzerConfig,
    ContextConfig,
    GroundingConfig,
    IndexSettings,
    RetrievalConfig,
)
from groundwire.context import assemble_context
from groundwire.errors import (
    ConfigError,
    GroundwireError,
    KnowledgeIndexError,
    MissingExtraError,
    QueryError,
    SourceError,
    ValidationFailedError,
)
from groundwire.ground import GroundingEngine, create_grounding_engine
from groundwire.index import KnowledgeBase
from groundwire.index.cache import BuildResult, SnapshotCache, get_or_build
from groundwire.ingest import ValidationReport, load_sources, normalize_and_validate
from groundwire.model import (
    Citation,
    ContextResult,
    Document,
    GroundingMetadata,
    GroundingOutcome,
    GroundingStatus,
    Hit,
    KnowledgeBlock,
    KnowledgeEntry,
    KnowledgeSource,
    RetrievalResult,
    Scope,
    ScoredEntry,
    Turn,
    ValidationIssue,
)
from groundwire.retrieve import RetrievalRequest, Selection, retrieve
from groundwire.text import Analyzer

__version__ = "0.1.0"

__all__ = [
    "Analyzer",
    "AnalyzerConfig",
    "BuildResult",
    "Citation",
    "ConfigError",
    "ContextConfig",
    "ContextResult",
    "Document",
    "GroundingConfig",
    "GroundingEngine",
    "GroundingMetadata",
    "GroundingOutcome",
    "GroundingStatus",
    "GroundwireError",
    "Hit",
    "IndexSettings",
    "KnowledgeBase",
    "KnowledgeBlock",
    "KnowledgeEntry",
    "KnowledgeIndexError",
    "KnowledgeSource",
    "MissingExtraError",
    "QueryError",
    "RetrievalConfig",
    "RetrievalRequest",
    "RetrievalResult",
    "Scope",
    "ScoredEntry",
    "Selection",
    "SnapshotCache",
    "SourceError",
    "Turn",
    "ValidationFailedError",
    "ValidationIssue",
    "ValidationReport",
    "__version__",
    "assemble_context",
    "create_grounding_engine",
    "get_or_build",
    "load_sources",
    "normalize_and_validate",
    "retrieve",
]
