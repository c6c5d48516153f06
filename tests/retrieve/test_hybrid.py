"""Dense and hybrid retrieval: channels, fusion, rerank, fallback, authorization before top-k."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import (
    CallableReranker,
    ConfigError,
    EmbeddingReranker,
    EvidenceSettings,
    HashingEmbedder,
    HybridSettings,
    KnowledgeBase,
    NoopReranker,
    RetrievalConfig,
    RetrievalRequest,
    VectorIndex,
    chunk_settings,
    retrieve,
    search_channels,
)
from groundwire.embed.base import Matrix
from groundwire.retrieve import channels
from groundwire.retrieve.evidence import select_evidence

WORDS = [
    "key",
    "rotate",
    "webhook",
    "retry",
    "billing",
    "refund",
    "invoice",
    "login",
    "sso",
    "token",
    "audit",
    "export",
]
EMBEDDER = HashingEmbedder(64)


def _corpus(seed: int, n: int = 40) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS, int(rng.integers(3, 12))))
        docs.append(
            {
                "id": f"src{i % 7}/doc-{i:03d}",
                "title": " ".join(rng.choice(WORDS, 2)),
                "text": text,
                "metadata": {"source_id": f"src{i % 7}", "start": 0, "end": len(text)},
            }
        )
    return docs


class Failing(HashingEmbedder):
    """Embeds documents; every query fails, as an unreachable server would."""

    def embed_query(self, text: str) -> Matrix:
        raise ConnectionError("embeddings server unreachable")


def _all_rankings(
    kb: KnowledgeBase, vectors: VectorIndex, query: str, mask: np.ndarray, k: int
) -> dict[str, list[int]]:
    out = {}
    for name, hs in {
        "lexical": HybridSettings(),
        "dense": HybridSettings(mode="dense"),
        "hybrid": HybridSettings(mode="hybrid"),
        "rrf": HybridSettings(mode="hybrid", fusion="rrf"),
        "reranked": HybridSettings(mode="hybrid", reranker=EmbeddingReranker(EMBEDDER)),
    }.items():
        hits, _ = search_channels(kb, query, k, hs, vectors=vectors, embedder=EMBEDDER, mask=mask)
        out[name] = [hit.doc for hit in hits]
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), share=st.floats(0.0, 1.0), k=st.integers(1, 15))
def test_denied_entries_never_appear_nor_take_a_slot(seed: int, share: float, k: int) -> None:
    kb = KnowledgeBase.from_documents(_corpus(seed))
    vectors = VectorIndex.build(kb, EMBEDDER)
    rng = np.random.default_rng(seed + 1)
    mask = rng.random(len(kb)) < share
    allowed_kb = KnowledgeBase.from_documents(
        [doc for doc in _corpus(seed) if mask[kb.position(doc["id"])]]  # type: ignore[index]
    )
    query = " ".join(rng.choice(WORDS, 3))
    full = _all_rankings(kb, vectors, query, mask, k)
    for name, docs in full.items():
        assert all(mask[d] for d in docs), name
    with mock.patch.object(channels._fusion, "available", return_value=False):  # numpy fusion
        assert _all_rankings(kb, vectors, query, mask, k) == full
    # Dense results over the full index with the mask equal those over only the allowed
    # entries (a denied entry takes no slot): same ids, same order.
    if allowed_kb_len := len(allowed_kb):
        small = VectorIndex.build(allowed_kb, EMBEDDER)
        hits, _ = search_channels(
            allowed_kb, query, k, HybridSettings(mode="dense"), vectors=small, embedder=EMBEDDER
        )
        assert [allowed_kb.entry(h.doc).id for h in hits] == [kb.entry(d).id for d in full["dense"]]
        assert len(full["dense"]) == min(k, allowed_kb_len)


def test_retrieve_lexical_default_is_unchanged(handbook_path: Any) -> None:
    import groundwire as gw

    kb = gw.KnowledgeBase.from_sources(gw.load_sources(handbook_path))
    request = RetrievalRequest("how do I rotate an API key")
    plain = retrieve(kb, request, RetrievalConfig())
    assert plain.channels is None
    assert all(not item.channels for item in plain.primary)
    vectors = VectorIndex.build(kb, EMBEDDER)
    again = retrieve(kb, request, RetrievalConfig(), vectors=vectors, embedder=EMBEDDER)
    assert [i.entry.id for i in again.primary] == [i.entry.id for i in plain.primary]


def test_hybrid_retrieval_fuses_with_a_per_channel_breakdown(handbook_path: Any) -> None:
    import groundwire as gw

    kb = gw.KnowledgeBase.from_sources(gw.load_sources(handbook_path))
    vectors = VectorIndex.build(kb, EMBEDDER)
    config = RetrievalConfig(hybrid=HybridSettings(mode="hybrid"))
    selection = retrieve(
        kb, RetrievalRequest("rotate an api key"), config, vectors=vectors, embedder=EMBEDDER
    )
    assert selection.channels is not None
    assert selection.channels.used == "hybrid"
    assert selection.channels.fusion == "weighted"
    top = selection.primary[0]
    assert top.entry.id == "security.api-key-rotation"
    assert set(top.channels) >= {"lexical", "dense"}
    assert top.score == pytest.approx(sum(c.contribution for c in top.channels.values()))
    scores = [item.score for item in selection.primary]
    assert scores == sorted(scores, reverse=True)


def test_query_embedding_failure_falls_back_to_lexical_with_the_reason(handbook_path: Any) -> None:
    import groundwire as gw

    kb = gw.KnowledgeBase.from_sources(gw.load_sources(handbook_path))
    failing = Failing(64)
    vectors = VectorIndex.build(kb, failing)
    request = RetrievalRequest("rotate an api key")
    config = RetrievalConfig(hybrid=HybridSettings(mode="hybrid"))
    selection = retrieve(kb, request, config, vectors=vectors, embedder=failing)
    plain = retrieve(kb, request, RetrievalConfig())
    assert selection.channels is not None
    assert selection.channels.used == "lexical"
    assert "unreachable" in (selection.channels.reason or "")
    assert [i.entry.id for i in selection.primary] == [i.entry.id for i in plain.primary]


def test_dense_without_vectors_or_with_another_model_is_a_config_error() -> None:
    kb = KnowledgeBase.from_documents(_corpus(1))
    with pytest.raises(ConfigError, match="VectorIndex"):
        search_channels(kb, "key", 5, HybridSettings(mode="dense"))
    vectors = VectorIndex.build(kb, EMBEDDER)
    with pytest.raises(ConfigError, match="built with"):
        search_channels(
            kb,
            "key",
            5,
            HybridSettings(mode="dense"),
            vectors=vectors,
            embedder=HashingEmbedder(32),
        )


def _order(kb: KnowledgeBase, reranker: Any, timeout: float = 2.0) -> tuple[list[str], Any]:
    vectors = VectorIndex.build(kb, EMBEDDER)
    hs = HybridSettings(mode="hybrid", reranker=reranker, rerank_top_n=5, rerank_timeout_s=timeout)
    hits, report = search_channels(
        kb, "rotate key token", 10, hs, vectors=vectors, embedder=EMBEDDER
    )
    return [kb.entry(h.doc).id for h in hits], report


def test_rerankers_reorder_only_the_head() -> None:
    kb = KnowledgeBase.from_documents(_corpus(5))
    fused, _ = _order(kb, None)
    same, report = _order(kb, NoopReranker())
    assert same == fused
    assert report.rerank.status == "applied"
    reverse = CallableReranker(lambda q, texts: list(range(len(texts))), name="reverse")
    flipped, report = _order(kb, reverse)
    assert flipped[:5] == fused[:5][::-1]
    assert flipped[5:] == fused[5:]
    assert report.rerank.reranker == "reverse"


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (lambda q, texts: 1 / 0, "ZeroDivisionError"),
        (lambda q, texts: [1.0], "returned 1 scores for 5"),
        (lambda q, texts: [float("nan")] * len(texts), "NaN"),
    ],
)
def test_a_failing_reranker_keeps_the_fused_order(
    fn: Callable[..., Sequence[float]], reason: str
) -> None:
    kb = KnowledgeBase.from_documents(_corpus(5))
    fused, _ = _order(kb, None)
    kept, report = _order(kb, CallableReranker(fn))
    assert kept == fused
    assert report.rerank.status == "error"
    assert reason in report.rerank.reason


def test_a_slow_reranker_times_out_and_keeps_the_fused_order() -> None:
    kb = KnowledgeBase.from_documents(_corpus(5))
    gate = threading.Event()

    def slow(query: str, texts: list[str]) -> list[float]:
        gate.wait(10)
        return [0.0] * len(texts)

    fused, _ = _order(kb, None)
    try:
        kept, report = _order(kb, CallableReranker(slow), timeout=0.05)
    finally:
        gate.set()
    assert kept == fused
    assert report.rerank.status == "timeout"
    assert "0.05 s" in report.rerank.reason


def test_rrf_and_weighted_fusion_scores() -> None:
    from groundwire.retrieve.channels import ChannelList, fuse

    lexical = ChannelList("lexical", (1, 2, 3), (9.0, 5.0, 1.0))
    dense = ChannelList("dense", (3, 4), (0.9, 0.1))
    rrf = fuse([lexical, dense], HybridSettings(fusion="rrf", rrf_k=60))
    scores = {hit.doc: hit.score for hit in rrf}
    assert scores[3] == pytest.approx(0.5 / 63 + 0.5 / 61)
    weighted = fuse(
        [lexical, dense],
        HybridSettings(fusion="weighted"),
        scorers={
            "dense": lambda docs: [0.5 for _ in docs],
            "lexical": lambda docs: [0.0 for _ in docs],
        },
    )
    by_doc = {hit.doc: hit for hit in weighted}
    assert by_doc[1].channels["lexical"].normalized == 1.0
    assert by_doc[1].channels["dense"].rank == 0  # scored for fusion, outside the dense list
    assert by_doc[3].score == pytest.approx(0.5 * (1 / 9) + 0.5 * 1.0)
    assert [hit.doc for hit in weighted] == sorted(by_doc, key=lambda d: (-by_doc[d].score, d))


def test_evidence_hybrid_respects_denied_sources() -> None:
    docs = _corpus(9)
    kb = KnowledgeBase.from_documents(docs, chunk_settings())
    vectors = VectorIndex.build(kb, EMBEDDER)
    denied = {"src1", "src4"}
    for mode in ("dense", "hybrid"):
        settings = EvidenceSettings(hybrid=HybridSettings(mode=mode), limit=10, candidate_limit=40)  # type: ignore[arg-type]
        selection = select_evidence(
            kb,
            "rotate webhook token",
            settings,
            principal="alice",
            authorize=lambda who, source: source.id not in denied,
            vectors=vectors,
            embedder=EMBEDDER,
        )
        assert selection.channels is not None
        assert selection.channels.used == mode
        assert selection.excerpts
        assert not {e.source_id for e in selection.excerpts} & denied


def test_theoretical_min_max_normalizes_from_each_channel_s_floor() -> None:
    from groundwire.retrieve.channels import ChannelList, fuse

    lexical = ChannelList.of("lexical", (1, 2), (8.0, 2.0))
    dense = ChannelList.of("dense", (2, 3), (0.5, -0.5))
    settings = HybridSettings(fusion="weighted", normalization="tmm", dense_weight=0.5)
    hits = {hit.doc: hit for hit in fuse([lexical, dense], settings)}
    assert hits[1].channels["lexical"].normalized == 1.0
    assert hits[2].channels["lexical"].normalized == 0.25  # 2 / 8: BM25's floor is 0
    assert hits[2].channels["dense"].normalized == 1.0
    assert hits[3].channels["dense"].normalized == pytest.approx(1 / 3)  # from -1, not -0.5
    assert hits[2].score == pytest.approx(0.5 * 0.25 + 0.5 * 1.0)
    with pytest.raises(ConfigError, match="normalization='z' is invalid"):
        HybridSettings(normalization="z")  # type: ignore[arg-type]


def test_zscore_and_dbsf_scale_by_each_channel_s_own_list() -> None:
    from groundwire.retrieve.channels import ChannelList, fuse

    lexical = ChannelList.of("lexical", (1, 2, 3), (9.0, 6.0, 3.0))  # mean 6, sd sqrt(6)
    dense = ChannelList.of("dense", (4, 5), (0.8, 0.6))  # mean 0.7, sd 0.1
    phrase = ChannelList.of("phrase", (5,), (2.0,))
    scorers = {"lexical": lambda docs: [1.5] * len(docs), "dense": lambda docs: [0.1] * len(docs)}
    sd = 6.0**0.5
    z = {
        hit.doc: hit
        for hit in fuse(
            [lexical, phrase, dense], HybridSettings(normalization="zscore"), scorers=scorers
        )
    }
    assert z[1].channels["lexical"].normalized == pytest.approx(3.0 / sd)
    assert z[4].channels["lexical"].normalized == pytest.approx(-4.5 / sd)  # completed: BM25 1.5
    assert z[4].channels["dense"].normalized == pytest.approx(1.0)
    assert z[1].channels["dense"].normalized == pytest.approx(
        -6.0
    )  # cosine 0.1, from the list's stats
    assert z[5].channels["phrase"].normalized == 1.0  # a flag channel: scaled from 0
    assert z[5].score == pytest.approx(0.5 * (-4.5 / sd) + 0.5 * -1.0 + 1.0)
    d = {
        hit.doc: hit
        for hit in fuse([lexical, dense], HybridSettings(normalization="dbsf"), scorers=scorers)
    }
    assert d[1].channels["lexical"].normalized == pytest.approx((9.0 - (6.0 - 3 * sd)) / (6 * sd))
    assert d[4].channels["lexical"].normalized == pytest.approx((1.5 - (6.0 - 3 * sd)) / (6 * sd))
    assert d[4].channels["dense"].normalized == pytest.approx((0.8 - 0.4) / 0.6)
    assert d[1].channels["dense"].normalized == 0.0  # 0.1 is below mean - 3 sd: clipped
    listed = {
        hit.doc: hit
        for hit in fuse([lexical, dense], HybridSettings(normalization="list"), scorers=scorers)
    }
    assert listed[1].channels["lexical"].normalized == 1.0
    assert listed[2].channels["lexical"].normalized == 0.5
    assert listed[4].channels["lexical"].normalized == 0.0  # not listed: 0 (1.5 < list min 3)
    assert listed[5].channels["dense"].normalized == 0.0  # the list's last
    assert listed[5].score == listed[3].score == 0.0
    single = ChannelList.of("dense", (4,), (0.3,))  # no spread: its score and above are 1
    flat = {
        hit.doc: hit
        for hit in fuse([lexical, single], HybridSettings(normalization="dbsf"), scorers=scorers)
    }
    assert flat[4].channels["dense"].normalized == 1.0
    assert flat[1].channels["dense"].normalized == 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 50, allow_nan=False), min_size=1, max_size=12),
    st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=12),
    st.sampled_from(["minmax", "tmm", "zscore", "dbsf", "list"]),
    st.floats(0, 1),
)
def test_every_normalization_fuses_to_finite_deterministic_scores(
    bm25: list[float], cosines: list[float], normalization: str, weight: float
) -> None:
    from groundwire.retrieve.channels import ChannelList, fuse

    lexical = ChannelList.of("lexical", range(len(bm25)), sorted(bm25, reverse=True))
    dense = ChannelList.of("dense", range(5, 5 + len(cosines)), sorted(cosines, reverse=True))
    hybrid = HybridSettings(normalization=normalization, dense_weight=weight)  # type: ignore[arg-type]
    scorers = {"lexical": lambda docs: [0.0] * len(docs), "dense": lambda docs: [-1.0] * len(docs)}
    first = fuse([lexical, dense], hybrid, scorers=scorers)
    again = fuse([lexical, dense], hybrid, scorers=scorers)
    assert [(h.doc, h.score) for h in first] == [(h.doc, h.score) for h in again]
    assert (
        len({h.doc for h in first})
        == len(first)
        == len({*lexical.docs.tolist(), *dense.docs.tolist()})
    )
    assert all(np.isfinite(h.score) for h in first)
    keys = [(-h.score, h.doc) for h in first]
    assert keys == sorted(keys)  # best first, ties on position
    if normalization != "zscore":
        for hit in first:
            assert all(-1e-12 <= part.normalized <= 1 + 1e-12 for part in hit.channels.values())
