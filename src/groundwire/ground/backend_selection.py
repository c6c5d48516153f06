"""One turn's selection of knowledge entries ranked by a search backend (Milvus).

:func:`select_from_backend` returns the :class:`~groundwire.retrieve.Selection` that
:func:`~groundwire.retrieve.retrieve` returns for a snapshot, with the same stages
(``retrieve/pipeline.py``, A–K) and the ranking done by the backend:

* the request's :class:`~groundwire.Filter` (status, blocked domains, integrations,
  tenant, ACL) is the backend's filter, applied before every top-k;
* candidates: the BM25 top ``2 × candidate_limit`` of the query plus its recent turns,
  with the exact/alias phrase hits, scored BM25 + boosts, ties on id, capped at
  ``candidate_limit``; in ``dense``/``hybrid`` mode the backend's channels fused by the
  embedded fusion (:func:`~groundwire.backends.hybrid_search`);
* the relevance gate on the backend's statistics: document frequencies of the query's
  informative terms under the filter and the recorded noise floor
  (:meth:`~groundwire.backends.SearchBackend.term_counts`, ``noise_level``); which terms
  a candidate holds is read from its fetched record with the snapshot's analyzer;
* related/parent expansion through ``fetch(ids, filter)`` (each added entry eligible,
  its links cut), the gate's link rule, the integration-scope hint and confidence.

The host predicate (``allow``) is asked about each candidate and linked entry the backend
returns, failing closed (a denied or failing entry is never returned nor named in a
link). Unlike the embedded path it cannot run before the backend's top-k: a denied
candidate takes no slot among those returned, but counts in the statistics.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from groundwire.access.authorize import authorize_items, check_callback
from groundwire.access.filters import admits
from groundwire.backends.hybrid import fused_channels
from groundwire.backends.protocol import LazyParts, SearchBackend, cut_links
from groundwire.config import BACKEND_TERMS_CACHE, HybridSettings, RetrievalConfig
from groundwire.embed.base import Embedder, check_embedder
from groundwire.errors import ConfigError, QueryError
from groundwire.index.builder import text_readers
from groundwire.index.scoped import entry_name
from groundwire.model import Filter, KnowledgeEntry, Principal, ScoredEntry
from groundwire.retrieve.confidence import classify_confidence, gated_confidence
from groundwire.retrieve.gate import QueryEvidence, gate_candidates, idf, informative_terms
from groundwire.retrieve.hybrid import HybridReport
from groundwire.retrieve.pipeline import (
    RetrievalRequest,
    ScopeHint,
    Selection,
    lexical_segments,
    truncate_query,
)
from groundwire.text import Analyzer

__all__ = ["select_from_backend"]

_BOOSTS = ("exact", "alias")


class _Turn:
    """What one turn holds: the backend, its analyzer, the predicate and its verdicts."""

    def __init__(
        self,
        backend: SearchBackend,
        config: RetrievalConfig,
        allow: Callable[[KnowledgeEntry], object] | None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.allow = allow
        settings = backend.settings
        self.key = (settings.analyzer, tuple(settings.field_weights))
        analyzer = _ANALYZERS.get(settings.analyzer)
        if analyzer is None:
            analyzer = _ANALYZERS.setdefault(settings.analyzer, Analyzer(settings.analyzer))
        self.analyzer = analyzer
        self.readers = text_readers(settings)[3]
        self.errors: list[str] = []
        self._allowed: dict[str, bool] = {}

    def permitted(self, entries: Sequence[KnowledgeEntry]) -> list[KnowledgeEntry]:
        """``entries`` the host predicate allows (each id asked once per turn)."""
        if self.allow is None:
            return list(entries)
        ask = list({e.id: e for e in entries if e.id not in self._allowed}.values())
        if ask:
            verdicts = authorize_items(
                ask,
                self.allow,
                option="allow",
                noun="entry",
                timeout_ms=self.config.authorize_timeout_ms,
                describe=entry_name,
            )
            self.errors.extend(verdicts.errors)
            self._allowed.update(zip((e.id for e in ask), verdicts.allowed.tolist(), strict=True))
        return [e for e in entries if self._allowed[e.id]]

    def fetch(self, ids: Sequence[str], flt: Filter) -> list[KnowledgeEntry]:
        """Eligible, permitted records of ``ids`` (in order), their links cut to what this
        request may see (the filter's cut made by the backend, the predicate's here)."""
        entries = self.permitted(self.backend.fetch(list(dict.fromkeys(ids)), flt))
        if self.allow is None:
            return entries
        linked = sorted({i for e in entries for i in _links(e)})
        unknown = [i for i in linked if i not in self._allowed]
        if unknown:
            self.permitted(self.backend.fetch(unknown, flt))
        visible = {i for i in linked if self._allowed.get(i, False)}
        return [cut_links(entry, visible) for entry in entries]

    def terms_of(self, entry: KnowledgeEntry) -> frozenset[str]:
        """Every analyzed term ``entry`` holds in an indexed field (remembered)."""
        texts = tuple(read(entry) for read in self.readers)
        digest = hashlib.blake2b("\0".join(texts).encode(), digest_size=16).digest()
        key = (self.key, entry.id, digest)
        with _TERMS_LOCK:
            known = _TERMS.get(key)
        if known is None:
            tokens = self.analyzer.tokens
            known = frozenset(t for text in texts if text for t in tokens(text))
            with _TERMS_LOCK:
                _TERMS[key] = known
                while len(_TERMS) > BACKEND_TERMS_CACHE:
                    _TERMS.popitem(last=False)
        return known


#: Analyzed terms of records a backend returned, by (settings, id, text digest): an entry's
#: terms are computed once while it keeps being a candidate, not once per turn.
_TERMS: OrderedDict[tuple[object, str, bytes], frozenset[str]] = OrderedDict()
_TERMS_LOCK = threading.Lock()
#: Analyzers by their settings (an analyzer remembers the words it has analyzed).
_ANALYZERS: dict[object, Analyzer] = {}


def _parts(fields: Mapping[str, float], boosts: dict[str, float]) -> LazyParts:
    """A candidate's breakdown: the backend's per-field parts, then the turn's boosts, read
    when first needed (as the embedded breakdown is)."""
    return LazyParts(lambda: {**fields, **boosts})


def _links(entry: KnowledgeEntry) -> tuple[str, ...]:
    """Related then parent ids, as the snapshot's relation index orders them."""
    return (*entry.related, *((entry.parent,) if entry.parent else ()))


