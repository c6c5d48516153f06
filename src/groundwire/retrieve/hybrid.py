"""The dense and hybrid step shared by entry retrieval, document evidence, tools and eval.

:func:`embed_query` embeds the query for the dense channel; if the embedder fails (a
remote server down, a model error) it returns no vector and a reason, and the caller
falls back to its lexical ranking: a retrieval never fails because embeddings are
unavailable at query time (fail open), and the report says so. Building vectors, by
contrast, fails loudly (see :meth:`~groundwire.index.vectors.VectorIndex.build`).

:func:`rank_channels` fuses the channels of a mode (``dense``: the dense list alone;
``hybrid``: lexical, phrase and dense; with dense pseudo-relevance feedback on, a second
pass, see :mod:`groundwire.retrieve.feedback`) and :func:`rerank_hits` applies a reranker
to the fused head; both only ever see eligible entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from groundwire.config import (
    DEFAULT_ALIAS_BOOST,
    DEFAULT_EXACT_BOOST,
    DEFAULT_MAX_QUERY_CHARS,
    HybridSettings,
    RetrievalConfig,
)
from groundwire.embed.base import Embedder, Matrix, check_embedder
from groundwire.errors import ConfigError, QueryError
from groundwire.index.knowledge_base import KnowledgeBase, check_k, check_query
from groundwire.index.lexical import MaskArray, QueryScores
from groundwire.index.vectors import VectorIndex, embedding_text
from groundwire.model import ScoredEntry
from groundwire.retrieve.channels import (
    ChannelList,
    FusedHit,
    Scorer,
    dense_channel,
    dense_hits,
    fuse,
    lexical_channel,
    phrase_channel,
)
from groundwire.retrieve.feedback import feedback_entries, feedback_vector
from groundwire.retrieve.rerank import RerankCandidate, Reranker, RerankReport, apply_reranker

__all__ = [
    "HybridReport",
    "QueryVector",
    "channel_candidates",
    "check_vectors",
    "embed_query",
    "entry_text",
    "rank_channels",
    "rerank_head",
    "scores_at",
    "search_channels",
]

# Knowledge bases whose vector indexes were checked (id order equal), kept alive with them.
_CHECKED: dict[tuple[int, int], tuple[KnowledgeBase, VectorIndex]] = {}
_CHECKED_LIMIT = 16


@dataclass(frozen=True, slots=True)
class HybridReport:
    """How one retrieval ranked: the mode asked and used, fusion, fallback and rerank.

    ``used`` is ``"lexical"`` with ``reason`` set when the dense channel was unavailable
    (the query could not be embedded). ``query_embed_ms`` is the embedding time alone.
    """

    mode: str
    used: str
    fusion: str | None = None
    reason: str | None = None
    query_embed_ms: float = 0.0
    channel_sizes: dict[str, int] = field(default_factory=dict)
    rerank: RerankReport | None = None

    def metadata(self, hits: Sequence[ScoredEntry]) -> dict[str, object]:
        """:meth:`as_dict` plus ``hits``: each hit's channel breakdown, by entry id."""
        return {
            **self.as_dict(),
            "hits": {
                item.entry.id: {
                    name: {
                        "rank": part.rank,
                        "score": part.score,
                        "normalized": part.normalized,
                        "contribution": part.contribution,
                    }
                    for name, part in item.channels.items()
                }
                for item in hits
            },
        }

    def as_dict(self) -> dict[str, object]:
        """JSON-ready values."""
        rerank = self.rerank
        return {
            "mode": self.mode,
            "used": self.used,
            "fusion": self.fusion,
            "reason": self.reason,
            "query_embed_ms": round(self.query_embed_ms, 3),
            "channel_sizes": dict(self.channel_sizes),
            "rerank": None
            if rerank is None
            else {
                "reranker": rerank.reranker,
                "status": rerank.status,
                "candidates": rerank.candidates,
                "duration_ms": rerank.duration_ms,
                "reason": rerank.reason,
            },
        }


@dataclass(frozen=True, slots=True)
class QueryVector:
    """The query's embedding (None when it failed, with the reason) and its time."""

    vector: Matrix | None
    reason: str | None
    milliseconds: float


