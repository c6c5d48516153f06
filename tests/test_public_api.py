"""The curated public API: exactly the documented names, sorted, importable; typed package."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import groundwire

# The documented public API. Adding or removing a name is an API change: update this
# list, the docs and the changelog together.
EXPECTED = [
    "AccessContext",
    "AccessDecision",
    "AccessDeniedError",
    "AccessError",
    "AccessPolicy",
    "Analyzer",
    "AnalyzerConfig",
    "AnswerEvent",
    "AnthropicProvider",
    "AsyncStreamResult",
    "AuditEnvelope",
    "AuditIntegrityError",
    "AuditSink",
    "BackendError",
    "BackendHit",
    "BackendStats",
    "BlockReason",
    "BuildResult",
    "CachedEmbedder",
    "CallableProvider",
    "CallableReranker",
    "ChannelScore",
    "ChatRequest",
    "Chunk",
    "ChunkSpan",
    "Chunker",
    "ChunkingConfig",
    "Citation",
    "CitationCheck",
    "CitationError",
    "CitationReport",
    "Client",
    "Completion",
    "ConfigError",
    "ContextConfig",
    "ContextResult",
    "ConversationMemory",
    "CorpusResult",
    "CorpusSource",
    "Custody",
    "CustodyError",
    "Document",
    "EmbeddedBackend",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingError",
    "EmbeddingReranker",
    "EvidenceLedger",
    "EvidenceResolver",
    "EvidenceResult",
    "EvidenceSettings",
    "EvidenceSource",
    "Excerpt",
    "Extraction",
    "ExtractorRegistry",
    "FetchError",
    "Filter",
    "FolderStore",
    "GenerateResult",
    "Governance",
    "GroundedAnswer",
    "GroundedAssistant",
    "GroundingConfig",
    "GroundingEngine",
    "GroundingMetadata",
    "GroundingOutcome",
    "GroundingStatus",
    "GroundwireError",
    "HashingEmbedder",
    "Hit",
    "HybridReport",
    "HybridSettings",
    "InMemoryConversationMemory",
    "IndexFormatError",
    "IndexSettings",
    "IngestReport",
    "JobOutcome",
    "JsonLinesAuditSink",
    "KnowledgeAccessGuard",
    "KnowledgeBase",
    "KnowledgeBlock",
    "KnowledgeEntry",
    "KnowledgeIndexError",
    "KnowledgeRuntime",
    "KnowledgeSource",
    "KnowledgeSpace",
    "Labels",
    "LoadResult",
    "LoadedDocument",
    "Memory",
    "MemoryAttribute",
    "MemoryAuditSink",
    "MemoryBlock",
    "MemoryEntity",
    "MemoryPipeline",
    "MemoryPipelineConfig",
    "MemoryRecall",
    "MemoryRecallConfig",
    "MemoryRelation",
    "MemoryScope",
    "MemoryStore",
    "MemoryStoreError",
    "Message",
    "MilvusBackend",
    "MilvusSyncReport",
    "MissingExtraError",
    "MutationPlan",
    "MutationRequest",
    "MutationResult",
    "NoopReranker",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "OpenAIProvider",
    "Principal",
    "Provider",
    "ProviderError",
    "ProviderTimeoutError",
    "QueryError",
    "RecalledMemory",
    "RelevanceGate",
    "RerankCandidate",
    "Reranker",
    "RetrievalConfig",
    "RetrievalRequest",
    "RetrievalResult",
    "RetryPolicy",
    "S3Store",
    "SQLiteAuditSink",
    "SQLiteConversationMemory",
    "Scope",
    "ScopedReader",
    "ScoredEntry",
    "Screened",
    "SearchBackend",
    "Section",
    "Selection",
    "SendGate",
    "SentenceTransformerEmbedder",
    "SkippedSource",
    "SnapshotCache",
    "SnapshotSection",
    "SourceError",
    "SourceReport",
    "StaticRetriever",
    "StaticSpace",
    "StreamEvent",
    "StreamResult",
    "SummarizedRecall",
    "SummaryCard",
    "SyncConfig",
    "SyncError",
    "SyncReport",
    "Syncer",
    "Tool",
    "ToolCall",
    "ToolLoopResult",
    "ToolRun",
    "ToolSpec",
    "Turn",
    "ValidationFailedError",
    "ValidationIssue",
    "ValidationReport",
    "VectorIndex",
    "__version__",
    "aexecute_mutation",
    "agenerate_with_files",
    "arun_tool_loop",
    "assemble_context",
    "build_corpus",
    "chunk_document",
    "chunk_settings",
    "chunk_text",
    "chunker_for",
    "chunks_to_documents",
    "create_embedder",
    "create_grounding_engine",
    "create_provider",
    "document_settings",
    "evaluate_mutation",
    "execute_mutation",
    "export_onnx",
    "fetch_url",
    "find_secret",
    "generate_with_files",
    "get_or_build",
    "label_chunks",
    "load_bytes",
    "load_document",
    "load_documents",
    "load_sources",
    "load_sync_config",
    "normalize_and_validate",
    "render_evidence",
    "render_memory_block",
    "retrieve",
    "retrieve_evidence",
    "retrieve_evidence_from",
    "run_tool_loop",
    "screen_texts",
    "search_channels",
    "search_knowledge_base_tool",
    "sync_milvus",
    "validate_citations",
]


def test_all_is_sorted() -> None:
    assert list(groundwire.__all__) == sorted(groundwire.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(set(groundwire.__all__)) == len(groundwire.__all__)


def test_all_is_exactly_the_documented_api() -> None:
    assert set(groundwire.__all__) == set(EXPECTED)
    assert list(groundwire.__all__) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_each_name_is_importable(name: str) -> None:
    module = importlib.import_module("groundwire")
    assert hasattr(module, name)
    namespace: dict[str, object] = {}
    exec(f"from groundwire import {name}", namespace)
    assert namespace[name] is getattr(groundwire, name)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from groundwire import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(EXPECTED)


def test_public_classes_claim_the_public_module_or_a_submodule() -> None:
    for name in EXPECTED:
        value = getattr(groundwire, name)
        module = getattr(value, "__module__", None)
        if module is not None:
            assert module == "groundwire" or module.startswith("groundwire."), (name, module)


def test_errors_form_one_tree() -> None:
    for name in (
        "AccessDeniedError",
        "AccessError",
        "AuditIntegrityError",
        "ConfigError",
        "FetchError",
        "IndexFormatError",
        "KnowledgeIndexError",
        "MissingExtraError",
        "ProviderError",
        "QueryError",
        "SourceError",
        "ValidationFailedError",
    ):
        assert issubclass(getattr(groundwire, name), groundwire.GroundwireError)
    assert issubclass(groundwire.MissingExtraError, ImportError)
    assert issubclass(groundwire.IndexFormatError, groundwire.KnowledgeIndexError)
    assert issubclass(groundwire.FetchError, groundwire.SourceError)
    assert issubclass(groundwire.ProviderTimeoutError, groundwire.ProviderError)
    assert issubclass(groundwire.CitationError, groundwire.ProviderError)
    assert issubclass(groundwire.AccessDeniedError, groundwire.AccessError)
    assert issubclass(groundwire.AuditIntegrityError, groundwire.AccessError)


def test_version_is_a_string() -> None:
    assert isinstance(groundwire.__version__, str)
    assert groundwire.__version__.count(".") >= 1


def test_py_typed_marker_is_shipped() -> None:
    package_dir = Path(groundwire.__file__).resolve().parent
    marker = package_dir / "py.typed"
    assert marker.is_file()