def _check(request: RetrievalRequest) -> None:
    if not isinstance(request.query, str):
        raise QueryError(f"query must be a string, got {type(request.query).__name__}")
    if request.principal is not None and not isinstance(request.principal, Principal):
        raise TypeError(f"principal must be a Principal, got {type(request.principal).__name__}")


def select_from_backend(
    backend: SearchBackend,
    request: RetrievalRequest,
    config: RetrievalConfig,
    blocked_domains: Iterable[str] = (),
    allow: Callable[[KnowledgeEntry], object] | None = None,
    *,
    embedder: Embedder | None = None,
    hybrid: HybridSettings | None = None,
) -> Selection:
    """Select, rank, gate and expand the entries one turn needs from ``backend`` (see the
    module docstring); the same :class:`Selection` as :func:`~groundwire.retrieve.retrieve`.

    Raises :class:`~groundwire.errors.BackendError` when the backend fails (the engine
    turns it into the ``backend-unavailable`` failure reason).
    """
    check_callback(allow, "allow")
    _check(request)
    settings = config.hybrid if hybrid is None else hybrid
    if settings.reranker is not None:
        raise ConfigError(
            "a reranker is not applied over a search backend; rerank on the embedded index "
            "or set HybridSettings(reranker=None)"
        )
    query, truncated = truncate_query(request.query, config.max_query_chars)
    flt = Filter.of(request.principal, request.scope, blocked_domains)
    turn = _Turn(backend, config, allow)
    segments = lexical_segments(query, request.recent_turns, config)
    text = "\n".join(segments)
    report: HybridReport | None = None
    if settings.mode == "lexical":
        ranked = _lexical(turn, query, text, flt)
    else:
        ranked, report = _channels(turn, query, text, flt, settings, embedder)
    candidates, primary, evidence = _gate(turn, query, segments[1:], ranked, flt)
    fixed = candidates[: config.result_limit]
    expanded = _expand(turn, fixed, flt, config.relation_limit)
    if evidence is not None:  # the gate only removes: links of kept entries it would add
        within = {item.entry.id for item in fixed} | {entry.id for entry in expanded}
        linked = [e for e in _expand(turn, primary, flt, None) if e.id in within]
        expanded = _relevant_links(turn, linked, evidence)
    hint, outranked = ScopeHint(), False
    if flt.integrations is not None:  # K: what the request's integration scope left out
        wide = replace(flt, integrations=None)
        if backend.term_counts((), wide)[0] > backend.term_counts((), flt)[0]:
            wider = _lexical(turn, query, text, wide)
            kept = _gate(turn, query, segments[1:], wider, wide)[1]
            excluded = [item.entry for item in kept if not admits(flt, item.entry)]
            names = sorted({n.casefold() for entry in excluded for n in entry.integrations})
            hint = ScopeHint(len(excluded), tuple(names))
            outranked = bool(kept) and not admits(flt, kept[0].entry)
    if config.gate == "off":
        confidence = classify_confidence(candidates)
    else:
        confidence = gated_confidence(primary, config.relevance, outranked=outranked)
    return Selection(
        primary,
        expanded,
        len(candidates),
        confidence,
        channels=report,
        candidates=candidates,
        query=query,
        truncated_query=truncated,
        scope_hint=hint,
        authorization_errors=tuple(dict.fromkeys(turn.errors)),
    )