def check_vectors(kb: KnowledgeBase, vectors: object) -> VectorIndex:
    """``vectors`` if it is a :class:`VectorIndex` of ``kb``'s entries (checked once)."""
    if not isinstance(vectors, VectorIndex):
        raise ConfigError(
            f"vectors={vectors!r} is invalid: dense and hybrid retrieval need a VectorIndex "
            "of the knowledge base, e.g. VectorIndex.build(kb, embedder)"
        )
    key = (id(kb), id(vectors))
    cached = _CHECKED.get(key)
    if cached is None or cached[0] is not kb or cached[1] is not vectors:
        vectors.check_for(kb)
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.clear()
        _CHECKED[key] = (kb, vectors)
    return vectors


def embed_query(
    text: str, embedder: Embedder | None, vectors: VectorIndex, query_vector: object = None
) -> QueryVector:
    """The query vector for ``vectors``: given, or embedded (a failure is a reason)."""
    if query_vector is not None:
        return QueryVector(vectors.check_query(query_vector), None, 0.0)
    if embedder is None:
        raise ConfigError(
            "dense and hybrid retrieval need an embedder for the query (the one that built "
            "the vectors) or a query_vector"
        )
    check_embedder(embedder)
    if embedder.model_id != vectors.model_id:
        raise ConfigError(
            f"the embedder is {embedder.model_id!r} but the vectors were built with "
            f"{vectors.model_id!r}; query with the model that built them"
        )
    started = time.perf_counter()
    try:
        vector = embedder.embed_query(text)
        checked = vectors.check_query(vector)
    except QueryError as exc:
        took = (time.perf_counter() - started) * 1000
        return QueryVector(None, f"query embedding unusable: {exc}", took)
    except Exception as exc:  # fail open: fall back to lexical, say why
        took = (time.perf_counter() - started) * 1000
        detail = " ".join(str(exc).split())[:300]
        return QueryVector(None, f"query embedding failed: {type(exc).__name__}: {detail}", took)
    return QueryVector(checked, None, (time.perf_counter() - started) * 1000)


def rank_channels(
    vectors: VectorIndex,
    query: Matrix,
    mask: MaskArray | None,
    settings: HybridSettings,
    lexical: Sequence[ChannelList],
    limit: int,
    lexical_scorer: Scorer | None = None,
) -> tuple[list[FusedHit], dict[str, int]]:
    """Fuse the channels of ``settings.mode``: dense alone, or ``lexical`` lists + dense.

    ``lexical_scorer`` gives BM25 scores of positions the lexical list did not hold
    (weighted fusion completes the union with it). With ``settings.feedback_docs`` the
    dense channel is searched again with the fed-back query vector and fused again.
    Returns the fused hits (best first, up to ``limit``) and each channel's list size.
    """
    depth = max(settings.channel_depth, limit)
    dense = dense_channel(vectors, query, mask, depth)
    if settings.mode == "dense":  # one channel: its cosine is the score
        return dense_hits(dense)[:limit], {"dense": len(dense)}
    lists = [*lexical, dense]
    scorers: dict[str, Scorer] = {"dense": lambda docs: vectors.scores(query, docs)}
    full = [c for c in lexical if c.name == "lexical" and len(c) >= depth]
    if lexical_scorer is not None and full:  # a shorter list holds every BM25 match
        scorers["lexical"] = lexical_scorer
    hits = fuse(lists, settings, max(limit, settings.feedback_docs), scorers)
    sizes = {channel.name: len(channel) for channel in lists}
    if settings.feedback_docs:  # a second pass with the moved query vector (feedback.py)
        moved = feedback_vector(
            vectors, query, feedback_entries(settings, hits, lists), settings.feedback_weight
        )
        if moved is not None:
            lists = [*lexical, dense_channel(vectors, moved, mask, depth)]
            scorers["dense"] = lambda docs: vectors.scores(moved, docs)
            hits = fuse(lists, settings, limit, scorers)
    return hits[:limit], sizes


