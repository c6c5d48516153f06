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


def test_dense_feedback_over_a_backend_is_refused_not_ignored() -> None:
    from groundwire.backends import hybrid_search

    kb = gw.KnowledgeBase.from_documents([gw.Document("a", "t", "rotate keys")])
    embedder = gw.HashingEmbedder(32)
    backend = gw.EmbeddedBackend(kb, gw.VectorIndex.build(kb, embedder))
    flt = gw.Filter.of(gw.Principal("acme", "alice", ["eng"]))
    settings = gw.HybridSettings(mode="hybrid", feedback_docs=3)
    with pytest.raises(gw.ConfigError, match="feedback_docs=0"):
        hybrid_search(backend, "rotate", embedder.embed_query("rotate"), flt, 5, settings)