def _lexical(turn: _Turn, query: str, text: str, flt: Filter) -> list[ScoredEntry]:
    """BM25 top ``2 × candidate_limit`` of ``text`` plus the phrase hits of ``query``,
    scored BM25 + boosts, ties on id, the first ``candidate_limit`` permitted ones."""
    backend, config = turn.backend, turn.config
    hits = {hit.id: hit for hit in backend.lexical(text, flt, 2 * config.candidate_limit)}
    boosts = config.exact_boost > 0 or config.alias_boost > 0
    phrase = {hit.id: hit.explanation for hit in backend.phrase(query, flt)} if boosts else {}
    missing = [i for i in phrase if i not in hits]
    extra = backend.lexical_scores(text, flt, missing) if missing else {}
    scored: list[tuple[float, str, float, bool, bool, Mapping[str, float]]] = []
    for entry_id in {*hits, *phrase}:
        named = phrase.get(entry_id, {})
        exact = config.exact_boost > 0 and "exact" in named
        alias = config.alias_boost > 0 and "alias" in named
        hit = hits.get(entry_id)
        bm25 = hit.score if hit is not None else extra.get(entry_id, 0.0)
        boosted = {"exact": config.exact_boost} if exact else {}
        if alias:
            boosted["alias"] = config.alias_boost
        parts = _parts(hit.explanation if hit is not None else {}, boosted)
        score = (
            bm25 + (config.exact_boost if exact else 0.0) + (config.alias_boost if alias else 0.0)
        )
        scored.append((score, entry_id, bm25, exact, alias, parts))
    scored.sort(key=lambda item: (-item[0], item[1]))
    entries = _first_permitted(turn, [item[1] for item in scored], flt, config.candidate_limit)
    by_id = {item[1]: item for item in scored}
    return [ScoredEntry(entry, by_id[entry.id][0], *by_id[entry.id][2:]) for entry in entries]


