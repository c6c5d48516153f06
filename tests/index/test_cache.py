"""The process-level snapshot cache: hits, misses, LRU eviction, failures, concurrency."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

import groundwire.index.cache as cache_module
from groundwire import (
    AnalyzerConfig,
    BuildResult,
    ConfigError,
    IndexSettings,
    KnowledgeBase,
    KnowledgeSource,
    SnapshotCache,
    get_or_build,
)

EntryFactory = Callable[..., dict[str, Any]]
SourceFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def sources(
    entry_factory: EntryFactory, source_factory: SourceFactory
) -> Callable[..., list[dict[str, Any]]]:
    """Fresh (equal but not identical) source lists; keyword arguments change one thing."""

    def make(
        body: str = "Refunds go to the original card.",
        aliases: tuple[str, ...] = ("money back",),
        status: str = "active",
        version: str = "v1",
        source_id: str = "kb",
    ) -> list[dict[str, Any]]:
        return [
            source_factory(
                entry_factory(
                    "billing.refunds",
                    title="Refund policy",
                    body=body,
                    aliases=list(aliases),
                    status=status,
                ),
                entry_factory("billing.invoices", title="Invoices"),
                source_id=source_id,
                version=version,
            )
        ]

    return make


def test_identical_sources_share_one_snapshot(sources: Callable[..., Any]) -> None:
    cache = SnapshotCache()
    first = cache.get_or_build(sources())
    second = cache.get_or_build(sources())
    assert isinstance(first, BuildResult)
    assert isinstance(first.knowledge_base, KnowledgeBase)
    assert first.cache_hit is False
    assert second.cache_hit is True
    assert second.knowledge_base is first.knowledge_base
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)
    third = cache.get_or_build(sources())
    assert third.knowledge_base is first.knowledge_base
    assert (cache.hits, cache.misses) == (2, 1)


def test_equivalent_knowledge_source_object_hits(
    sources: Callable[..., Any],
) -> None:
    cache = SnapshotCache()
    first = cache.get_or_build(sources())
    raw = sources()[0]
    as_object = KnowledgeSource(raw["id"], raw["version"], tuple(raw["entries"]), origin="x.json")
    second = cache.get_or_build([as_object])
    assert second.cache_hit
    assert second.knowledge_base is first.knowledge_base


@pytest.mark.parametrize(
    "change",
    [
        {"body": "Refunds are credited to the account balance."},
        {"aliases": ("cash back",)},
        {"aliases": ()},
        {"status": "draft"},
        {"version": "v2"},
        {"source_id": "kb2"},
    ],
    ids=["body", "alias", "no-alias", "status", "version", "source-id"],
)
def test_changed_sources_miss(sources: Callable[..., Any], change: dict[str, Any]) -> None:
    cache = SnapshotCache()
    original = cache.get_or_build(sources())
    changed = cache.get_or_build(sources(**change))
    assert changed.cache_hit is False
    assert changed.knowledge_base is not original.knowledge_base
    assert (cache.hits, cache.misses, len(cache)) == (0, 2, 2)
    # both stay cached
    assert cache.get_or_build(sources()).knowledge_base is original.knowledge_base
    assert cache.get_or_build(sources(**change)).knowledge_base is changed.knowledge_base


def test_changed_content_is_visible_in_the_new_snapshot(sources: Callable[..., Any]) -> None:
    cache = SnapshotCache()
    cache.get_or_build(sources())
    changed = cache.get_or_build(sources(body="Refunds arrive as store vouchers."))
    kb = changed.knowledge_base
    assert kb is not None
    assert kb.get("billing.refunds").body == "Refunds arrive as store vouchers."  # type: ignore[union-attr]
    assert [hit.id for hit in kb.search("vouchers")] == ["billing.refunds"]


@pytest.mark.parametrize(
    "settings",
    [
        IndexSettings(field_weights={"title": 1.0, "summary": 1.0, "body": 1.0}),
        IndexSettings(k1=1.2),
        IndexSettings(b=0.5),
        IndexSettings(scoring="bm25f"),
        IndexSettings(analyzer=AnalyzerConfig(stem=False)),
        IndexSettings(analyzer=AnalyzerConfig(stopwords=frozenset({"refund"}))),
        IndexSettings(analyzer=AnalyzerConfig(fold_diacritics=True)),
    ],
    ids=["weights", "k1", "b", "scoring", "stem", "stopwords", "fold"],
)
def test_changed_settings_miss(sources: Callable[..., Any], settings: IndexSettings) -> None:
    cache = SnapshotCache()
    default = cache.get_or_build(sources())
    other = cache.get_or_build(sources(), settings)
    assert other.cache_hit is False
    assert other.knowledge_base is not default.knowledge_base
    assert other.knowledge_base is not None
    assert other.knowledge_base.settings == settings
    # equal settings built separately are the same key
    again = cache.get_or_build(sources(), IndexSettings(**_fields_of(settings)))
    assert again.cache_hit
    assert again.knowledge_base is other.knowledge_base


def _fields_of(settings: IndexSettings) -> dict[str, Any]:
    return {
        "field_weights": dict(settings.field_weights),
        "k1": settings.k1,
        "b": settings.b,
        "scoring": settings.scoring,
        "analyzer": settings.analyzer,
    }


def test_default_settings_equal_explicit_defaults(sources: Callable[..., Any]) -> None:
    cache = SnapshotCache()
    first = cache.get_or_build(sources())
    assert cache.get_or_build(sources(), IndexSettings()).knowledge_base is first.knowledge_base


def test_lru_eviction_at_the_limit(sources: Callable[..., Any]) -> None:
    cache = SnapshotCache(limit=2)
    a = cache.get_or_build(sources(version="a")).knowledge_base
    b = cache.get_or_build(sources(version="b")).knowledge_base
    assert len(cache) == 2
    # touch "a" so that "b" is the least recently used
    assert cache.get_or_build(sources(version="a")).knowledge_base is a
    c = cache.get_or_build(sources(version="c")).knowledge_base
    assert len(cache) == 2
    assert cache.get_or_build(sources(version="a")).knowledge_base is a
    assert cache.get_or_build(sources(version="c")).knowledge_base is c
    rebuilt = cache.get_or_build(sources(version="b"))
    assert rebuilt.cache_hit is False
    assert rebuilt.knowledge_base is not b
    assert len(cache) == 2
    # rebuilding "b" evicted "a" (least recently used after the hits on a and c)
    assert cache.get_or_build(sources(version="c")).cache_hit is True
    assert cache.get_or_build(sources(version="a")).cache_hit is False


def test_limit_one_keeps_only_the_latest(sources: Callable[..., Any]) -> None:
    cache = SnapshotCache(limit=1)
    cache.get_or_build(sources(version="a"))
    cache.get_or_build(sources(version="b"))
    assert len(cache) == 1
    assert cache.get_or_build(sources(version="b")).cache_hit
    assert not cache.get_or_build(sources(version="a")).cache_hit


def test_invalid_sources_are_not_cached(
    entry_factory: EntryFactory, source_factory: SourceFactory
) -> None:
    cache = SnapshotCache()
    invalid = [source_factory(entry_factory("a.one", kind="essay"), entry_factory("a.two"))]
    result = cache.get_or_build(invalid)
    assert result.knowledge_base is None
    assert result.cache_hit is False
    assert [issue.code for issue in result.issues] == ["kind-unsupported"]
    assert len(cache) == 0
    assert (cache.hits, cache.misses) == (0, 0)
    again = cache.get_or_build(invalid)
    assert again.knowledge_base is None
    assert again.cache_hit is False


def test_warnings_are_returned_on_build_and_hit(
    entry_factory: EntryFactory, source_factory: SourceFactory
) -> None:
    cache = SnapshotCache()
    with_warning = [source_factory(entry_factory("a.one", related=["a.none"]))]
    built = cache.get_or_build(with_warning)
    hit = cache.get_or_build(with_warning)
    assert built.knowledge_base is not None
    assert [i.code for i in built.issues] == ["related-missing"]
    assert [i.code for i in hit.issues] == ["related-missing"]
    assert hit.cache_hit


def test_clear_resets(sources: Callable[..., Any]) -> None:
    cache = SnapshotCache()
    first = cache.get_or_build(sources()).knowledge_base
    cache.get_or_build(sources())
    cache.clear()
    assert (len(cache), cache.hits, cache.misses) == (0, 0, 0)
    rebuilt = cache.get_or_build(sources())
    assert rebuilt.cache_hit is False
    assert rebuilt.knowledge_base is not first


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2", None])
def test_limit_validation(limit: Any) -> None:
    with pytest.raises(ConfigError, match="limit="):
        SnapshotCache(limit=limit)


def test_get_or_build_with_an_explicit_cache(sources: Callable[..., Any]) -> None:
    cache = SnapshotCache()
    first = get_or_build(sources(), cache=cache)
    second = get_or_build(sources(), cache=cache)
    assert second.cache_hit
    assert second.knowledge_base is first.knowledge_base
    assert cache.misses == 1


class _CountingKnowledgeBase(KnowledgeBase):
    """Counts builds; the pause keeps a build in flight while the other threads arrive."""

    builds: ClassVar[int] = 0
    lock: ClassVar[threading.Lock] = threading.Lock()
    failing: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with _CountingKnowledgeBase.lock:
            _CountingKnowledgeBase.builds += 1
        time.sleep(0.2)  # not an assertion: only widens the window for concurrent callers
        if _CountingKnowledgeBase.failing:
            raise RuntimeError("build failed")
        super().__init__(*args, **kwargs)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[_CountingKnowledgeBase]:
    monkeypatch.setattr(_CountingKnowledgeBase, "builds", 0)
    monkeypatch.setattr(_CountingKnowledgeBase, "failing", False)
    monkeypatch.setattr(cache_module, "KnowledgeBase", _CountingKnowledgeBase)
    return _CountingKnowledgeBase


def _run_threads(target: Callable[[], Any], n: int) -> tuple[list[Any], list[BaseException]]:
    barrier = threading.Barrier(n)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            value = target()
        except BaseException as exc:
            with lock:
                errors.append(exc)
        else:
            with lock:
                results.append(value)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results, errors


def test_concurrent_builds_of_one_key_run_once(
    sources: Callable[..., Any], counting: type[_CountingKnowledgeBase]
) -> None:
    cache = SnapshotCache()
    results, errors = _run_threads(lambda: cache.get_or_build(sources()), 8)
    assert errors == []
    assert len(results) == 8
    assert counting.builds == 1
    built = {id(result.knowledge_base) for result in results}
    assert len(built) == 1
    assert isinstance(results[0].knowledge_base, _CountingKnowledgeBase)
    assert sorted(result.cache_hit for result in results) == [False] + [True] * 7
    assert (cache.hits, cache.misses, len(cache)) == (7, 1, 1)


def test_concurrent_builds_of_different_keys_run_separately(
    sources: Callable[..., Any], counting: type[_CountingKnowledgeBase]
) -> None:
    cache = SnapshotCache()
    versions = iter(["a", "b", "c", "d"] * 2)
    lock = threading.Lock()

    def target() -> BuildResult:
        with lock:
            version = next(versions)
        return cache.get_or_build(sources(version=version))

    results, errors = _run_threads(target, 8)
    assert errors == []
    assert counting.builds == 4
    assert len({id(r.knowledge_base) for r in results}) == 4
    assert (cache.hits, cache.misses, len(cache)) == (4, 4, 4)


def test_a_failed_build_is_not_cached_and_can_be_retried(
    sources: Callable[..., Any], counting: type[_CountingKnowledgeBase]
) -> None:
    counting.failing = True
    cache = SnapshotCache()
    results, errors = _run_threads(lambda: cache.get_or_build(sources()), 4)
    # the builder and every caller waiting on it see the failure; nothing is cached
    assert results == []
    assert len(errors) == 4
    assert all(isinstance(e, RuntimeError) for e in errors)
    assert 1 <= counting.builds <= 4
    assert len(cache) == 0
    failed_builds = counting.builds
    counting.failing = False
    retry = cache.get_or_build(sources())
    assert retry.cache_hit is False
    assert isinstance(retry.knowledge_base, KnowledgeBase)
    assert counting.builds == failed_builds + 1
    assert cache.get_or_build(sources()).knowledge_base is retry.knowledge_base
