"""The engine with a dense channel: vectors installed with the snapshot, metadata, failures.

Embedders are real: the hashing embedder, and the OpenAI-compatible client against a
loopback server speaking ``POST /v1/embeddings`` (tests/embed/conftest.py) for failures.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import groundwire as gw
from groundwire import GroundingConfig, GroundingEngine, HybridSettings, RetrievalConfig
from groundwire.index.vector_files import vectors_path

MakeEngine = Any


def _server_module() -> Any:
    """tests/embed/conftest.py's scripted embeddings server, imported by path."""
    name = "embed_server_helpers"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "embed" / "conftest.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def server() -> Any:
    running = _server_module().EmbeddingsServer(dimensions=32)
    yield running
    running.close()


class Counting:
    """A hashing embedder that counts the texts it embeds (documents) and queries."""

    def __init__(self, dimensions: int = 64) -> None:
        self.inner = gw.HashingEmbedder(dimensions)
        self.documents = 0
        self.queries = 0

    model_id = property(lambda self: self.inner.model_id)
    dimensions = property(lambda self: self.inner.dimensions)
    location = property(lambda self: self.inner.location)

    def embed_documents(self, texts: list[str]) -> Any:
        self.documents += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        self.queries += 1
        return self.inner.embed_query(text)


def hybrid_config(sources: Any, embedder: Any, **settings: Any) -> GroundingConfig:
    hybrid = HybridSettings(**{"mode": "hybrid", **settings})
    return GroundingConfig(
        sources=sources, retrieval=RetrievalConfig(hybrid=hybrid), embedder=embedder
    )


def test_a_hybrid_turn_ranks_by_fused_channels_and_reports_them(
    make_engine: MakeEngine, handbook_sources: list[gw.KnowledgeSource]
) -> None:
    embedder = Counting()
    config = hybrid_config(handbook_sources, embedder)
    engine = make_engine(config)
    assert engine.ready()
    kb = engine.knowledge_base
    assert kb is not None
    assert embedder.documents == len(kb)  # embedded once, when the snapshot was installed

    outcome = engine.ground("What is the refund policy?")
    assert outcome.block is not None
    meta = outcome.metadata
    assert meta.selected_ids[0] == "billing.refund-policy"
    channels = meta.channels
    assert channels is not None
    assert (channels["mode"], channels["used"], channels["fusion"]) == (
        "hybrid",
        "hybrid",
        "weighted",
    )
    assert channels["reason"] is None
    assert set(channels["hits"]) == set(meta.selected_ids)
    top = channels["hits"]["billing.refund-policy"]
    assert {"lexical", "dense"} <= set(top)
    assert set(top["dense"]) == {"rank", "score", "normalized", "contribution"}
    json.dumps(channels)  # JSON-ready

    # The same selection as retrieve() with the same vectors: the engine adds no ranking.
    retrieval = outcome.retrieval
    assert retrieval is not None
    vectors = gw.VectorIndex.build(kb, embedder)
    direct = gw.retrieve(
        kb,
        gw.RetrievalRequest("What is the refund policy?"),
        config.retrieval,
        vectors=vectors,
        embedder=embedder,
    )
    assert [(i.entry.id, i.score) for i in retrieval.primary] == [
        (i.entry.id, i.score) for i in direct.primary
    ]
    assert retrieval.primary[0].channels == direct.primary[0].channels


def test_dense_mode_ranks_by_the_dense_channel_alone(
    make_engine: MakeEngine, handbook_sources: list[gw.KnowledgeSource]
) -> None:
    engine = make_engine(hybrid_config(handbook_sources, gw.HashingEmbedder(64), mode="dense"))
    assert engine.ready()
    meta = engine.ground("refund policy for annual plans").metadata
    assert meta.channels is not None
    assert meta.channels["used"] == "dense"
    assert meta.channels["fusion"] is None
    assert meta.channels["hits"]
    assert all(set(parts) == {"dense"} for parts in meta.channels["hits"].values())


def test_lexical_turns_carry_no_channel_report(
    make_engine: MakeEngine, handbook_sources: list[gw.KnowledgeSource]
) -> None:
    engine = make_engine(GroundingConfig(sources=handbook_sources))
    assert engine.ready()
    assert engine.ground("refund policy").metadata.channels is None


def test_dense_modes_need_an_embedder() -> None:
    with pytest.raises(gw.ConfigError, match=r"embedder=None is invalid.*mode is 'hybrid'"):
        GroundingConfig(retrieval=RetrievalConfig(hybrid=HybridSettings(mode="hybrid")))
    with pytest.raises(gw.ConfigError, match="embedder=42 is invalid"):
        GroundingConfig(embedder=42)


