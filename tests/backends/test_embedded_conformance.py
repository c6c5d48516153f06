"""The embedded snapshot passes the backend conformance suite (it is the reference)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import load_by_path

import groundwire as gw

conformance = load_by_path("backend_conformance", Path(__file__).parent / "conformance.py")


class TestEmbeddedBackend(conformance.BackendConformance, conformance.HybridConformance):
    POOLS_EMPTY_FIELDS = False
    SCORING = "bm25f"

    @pytest.fixture(scope="class")
    @classmethod
    def make_backend(cls) -> conformance.MakeBackend:
        return lambda kb, vectors: gw.EmbeddedBackend(kb, vectors)


def test_an_embedded_backend_is_a_search_backend() -> None:
    kb = gw.KnowledgeBase.from_documents([gw.Document("a", "t", "rotate keys")])
    assert isinstance(gw.EmbeddedBackend(kb), gw.SearchBackend)
