"""One turn's selection, in a fixed order of stages (A–K):

A. normalize the query into terms;
B. look every contiguous query n-gram up in the exact (id/title) and alias maps;
C. build the lexical query from the query plus recent turns (each capped);
D. compute the eligibility set *before* ranking, once (status, blocked domains,
   integrations, tenant, ACL, host predicate: :mod:`groundwire.retrieve.eligibility`),
   and take the tenant's statistics pool: every later stage ranks, gates and expands
   within it;
E. BM25 over eligible entries only, ``2 × candidate_limit`` deep;
F. union with eligible exact and alias hits;
G. score = BM25 + exact boost + alias boost, sorted by score then id;
H. cap at ``candidate_limit``; of the first ``result_limit``, the relevance gate
   (``gate.py``; ``gate="off"``: none is cut) keeps those the query supports: the primary
   selection, possibly empty;
I. expand primary entries along related/parent links (re-checked, no duplicates); with
   the gate, only links that hold the query as a kept entry must, and only entries the
   fixed count would have selected or expanded: the gate never adds an entry;
J. classify confidence (with the gate: at most ``low`` when an entry K finds out of
   scope would have ranked first);
K. integration-scope hints: entries the gate would have kept had the request enabled
   their integrations (same blocked domains, labels and predicate; ranked lexically),
   counted and named.

Every entry a selection returns (candidates, primary, expanded) has its related/parent
ids cut to those this request may see.

A query longer than ``max_query_chars`` is cut to it, keeping its start and its end
(:func:`truncate_query`), before stage A.

With ``mode="dense"`` or ``"hybrid"`` (:class:`~groundwire.config.HybridSettings`, per
call or in ``RetrievalConfig.hybrid``) stages E–G rank by channels instead: the BM25,
phrase and dense lists of eligible entries, fused (:mod:`groundwire.retrieve.hybrid`),
then optionally reranked; the query alone (not the recent turns) is embedded. The
default, ``"lexical"``, is exactly the ranking above. The gate (H) reads the fused list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from groundwire.config import HybridSettings, RetrievalConfig
from groundwire.embed.base import Embedder
from groundwire.errors import QueryError
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import MaskArray
from groundwire.index.scoped import subset_vectors
from groundwire.index.vectors import VectorIndex
from groundwire.model import (
    Confidence,
    Filter,
    KnowledgeEntry,
    Principal,
    Scope,
    ScoredEntry,
    Turn,
)
from groundwire.retrieve.confidence import classify_confidence, gated_confidence
from groundwire.retrieve.eligibility import Eligibility, turn_eligibility
from groundwire.retrieve.gate import (
    QueryEvidence,
    gate_candidates,
    noise_level,
    query_evidence,
)
from groundwire.retrieve.hybrid import HybridReport, channel_candidates
from groundwire.retrieve.mentions import Mentions, NamedScope, mentions, named_scope

__all__ = [
    "RetrievalRequest",
    "ScopeHint",
    "Selection",
    "lexical_segments",
    "lexical_text",
    "retrieve",
    "truncate_query",
]

#: Marks where a truncated query was cut (between its kept start and end).
TRUNCATION_MARK = " … "
# Longest partial word dropped at a cut; longer runs (base64, hashes) are cut as they are.
_WORD_SLACK = 64


@dataclass(frozen=True, slots=True)
class RetrievalRequest:
    """What one turn asks for: the query, earlier turns, the request's scope and principal.

    ``principal`` is the verified principal the host passes (None: anonymous, which sees
    only entries without tenant and ACL labels).
    """

    query: str
    recent_turns: tuple[Turn, ...] = ()
    scope: Scope = field(default_factory=Scope)
    principal: Principal | None = None


@dataclass(frozen=True, slots=True)
class ScopeHint:
    """Integration-specific entries the gate would have kept had their integrations been
    enabled: how many, and which integrations (sorted) would include them."""

    count: int = 0
    integrations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Selection:
    """The primary entries (ranked), the relationship-expanded entries and confidence.

    ``channels`` reports dense/hybrid ranking and reranking (None for plain lexical).
    ``candidates`` are every ranked candidate before the gate (with their coverage when
    the gate is on); ``query`` is the query as used (cut when ``truncated_query``).
    ``authorization_errors`` lists the host predicate's failures (kinds and counts).
    """

    primary: tuple[ScoredEntry, ...]
    expanded: tuple[KnowledgeEntry, ...]
    candidate_count: int
    confidence: Confidence
    channels: HybridReport | None = None
    candidates: tuple[ScoredEntry, ...] = ()
    query: str = ""
    truncated_query: bool = False
    scope_hint: ScopeHint = field(default_factory=ScopeHint)
    named_integrations: tuple[str, ...] = ()
    authorization_errors: tuple[str, ...] = ()


def truncate_query(query: str, limit: int) -> tuple[str, bool]:
    """``query`` cut to at most ``limit`` characters, keeping its start and its end.

    Pasted logs and stack traces say what failed at the start and where at the end. The
    two parts are joined by :data:`TRUNCATION_MARK` and cut between words where a word
    boundary lies near the cut (so no half word becomes a query term). Returns the text
    and whether it was cut.
    """
    if len(query) <= limit:
        return query, False
    mark = TRUNCATION_MARK if limit > 2 * len(TRUNCATION_MARK) else ""
    room = limit - len(mark)
    head, tail = query[: room - room // 2], query[len(query) - room // 2 :] if room // 2 else ""
    if not query[len(head)].isspace():  # the cut fell inside a word: drop its start
        kept = head.rstrip().rsplit(None, 1)
        head = kept[0] if len(kept) == 2 and len(kept[1]) <= _WORD_SLACK else head
    if tail and not query[len(query) - len(tail) - 1].isspace():
        kept = tail.lstrip().split(None, 1)
        tail = kept[1] if len(kept) == 2 and len(kept[0]) <= _WORD_SLACK else tail
    return head + mark + tail, True


def lexical_segments(query: str, turns: Sequence[Turn], config: RetrievalConfig) -> list[str]:
    """What BM25 searches: the query plus the latest turns, each capped in length."""
    recent = list(turns)[-config.recent_turns :] if config.recent_turns else []
    parts = [query, *(turn.text[: config.turn_chars] for turn in recent)]
    return [part for part in parts if part]


def lexical_text(query: str, turns: Sequence[Turn], config: RetrievalConfig) -> str:
    """The lexical segments as one text (for display and diagnostics)."""
    return "\n".join(lexical_segments(query, turns, config))


def _check_request(request: RetrievalRequest) -> None:
    if not isinstance(request.query, str):
        raise QueryError(f"query must be a string, got {type(request.query).__name__}")
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
    allow: Callable[[KnowledgeEntry], object] | None = None,
    *,
    vectors: VectorIndex | None = None,
    embedder: Embedder | None = None,
    query_vector: object = None,
    hybrid: HybridSettings | None = None,
) -> Selection:
    """Select, rank, gate and expand the entries one turn needs (stages A–K above).

    ``allow(entry)`` is the host's predicate (only ``True`` allows; see
    :mod:`groundwire.access.authorize`); its failures are in ``authorization_errors``.
    ``hybrid`` overrides ``config.hybrid`` for this call; dense and hybrid modes need
    ``vectors`` (a :class:`VectorIndex` of ``kb``) and the ``embedder`` that built them
    (or a ``query_vector``).
    """
    _check_request(request)
    settings = config.hybrid if hybrid is None else hybrid
    query, truncated = truncate_query(request.query, config.max_query_chars)
    eligible = turn_eligibility(  # D: once, before any top-k of any channel
        kb,
        Filter.of(request.principal, request.scope, blocked_domains),
        allow,
        timeout_ms=config.authorize_timeout_ms,
    )
    named: tuple[str, ...] = ()
    mentioned = Mentions()
    if config.gate != "off" and config.named_integrations:
        mentioned = mentions(kb, query, eligible.unscoped)
        enabled = eligible.filter.integrations
        if enabled is not None:
            named = tuple(name for name in mentioned.integrations if name not in enabled)
            eligible = eligible.widened(named)  # the scope only: nobody may see more
    pool, mask = eligible.pool, eligible.pool_mask  # the tenant's statistics pool
    named_by_name = named_scope(pool, mentioned)  # a name is scope, not evidence
    analyzer = pool.analyzer
    query_terms = analyzer.tokens(query)  # A
    segments = lexical_segments(query, request.recent_turns, config)  # C
    lexical_ids = pool.query_ids([analyzer.tokens(segment) for segment in segments])
    report: HybridReport | None = None
    if settings.mode != "lexical" or settings.reranker is not None:  # E-G by channels
        ranked, report = channel_candidates(
            pool,
            query,
            query_terms,
            lexical_ids,
            mask,
            config,
            settings,
            lexical=lambda: _lexical_candidates(pool, query_terms, lexical_ids, mask, config),
            vectors=None if vectors is None else subset_vectors(kb, pool, vectors),
            embedder=embedder,
            query_vector=query_vector,
        )
    else:
        ranked = _lexical_candidates(pool, query_terms, lexical_ids, mask, config)
    candidates, primary, evidence = _gate(  # H: the relevance gate
        pool, query, segments[1:], ranked, mask, config, named_by_name
    )
    fixed = candidates[: config.result_limit]
    expanded = _expand(pool, fixed, eligible, config.relation_limit)  # I
    if evidence is not None:  # the gate only removes: links of kept entries it would add
        within = {item.entry.id for item in fixed} | {entry.id for entry in expanded}
        linked = [e for e in _expand(pool, primary, eligible, len(pool)) if e.id in within]
        expanded = _relevant_links(pool, linked, evidence, config)
    hint, outranked = ScopeHint(), False
    if request.scope is not None:  # K
        unscoped = eligible.pool_unscoped  # same labels and predicate, any integration
        if bool((unscoped & ~mask).any()):
            wider = _lexical_candidates(pool, query_terms, lexical_ids, unscoped, config)
            kept = _gate(pool, query, segments[1:], wider, unscoped, config, named_by_name)[1]
            hint = _scope_hint(kept, mask, pool)
            # An out-of-scope entry the gate ranks first: the answer may lie outside.
            outranked = bool(kept) and not pool.is_eligible(kept[0].entry.id, mask)
    if config.gate == "off":  # J
        confidence = classify_confidence(candidates)
    else:
        confidence = gated_confidence(primary, config.relevance, outranked=outranked)
    cut = {id(item): _cut(item, eligible) for item in candidates}  # returned: links cut
    return Selection(
        tuple(cut[id(item)] for item in primary),
        expanded,
        len(candidates),
        confidence,
        channels=report,
        candidates=tuple(cut.values()),
        query=query,
        truncated_query=truncated,
        scope_hint=hint,
        named_integrations=named,
        authorization_errors=eligible.authorization_errors,
    )


def _cut(item: ScoredEntry, eligible: Eligibility) -> ScoredEntry:
    """A returned candidate whose entry names only ids this request may see."""
    entry = eligible.scrub(item.entry)
    return item if entry is item.entry else replace(item, entry=entry)


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


def _gate(
    kb: KnowledgeBase,
    query: str,
    turns: Sequence[str],
    candidates: Sequence[ScoredEntry],
    mask: MaskArray,
    config: RetrievalConfig,
    named: Sequence[NamedScope] = (),
) -> tuple[tuple[ScoredEntry, ...], tuple[ScoredEntry, ...], QueryEvidence | None]:
    """The candidates (with their coverage), the primary selection the gate keeps among
    the first ``result_limit`` of them (all of those when the gate is off) and the
    query's evidence (None when the gate is off)."""
    if config.gate == "off":
        return tuple(candidates), tuple(candidates[: config.result_limit]), None
    evidence = query_evidence(kb, query, config.relevance, turns, mask, named)
    verdict = gate_candidates(
        evidence,
        [kb.position(item.entry.id) or 0 for item in candidates],
        [item.score for item in candidates],
        config.relevance,
        noise=lambda: noise_level(kb, config.relevance.noise_quantile),
        lexical=[item.lexical_score for item in candidates],
        phrase=[item.exact or item.alias for item in candidates],
        limit=config.result_limit,
    )
    covered = tuple(  # built directly: dataclasses.replace costs ~10x more per record
        ScoredEntry(i.entry, i.score, i.lexical_score, i.exact, i.alias, i.breakdown, i.channels, c)
        for i, c in zip(candidates, verdict.coverage, strict=True)
    )
    return covered, tuple(covered[n] for n in verdict.kept), evidence


