"""Ingestion: reading and validating knowledge sources; loading, fetching and chunking documents."""

from groundwire.ingest.chunking import (
    Chunker,
    ChunkSpan,
    chunk_document,
    chunk_text,
    chunker_for,
    chunks_to_documents,
)
from groundwire.ingest.corpus import CorpusResult, CorpusSource, build_corpus
from groundwire.ingest.fetch import fetch_url
from groundwire.ingest.loaders import LoadResult, load_bytes, load_document, load_documents
from groundwire.ingest.safety import find_secret
from groundwire.ingest.sources import load_sources, read_front_matter
from groundwire.ingest.validate import ValidationReport, content_hash, normalize_and_validate

__all__ = [
    "ChunkSpan",
    "Chunker",
    "CorpusResult",
    "CorpusSource",
    "LoadResult",
    "ValidationReport",
    "build_corpus",
    "chunk_document",
    "chunk_text",
    "chunker_for",
    "chunks_to_documents",
    "content_hash",
    "fetch_url",
    "find_secret",
    "load_bytes",
    "load_document",
    "load_documents",
    "load_sources",
    "normalize_and_validate",
    "read_front_matter",
]