def scores_at(scores: QueryScores, docs: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """The BM25 scores of positions ``docs`` (0.0 where they did not match)."""
    return scores.scores_at(docs)


def rerank_head(
    reranker: Reranker,
    query: str,
    docs: Sequence[int],
    scores: Sequence[float],
    settings: HybridSettings,
    *,
    text_of: Callable[[int], str],
    ids_of: Callable[[int], str],
    vectors: VectorIndex | None = None,
    query_vector: Matrix | None = None,
) -> tuple[list[int], list[float], RerankReport]:
    """Rerank the first ``rerank_top_n`` of a ranked list (positions ``docs``, best first).

    Returns the new order (indexes into ``docs``), every item's score in that order
    (reranked ones carry the reranker's score, the rest keep theirs) and the report.
    """
    top = min(settings.rerank_top_n, len(docs))
    candidates = [
        RerankCandidate(
            id=ids_of(docs[n]),
            text=text_of(docs[n]),
            score=float(scores[n]),
            vector=None if vectors is None else vectors.vector(docs[n]),
            model_id=None if vectors is None else vectors.model_id,
        )
        for n in range(top)
    ]
    order, new, report = apply_reranker(
        reranker, query, candidates, query_vector, settings.rerank_timeout_s
    )
    rest = list(range(top, len(docs)))
    if order is None or new is None:
        return [*range(top), *rest], list(scores), report
    return [*order, *rest], [*new, *(float(scores[n]) for n in rest)], report


def channel_candidates(
    kb: KnowledgeBase,
    query: str,
    terms: Sequence[str],
    lexical_ids: Sequence[int],
    mask: MaskArray,
    config: RetrievalConfig,
    settings: HybridSettings,
    *,
    lexical: Callable[[], list[ScoredEntry]],
    vectors: VectorIndex | None,
    embedder: Embedder | None,
    query_vector: object,
) -> tuple[list[ScoredEntry], HybridReport]:
    """Entry candidates by channels (``settings.mode``), then reranked (if a reranker is set).

    ``lexical()`` gives the plain lexical candidates: the ranking of ``"lexical"`` mode and
    the fallback when the query cannot be embedded.
    """
    mode = settings.mode
    used, reason, embed_ms = "lexical", None, 0.0
    sizes: dict[str, int] = {}
    index: VectorIndex | None = None
    vector: Matrix | None = None
    if mode == "lexical":
        candidates = lexical()
    else:
        index = check_vectors(kb, vectors)
        embedded = embed_query(query, embedder, index, query_vector)
        vector, reason, embed_ms = embedded.vector, embedded.reason, embedded.milliseconds
        if vector is None:
            candidates = lexical()
        else:
            used = mode
            depth = max(settings.channel_depth, config.candidate_limit)
            lists = [] if mode == "dense" else [
                lexical_channel(kb, lexical_ids, mask, depth),
                phrase_channel(
                    kb, terms, lexical_ids, mask, config.exact_boost, config.alias_boost
                ),
            ]  # fmt: skip
            hits, sizes = rank_channels(
                index, vector, mask, settings, lists, config.candidate_limit
            )
            named = kb.phrase_matches(terms) if sizes.get("phrase") else (set(), set())
            candidates = [_scored(kb, hit, lexical_ids, config, named) for hit in hits]
    rerank = None
    if settings.reranker is not None and candidates:
        positions = [kb.position(item.entry.id) for item in candidates]
        order, scores, rerank = rerank_head(
            settings.reranker,
            query,
            [p for p in positions if p is not None],
            [item.score for item in candidates],
            settings,
            text_of=entry_text(kb),
            ids_of=lambda doc: kb.entry(doc).id,
            vectors=index,
            query_vector=vector,
        )
        candidates = [
            replace(candidates[n], score=score) for n, score in zip(order, scores, strict=True)
        ]
    fusion = settings.fusion if used != "lexical" and mode == "hybrid" else None
    report = HybridReport(mode, used, fusion, reason, embed_ms, sizes, rerank)
    return candidates, report


def _scored(
    kb: KnowledgeBase,
    hit: FusedHit,
    lexical_ids: Sequence[int],
    config: RetrievalConfig,
    named: tuple[set[int], set[int]],
) -> ScoredEntry:
    """A fused hit as a turn candidate: fused score, BM25 breakdown, channel parts."""
    lexical_part = hit.channels.get("lexical")
    in_phrase = "phrase" in hit.channels
    exact = in_phrase and config.exact_boost > 0 and hit.doc in named[0]
    alias = in_phrase and config.alias_boost > 0 and hit.doc in named[1]
    return ScoredEntry(
        entry=kb.entry(hit.doc),
        score=hit.score,
        lexical_score=lexical_part.score if lexical_part is not None else 0.0,
        exact=exact,
        alias=alias,
        breakdown=kb.breakdown(
            lexical_ids,
            hit.doc,
            config.exact_boost if exact else 0.0,
            config.alias_boost if alias else 0.0,
        ),
        channels=hit.channels,
    )


def search_channels(
    kb: KnowledgeBase,
    query: str,
    k: int,
    settings: HybridSettings,
    *,
    vectors: VectorIndex | None = None,
    embedder: Embedder | None = None,
    query_vector: object = None,
    mask: MaskArray | None = None,
    exact_boost: float = DEFAULT_EXACT_BOOST,
    alias_boost: float = DEFAULT_ALIAS_BOOST,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
) -> tuple[list[FusedHit], HybridReport]:
    """The ``k`` best entries for ``query`` in ``settings.mode``, with the report.

    ``lexical`` is :meth:`KnowledgeBase.search`'s ranking (BM25 plus phrase boosts, no
    per-channel parts); ``dense`` and ``hybrid`` rank by channels as retrieval does.
    ``mask`` (default: :meth:`KnowledgeBase.eligibility`) applies before every top-k.
    Then the reranker of ``settings``, if any, reorders the head.
    """
    check_query(query, max_query_chars)
    check_k("k", k)
    allowed = kb.eligibility() if mask is None else mask
    analyzer = kb.analyzer
    terms = analyzer.tokens(query)
    lexical_ids = kb.query_ids([terms])
    used, reason, embed_ms = "lexical", None, 0.0
    sizes: dict[str, int] = {}
    index: VectorIndex | None = None
    vector: Matrix | None = None
    hits: list[FusedHit] | None = None
    if settings.mode != "lexical":
        index = check_vectors(kb, vectors)
        embedded = embed_query(query, embedder, index, query_vector)
        vector, reason, embed_ms = embedded.vector, embedded.reason, embedded.milliseconds
        if vector is not None:
            used = settings.mode
            depth = max(settings.channel_depth, k)
            lists = [] if settings.mode == "dense" else [
                lexical_channel(kb, lexical_ids, allowed, depth),
                phrase_channel(kb, terms, lexical_ids, allowed, exact_boost, alias_boost),
            ]  # fmt: skip
            hits, sizes = rank_channels(
                index, vector, allowed, settings, lists, k, _bm25_scorer(kb, lexical_ids)
            )
    if hits is None:
        ranking = kb.rank(
            lexical_ids,
            terms,
            lexical_k=k,
            limit=k,
            mask=allowed,
            exact_boost=exact_boost,
            alias_boost=alias_boost,
        )
        hits = [
            FusedHit(doc, score, {})
            for doc, score in zip(ranking.docs, ranking.scores, strict=True)
        ]
    rerank = None
    if settings.reranker is not None and hits:
        order, scores, rerank = rerank_head(
            settings.reranker,
            query,
            [hit.doc for hit in hits],
            [hit.score for hit in hits],
            settings,
            text_of=entry_text(kb),
            ids_of=lambda doc: kb.entry(doc).id,
            vectors=index,
            query_vector=vector,
        )
        hits = [hits[n].with_score(score) for n, score in zip(order, scores, strict=True)]
    fusion = settings.fusion if used == "hybrid" else None
    return hits, HybridReport(settings.mode, used, fusion, reason, embed_ms, sizes, rerank)


def _bm25_scorer(kb: KnowledgeBase, lexical_ids: Sequence[int]) -> Scorer:
    """BM25 of the query's term ids for given positions (one kernel call)."""
    return lambda docs: kb.bm25.scores_of_ids(lexical_ids, docs)


def entry_text(kb: KnowledgeBase) -> Callable[[int], str]:
    """Position → the text a reranker reads for it (what was embedded)."""
    return lambda doc: embedding_text(kb.entry(doc))