def _relevant_links(
    kb: KnowledgeBase,
    linked: Sequence[KnowledgeEntry],
    evidence: QueryEvidence,
    config: RetrievalConfig,
) -> tuple[KnowledgeEntry, ...]:
    """The linked entries that hold at least ``expand_coverage`` of the query, in link
    order, at most ``relation_limit``: a link alone does not make an entry relevant."""
    if not linked or config.relation_limit == 0:
        return ()
    positions = np.asarray([kb.position(entry.id) or 0 for entry in linked], dtype=np.int64)
    coverage, _ = evidence.coverage(positions)
    floor = config.relevance.expand_coverage
    kept = [
        entry for entry, c in zip(linked, coverage.tolist(), strict=True) if c >= floor and c > 0
    ]
    return tuple(kept[: config.relation_limit])


def _scope_hint(kept: Sequence[ScoredEntry], mask: MaskArray, kb: KnowledgeBase) -> ScopeHint:
    """The kept entries of an unscoped selection that this request's scope excluded."""
    excluded = [item.entry for item in kept if not kb.is_eligible(item.entry.id, mask)]
    names = sorted({name.casefold() for entry in excluded for name in entry.integrations})
    return ScopeHint(len(excluded), tuple(names))


def _expand(
    kb: KnowledgeBase, primary: Sequence[ScoredEntry], eligible: Eligibility, limit: int
) -> tuple[KnowledgeEntry, ...]:
    """Related and parent entries of the primary selection, in order, each checked again
    against the turn's eligibility (mask and filter) and with its own links cut."""
    seen = {item.entry.id for item in primary}
    expanded: list[KnowledgeEntry] = []
    for item in primary:
        for related_id in kb.related(item.entry.id):
            if len(expanded) >= limit:
                return tuple(expanded)
            if related_id in seen or not eligible.visible(related_id):
                continue
            if not eligible.allows(related_id):  # the record itself, checked again
                continue
            seen.add(related_id)
            entry = kb.get(related_id)
            if entry is not None:
                expanded.append(eligible.scrub(entry))
    return tuple(expanded)
