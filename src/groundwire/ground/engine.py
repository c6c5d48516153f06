"""The grounding engine: one-time background build, readiness, and fail-open turns.

``GroundingEngine(config)`` returns at once while the snapshot builds in the
background; ``ground()`` waits for it within the turn's time budget.
``GroundingEngine.from_snapshot(path)`` serves a saved snapshot instead (no build),
and ``reload()`` swaps in a newer one while turns run. No grounding problem ever
raises out of ``ground()``: the outcome carries a ``failure_reason``.

With ``retrieval.hybrid.mode`` ``"dense"`` or ``"hybrid"``, the engine installs each
snapshot together with its vectors (``GroundingConfig.embedder``): embedded when the
snapshot is built (a rebuild through a ``CachedEmbedder`` embeds only changed entries),
or read from the snapshot's ``vectors`` section (or a legacy ``<snapshot>.vectors`` file)
when they match it, and swapped in as one pair. A
snapshot whose vectors cannot be built is not installed (the previous pair keeps
serving); a query that cannot be embedded ranks lexically, the reason in
``metadata.channels``. Every channel ranks the principal's eligible entries only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from groundwire.access.authorize import check_callback, predicate_of
from groundwire.backends.protocol import SearchBackend
from groundwire.config import ContextConfig, GroundingConfig, RetrievalConfig
from groundwire.context import assemble_context
from groundwire.embed.base import Embedder
from groundwire.errors import BackendError, ConfigError, QueryError
from groundwire.ground.backend_selection import select_from_backend
from groundwire.index.cache import SnapshotCache, default_cache
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.scoped import label_index
from groundwire.index.vector_files import snapshot_vectors
from groundwire.index.vectors import VectorIndex
from groundwire.ingest.sources import SOURCE_MANIFEST
from groundwire.model import (
    FailureReason,
    GroundingMetadata,
    GroundingOutcome,
    GroundingStatus,
    KnowledgeBlock,
    KnowledgeSource,
    Principal,
    RetrievalResult,
    Scope,
    Turn,
    ValidationIssue,
)
from groundwire.retrieve import RetrievalRequest, Selection, retrieve
from groundwire.retrieve.eligibility import warm_tenant_pools
from groundwire.retrieve.gate import noise_level

__all__ = ["GroundingEngine", "create_grounding_engine", "warm_snapshot"]

logger = logging.getLogger("groundwire")
_WORKERS = 4


def create_grounding_engine(config: GroundingConfig | None) -> GroundingEngine | None:
    """An engine for ``config``, or None when grounding is off or has no sources.

    Mirrors the host guard: a disabled (or absent) configuration creates nothing;
    an enabled one without sources logs a warning and creates nothing.
    """
    if config is None or not config.enabled:
        return None
    if not config.sources:
        logger.warning(
            "knowledge grounding is enabled but no sources were provided; "
            "grounding is disabled for this instance"
        )
        return None
    return GroundingEngine(config)


def _turns(recent_turns: Sequence[Turn | Mapping[str, Any]] | None) -> tuple[Turn, ...]:
    out = []
    for turn in recent_turns or ():
        if isinstance(turn, Turn):
            out.append(turn)
        elif isinstance(turn, Mapping):
            text = turn.get("text", turn.get("content", ""))
            out.append(Turn(str(turn.get("role", "")), text if isinstance(text, str) else ""))
        else:
            raise TypeError(f"a recent turn must be a Turn or a mapping, got {turn!r}")
    return tuple(out)


def _scope(scope: Scope | Mapping[str, Any] | None) -> Scope:
    if scope is None:
        return Scope()
    if isinstance(scope, Scope):
        return scope
    if isinstance(scope, Mapping):
        enabled = scope.get("enabled_integrations", ())
        if isinstance(enabled, str) or not isinstance(enabled, Sequence):
            raise TypeError(f"enabled_integrations must be a list of strings, got {enabled!r}")
        return Scope(tuple(str(item) for item in enabled))
    raise TypeError(f"scope must be a Scope or a mapping, got {scope!r}")


@dataclass(frozen=True, slots=True)
class _Turn:
    """The settings of one turn: the configured ones, or the call's overrides."""

    blocked_domains: tuple[str, ...]
    retrieval: RetrievalConfig
    context: ContextConfig
    vectors: VectorIndex | None = None
    embedder: Embedder | None = None