def test_a_query_that_cannot_be_embedded_ranks_lexically_with_the_reason(
    make_engine: MakeEngine, handbook_sources: list[gw.KnowledgeSource], server: Any
) -> None:
    embedder = gw.OpenAIEmbedder(
        "m", base_url=server.base_url, allow_remote=True, retry=gw.RetryPolicy(attempts=1)
    )
    engine = make_engine(hybrid_config(handbook_sources, embedder))
    assert engine.ready()  # documents embedded by the server
    server.enqueue(500, {"error": {"message": "model crashed"}})
    outcome = engine.ground("What is the refund policy?")
    assert outcome.block is not None  # fail open: the turn still gets its knowledge
    channels = outcome.metadata.channels
    assert channels is not None
    assert (channels["mode"], channels["used"], channels["fusion"]) == ("hybrid", "lexical", None)
    assert "query embedding failed" in channels["reason"]
    assert "model crashed" in channels["reason"]
    lexical = make_engine(GroundingConfig(sources=handbook_sources))
    assert lexical.ready()
    assert (
        outcome.metadata.selected_ids
        == lexical.ground("What is the refund policy?").metadata.selected_ids
    )
    # The server answers again: the next turn is hybrid.
    assert engine.ground("What is the refund policy?").metadata.channels["used"] == "hybrid"


def test_vectors_that_fail_to_build_install_nothing(
    make_engine: MakeEngine, handbook_sources: list[gw.KnowledgeSource], server: Any
) -> None:
    embedder = gw.OpenAIEmbedder(
        "m", base_url=server.base_url, allow_remote=True, retry=gw.RetryPolicy(attempts=1)
    )
    server.enqueue(401, {"error": {"message": "invalid api key"}})
    engine = make_engine(hybrid_config(handbook_sources, embedder))
    assert engine.ready() is False
    status = engine.status()
    assert status.last_error is not None
    assert status.last_error.startswith("vectors: ")
    assert "invalid api key" in status.last_error
    assert engine.ground("refund policy").metadata.failure_reason == "index-not-ready"
    # The server recovers: a rebuild installs the snapshot with its vectors.
    assert engine.rebuild().ready
    served = engine.ground("refund policy")
    assert served.metadata.channels is not None
    assert served.metadata.channels["used"] == "hybrid"
    # It fails again: the previous snapshot and vectors keep serving.
    server.enqueue(503, {"error": {"message": "overloaded"}})
    status = engine.rebuild()
    assert status.ready
    assert "overloaded" in (status.last_error or "")
    assert engine.ground("refund policy").metadata.selected_ids == served.metadata.selected_ids


def test_a_rebuild_through_the_cache_embeds_only_changed_entries(
    make_engine: MakeEngine,
    tmp_path: Path,
    entry_factory: Any,
    source_factory: Any,
) -> None:
    counting = Counting()
    embedder = gw.CachedEmbedder(counting, gw.EmbeddingCache(tmp_path / "embeddings.sqlite"))
    entries = [entry_factory(f"kb.topic-{n}", body=f"Topic {n} explained.") for n in range(6)]
    engine = make_engine(hybrid_config([source_factory(*entries)], embedder))
    assert engine.ready()
    assert counting.documents == 6
    entries[2] = entry_factory("kb.topic-2", body="Topic two, rewritten.")
    status = engine.rebuild([source_factory(*entries)])
    assert status.ready
    assert status.last_error is None
    assert counting.documents == 7  # one more: the edited entry
    outcome = engine.ground("topic two rewritten")
    assert outcome.metadata.selected_ids[0] == "kb.topic-2"


def test_from_snapshot_serves_the_saved_vectors(
    tmp_path: Path, handbook_sources: list[gw.KnowledgeSource]
) -> None:
    kb = gw.KnowledgeBase.from_sources(handbook_sources)
    path = tmp_path / "handbook.snapshot"
    kb.save(path)
    embedder = Counting()
    gw.VectorIndex.build(kb, embedder).save(vectors_path(path))
    assert embedder.documents == len(kb)
    config = GroundingConfig(  # a deadline no loaded test machine misses (not under test)
        retrieval=RetrievalConfig(hybrid=HybridSettings(mode="hybrid")),
        embedder=embedder,
        timeout_ms=60_000,
    )
    with GroundingEngine.from_snapshot(path, config) as engine:
        assert embedder.documents == len(kb)  # read, not embedded again
        channels = engine.ground("refund policy").metadata.channels
        assert channels is not None
        assert channels["used"] == "hybrid"
    other = Counting(32)  # another model: the saved vectors do not fit, so it embeds
    config = GroundingConfig(
        retrieval=RetrievalConfig(hybrid=HybridSettings(mode="hybrid")),
        embedder=other,
        timeout_ms=60_000,
    )
    with GroundingEngine.from_snapshot(path, config) as engine:
        assert other.documents == len(kb)
        assert engine.ground("refund policy").metadata.channels["used"] == "hybrid"


