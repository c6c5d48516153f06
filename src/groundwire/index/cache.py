"""Process-level build cache: identical source configurations share one snapshot.

The key holds the cache schema version, the resolved index settings, every source
id and version, every entry id and a SHA-256 of the normalized content, so changed
content never reuses a stale snapshot. Bounded LRU; concurrent builds of the same
key run once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from groundwire.config import CACHE_SCHEMA_VERSION, INDEX_CACHE_LIMIT, IndexSettings
from groundwire.errors import ConfigError
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.ingest.validate import (
    ValidationReport,
    coerce_source,
    content_hash,
    normalize_and_validate,
)
from groundwire.model import KnowledgeSource, ValidationIssue
from groundwire.text import Analyzer

__all__ = ["BuildResult", "SnapshotCache", "default_cache", "get_or_build"]


@dataclass(frozen=True, slots=True)
class BuildResult:
    """A snapshot (None when validation failed), every issue, and whether it was cached."""

    knowledge_base: KnowledgeBase | None
    issues: tuple[ValidationIssue, ...]
    cache_hit: bool


def cache_key(
    report: ValidationReport, sources: Sequence[KnowledgeSource], settings: IndexSettings
) -> tuple[Hashable, ...]:
    """The identity of a snapshot built from validated sources with these settings."""
    return (
        CACHE_SCHEMA_VERSION,
        settings.key(),
        tuple((s.id, s.version) for s in sources),
        tuple(e.id for e in report.entries),
        content_hash(report.entries),
    )


class SnapshotCache:
    """A bounded, thread-safe LRU of built snapshots."""

    def __init__(self, limit: int = INDEX_CACHE_LIMIT) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"limit={limit!r} is invalid: expected an integer >= 1")
        self.limit = limit
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[Hashable, KnowledgeBase] = OrderedDict()
        self._building: dict[Hashable, Future[KnowledgeBase]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Drop every cached snapshot and reset the counters."""
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0

    def get_or_build(
        self,
        sources: Sequence[KnowledgeSource | Mapping[str, Any]],
        settings: IndexSettings | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        previous: KnowledgeBase | None = None,
    ) -> BuildResult:
        """Validate ``sources`` and return the cached snapshot or build (and cache) one.

        With blocking validation errors no snapshot is built: ``knowledge_base`` is None.
        ``previous`` (a snapshot of earlier sources with the same settings, e.g. the one
        an engine serves) is updated instead of building from scratch: only changed
        entries are analyzed, and searches equal a full build's.
        """
        settings = settings if settings is not None else IndexSettings()
        resolved = [coerce_source(s) for s in sources]
        report = normalize_and_validate(sources, Analyzer(settings.analyzer))
        if not report.ok:
            return BuildResult(None, report.issues, cache_hit=False)
        key = cache_key(report, resolved, settings)
        with self._lock:
            cached = self._items.get(key)
            if cached is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return BuildResult(cached, report.issues, cache_hit=True)
            pending = self._building.get(key)
            owner = pending is None
            if pending is None:
                pending = self._building[key] = Future()
                self.misses += 1
        if not owner:
            kb = pending.result()
            with self._lock:
                self.hits += 1
            return BuildResult(kb, report.issues, cache_hit=True)
        try:
            if previous is not None and previous.settings == settings:
                kb, _, _ = previous.update_entries(report.entries)
                kb = kb.with_issues(report.issues)
            else:
                kb = KnowledgeBase(
                    report.entries, settings, issues=report.issues, progress=progress
                )
        except BaseException as exc:
            with self._lock:
                del self._building[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            self._items[key] = kb
            self._items.move_to_end(key)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)
            del self._building[key]
        pending.set_result(kb)
        return BuildResult(kb, report.issues, cache_hit=False)


_DEFAULT = SnapshotCache()


def default_cache() -> SnapshotCache:
    """The process-wide snapshot cache."""
    return _DEFAULT


def get_or_build(
    sources: Sequence[KnowledgeSource | Mapping[str, Any]],
    settings: IndexSettings | None = None,
    *,
    cache: SnapshotCache | None = None,
) -> BuildResult:
    """Build a snapshot through the process-level cache (or the ``cache`` given)."""
    return (cache if cache is not None else _DEFAULT).get_or_build(sources, settings)
