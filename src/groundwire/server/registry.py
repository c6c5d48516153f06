"""The knowledge bases a server serves, by name, each swapped atomically on reload.

Each name holds one :class:`Served` generation: an immutable snapshot with its engine
(entries) or its chunks (documents) and, when the server embeds, its vectors. A request
takes a :meth:`Registry.lease` on the current generation and uses only it from start to
end, so every response comes from exactly one snapshot (its ``snapshot`` field,
``<kb>@<generation>``, names it). :meth:`Registry.reload` opens the source again — off the request
path — and swaps the reference; the previous generation keeps serving the requests that
hold it and is closed when the last one ends. A source that fails to open (a snapshot
that fails its checks, entries that fail validation) is not installed: the current
generation keeps serving and the reload reports why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from groundwire import (
    Embedder,
    GroundingEngine,
    GroundwireError,
    KnowledgeBase,
    SkippedSource,
    ValidationIssue,
    VectorIndex,
)
from groundwire.server.problems import Problem

__all__ = ["Opened", "Opener", "Registry", "Served", "Source"]

logger = logging.getLogger("groundwire.server")

Kind = Literal["knowledge", "documents"]


@dataclass(frozen=True, slots=True)
class Opened:
    """A source opened once: the snapshot, how to ground in it, and what it was made of.

    ``engine`` grounds entries (``kind="knowledge"``); documents are grounded by
    evidence retrieval over ``kb`` (``engine`` None). ``vectors`` and ``embedder`` enable
    ``mode=dense|hybrid``.
    """

    kb: KnowledgeBase
    kind: Kind
    engine: GroundingEngine | None = None
    vectors: VectorIndex | None = None
    embedder: Embedder | None = None
    files: int = 0
    chunks: int = 0
    skipped: tuple[SkippedSource, ...] = ()
    issues: tuple[ValidationIssue, ...] = ()

    def close(self) -> None:
        """Release the engine's worker threads."""
        if self.engine is not None:
            self.engine.close()


#: Opens a source again (at start and on every reload); raises GroundwireError when the
#: source cannot be served.
Opener = Callable[[], Opened]


@dataclass(frozen=True, slots=True)
class Source:
    """A knowledge base to serve: its name, where it comes from, how to open it."""

    name: str
    origin: str
    open: Opener


