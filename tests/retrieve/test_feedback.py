"""Dense pseudo-relevance feedback (retrieve/feedback.py): eligibility, determinism, math."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import (
    ConfigError,
    HashingEmbedder,
    HybridSettings,
    KnowledgeBase,
    RetrievalConfig,
    RetrievalRequest,
    VectorIndex,
    retrieve,
    search_channels,
)
from groundwire.retrieve import feedback, hybrid

WORDS = ["key", "rotate", "webhook", "retry", "billing", "refund", "invoice", "login", "sso"]
EMBEDDER = HashingEmbedder(64)


def _corpus(seed: int, n: int = 40) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "id": f"doc-{i:03d}",
            "title": " ".join(rng.choice(WORDS, 2)),
            "text": " ".join(rng.choice(WORDS, int(rng.integers(3, 12)))),
        }
        for i in range(n)
    ]


def _feedback(source: str, count: int = 3, beta: float = 0.5) -> HybridSettings:
    return HybridSettings(
        mode="hybrid",
        feedback_docs=count,
        feedback_weight=beta,
        feedback_source=source,  # type: ignore[arg-type]
    )


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    share=st.floats(0.0, 1.0),
    k=st.integers(1, 15),
    source=st.sampled_from(["fused", "dense", "lexical"]),
    count=st.integers(1, 12),
)
def test_only_eligible_entries_feed_back_appear_or_take_a_slot(
    seed: int, share: float, k: int, source: str, count: int
) -> None:
    kb = KnowledgeBase.from_documents(_corpus(seed))
    vectors = VectorIndex.build(kb, EMBEDDER)
    rng = np.random.default_rng(seed + 1)
    mask = rng.random(len(kb)) < share
    query = " ".join(rng.choice(WORDS, 3))
    fed: list[list[int]] = []
    original = feedback.feedback_vector

    def spy(index: VectorIndex, vector: Any, docs: Any, weight: float) -> Any:
        fed.append(list(docs))
        return original(index, vector, docs, weight)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hybrid, "feedback_vector", spy)
        hits, report = search_channels(
            kb, query, k, _feedback(source, count), vectors=vectors, embedder=EMBEDDER, mask=mask
        )
    assert report.used == "hybrid"
    assert all(mask[doc] for docs in fed for doc in docs)  # nothing denied is fed back
    assert all(mask[hit.doc] for hit in hits)
    # Every eligible entry is in the dense list (depth 100 > 40 entries), so the fused list
    # holds min(k, eligible) hits: a denied entry takes no slot.
    assert len(hits) == min(k, int(mask.sum()))
    assert len({hit.doc for hit in hits}) == len(hits)


def test_feedback_is_deterministic_and_moves_the_dense_channel() -> None:
    kb = KnowledgeBase.from_documents(_corpus(7))
    vectors = VectorIndex.build(kb, EMBEDDER)
    query = "rotate webhook key"
    on = _feedback("fused", 3, 1.0)
    first, _ = search_channels(kb, query, 10, on, vectors=vectors, embedder=EMBEDDER)
    again, _ = search_channels(kb, query, 10, on, vectors=vectors, embedder=EMBEDDER)
    assert first == again
    plain = HybridSettings(mode="hybrid")
    base, _ = search_channels(kb, query, 10, plain, vectors=vectors, embedder=EMBEDDER)
    moved = feedback.feedback_vector(
        vectors, EMBEDDER.embed_query(query), [hit.doc for hit in base[:3]], 1.0
    )
    assert moved is not None
    for hit in first:  # the dense part is the cosine with the fed-back vector
        expected = float(vectors.scores(moved, np.array([hit.doc]))[0])
        assert hit.channels["dense"].score == pytest.approx(expected, abs=1e-6)


def test_feedback_off_leaves_the_ranking_unchanged() -> None:
    kb = KnowledgeBase.from_documents(_corpus(3))
    vectors = VectorIndex.build(kb, EMBEDDER)
    plain = HybridSettings(mode="hybrid")
    off = _feedback("fused", 0)
    for query in ("billing refund", "sso login token", "invoice"):
        a, _ = search_channels(kb, query, 20, plain, vectors=vectors, embedder=EMBEDDER)
        b, _ = search_channels(kb, query, 20, off, vectors=vectors, embedder=EMBEDDER)
        assert a == b


def test_feedback_vector_is_rocchio_at_unit_length() -> None:
    kb = KnowledgeBase.from_documents(_corpus(5))
    vectors = VectorIndex.build(kb, EMBEDDER)
    query = EMBEDDER.embed_query("retry webhook")
    moved = feedback.feedback_vector(vectors, query, [4, 1, 9], 0.5)
    assert moved is not None
    assert moved.dtype == np.float32
    centroid = np.mean([vectors.vector(d) for d in (4, 1, 9)], axis=0)
    expected = query + 0.5 * centroid
    np.testing.assert_allclose(moved, expected / np.linalg.norm(expected), atol=1e-6)
    assert feedback.feedback_vector(vectors, query, [], 0.5) is None
    assert feedback.feedback_vector(vectors, query, [1], 0.0) is None
    assert feedback.feedback_vector(vectors, -vectors.vector(2), [2], 1.0) is None  # cancels


def test_retrieve_with_feedback_ranks_by_the_second_pass(handbook_path: Any) -> None:
    import groundwire as gw

    kb = gw.KnowledgeBase.from_sources(gw.load_sources(handbook_path))
    vectors = VectorIndex.build(kb, EMBEDDER)
    request = RetrievalRequest("rotate an api key")
    config = RetrievalConfig(hybrid=_feedback("fused", 3, 1.0))
    first = retrieve(kb, request, config, vectors=vectors, embedder=EMBEDDER)
    again = retrieve(kb, request, config, vectors=vectors, embedder=EMBEDDER)
    assert first.channels is not None
    assert first.channels.used == "hybrid"
    assert [i.entry.id for i in first.primary] == [i.entry.id for i in again.primary]
    top = first.primary[0]
    assert top.entry.id == "security.api-key-rotation"
    assert top.score == pytest.approx(sum(c.contribution for c in top.channels.values()))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("feedback_docs", -1),
        ("feedback_docs", 1.5),
        ("feedback_docs", True),
        ("feedback_weight", -0.1),
        ("feedback_weight", float("nan")),
        ("feedback_source", "phrase"),
    ],
)
def test_bad_feedback_settings_are_config_errors(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=option):
        HybridSettings(mode="hybrid", **{option: value})  # type: ignore[arg-type]


def test_evidence_with_feedback_never_feeds_back_a_denied_source() -> None:
    from groundwire import EvidenceSettings, chunk_settings
    from groundwire.retrieve.evidence import select_evidence

    docs = [
        {**d, "metadata": {"source_id": f"src{n % 5}", "start": 0, "end": len(d["text"])}}
        for n, d in enumerate(_corpus(9))
    ]
    kb = KnowledgeBase.from_documents(docs, chunk_settings())
    vectors = VectorIndex.build(kb, EMBEDDER)
    denied = {"src1", "src4"}
    fed: list[int] = []
    original = feedback.feedback_vector

    def spy(index: VectorIndex, vector: Any, positions: Any, weight: float) -> Any:
        fed.extend(positions)
        return original(index, vector, positions, weight)

    settings = EvidenceSettings(hybrid=_feedback("fused", 10, 1.0), limit=10, candidate_limit=40)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hybrid, "feedback_vector", spy)
        selection = select_evidence(
            kb,
            "rotate webhook key",
            settings,
            principal="alice",
            authorize=lambda who, source: source.id not in denied,
            vectors=vectors,
            embedder=EMBEDDER,
        )
    assert selection.channels is not None
    assert selection.channels.used == "hybrid"
    assert fed
    assert selection.excerpts
    assert not {e.source_id for e in selection.excerpts} & denied
    assert not {kb.entry(p).metadata.get("source_id") for p in fed} & denied
