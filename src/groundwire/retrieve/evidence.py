"""Evidence selection: the authorized, ranked, merged and diversified excerpts for one question.

:func:`select_evidence` chooses; it renders nothing and knows no token budget (packing
the rendered block is :func:`groundwire.context.evidence.pack_evidence`; the two are
composed by :func:`groundwire.ground.evidence.retrieve_evidence`). Its steps, in order:

1. **Validate** the knowledge base, the question (type and length) and the principal:
   a :class:`~groundwire.Principal` (its chunks' tenant and ACL labels apply, with or
   without ``authorize``), None (anonymous: only chunks without labels), or, with
   ``authorize``, any host object the authorizer understands (labeled chunks are then
   visible to nobody: labels need a verified ``Principal``).
2. **Authorize, before ranking.** Chunks are grouped by source (``metadata["source_id"]``
   as :func:`~groundwire.ingest.chunking.chunks_to_documents` writes it; an entry
   without one is its own source). First the labels: chunks the principal may not see
   are out, and a source none of whose chunks it may see is never mentioned again — not
   to the authorizer, not in any count. Then ``authorize(principal, source)`` is called
   exactly once per remaining source, in source-id order (code point), with an
   :class:`~groundwire.model.EvidenceSource`, through the one fail-closed evaluation of
   :mod:`groundwire.access.authorize`: only ``True`` allows; ``False`` denies, and so
   does any other return value, an exception or the ``authorize_timeout_ms`` deadline
   passing (the selection lists such failures in ``authorization_errors``, by kind and
   count, naming no source).
3. **Rank** the question's terms with BM25 over allowed, active chunks only. When
   nothing is excluded this reads the precomputed rows; otherwise
   :func:`~groundwire.retrieve.restricted.restricted_scores` recomputes every statistic
   without the excluded chunks: an excluded chunk changes no score and takes no slot.
   A code chunk whose defined name the question holds gets the alias boost.
   With ``settings.hybrid.mode`` ``"dense"`` or ``"hybrid"`` the dense channel (the
   question's embedding against the chunks' vectors, over the same allowed chunks) is
   used alone or fused with BM25 (:mod:`groundwire.retrieve.hybrid`), then optionally
   reranked; ``min_score`` then applies to the fused (or reranked) score. If the
   question cannot be embedded, BM25 alone ranks and ``channels.reason`` says why.
4. **Select** the best ``candidate_limit`` chunks (score descending, then chunk id);
   those scoring below ``min_score`` are dropped.
5. **Gate**: the relevance gate (:mod:`groundwire.retrieve.gate`, ``gate="relevance"``)
   keeps the chunks the question's informative terms support, with document frequencies
   and the noise level counted over allowed chunks only; ``gate="off"`` keeps them all.
6. **Merge**, **cut** and **diversify** them into excerpts (see
   :mod:`groundwire.retrieve.excerpts`).

A question longer than ``max_query_chars`` is cut to it, keeping its start and end
(``truncated_query``). The selection is insufficient, with a reason checked in this
order, when no allowed chunk matched (``no-match``), none scored at least ``min_score``
(``below-min-score``), the gate kept none (``low-relevance``) or fewer than
``min_sources`` distinct sources qualify (``too-few-sources``); an insufficient
selection carries no excerpts.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

import numpy as np

from groundwire.access.authorize import authorize_items, check_callback, predicate_of
from groundwire.config import DEFAULT_ALIAS_BOOST, DEFAULT_EXACT_BOOST, EvidenceSettings
from groundwire.embed.base import Embedder
from groundwire.errors import ConfigError, QueryError
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import IntArray, MaskArray, QueryScores
from groundwire.index.scoped import label_index
from groundwire.index.vectors import VectorIndex
from groundwire.model import EvidenceSource, Excerpt, Filter, KnowledgeEntry, Principal
from groundwire.retrieve.channels import ChannelList
from groundwire.retrieve.excerpts import (
    Hits,
    Piece,
    cut_excerpt,
    merge_pieces,
    round_robin,
    source_id_of,
    term_hits,
    to_piece,
)
from groundwire.retrieve.gate import gate_candidates, noise_level, query_evidence
from groundwire.retrieve.hybrid import (
    HybridReport,
    check_vectors,
    embed_query,
    entry_text,
    rank_channels,
    rerank_head,
    scores_at,
)
from groundwire.retrieve.pipeline import truncate_query
from groundwire.retrieve.restricted import restricted_noise, restricted_scores

__all__ = [
    "SELECTION_REASONS",
    "Authorizer",
    "EvidenceSelection",
    "SelectionReason",
    "check_knowledge_base",
    "select_evidence",
]

SelectionReason = Literal["no-match", "below-min-score", "low-relevance", "too-few-sources"]
#: Every reason a selection can be insufficient, in the order they are checked.
SELECTION_REASONS: Final[tuple[str, ...]] = get_args(SelectionReason)
#: A host authorizer: ``authorize(principal, source) -> bool``; only ``True`` allows.
Authorizer = Callable[[Any, EvidenceSource], object]

# Knowledge bases whose source maps are kept (each map holds its knowledge base alive, so
# an identity check can never match a new object at a recycled address): a few snapshots.
_MAP_CACHE_LIMIT = 4


@dataclass(frozen=True, slots=True)
class EvidenceSelection:
    """The candidate excerpts for one question, in order, before any token budget.

    ``excerpts`` holds every qualifying excerpt in round-robin order (empty when
    ``reason`` is set). ``candidate_count`` counts allowed chunks that matched;
    ``candidates_truncated`` says more matched than ``candidate_limit`` considered.
    ``authorized_sources`` counts sources the principal may see that the authorizer
    allowed, ``denied_sources`` those it did not; sources hidden by labels are in
    neither. ``authorization_errors`` lists the authorizer's failures (raised, returned a
    non-bool, deadline passed) by kind and count.
    ``channels`` reports dense/hybrid ranking and reranking (None for plain BM25).
    ``truncated_query``: the question was cut to ``max_query_chars``.
    """

    question: str
    reason: SelectionReason | None
    excerpts: tuple[Excerpt, ...]
    candidate_count: int
    candidates_truncated: bool
    authorized_sources: int
    denied_sources: int
    authorization_errors: tuple[str, ...]
    settings: EvidenceSettings
    channels: HybridReport | None = None
    truncated_query: bool = False


# --- sources -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _SourceMap:
    """Sources of a knowledge base (id order) and which source each position belongs to."""

    sources: tuple[EvidenceSource, ...]
    doc_source: IntArray


_maps: dict[int, tuple[KnowledgeBase, _SourceMap]] = {}


def _source_map(kb: KnowledgeBase) -> _SourceMap:
    """The sources of ``kb``, computed once per knowledge base (a snapshot never changes)."""
    cached = _maps.get(id(kb))
    if cached is not None and cached[0] is kb:  # holding kb keeps its id unique
        return cached[1]
    first: dict[str, KnowledgeEntry] = {}
    counts: Counter[str] = Counter()
    per_doc: list[str] = []
    for entry in kb:
        source = source_id_of(entry) or entry.id
        first.setdefault(source, entry)
        counts[source] += 1
        per_doc.append(source)
    order = sorted(first)
    number = {source: n for n, source in enumerate(order)}
    sources = []
    for source in order:
        entry = first[source]
        meta = entry.metadata
        path, title, kind, version = (meta.get(k) for k in ("path", "title", "kind", "version"))
        sources.append(
            EvidenceSource(
                id=source,
                path=path if isinstance(path, str) else "",
                version=version if isinstance(version, str) and version else entry.version,
                title=title if isinstance(title, str) else entry.title,
                kind=kind if isinstance(kind, str) else entry.kind,
                chunk_count=counts[source],
            )
        )
    doc_source = np.fromiter((number[s] for s in per_doc), np.int32, len(per_doc))
    built = _SourceMap(tuple(sources), doc_source)
    if len(_maps) >= _MAP_CACHE_LIMIT:
        _maps.clear()
    _maps[id(kb)] = (kb, built)
    return built


def _authorize(
    sources: Sequence[EvidenceSource],
    visible: Sequence[int],
    principal: object,
    authorize: Authorizer | None,
    timeout_ms: int | None,
) -> tuple[list[int], tuple[str, ...]]:
    """Positions of the visible sources the authorizer did not allow, and its failures;
    each visible source is asked exactly once, in order."""
    if authorize is None:
        return [], ()
    verdicts = authorize_items(
        [sources[n] for n in visible],
        predicate_of(principal, authorize),
        option="authorize",
        noun="source",
        timeout_ms=timeout_ms,
        describe=lambda source: repr(source.id),
    )
    denied = [n for n, ok in zip(visible, verdicts.allowed.tolist(), strict=True) if not ok]
    return denied, verdicts.errors


def _label_mask(
    kb: KnowledgeBase, principal: object, where: Mapping[str, str | Sequence[str]] | None
) -> MaskArray:
    """The chunks whose labels admit ``principal`` (a Principal; anything else: anonymous)
    and whose metadata meets ``where``."""
    who = principal if isinstance(principal, Principal) else None
    try:
        flt = Filter.of(who, where=where)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    return label_index(kb).mask(flt)


_noises: dict[tuple[int, bytes, float], tuple[KnowledgeBase, float]] = {}


def _noise(kb: KnowledgeBase, allowed: MaskArray, quantile: float) -> float:
    """The gate's noise level over what this request may see: the snapshot's own when
    nothing is excluded, else recomputed without the excluded chunks (remembered per
    allowed set: the same principal's requests share it)."""
    if bool(allowed.all()):
        return noise_level(kb, quantile)
    key = (id(kb), hashlib.sha256(np.packbits(allowed).tobytes()).digest(), quantile)
    cached = _noises.get(key)
    if cached is not None and cached[0] is kb:
        return cached[1]
    level = restricted_noise(kb.bm25, allowed, quantile)
    if len(_noises) >= _MAP_CACHE_LIMIT * 8:
        _noises.clear()
    _noises[key] = (kb, level)
    return level


# --- validation --------------------------------------------------------------------------------
def check_knowledge_base(kb: object) -> KnowledgeBase:
    """``kb`` if it is a :class:`KnowledgeBase`, else a :class:`ConfigError`."""
    if not isinstance(kb, KnowledgeBase):
        raise ConfigError(f"kb={kb!r} is invalid: expected a KnowledgeBase")
    return kb


def _check_authorizer(principal: object, authorize: Authorizer | None) -> None:
    check_callback(authorize, "authorize")
    if principal is not None and authorize is None and not isinstance(principal, Principal):
        raise ConfigError(
            "principal is given without authorize: pass a Principal(tenant, subject, groups) "
            "so tenant and ACL labels apply, or authorize(principal, source) -> bool so every "
            "source is checked before ranking, or drop principal"
        )
    if authorize is not None and principal is None:
        raise ConfigError(
            "authorize is given without principal: pass the verified principal the "
            "authorizer should check, or drop authorize"
        )


# --- ranking -----------------------------------------------------------------------------------
def _ranked(
    kb: KnowledgeBase,
    scores: QueryScores,
    terms: Sequence[str],
    allowed: MaskArray,
    limit: int,
) -> tuple[list[tuple[int, float]], dict[int, float], set[int]]:
    """The best ``limit`` chunks (score descending, then position), each chunk's BM25
    score, and the chunks whose phrase keys the question holds.

    Phrase keys of chunks are the code names they define: such a chunk gets the alias
    boost, as in :meth:`KnowledgeBase.search`, so naming a function finds its definition.
    """
    docs, values = scores.top(limit)
    pairs = zip(docs.tolist(), values.tolist(), strict=True)
    ranked = [(int(doc), float(value)) for doc, value in pairs]
    lexical = dict(ranked)
    exact, alias = kb.phrase_matches(terms)
    phrase = {doc for doc in exact | alias if allowed[doc]}
    if not phrase:
        return ranked, lexical, phrase
    for doc in phrase:
        lexical.setdefault(doc, scores.score_of(doc))
    boosted = {
        doc: score
        + (DEFAULT_EXACT_BOOST if doc in exact else 0.0)
        + (DEFAULT_ALIAS_BOOST if doc in alias else 0.0)
        for doc, score in lexical.items()
    }
    ranked = sorted(boosted.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return ranked, lexical, phrase


# --- the entry point ---------------------------------------------------------------------------
def select_evidence(
    kb: KnowledgeBase,
    question: str,
    settings: EvidenceSettings | None = None,
    *,
    principal: object = None,
    authorize: Authorizer | None = None,
    vectors: VectorIndex | None = None,
    embedder: Embedder | None = None,
    query_vector: object = None,
    where: Mapping[str, str | Sequence[str]] | None = None,
) -> EvidenceSelection:
    """Authorized, ranked, merged and diversified candidate excerpts for ``question``.

    ``kb`` holds chunks (``KnowledgeBase.from_documents(chunks_to_documents(chunks))``).
    ``principal`` is a :class:`~groundwire.Principal` (labels apply) or, with
    ``authorize(principal, source) -> bool`` (called once per visible source before
    ranking), any host object. ``where`` keeps chunks whose metadata has one of the given
    values per key (e.g. ``{"locale": "en"}``). Dense and hybrid modes
    (``settings.hybrid``) need ``vectors`` of ``kb`` and the ``embedder`` that built them
    (or a ``query_vector``); they rank over the same allowed chunks. Raises
    :class:`ConfigError` for a bad argument and
    :class:`QueryError` for a bad question; finding nothing is a selection with a
    reason, not an error. The steps and their order rules are in the module docstring.
    """
    check_knowledge_base(kb)
    if settings is None:
        settings = EvidenceSettings()
    elif not isinstance(settings, EvidenceSettings):
        raise ConfigError(f"settings={settings!r} is invalid: expected EvidenceSettings")
    if not isinstance(question, str):
        raise QueryError(f"question must be a string, got {type(question).__name__}")
    question, query_cut = truncate_query(question, settings.max_query_chars)
    _check_authorizer(principal, authorize)

    sources = _source_map(kb)
    labels = _label_mask(kb, principal, where)  # labels first, before any scoring
    allowed = kb.eligibility() & labels
    visible = (
        list(range(len(sources.sources)))
        if bool(labels.all())  # no labels in the way (the common case): every source
        else np.unique(sources.doc_source[allowed]).tolist()
    )
    denied, errors = _authorize(
        sources.sources, visible, principal, authorize, settings.authorize_timeout_ms
    )
    if denied:
        allowed = allowed & ~np.isin(sources.doc_source, np.array(denied, np.int32))
    analyzer = kb.analyzer
    terms = analyzer.tokens(question)
    if bool(allowed.all()):
        scores = kb.bm25.score(terms)  # nothing excluded: the index's own scores
    else:
        scores = QueryScores(kb.bm25.doc_count, restricted_scores(kb.bm25, terms, allowed))
    matched = int(scores.matched()[0].shape[0])
    ranked, lexical, phrase = _ranked(kb, scores, terms, allowed, settings.candidate_limit)
    truncated = matched > len(ranked)
    report: HybridReport | None = None
    if settings.hybrid.mode != "lexical" or settings.hybrid.reranker is not None:
        ranked, matched, truncated, report = _channels(
            kb, question, scores, allowed, settings, vectors, embedder, query_vector, ranked
        )
    # min_score bounds BM25 (phrase boosts aside), or the fused score of channels.
    floor_of = lexical if report is None else dict(ranked)

    def selection(
        reason: SelectionReason | None, excerpts: Sequence[Excerpt] = ()
    ) -> EvidenceSelection:
        return EvidenceSelection(
            question=question,
            reason=reason,
            excerpts=tuple(excerpts),
            candidate_count=matched,
            candidates_truncated=truncated,
            authorized_sources=len(visible) - len(denied),
            denied_sources=len(denied),
            authorization_errors=errors,
            settings=settings,
            channels=report,
            truncated_query=query_cut,
        )

    if matched == 0:
        return selection("no-match")
    qualified = [(doc, score) for doc, score in ranked if floor_of[doc] >= settings.min_score]
    if not qualified:
        return selection("below-min-score")
    if settings.gate == "relevance":
        evidence = query_evidence(kb, question, settings.relevance, allowed=allowed)
        verdict = gate_candidates(
            evidence,
            [d for d, _ in qualified],
            [v for _, v in qualified],
            settings.relevance,
            noise=lambda: _noise(kb, allowed, settings.relevance.noise_quantile),
            lexical=[lexical.get(d, scores.score_of(d)) for d, _ in qualified],  # BM25
            phrase=[d in phrase for d, _ in qualified],
        )
        qualified = [qualified[n] for n in verdict.kept]
        if not qualified:
            return selection("low-relevance")
    by_source: dict[int, list[Piece]] = {}
    for doc, score in qualified:
        source = int(sources.doc_source[doc])
        by_source.setdefault(source, []).append(to_piece(kb.entry(doc), score))
    if len(by_source) < settings.min_sources:
        return selection("too-few-sources")

    wanted = frozenset(terms)
    tokens = analyzer.tokens

    def hits(text: str) -> Hits:
        return term_hits(text, wanted, tokens)

    ordered = round_robin(
        cut_excerpt(piece, sources.sources[source], settings.max_excerpt_chars, hits)
        for source, pieces in by_source.items()
        for piece in merge_pieces(pieces)
    )
    return selection(None, ordered)


def _channels(
    kb: KnowledgeBase,
    question: str,
    scores: QueryScores,
    allowed: MaskArray,
    settings: EvidenceSettings,
    vectors: VectorIndex | None,
    embedder: Embedder | None,
    query_vector: object,
    ranked: list[tuple[int, float]],
) -> tuple[list[tuple[int, float]], int, bool, HybridReport]:
    """Step 3 by channels: dense alone or fused with BM25, then reranked.

    Returns the ranked (position, score) pairs (at most ``candidate_limit``), how many
    allowed chunks matched, whether more matched than were kept, and the report.
    """
    hybrid = settings.hybrid
    limit = settings.candidate_limit
    matched = int(scores.matched()[0].shape[0])
    truncated = matched > len(ranked)
    used, reason, embed_ms = "lexical", None, 0.0
    sizes: dict[str, int] = {}
    index: VectorIndex | None = None
    vector = None
    if hybrid.mode != "lexical":
        index = check_vectors(kb, vectors)
        embedded = embed_query(question, embedder, index, query_vector)
        vector, reason, embed_ms = embedded.vector, embedded.reason, embedded.milliseconds
        if vector is not None:
            used = hybrid.mode
            docs, values = scores.top(max(hybrid.channel_depth, limit))
            lexical = ChannelList.of("lexical", docs, values)
            hits, sizes = rank_channels(
                index,
                vector,
                allowed,
                hybrid,
                [lexical],
                limit,
                lambda positions: scores_at(scores, positions),
            )
            ranked = [(hit.doc, hit.score) for hit in hits]
            union = {*(docs.tolist() if hybrid.mode == "hybrid" else ()), *(h.doc for h in hits)}
            matched = max(len(union), len(ranked))
            truncated = matched > len(ranked)
    rerank = None
    if hybrid.reranker is not None and ranked:
        order, new, rerank = rerank_head(
            hybrid.reranker,
            question,
            [doc for doc, _ in ranked],
            [score for _, score in ranked],
            hybrid,
            text_of=entry_text(kb),
            ids_of=lambda doc: kb.entry(doc).id,
            vectors=index,
            query_vector=vector,
        )
        ranked = [(ranked[n][0], score) for n, score in zip(order, new, strict=True)]
    fusion = hybrid.fusion if used == "hybrid" else None
    return (
        ranked,
        matched,
        truncated,
        HybridReport(hybrid.mode, used, fusion, reason, embed_ms, sizes, rerank),
    )