@dataclass(eq=False)
class Served:
    """One generation of a served knowledge base (leased by requests while they run)."""

    name: str
    origin: str
    opened: Opened
    generation: int
    loaded_at: float  # Unix seconds
    leases: int = 0
    retired: bool = False
    integrations: tuple[str, ...] = field(default=())
    domains: tuple[str, ...] = field(default=())

    @property
    def snapshot(self) -> str:
        """This generation's name: ``<kb>@<generation>``."""
        return f"{self.name}@{self.generation}"

    @property
    def kb(self) -> KnowledgeBase:
        return self.opened.kb

    def age(self, now: float | None = None) -> float:
        """Seconds since this generation was installed."""
        return max(0.0, (time.time() if now is None else now) - self.loaded_at)


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What a reload did: installed a new generation, or kept the current one and why."""

    name: str
    reloaded: bool
    generation: int
    error: str | None = None
    issues: tuple[ValidationIssue, ...] = ()


def _facets(kb: KnowledgeBase) -> tuple[tuple[str, ...], tuple[str, ...]]:
    integrations = sorted({name.casefold() for entry in kb for name in entry.integrations})
    domains = sorted({entry.domain for entry in kb if entry.domain})
    return tuple(integrations), tuple(domains)


class Registry:
    """Named knowledge bases, each one current generation, swapped atomically."""

    def __init__(self, sources: Sequence[Source]) -> None:
        names = [source.name for source in sources]
        if not names:
            raise ValueError("a server needs at least one knowledge base")
        if len(set(names)) != len(names):
            dupes = sorted({name for name in names if names.count(name) > 1})
            raise ValueError(f"knowledge base names must be unique: {dupes} given twice")
        self._sources = {source.name: source for source in sources}
        self._current: dict[str, Served] = {}
        self._lock = threading.Lock()  # guards leases and swaps
        self._reloading = {name: threading.Lock() for name in names}
        self._last_error: dict[str, str | None] = dict.fromkeys(names)

    # -- lifecycle ------------------------------------------------------------------------
    def open_all(self) -> None:
        """Open every source (the first generation); raises what the first failure raised."""
        for name in self._sources:
            self._install(name, self._sources[name].open())

    def _install(self, name: str, opened: Opened) -> Served:
        integrations, domains = _facets(opened.kb)
        with self._lock:
            previous = self._current.get(name)
            served = Served(
                name,
                self._sources[name].origin,
                opened,
                generation=1 if previous is None else previous.generation + 1,
                loaded_at=time.time(),
                integrations=integrations,
                domains=domains,
            )
            self._current[name] = served  # the atomic swap: later leases get the new one
            self._last_error[name] = None
            if previous is not None:
                previous.retired = True
                if previous.leases == 0:
                    previous.opened.close()
        return served

    def close(self) -> None:
        """Close every generation (the server is stopping)."""
        with self._lock:
            for served in self._current.values():
                served.retired = True
                served.opened.close()

    # -- reading --------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        """Whether every knowledge base has a current generation."""
        return len(self._current) == len(self._sources)

    @property
    def names(self) -> tuple[str, ...]:
        """Names in the order they were given (the first is the default)."""
        return tuple(self._sources)

    def resolve(self, name: str | None, allowed: Callable[[str], bool] | None = None) -> str:
        """``name``, or the default when None; a 404/422 problem for an unknown one."""
        if name is None:
            for candidate in self._sources:
                if allowed is None or allowed(candidate):
                    return candidate
            return next(iter(self._sources))  # the grant check answers 403 for it
        if name not in self._sources:
            raise Problem(
                404,
                "unknown-kb",
                f"no knowledge base {name!r}; this server has: {', '.join(self._sources)}",
                field="kb",
            )
        return name

    def current(self, name: str) -> Served:
        """The current generation of ``name`` (for status; requests use :meth:`lease`)."""
        served = self._current.get(name)
        if served is None:
            raise Problem(503, "not-ready", f"knowledge base {name!r} is not open yet")
        return served

    def last_error(self, name: str) -> str | None:
        """Why the last reload of ``name`` was not installed, or None."""
        return self._last_error[name]

    @contextmanager
    def lease(self, name: str) -> Iterator[Served]:
        """The current generation of ``name``, kept open until the block ends."""
        with self._lock:
            served = self.current(name)
            served.leases += 1
        try:
            yield served
        finally:
            with self._lock:
                served.leases -= 1
                if served.retired and served.leases == 0:
                    served.opened.close()

    # -- reloading ------------------------------------------------------------------------
    def reload(self, name: str) -> ReloadResult:
        """Open ``name``'s source again and swap it in; on failure keep the current one."""
        with self._reloading[name]:  # one reload of a name at a time
            try:
                opened = self._sources[name].open()
            except GroundwireError as exc:
                return self._failed(name, f"{type(exc).__name__}: {exc}", exc)
            except Exception as exc:  # a bug in an opener must not take the server down
                logger.exception("reloading knowledge base %s failed", name)
                return self._failed(name, f"{type(exc).__name__}: {exc}", exc)
            served = self._install(name, opened)
            return ReloadResult(name, True, served.generation, None, opened.issues)

    def _failed(self, name: str, error: str, exc: Exception) -> ReloadResult:
        logger.warning("knowledge base %s was not reloaded: %s", name, error)
        self._last_error[name] = error
        issues = tuple(getattr(exc, "issues", ()) or ())
        generation = self._current[name].generation if name in self._current else 0
        return ReloadResult(name, False, generation, error, issues)
