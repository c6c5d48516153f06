"""The embedded index as a :class:`~groundwire.integrations.Searcher`: entries and documents.

- :class:`EntrySearcher` selects knowledge entries exactly as a grounding turn does
  (:func:`groundwire.retrieve`: eligibility and authorization before ranking, BM25 or
  channels, the relevance gate, relationship expansion, confidence), over a
  :class:`~groundwire.KnowledgeBase` or the current snapshot of a
  :class:`~groundwire.GroundingEngine`.
- :class:`EvidenceSearcher` selects document excerpts exactly as
  :func:`groundwire.retrieve_evidence` does (sources authorized before ranking with
  statistics recomputed without the denied ones, the gate, merged and diversified
  excerpts, the token budget).

Both are thread-safe and cheap to share; ``asearch`` runs ``search`` in a worker thread
(retrieval is CPU-bound and short), so an event loop never blocks on it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import fields

import groundwire as gw
from groundwire.access.authorize import predicate_of, verdict_failure
from groundwire.index.scoped import entry_name
from groundwire.integrations.search import (
    Access,
    Passage,
    Passages,
    check_access,
    check_limit,
)

__all__ = ["EntrySearcher", "EvidenceSearcher"]

logger = logging.getLogger("groundwire.integrations")
access_log = logging.getLogger("groundwire.access")  # the operator's log of callback failures


def _check_pair(access: Access) -> None:
    """An authorizer needs the principal it checks (groundwire never supplies one)."""
    if access.authorize is not None and access.principal is None:
        raise gw.ConfigError(
            "authorize is given without a principal: pass the verified groundwire "
            "Principal the authorizer should check, or drop authorize"
        )


#: Failures logged entry by entry per search (the rest are counted), as in the core.
_LOGGED_FAILURES = 5

Check = Callable[[gw.KnowledgeEntry], object]


class _Checks:
    """The host's entry callbacks as one predicate for :func:`groundwire.retrieve`.

    ``allow``, ``authorize`` and the engine's ``GroundingConfig.authorize`` are asked in
    turn until one does not allow. Each is judged by groundwire's one rule
    (:mod:`groundwire.access.authorize`: only ``True`` allows; another value, an awaitable
    or an exception denies and is a failure), and failures are counted under the name of
    the callback that failed. ``retrieve`` asks once per entry the labels admit, under its
    deadline (``RetrievalConfig.authorize_timeout_ms``), possibly from a worker thread.
    """

    def __init__(self, checks: list[tuple[str, Check]]) -> None:
        self.checks = checks
        self.denied = 0
        self.failures: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, entry: gw.KnowledgeEntry) -> bool:
        for name, check in self.checks:
            try:
                verdict = check(entry)
                failure, detail = verdict_failure(verdict), repr(verdict)
            except Exception as exc:  # fail closed: a broken callback allows nothing
                verdict, failure, detail = False, f"raised {type(exc).__name__}", str(exc)
            if verdict is not True:
                self._deny(name, failure, entry, detail)
                return False
        return True

    def _deny(self, name: str, failure: str | None, entry: gw.KnowledgeEntry, detail: str) -> None:
        with self.lock:
            self.denied += 1
            if failure is None:
                return
            kind = f"{name} {failure}"
            if sum(self.failures.values()) < _LOGGED_FAILURES:
                access_log.warning("%s for %s (denied): %s", kind, entry_name(entry), detail)
            self.failures[kind] += 1

    def errors(self) -> tuple[str, ...]:
        """One line per kind of failure, with its count; no entry is named."""
        with self.lock:
            counts = sorted(self.failures.items())
        return tuple(
            f"{kind} for {count} entr{'y' if count == 1 else 'ies'}; denied"
            for kind, count in counts
        )


def _checks(access: Access, engine: Callable[..., object] | None) -> _Checks | None:
    """The callbacks ``access`` and the engine bring, as one predicate (None: there are none)."""
    checks: list[tuple[str, Check]] = []
    if access.allow is not None:
        checks.append(("allow", access.allow))
    if access.authorize is not None:
        checks.append(("authorize", predicate_of(access.principal, access.authorize)))
    if engine is not None:
        checks.append(("GroundingConfig.authorize", predicate_of(access.principal, engine)))
    return _Checks(checks) if checks else None


def entry_text(entry: gw.KnowledgeEntry) -> str:
    """What a model reads for an entry: title, summary and body, separated by blank lines."""
    return "\n\n".join(part for part in (entry.title, entry.summary, entry.body) if part)


def _entry_passage(
    entry: gw.KnowledgeEntry,
    scored: gw.ScoredEntry | None,
    expanded: bool = False,
    explain: bool = True,
) -> Passage:
    return Passage(
        id=entry.id,
        text=entry_text(entry),
        score=None if scored is None else scored.score,
        citation=entry.citation,
        title=entry.title,
        source=entry.source_id,
        version=entry.version,
        kind="entry",
        breakdown=dict(scored.breakdown) if scored is not None and explain else {},
        channels={} if scored is None else dict(scored.channels),
        coverage=None if scored is None else scored.coverage,
        expanded=expanded,
        details={
            "domain": entry.domain,
            "integrations": entry.integrations,
            "entry_kind": entry.kind,
        },
    )


class EntrySearcher:
    """Knowledge entries for a query, selected as a grounding turn selects them.

    ``source`` is a :class:`~groundwire.KnowledgeBase`, or a
    :class:`~groundwire.GroundingEngine` whose current snapshot, retrieval settings and
    blocked domains are used on every search (a rebuild or reload is picked up; a search
    waits up to ``ready_timeout_s``, default the engine's turn timeout, for the first
    build, else comes back with reason ``index-not-ready``). ``config`` overrides the
    retrieval settings; ``blocked_domains`` adds to the engine's and the access's.
    ``vectors`` and ``embedder`` serve dense and hybrid modes
    (``config.hybrid``). ``expand=False`` leaves out entries added by relationship
    expansion. ``explain=False`` leaves breakdowns empty: explaining a score costs about
    half a millisecond per entry, more than selecting it. Passages come primary entries
    first (best first), then expanded ones.
    """

    def __init__(
        self,
        source: gw.KnowledgeBase | gw.GroundingEngine,
        *,
        config: gw.RetrievalConfig | None = None,
        blocked_domains: Iterable[str] = (),
        vectors: gw.VectorIndex | None = None,
        embedder: gw.Embedder | None = None,
        expand: bool = True,
        explain: bool = True,
        ready_timeout_s: float | None = None,
    ) -> None:
        if not isinstance(source, gw.KnowledgeBase | gw.GroundingEngine):
            raise gw.ConfigError(
                f"source={source!r} is invalid: expected a KnowledgeBase or a GroundingEngine"
            )
        if config is not None and not isinstance(config, gw.RetrievalConfig):
            raise gw.ConfigError(f"config={config!r} is invalid: expected a RetrievalConfig")
        self.source = source
        self._config = config
        self._blocked = Access(blocked_domains=tuple(blocked_domains)).blocked_domains
        self.vectors = vectors
        self.embedder = embedder
        self.expand = bool(expand)
        self.explain = bool(explain)
        if ready_timeout_s is None and isinstance(source, gw.GroundingEngine):
            ready_timeout_s = source.config.timeout_ms / 1000.0
        self.ready_timeout_s = ready_timeout_s

    @property
    def config(self) -> gw.RetrievalConfig:
        """The retrieval settings searches use."""
        if self._config is not None:
            return self._config
        if isinstance(self.source, gw.GroundingEngine):
            return self.source.config.retrieval
        return gw.RetrievalConfig()

    def _snapshot(self) -> gw.KnowledgeBase | None:
        source = self.source
        if isinstance(source, gw.KnowledgeBase):
            return source
        if not source.ready(self.ready_timeout_s):
            status = source.status()
            logger.warning(
                "groundwire index not ready for a search: %s", status.last_error or "still building"
            )
            return None
        return source.knowledge_base

    def _blocked_domains(self, access: Access) -> tuple[str, ...]:
        engine = self.source if isinstance(self.source, gw.GroundingEngine) else None
        configured = tuple(engine.config.blocked_domains) if engine is not None else ()
        return tuple(dict.fromkeys((*configured, *self._blocked, *access.blocked_domains)))

    def search(self, query: str, access: Access, limit: int | None = None) -> Passages:
        """The entries for ``query`` that ``access`` may see: primary (ranked, gated),
        then expanded; at most ``limit``.

        Eligibility is a grounding turn's: the principal's tenant and ACL labels (no
        principal: only unlabeled entries), then ``allow``, ``authorize`` and an engine's
        ``GroundingConfig.authorize``, each fail closed, before any ranking; scores come
        from the tenant's statistics pool. ``denied`` counts entries the callbacks denied.
        Raises :class:`~groundwire.ConfigError` for an authorizer without a principal."""
        limit = check_limit(limit)
        access = check_access(access)
        _check_pair(access)
        if not isinstance(query, str):
            raise gw.QueryError(f"query must be a string, got {type(query).__name__}")
        if not query.strip():
            return Passages(query, reason="empty-query")
        kb = self._snapshot()
        if kb is None:
            return Passages(query, reason="index-not-ready")
        engine = (
            self.source.config.authorize if isinstance(self.source, gw.GroundingEngine) else None
        )
        checks = _checks(access, engine)
        request = gw.RetrievalRequest(
            query, scope=access.scope or gw.Scope(), principal=access.principal
        )
        selection = gw.retrieve(
            kb,
            request,
            self.config,
            self._blocked_domains(access),
            checks,
            vectors=self.vectors,
            embedder=self.embedder,
        )
        explain = self.explain
        passages = [_entry_passage(item.entry, item, explain=explain) for item in selection.primary]
        if self.expand:
            passages += [_entry_passage(entry, None, True) for entry in selection.expanded]
        reason = None
        if not selection.primary:
            reason = "low-relevance" if selection.candidates else "no-match"
        return Passages(
            query=selection.query,
            passages=tuple(passages),
            confidence=selection.confidence,
            reason=reason,
            candidate_count=selection.candidate_count,
            denied=0 if checks is None else checks.denied,
            authorization_errors=(
                *(() if checks is None else checks.errors()),
                *selection.authorization_errors,  # the deadline's, if it passed
            ),
            truncated_query=selection.truncated_query,
            named_integrations=selection.named_integrations,
        ).limited(limit)

    async def asearch(self, query: str, access: Access, limit: int | None = None) -> Passages:
        """Async :meth:`search` (in a worker thread)."""
        return await asyncio.to_thread(self.search, query, access, limit)


#: The EvidenceSettings fields retrieve_evidence takes as keyword arguments.
_EVIDENCE_OPTIONS = tuple(f.name for f in fields(gw.EvidenceSettings))


class EvidenceSearcher:
    """Document excerpts for a query, selected as :func:`groundwire.retrieve_evidence`
    selects them.

    ``kb`` holds document chunks (``KnowledgeBase.from_documents(chunks_to_documents(...))``
    or a snapshot saved by ``groundwire ingest``); ``settings`` bound the result (excerpts,
    excerpt length, the token budget of groundwire's own evidence block, the gate, hybrid
    mode); ``vectors`` and ``embedder`` serve dense and hybrid modes. Passages come in
    groundwire's order: sources take turns, best source first, so one long file cannot
    crowd out the rest (scores are therefore not monotonic across sources). An excerpt's
    ``breakdown`` explains its BM25 score per field when it can do so exactly (lexical
    mode and no source denied: denied sources change the statistics); else it is empty,
    and ``explain=False`` leaves it empty always (explaining costs time).
    """

    def __init__(
        self,
        kb: gw.KnowledgeBase,
        settings: gw.EvidenceSettings | None = None,
        *,
        vectors: gw.VectorIndex | None = None,
        embedder: gw.Embedder | None = None,
        explain: bool = True,
    ) -> None:
        if not isinstance(kb, gw.KnowledgeBase):
            raise gw.ConfigError(f"kb={kb!r} is invalid: expected a KnowledgeBase of chunks")
        if settings is not None and not isinstance(settings, gw.EvidenceSettings):
            raise gw.ConfigError(f"settings={settings!r} is invalid: expected EvidenceSettings")
        self.kb = kb
        self.settings = settings if settings is not None else gw.EvidenceSettings()
        self.vectors = vectors
        self.embedder = embedder
        self.explain = bool(explain)

    def search(self, query: str, access: Access, limit: int | None = None) -> Passages:
        """The excerpts for ``query`` from sources ``access`` may read; at most ``limit``.

        Eligibility is :func:`groundwire.retrieve_evidence`'s: the chunks' tenant and ACL
        labels admit the principal (no principal: only unlabeled chunks), then
        ``authorize(principal, source)`` decides each visible source, fail closed, before
        any ranking. Raises :class:`~groundwire.ConfigError` when ``access`` sets
        ``allow``, ``scope`` or ``blocked_domains`` (entry-only restrictions: refused
        rather than ignored) or an authorizer without a principal.
        """
        limit = check_limit(limit)
        access = check_access(access)
        entry_only = [
            name
            for name, value in (
                ("allow", access.allow),
                ("scope", access.scope),
                ("blocked_domains", access.blocked_domains),
            )
            if value
        ]
        if entry_only:
            raise gw.ConfigError(
                f"{', '.join(entry_only)} restrict knowledge entries, not documents; "
                "authorize document sources with authorize(principal, source) -> bool"
            )
        _check_pair(access)
        if not isinstance(query, str):
            raise gw.QueryError(f"query must be a string, got {type(query).__name__}")
        if not query.strip():
            return Passages(query, reason="empty-query")
        options = {name: getattr(self.settings, name) for name in _EVIDENCE_OPTIONS}
        result = gw.retrieve_evidence(
            self.kb,
            query,
            principal=access.principal,
            authorize=access.authorize,
            vectors=self.vectors,
            embedder=self.embedder,
            **options,
        )
        exact = self.explain and result.denied_sources == 0
        exact = exact and self.settings.hybrid.mode == "lexical"
        exact = exact and self.settings.hybrid.reranker is None
        passages = tuple(
            self._passage(excerpt, result.question if exact else None)
            for excerpt in result.excerpts
        )
        return Passages(
            query=result.question,
            passages=passages,
            reason=result.reason,
            candidate_count=result.candidate_count,
            denied=result.denied_sources,
            authorization_errors=result.authorization_errors,
            truncated_query=result.truncated_query,
        ).limited(limit)

    def _passage(self, excerpt: gw.Excerpt, explain_for: str | None) -> Passage:
        breakdown: dict[str, float] = {}
        if explain_for is not None:
            breakdown = dict(self.kb.explain(explain_for, excerpt.id).breakdown)
        return Passage(
            id=excerpt.id,
            text=excerpt.text,
            score=excerpt.score,
            citation=excerpt.citation,
            title=excerpt.heading or excerpt.path or excerpt.source_id,
            source=excerpt.source_id,
            version=excerpt.version,
            kind="excerpt",
            span=(excerpt.start, excerpt.end),
            breakdown=breakdown,
            details={
                "path": excerpt.path,
                "headings": excerpt.headings,
                "chunk_ids": excerpt.chunk_ids,
                "sha256": excerpt.sha256,
                "cut": excerpt.cut,
            },
        )

    async def asearch(self, query: str, access: Access, limit: int | None = None) -> Passages:
        """Async :meth:`search` (in a worker thread)."""
        return await asyncio.to_thread(self.search, query, access, limit)