def _first_permitted(
    turn: _Turn, ranked: Sequence[str], flt: Filter, limit: int
) -> list[KnowledgeEntry]:
    """The records of the first ``limit`` ids of ``ranked`` that are eligible and permitted
    (fetched a ``limit`` at a time: denied ones take no slot)."""
    out: list[KnowledgeEntry] = []
    for start in range(0, len(ranked), max(1, limit)):
        out.extend(turn.fetch(ranked[start : start + max(1, limit)], flt))
        if len(out) >= limit:
            break
    return out[:limit]


def _evidence(
    turn: _Turn, query: str, context: Sequence[str], flt: Filter
) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The informative terms of ``query`` (or of ``context`` when it has none) and their
    IDF weights over the entries ``flt`` admits (``retrieve.gate.query_evidence``)."""
    analyzer, settings = turn.analyzer, turn.config.relevance
    terms = informative_terms(analyzer, query)
    if not terms and context:
        terms = list(
            dict.fromkeys(t for part in context for t in informative_terms(analyzer, part))
        )
    n_docs, counts = turn.backend.term_counts(terms, flt)
    found = list(zip(terms, counts, strict=True))
    floor = settings.idf_floor * n_docs
    informative = [item for item in found if item[1] <= floor] or found
    return tuple(t for t, _ in informative), tuple(idf(n_docs, df) for _, df in informative)


def _query_evidence(
    turn: _Turn,
    terms: tuple[str, ...],
    weights: tuple[float, ...],
    entries: Sequence[KnowledgeEntry],
) -> QueryEvidence:
    """The evidence with each term's row over ``entries`` (positions into the list)."""
    held = [turn.terms_of(entry) for entry in entries]
    rows = tuple(
        np.asarray([n for n, have in enumerate(held) if term in have], dtype=np.int64)
        for term in terms
    )
    return QueryEvidence(terms, weights, rows)


_Gate = tuple[
    tuple[ScoredEntry, ...],
    tuple[ScoredEntry, ...],
    tuple[tuple[str, ...], tuple[float, ...]] | None,
]


def _gate(
    turn: _Turn, query: str, context: Sequence[str], candidates: Sequence[ScoredEntry], flt: Filter
) -> _Gate:
    """The candidates with their coverage, the primary selection the gate keeps among the
    first ``result_limit`` (all of them with the gate off) and the query's terms and
    weights (None with the gate off)."""
    config = turn.config
    if config.gate == "off":
        return tuple(candidates), tuple(candidates[: config.result_limit]), None
    terms, weights = _evidence(turn, query, context, flt)
    evidence = _query_evidence(turn, terms, weights, [item.entry for item in candidates])
    verdict = gate_candidates(
        evidence,
        list(range(len(candidates))),
        [item.score for item in candidates],
        config.relevance,
        noise=lambda: turn.backend.noise_level(config.relevance.noise_quantile),
        lexical=[item.lexical_score for item in candidates],
        phrase=[item.exact or item.alias for item in candidates],
        limit=config.result_limit,
    )
    covered = tuple(
        replace(item, coverage=coverage)
        for item, coverage in zip(candidates, verdict.coverage, strict=True)
    )
    return covered, tuple(covered[n] for n in verdict.kept), (terms, weights)


def _expand(
    turn: _Turn, primary: Sequence[ScoredEntry], flt: Filter, limit: int | None
) -> tuple[KnowledgeEntry, ...]:
    """Related and parent entries of ``primary``, in order, each fetched under the filter
    (eligible, permitted, its own links cut), at most ``limit``."""
    seen = {item.entry.id for item in primary}
    wanted = [i for item in primary for i in _links(item.entry) if i not in seen]
    if not wanted or limit == 0:
        return ()
    found = turn.fetch(list(dict.fromkeys(wanted)), flt)
    return tuple(found if limit is None else found[:limit])


