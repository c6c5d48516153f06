"""Fixtures for retrieval tests: precise entries and small knowledge bases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from groundwire import IndexSettings, KnowledgeBase


@pytest.fixture
def entry(entry_factory: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A valid entry mapping whose searchable text is exactly what the test says.

    The shared factory's default summary repeats the id ("Summary of <id>."), which
    would add the id's terms to BM25; here title and summary default to neutral filler.
    """

    def make(entry_id: str, **fields: Any) -> dict[str, Any]:
        fields.setdefault("title", "Filler entry")
        fields.setdefault("summary", "filler text")
        return entry_factory(entry_id, **fields)

    return make


@pytest.fixture
def build_kb(source_factory: Callable[..., dict[str, Any]]) -> Callable[..., KnowledgeBase]:
    """Validate and index entry mappings into one snapshot (source ``kb@v1``)."""

    def build(*entries: dict[str, Any], settings: IndexSettings | None = None) -> KnowledgeBase:
        return KnowledgeBase.from_sources([source_factory(*entries)], settings)

    return build
