"""Ingestion: reading and validating knowledge sources."""

from groundwire.ingest.sources import load_sources, read_front_matter
from groundwire.ingest.validate import ValidationReport, content_hash, normalize_and_validate

__all__ = [
    "ValidationReport",
    "content_hash",
    "load_sources",
    "normalize_and_validate",
    "read_front_matter",
]