def _relevant_links(
    turn: _Turn,
    linked: Sequence[KnowledgeEntry],
    evidence: tuple[tuple[str, ...], tuple[float, ...]],
) -> tuple[KnowledgeEntry, ...]:
    """The linked entries holding at least ``expand_coverage`` of the query, in link
    order, at most ``relation_limit`` (as ``retrieve.pipeline`` keeps them)."""
    config = turn.config
    terms, weights = evidence
    if not linked or config.relation_limit == 0:
        return ()
    total = math.fsum(weights)
    floor = config.relevance.expand_coverage * total
    kept = []
    for entry in linked:
        held = turn.terms_of(entry)
        weight = math.fsum(w for term, w in zip(terms, weights, strict=True) if term in held)
        if total and weight >= floor and weight > 0:
            kept.append(entry)
    return tuple(kept[: config.relation_limit])


def _query_vector(
    backend: SearchBackend, query: str, embedder: Embedder | None
) -> tuple[np.ndarray | None, str | None, float]:
    """The query's unit vector for the backend's model, or None and why (fail open)."""
    if embedder is None:
        raise ConfigError(
            "dense and hybrid retrieval over a backend need GroundingConfig.embedder (the "
            "model the backend's vectors were exported with)"
        )
    check_embedder(embedder)
    stats = backend.stats()
    if stats.model_id is None:
        raise ConfigError("the backend holds no vectors; export it with --vectors")
    if embedder.model_id != stats.model_id:
        raise ConfigError(
            f"the embedder is {embedder.model_id!r} but the backend's vectors were built with "
            f"{stats.model_id!r}; query with the model that built them"
        )
    started = time.perf_counter()
    try:
        vector = np.asarray(embedder.embed_query(query), dtype=np.float32).reshape(-1)
    except Exception as exc:  # fail open: rank lexically, say why
        detail = " ".join(str(exc).split())[:300]
        took = (time.perf_counter() - started) * 1000
        return None, f"query embedding failed: {type(exc).__name__}: {detail}", took
    took = (time.perf_counter() - started) * 1000
    if vector.shape[0] != stats.dimensions or not np.isfinite(vector).all():
        return None, "query embedding unusable: wrong dimensions or non-finite values", took
    return vector, None, took


def _channels(
    turn: _Turn,
    query: str,
    text: str,
    flt: Filter,
    settings: HybridSettings,
    embedder: Embedder | None,
) -> tuple[list[ScoredEntry], HybridReport]:
    """Candidates by the backend's channels fused client-side (``dense``/``hybrid``); the
    lexical ranking, with the reason, when the query cannot be embedded."""
    config = turn.config
    vector, reason, took = _query_vector(turn.backend, query, embedder)
    if vector is None:
        report = HybridReport(settings.mode, "lexical", None, reason, took, {}, None)
        return _lexical(turn, query, text, flt), report
    fused = fused_channels(
        turn.backend,
        query,
        vector,
        flt,
        config.candidate_limit,
        settings,
        lexical_query=text,
        boosts=(config.exact_boost, config.alias_boost),
        score_union=False,
    )
    found = {
        e.id: e for e in _first_permitted(turn, [h.id for h in fused.hits], flt, len(fused.hits))
    }
    candidates = []
    for hit in fused.hits:
        entry = found.get(hit.id)
        if entry is None:
            continue
        named = hit.phrase.explanation if hit.phrase is not None else {}
        exact, alias = "exact" in named, "alias" in named
        lexical_parts = hit.lexical.explanation if hit.lexical is not None else {}
        parts = _parts(lexical_parts, {name: named[name] for name in _BOOSTS if name in named})
        lexical = hit.channels.get("lexical")
        score = lexical.score if lexical is not None else 0.0
        candidates.append(ScoredEntry(entry, hit.score, score, exact, alias, parts, hit.channels))
    fusion = settings.fusion if settings.mode == "hybrid" else None
    return candidates, HybridReport(settings.mode, settings.mode, fusion, None, took, fused.sizes)