def test_damaged_saved_vectors_are_refused_and_never_served(
    tmp_path: Path, handbook_sources: list[gw.KnowledgeSource]
) -> None:
    kb = gw.KnowledgeBase.from_sources(handbook_sources)
    path = tmp_path / "handbook.snapshot"
    kb.save(path)
    embedder = gw.HashingEmbedder(64)
    saved = vectors_path(path)
    gw.VectorIndex.build(kb, embedder).save(saved)
    config = GroundingConfig(
        retrieval=RetrievalConfig(hybrid=HybridSettings(mode="hybrid")), embedder=embedder
    )
    with GroundingEngine.from_snapshot(path, config) as engine:
        before = engine.ground("refund policy").metadata.selected_ids
        data = bytearray(saved.read_bytes())
        data[-3] ^= 0xFF  # one flipped byte in the matrix
        saved.write_bytes(bytes(data))
        status = engine.reload()
        assert status.ready
        assert "checksum mismatch" in (status.last_error or "")
        assert engine.ground("refund policy").metadata.selected_ids == before
    with pytest.raises(gw.IndexFormatError, match="checksum mismatch"):
        GroundingEngine.from_snapshot(path, config)


def test_the_dense_channel_sees_only_the_principal_s_entries(
    make_engine: MakeEngine, entry_factory: Any, source_factory: Any
) -> None:
    text = "Rotate the signing keys every quarter."
    entries = [
        entry_factory("acme.keys", title="Acme keys", body=text, tenant="acme"),
        entry_factory("beta.keys", title="Beta keys", body=text, tenant="beta"),
        entry_factory("acme.hr", title="HR keys", body=text, tenant="acme", acl=["group:hr"]),
        entry_factory("shared.keys", title="Shared keys", body=text),
    ]
    engine = make_engine(
        hybrid_config([source_factory(*entries)], gw.HashingEmbedder(64), mode="dense")
    )
    assert engine.ready()
    alice = gw.Principal("acme", "alice", groups=["eng"])
    meta = engine.ground("signing keys quarter rotate", principal=alice).metadata
    assert meta.channels is not None
    assert meta.channels["used"] == "dense"
    assert set(meta.selected_ids) == {"acme.keys", "shared.keys"}
    assert set(meta.channels["hits"]) == set(meta.selected_ids)
    assert meta.channels["channel_sizes"] == {"dense": 2}
    anonymous = engine.ground("signing keys quarter rotate").metadata
    assert anonymous.selected_ids == ("shared.keys",)
    assert np.isfinite(anonymous.channels["hits"]["shared.keys"]["dense"]["score"])


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_vectors_held_in_the_snapshot_s_section_serve_the_engine(
    tmp_path: Path, handbook_sources: list[gw.KnowledgeSource], dtype: str
) -> None:
    kb = gw.KnowledgeBase.from_sources(handbook_sources)
    embedder = Counting()
    vectors = gw.VectorIndex.build(kb, embedder, dtype=dtype)  # type: ignore[arg-type]
    path = tmp_path / "handbook.snapshot"
    kb.with_section(vectors.section()).save(path)
    loaded = gw.KnowledgeBase.load(path)
    held = gw.VectorIndex.from_section(loaded)
    assert held is not None
    assert (held.ids, held.model_id, held.dtype) == (vectors.ids, vectors.model_id, dtype)
    query = embedder.embed_query("refund policy")
    assert held.search(query, 5) == vectors.search(query, 5)
    config = GroundingConfig(
        retrieval=RetrievalConfig(hybrid=HybridSettings(mode="hybrid")), embedder=embedder
    )
    with GroundingEngine.from_snapshot(path, config) as engine:
        assert embedder.documents == len(kb)  # read from the section, not embedded again
        channels = engine.ground("refund policy").metadata.channels
        assert channels is not None
        assert channels["used"] == "hybrid"
    assert gw.VectorIndex.from_section(kb) is None  # no section: None
    other = kb.with_section(gw.VectorIndex(vectors.ids[:-1], vectors.matrix()[:-1], "m").section())
    with pytest.raises(gw.IndexFormatError, match="does not fit its entries"):
        gw.VectorIndex.from_section(other)