@dataclass(frozen=True, slots=True)
class _Overrides:
    """A call's overrides of the configured per-turn settings, as given (unchecked)."""

    blocked_domains: object = None
    retrieval: object = None
    context: object = None
    vectors: VectorIndex | None = None
    embedder: Embedder | None = None

    def settle(self, config: GroundingConfig) -> _Turn:
        """The overrides checked (TypeError), the configured settings where none is given."""
        blocked = self.blocked_domains
        if blocked is not None and (
            isinstance(blocked, str)
            or not isinstance(blocked, Sequence)
            or not all(isinstance(name, str) for name in blocked)
        ):
            raise TypeError(f"blocked_domains must be a list of strings, got {blocked!r}")
        retrieval = config.retrieval if self.retrieval is None else self.retrieval
        context = config.context if self.context is None else self.context
        if not isinstance(retrieval, RetrievalConfig):
            raise TypeError(f"retrieval must be a RetrievalConfig, got {retrieval!r}")
        if not isinstance(context, ContextConfig):
            raise TypeError(f"context must be a ContextConfig, got {context!r}")
        domains = config.blocked_domains if blocked is None else tuple(blocked)
        return _Turn(domains, retrieval, context, self.vectors, self.embedder)


class GroundingEngine:
    """Builds one immutable snapshot and grounds turns against it, failing open.

    Thread-safe: many turns may run concurrently, and :meth:`rebuild` swaps the
    snapshot atomically while they do.
    """

    def __init__(
        self,
        config: GroundingConfig,
        *,
        cache: SnapshotCache | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not isinstance(config, GroundingConfig):
            raise TypeError(f"config must be a GroundingConfig, got {type(config).__name__}")
        check_callback(config.authorize, "GroundingConfig.authorize")
        self._config = config
        self._cache = cache if cache is not None else default_cache()
        self._clock = clock
        # The snapshot and its vectors, swapped as one reference: a turn uses one pair.
        self._served: tuple[KnowledgeBase, VectorIndex | None] | None = None
        self._backend: SearchBackend | None = None  # set by from_backend: turns rank there
        self._snapshot_path: str | os.PathLike[str] | None = None  # set by from_snapshot
        self._verify: Literal["full", "manifest"] = "full"
        self._issues: tuple[ValidationIssue, ...] = ()
        self._entry_count = 0  # a backend's last known count (from_backend)
        self._last_error: str | None = None
        self._build_lock = threading.Lock()
        self._built = threading.Event()
        self._warming: Future[None] | None = None  # the first snapshot's warm-up
        self._executor = ThreadPoolExecutor(_WORKERS, thread_name_prefix="groundwire")
        if config.enabled and config.sources:
            self._build_future: Future[None] | None = self._executor.submit(
                self._build, config.sources
            )
        else:
            self._build_future = None
            self._built.set()

    # -- lifecycle --------------------------------------------------------------------------
    def _build(self, sources: Sequence[KnowledgeSource | Mapping[str, Any]]) -> None:
        with self._build_lock:
            try:
                # A rebuild updates the served snapshot: only changed entries are analyzed.
                settings = self._config.index_settings
                result = (
                    self._cache.get_or_build(sources, settings, previous=self._snapshot)
                    if self._snapshot is not None
                    else self._cache.get_or_build(sources, settings)
                )
            except Exception as exc:  # a build bug must not escape into the host
                logger.exception("knowledge index build failed")
                self._last_error = f"{type(exc).__name__}: {exc}"
            else:
                self._issues = result.issues
                if result.knowledge_base is None:
                    errors = [i for i in result.issues if i.severity == "error"]
                    self._last_error = (
                        f"validation failed with {len(errors)} error(s); "
                        "the snapshot was not installed"
                    )
                    logger.warning(_invalid_sources(errors, sources))
                else:
                    self._serve_built(result.knowledge_base)
            finally:
                self._built.set()

    def _serve_built(self, snapshot: KnowledgeBase) -> None:
        """Serve a freshly built snapshot; if its vectors fail, keep the previous pair."""
        try:
            self._serve(snapshot, None)
        except Exception as exc:  # vectors failed: the snapshot is never installed alone
            logger.warning("knowledge index not installed: its vectors failed: %s", exc)
            self._last_error = f"vectors: {type(exc).__name__}: {exc}"

    @classmethod
    def from_snapshot(
        cls,
        path: str | os.PathLike[str],
        config: GroundingConfig | None = None,
        *,
        expected_manifest_hash: str | None = None,
        verify: Literal["full", "manifest"] = "full",
        clock: Callable[[], float] = time.perf_counter,
    ) -> GroundingEngine:
        """An engine serving a snapshot saved by ``KnowledgeBase.save``: ready at once.

        The snapshot's own index settings (fields, weights, BM25, analyzer) apply;
        ``config`` gives the per-turn settings (limits, boosts, blocked domains,
        context, timeout) and must not list sources. Raises IndexFormatError when the
        snapshot cannot be trusted (see ``KnowledgeBase.load`` for ``verify``). With
        ``config.embedder``, the vectors it holds (its ``vectors`` section, else a legacy
        ``<path>.vectors`` file, checked like the snapshot) serve when they are the
        model's; otherwise they are embedded now, and an embedding failure raises.
        """
        config = config if config is not None else GroundingConfig()
        if not isinstance(config, GroundingConfig):
            raise TypeError(f"config must be a GroundingConfig, got {type(config).__name__}")
        if config.sources:
            raise ConfigError(
                "from_snapshot serves a saved snapshot: leave GroundingConfig.sources "
                "empty, or build from sources with GroundingEngine(config)"
            )
        snapshot = KnowledgeBase.load(path, expected_manifest_hash, verify=verify)
        engine = cls(config, clock=clock)
        engine._verify = verify
        try:
            engine._install(snapshot, path)
        except BaseException:
            engine.close()
            raise
        return engine

    @classmethod
    def from_backend(
        cls,
        backend: SearchBackend,
        config: GroundingConfig | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> GroundingEngine:
        """An engine whose turns rank the entries a search backend holds (Milvus), ready
        at once; ``config`` gives the per-turn settings and must not list sources.

        Each turn is the embedded one with the backend ranking (docs/MILVUS.md,
        ``ground.backend_selection``): same filter before top-k, relevance gate, scope
        rules, expansion, budget, citations and outcome. A backend that fails mid-turn
        gives the ``backend-unavailable`` failure reason (the turn goes on without
        knowledge; ``status().last_error`` says why); nothing is returned from it.
        """
        config = config if config is not None else GroundingConfig()
        if not isinstance(config, GroundingConfig):
            raise TypeError(f"config must be a GroundingConfig, got {type(config).__name__}")
        if not isinstance(backend, SearchBackend):
            raise TypeError(f"backend must be a SearchBackend, got {type(backend).__name__}")
        if config.sources:
            raise ConfigError(
                "from_backend serves what the backend holds: leave GroundingConfig.sources "
                "empty (sync the backend with sync_milvus or groundwire export)"
            )
        engine = cls(config, clock=clock)
        engine._backend = backend
        engine._entry_count = backend.stats().count
        return engine

    @property
    def backend(self) -> SearchBackend | None:
        """The search backend turns rank on (None: the installed snapshot)."""
        return self._backend

    def _install(self, snapshot: KnowledgeBase, path: str | os.PathLike[str]) -> None:
        self._serve(snapshot, path)
        self._snapshot_path = path
        self._issues = snapshot.issues

    def _serve(self, snapshot: KnowledgeBase, path: str | os.PathLike[str] | None) -> None:
        """Swap in ``snapshot`` with its vectors (raises, installing nothing, if they fail).

        A replacement (reload, rebuild) is warmed on the caller's thread before the swap:
        turns keep the warm snapshot until the new one is ready. The first snapshot has
        none to keep serving meanwhile: it is warmed in the background (:meth:`warm`).
        """
        embedder = self._config.embedder
        vectors = None
        if embedder is not None and self._config.retrieval.hybrid.mode != "lexical":
            vectors = snapshot_vectors(snapshot, path, embedder, verify=self._verify == "full")
        quantile = self._config.retrieval.relevance.noise_quantile
        first = self._served is None
        if not first:
            warm_snapshot(snapshot, quantile)
        self._served = (snapshot, vectors)  # atomic reference swap
        self._last_error = None
        if first:
            with contextlib.suppress(RuntimeError):  # closed: turns build pools on first use
                self._warming = self._executor.submit(warm_snapshot, snapshot, quantile)

    @property
    def _snapshot(self) -> KnowledgeBase | None:
        served = self._served
        return None if served is None else served[0]

    def warm(self, timeout: float | None = None) -> bool:
        """Wait (up to ``timeout`` seconds) until the served snapshot is warm: its entries'
        labels read, the gate's noise level measured and the tenants' statistics pools
        built (docs/INDEX.md, "Turns on a delta index"); True once that has run (a
        failure there is logged and leaves the work to the turns), False on timeout or
        when nothing is served.

        Turns never need this: one that comes first does the missing work itself. A
        host that wants no turn to pay it (a server before it takes traffic) calls it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._built.wait(timeout):
            return False
        warming = self._warming
        if warming is None:  # none started: a backend has nothing to warm; else nothing served
            return self._backend is not None
        try:
            warming.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except (FutureTimeout, CancelledError):  # cancelled: closed before it ran
            return False
        return True

    def reload(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        expected_manifest_hash: str | None = None,
    ) -> GroundingStatus:
        """Open a saved snapshot (``path``, default the one served) and swap it in.

        Turns already running finish on the snapshot they started with; later turns
        use the new one. A snapshot that fails to load is not installed: the current
        one keeps serving and ``status().last_error`` says why.
        """
        self._built.wait()
        self._no_backend("reload()")
        target = path if path is not None else self._snapshot_path
        if target is None:
            raise ConfigError(
                "reload() needs a snapshot path: this engine was built from sources "
                "(use rebuild()), or pass reload(path)"
            )
        with self._build_lock:
            try:
                snapshot = KnowledgeBase.load(target, expected_manifest_hash, verify=self._verify)
                self._install(snapshot, target)
            except Exception as exc:  # a bad snapshot must not take the serving one down
                logger.warning("snapshot %s was not installed: %s", os.fspath(target), exc)
                self._last_error = f"{type(exc).__name__}: {exc}"
        return self.status()

    def _no_backend(self, what: str) -> None:
        if self._backend is not None:
            raise ConfigError(
                f"{what} swaps snapshots; this engine reads a search backend live: update "
                "the backend (sync_milvus, groundwire export) and turns see it"
            )

    def ready(self, timeout: float | None = None) -> bool:
        """Wait for the initial build (up to ``timeout`` seconds); True if a snapshot is ready."""
        self._built.wait(timeout)
        return self._snapshot is not None or self._backend is not None

    async def aready(self, timeout: float | None = None) -> bool:
        """Async :meth:`ready`."""
        return await asyncio.get_running_loop().run_in_executor(None, self.ready, timeout)

    def status(self) -> GroundingStatus:
        """Enabled, ready, entry count, last error and every validation issue."""
        snapshot = self._snapshot
        if self._backend is not None:
            with contextlib.suppress(BackendError):  # unreachable: the last count it gave
                self._entry_count = self._backend.stats().count
        return GroundingStatus(
            enabled=self._config.enabled,
            ready=snapshot is not None or self._backend is not None,
            entry_count=len(snapshot) if snapshot is not None else self._entry_count,
            last_error=self._last_error,
            validation_issues=self._issues,
        )

    def rebuild(
        self, sources: Sequence[KnowledgeSource | Mapping[str, Any]] | None = None
    ) -> GroundingStatus:
        """Build a new snapshot (from ``sources`` or the configured ones) and swap it in.

        Turns keep using the previous snapshot until the swap; a source set with
        validation errors is never installed (the previous snapshot stays). An engine
        started with :meth:`from_snapshot` and no ``sources`` reloads its snapshot.
        """
        self._built.wait()
        self._no_backend("rebuild()")
        if sources is None and not self._config.sources and self._snapshot_path is not None:
            return self.reload()
        self._build(self._config.sources if sources is None else sources)
        return self.status()

    @property
    def knowledge_base(self) -> KnowledgeBase | None:
        """The installed snapshot, if any."""
        return self._snapshot

    @property
    def config(self) -> GroundingConfig:
        """The configuration this engine was created with."""
        return self._config

    def close(self) -> None:
        """Release the worker threads (turns already running finish)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> GroundingEngine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- turns ----------------------------------------------------------------------------
    def ground(
        self,
        query: str,
        recent_turns: Sequence[Turn | Mapping[str, Any]] | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        *,
        principal: Principal | None = None,
        blocked_domains: Sequence[str] | None = None,
        retrieval: RetrievalConfig | None = None,
        context: ContextConfig | None = None,
        vectors: VectorIndex | None = None,
        embedder: Embedder | None = None,
    ) -> GroundingOutcome:
        """Ground one turn; never raises. See ``metadata.failure_reason`` when no block.

        ``principal`` is the verified principal of the request (None: anonymous, which
        sees only entries without tenant and ACL labels); ``GroundingConfig.authorize``,
        when set, is asked about it and each eligible entry.

        ``blocked_domains``, ``retrieval`` and ``context`` replace the configured ones for
        this turn only (a server takes them per request). Dense and hybrid modes
        (``retrieval.hybrid``) need ``vectors`` of the installed snapshot and the
        ``embedder`` that built them.
        """
        started = self._clock()
        if not self._config.enabled:
            return self._failure("disabled", started)
        if not isinstance(query, str) or not query.strip():
            return self._failure("empty-query", started)
        deadline = started + self._config.timeout_ms / 1000.0
        if not self._built.wait(max(0.0, deadline - self._clock())):
            return self._failure("index-not-ready", started)
        served: tuple[KnowledgeBase, VectorIndex | None] | SearchBackend | None = (
            self._served if self._backend is None else self._backend
        )
        if served is None:
            return self._failure("index-not-ready", started)
        try:
            turn = _Overrides(blocked_domains, retrieval, context, vectors, embedder)
            future = self._executor.submit(
                self._run, served, query, recent_turns, scope, principal, started, turn
            )
        except RuntimeError:  # executor closed
            return self._failure("error", started)
        try:
            return future.result(timeout=max(0.0, deadline - self._clock()))
        except FutureTimeout:
            if not future.done():  # the turn overran; a TimeoutError it raised is an error
                future.cancel()
                return self._failure("timeout", started)
            logger.exception("knowledge grounding failed; continuing without knowledge")
            return self._failure("error", started)
        except (QueryError, TypeError) as exc:  # bad input: say so without a traceback
            logger.warning("knowledge grounding skipped: %s", exc)
            return self._failure("error", started)
        except BackendError as exc:  # fail open: the turn goes on without knowledge
            logger.warning("knowledge grounding skipped: the search backend failed: %s", exc)
            self._last_error = f"backend: {exc}"
            return self._failure("backend-unavailable", started)
        except Exception:
            logger.exception("knowledge grounding failed; continuing without knowledge")
            return self._failure("error", started)

    async def aground(
        self,
        query: str,
        recent_turns: Sequence[Turn | Mapping[str, Any]] | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        *,
        principal: Principal | None = None,
        **overrides: Any,
    ) -> GroundingOutcome:
        """Async :meth:`ground` (same keyword overrides): runs off the event loop; never raises."""
        loop = asyncio.get_running_loop()
        turn = partial(self.ground, query, recent_turns, scope, principal=principal, **overrides)
        try:
            return await loop.run_in_executor(None, turn)
        except Exception:
            logger.exception("knowledge grounding failed; continuing without knowledge")
            return self._failure("error", self._clock())

    def _failure(
        self, reason: FailureReason, started: float, retrieval: RetrievalResult | None = None
    ) -> GroundingOutcome:
        if retrieval is None:
            metadata = GroundingMetadata(duration_ms=self._elapsed(started), failure_reason=reason)
        else:
            metadata = _metadata(retrieval, reason)
        return GroundingOutcome(None, metadata, retrieval)

    def _elapsed(self, started: float) -> float:
        return round((self._clock() - started) * 1000.0, 3)

    def _run(
        self,
        served: tuple[KnowledgeBase, VectorIndex | None] | SearchBackend,
        query: str,
        recent_turns: Sequence[Turn | Mapping[str, Any]] | None,
        scope: Scope | Mapping[str, Any] | None,
        principal: Principal | None,
        started: float,
        overrides: _Overrides,
    ) -> GroundingOutcome:
        config = self._config
        if principal is not None and not isinstance(principal, Principal):
            raise TypeError(f"principal must be a Principal, got {type(principal).__name__}")
        turn = overrides.settle(config)
        # retrieve() keeps only the configured number of most recent turns.
        request = RetrievalRequest(
            query=query, recent_turns=_turns(recent_turns), scope=_scope(scope), principal=principal
        )
        allow = None if config.authorize is None else predicate_of(principal, config.authorize)
        embedder = config.embedder if turn.embedder is None else turn.embedder
        if isinstance(served, tuple):
            snapshot, vectors = served
            selection = retrieve(
                snapshot,
                request,
                turn.retrieval,
                turn.blocked_domains,
                allow,
                vectors=vectors if turn.vectors is None else turn.vectors,
                embedder=embedder,
            )
        else:
            selection = select_from_backend(
                served, request, turn.retrieval, turn.blocked_domains, allow, embedder=embedder
            )
        context = assemble_context(
            [item.entry for item in selection.primary], selection.expanded, turn.context
        )
        retrieval = RetrievalResult(
            query=selection.query,
            primary=selection.primary,
            expanded=selection.expanded,
            candidate_count=selection.candidate_count,
            confidence=selection.confidence,
            context=context,
            duration_ms=self._elapsed(started),
            candidates=selection.candidates,
            authorization_errors=selection.authorization_errors,
            channels=None if selection.channels is None else selection.channels.as_dict(),
        )
        if not selection.primary:
            reason: FailureReason = "low-relevance" if selection.candidates else "no-match"
            return self._outcome(None, retrieval, reason, selection)
        if not context.text:
            return self._outcome(None, retrieval, "budget-exhausted", selection)
        block = KnowledgeBlock(
            content=context.text,
            citations=context.citations,
            metadata={"confidence": retrieval.confidence},
        )
        return self._outcome(block, retrieval, None, selection)

    def _outcome(
        self,
        block: KnowledgeBlock | None,
        retrieval: RetrievalResult,
        reason: FailureReason | None,
        selection: Selection,
    ) -> GroundingOutcome:
        report = selection.channels
        metadata = replace(
            _metadata(retrieval, reason),
            truncated_query=selection.truncated_query,
            out_of_scope_count=selection.scope_hint.count,
            out_of_scope_integrations=selection.scope_hint.integrations,
            named_integrations=selection.named_integrations,
            channels=None if report is None else report.metadata(selection.primary),
        )
        return GroundingOutcome(block, metadata, retrieval)


#: Validation errors named in the build warning; the rest are counted.
_ERRORS_NAMED = 3


def _invalid_sources(
    errors: Sequence[ValidationIssue], sources: Sequence[KnowledgeSource | Mapping[str, Any]]
) -> str:
    """The once-per-build warning for sources that failed validation."""
    named = "; ".join(issue.describe() for issue in errors[:_ERRORS_NAMED])
    more = f" (and {len(errors) - _ERRORS_NAMED} more)" if len(errors) > _ERRORS_NAMED else ""
    origins = [s.origin for s in sources if isinstance(s, KnowledgeSource) and s.origin]
    path = os.path.dirname(origins[0]) if origins and origins[0].endswith(SOURCE_MANIFEST) else ""
    where = f"groundwire validate {path or (origins[0] if origins else 'PATH')}"
    return (
        f"knowledge base not installed: {len(errors)} validation error(s), first: {named}{more}; "
        f"list them all with '{where}' (or normalize_and_validate(sources).issues)"
    )


def _metadata(retrieval: RetrievalResult, reason: FailureReason | None) -> GroundingMetadata:
    context = retrieval.context
    return GroundingMetadata(
        selected_ids=retrieval.selected_ids,
        expanded_ids=retrieval.expanded_ids,
        candidate_count=retrieval.candidate_count,
        context_tokens=context.tokens if context else 0,
        truncated=context.truncated if context else False,
        duration_ms=retrieval.duration_ms,
        confidence=retrieval.confidence,
        failure_reason=reason,
        authorization_errors=retrieval.authorization_errors,
    )


def warm_snapshot(snapshot: KnowledgeBase, quantile: float, *, pools: bool = True) -> None:
    """Do ahead of the turns what the first turns on ``snapshot`` would: read the entries'
    labels (a loaded snapshot's decode every entry), measure the gate's noise level at
    ``quantile`` (on a delta index, a pass over every posting) and, with ``pools``, build
    the tenants' statistics pools the engine's turns read. Never raises: a failure only
    leaves that work to the turns."""
    try:
        label_index(snapshot)  # every turn's eligibility reads it
        noise_level(snapshot, quantile)
        if pools:
            warm_tenant_pools(snapshot)
    except Exception:  # a warm-up failure only costs the first turns what it would make
        logger.exception("warming the snapshot failed; its first turns will do the work themselves")
