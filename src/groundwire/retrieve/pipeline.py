"""One turn's selection, in a fixed order of stages (A–J):

A. normalize the query into terms;
B. look every contiguous query n-gram up in the exact (id/title) and alias maps;
C. build the lexical query from the query plus recent turns (each capped);
D. compute the eligibility set (status, blocked domains, integrations) *before* ranking;
E. BM25 over eligible entries only, ``2 × candidate_limit`` deep;
F. union with eligible exact and alias hits;
G. score = BM25 + exact boost + alias boost, sorted by score then id;
H. cap at ``candidate_limit``; the first ``result_limit`` are the primary selection;
I. expand primary entries along related/parent links (re-authorized, no duplicates);
J. classify confidence.

With ``mode="dense"`` or ``"hybrid"`` (:class:`~groundwire.config.HybridSettings`, per
call or in ``RetrievalConfig.hybrid``) stages E–G rank by channels instead: the BM25,
phrase and dense lists of eligible entries, fused (:mod:`groundwire.retrieve.hybrid`),
then optionally reranked; the query alone (not the recent turns) is embedded. The
default, ``"lexical"``, is exactly the ranking above.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from groundwire.config import HybridSettings, RetrievalConfig
from groundwire.embed.base import Embedder
from groundwire.errors import QueryError
from groundwire.index.knowledge_base import KnowledgeBase, check_query
from groundwire.index.lexical import MaskArray
from groundwire.index.vectors import VectorIndex
from groundwire.model import Confidence, KnowledgeEntry, Scope, ScoredEntry, Turn
from groundwire.retrieve.confidence import classify_confidence
from groundwire.retrieve.hybrid import HybridReport, channel_candidates

__all__ = ["RetrievalRequest", "Selection", "lexical_segments", "lexical_text", "retrieve"]


@dataclass(frozen=True, slots=True)
class RetrievalRequest:
    """What one turn asks for: the query, earlier turns and the request's scope."""

    query: str
    recent_turns: tuple[Turn, ...] = ()
    scope: Scope = field(default_factory=Scope)


@dataclass(frozen=True, slots=True)
class Selection:
    """The primary entries (ranked), the relationship-expanded entries and confidence.

    ``channels`` reports dense/hybrid ranking and reranking (None for plain lexical).
    """

    primary: tuple[ScoredEntry, ...]
    expanded: tuple[KnowledgeEntry, ...]
    candidate_count: int
    confidence: Confidence
    channels: HybridReport | None = None


def lexical_segments(query: str, turns: Sequence[Turn], config: RetrievalConfig) -> list[str]:
    """What BM25 searches: the query plus the latest turns, each capped in length."""
    recent = list(turns)[-config.recent_turns :] if config.recent_turns else []
    parts = [query, *(turn.text[: config.turn_chars] for turn in recent)]
    return [part for part in parts if part]


def lexical_text(query: str, turns: Sequence[Turn], config: RetrievalConfig) -> str:
    """The lexical segments as one text (for display and diagnostics)."""
    return "\n".join(lexical_segments(query, turns, config))


def _check_request(request: RetrievalRequest, config: RetrievalConfig) -> None:
    check_query(request.query, config.max_query_chars)
    for n, turn in enumerate(request.recent_turns):
        if not isinstance(turn, Turn) or not isinstance(turn.text, str):
            raise QueryError(
                f"recent_turns[{n}] must be a Turn(role, text) with text, got {turn!r}"
            )


def retrieve(
    kb: KnowledgeBase,
    request: RetrievalRequest,
    config: RetrievalConfig,
    blocked_domains: Iterable[str] = (),
    allow: Callable[[KnowledgeEntry], bool] | None = None,
    *,
    vectors: VectorIndex | None = None,
    embedder: Embedder | None = None,
    query_vector: object = None,
    hybrid: HybridSettings | None = None,
) -> Selection:
    """Select, rank and expand the entries one turn needs (stages A–J above).

    ``hybrid`` overrides ``config.hybrid`` for this call; dense and hybrid modes need
    ``vectors`` (a :class:`VectorIndex` of ``kb``) and the ``embedder`` that built them
    (or a ``query_vector``).
    """
    _check_request(request, config)
    settings = config.hybrid if hybrid is None else hybrid
    analyzer = kb.analyzer
    query_terms = analyzer.tokens(request.query)  # A
    segments = lexical_segments(request.query, request.recent_turns, config)  # C
    lexical_ids = kb.query_ids([analyzer.tokens(segment) for segment in segments])
    mask = kb.eligibility(request.scope, blocked_domains, allow)  # D
    report: HybridReport | None = None
    if settings.mode != "lexical" or settings.reranker is not None:  # E-G by channels
        candidates, report = channel_candidates(
            kb,
            request.query,
            query_terms,
            lexical_ids,
            mask,
            config,
            settings,
            lexical=lambda: _lexical_candidates(kb, query_terms, lexical_ids, mask, config),
            vectors=vectors,
            embedder=embedder,
            query_vector=query_vector,
        )
    else:
        candidates = _lexical_candidates(kb, query_terms, lexical_ids, mask, config)
    primary = tuple(candidates[: config.result_limit])
    expanded = _expand(kb, primary, mask, config.relation_limit)  # I
    confidence = classify_confidence(candidates)  # J
    return Selection(primary, expanded, len(candidates), confidence, report)


def _lexical_candidates(
    kb: KnowledgeBase,
    query_terms: Sequence[str],
    lexical_ids: Sequence[int],
    mask: MaskArray,
    config: RetrievalConfig,
) -> list[ScoredEntry]:
    """Stages B and E–H: BM25 plus phrase boosts, capped at ``candidate_limit``."""
    ranking = kb.rank(  # B, E, F, G
        lexical_ids,
        query_terms,
        lexical_k=2 * config.candidate_limit,
        limit=config.candidate_limit,  # H
        mask=mask,
        exact_boost=config.exact_boost,
        alias_boost=config.alias_boost,
    )
    return [
        ScoredEntry(
            entry=kb.entry(item.doc),
            score=item.score,
            lexical_score=item.lexical,
            exact=item.exact,
            alias=item.alias,
            breakdown=kb.breakdown(
                lexical_ids,
                item.doc,
                config.exact_boost if item.exact else 0.0,
                config.alias_boost if item.alias else 0.0,
            ),
        )
        for item in ranking.items()
    ]


def _expand(
    kb: KnowledgeBase, primary: Sequence[ScoredEntry], mask: MaskArray, limit: int
) -> tuple[KnowledgeEntry, ...]:
    """Related and parent entries of the primary selection, in order, authorized again."""
    seen = {item.entry.id for item in primary}
    expanded: list[KnowledgeEntry] = []
    for item in primary:
        for related_id in kb.related(item.entry.id):
            if len(expanded) >= limit:
                return tuple(expanded)
            if related_id in seen or not kb.is_eligible(related_id, mask):
                continue
            seen.add(related_id)
            entry = kb.get(related_id)
            if entry is not None:
                expanded.append(entry)
    return tuple(expanded)
