"""Warming a snapshot ahead of the turns: a reload is warm before it is served, the first
snapshot warms in the background, ``warm()`` waits for it, and a failure costs nothing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import groundwire.ground.engine as engine_module
from groundwire import GroundingConfig, GroundingEngine, KnowledgeBase, load_sources
from groundwire.index.cache import BuildResult, SnapshotCache

#: Safety net for waits on events a test sets itself; never reached when the test passes.
SAFETY_SECONDS = 30


class BlockingCache(SnapshotCache):
    """A private snapshot cache whose builds wait until the test sets ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def get_or_build(self, *args: Any, **kwargs: Any) -> BuildResult:
        self.entered.set()
        self.release.wait(SAFETY_SECONDS)
        return super().get_or_build(*args, **kwargs)


def saved(tmp_path: Path, name: str, source: dict[str, Any]) -> Path:
    folder = tmp_path / name
    KnowledgeBase.from_sources([source]).save(folder)
    return folder


@pytest.fixture
def two_snapshots(
    tmp_path: Path,
    entry_factory: Callable[..., dict[str, Any]],
    source_factory: Callable[..., dict[str, Any]],
) -> tuple[Path, Path]:
    first = source_factory(entry_factory("ops.keys", title="Keys", summary="Rotate keys monthly."))
    second = source_factory(
        entry_factory("ops.keys", title="Keys", summary="Rotate keys weekly."),
        entry_factory("ops.tokens", title="Tokens", summary="Tokens expire after a day."),
    )
    return saved(tmp_path, "first", first), saved(tmp_path, "second", second)


def record_warm_ups(
    monkeypatch: pytest.MonkeyPatch, engine: GroundingEngine
) -> list[tuple[KnowledgeBase, KnowledgeBase | None]]:
    """From now on, each warm-up's snapshot beside the one ``engine`` served meanwhile."""
    seen: list[tuple[KnowledgeBase, KnowledgeBase | None]] = []
    real = engine_module.noise_level

    def noise(kb: KnowledgeBase, quantile: float) -> float:
        seen.append((kb, engine.knowledge_base))
        return real(kb, quantile)

    monkeypatch.setattr(engine_module, "noise_level", noise)
    return seen


def test_a_reload_is_warmed_before_it_is_served(
    two_snapshots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_snapshots
    with GroundingEngine.from_snapshot(first, GroundingConfig()) as engine:
        assert engine.warm(SAFETY_SECONDS)
        old = engine.knowledge_base
        seen = record_warm_ups(monkeypatch, engine)
        status = engine.reload(second)
        assert status.last_error is None
        assert status.entry_count == 2
        new = engine.knowledge_base
        assert new is not old
        # Warmed once, on the new snapshot, while the old one was still served.
        assert len(seen) == 1
        assert seen[0][0] is new
        assert seen[0][1] is old
        assert engine.warm(0)
        outcome = engine.ground("when do tokens expire")
        assert outcome.metadata.selected_ids == ("ops.tokens",)


def test_a_rebuild_is_warmed_before_it_is_served(
    make_engine: Callable[..., GroundingEngine],
    entry_factory: Callable[..., dict[str, Any]],
    source_factory: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = source_factory(entry_factory("ops.keys", title="Keys", summary="Rotate keys."))
    engine = make_engine(GroundingConfig(sources=[source]))
    assert engine.warm(SAFETY_SECONDS)
    old = engine.knowledge_base
    seen = record_warm_ups(monkeypatch, engine)
    changed = source_factory(
        entry_factory("ops.keys", title="Keys", summary="Rotate keys."),
        entry_factory("ops.vpn", title="VPN", summary="The VPN needs a token."),
    )
    status = engine.rebuild([changed])
    assert status.last_error is None
    assert status.entry_count == 2
    assert [(kb is engine.knowledge_base, served is old) for kb, served in seen] == [(True, True)]


def test_the_first_snapshot_warms_in_the_background_and_warm_waits_for_it(
    two_snapshots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = two_snapshots
    entered, release = threading.Event(), threading.Event()
    real = engine_module.noise_level

    def noise(kb: KnowledgeBase, quantile: float) -> float:
        entered.set()
        release.wait(SAFETY_SECONDS)
        return real(kb, quantile)

    monkeypatch.setattr(engine_module, "noise_level", noise)
    engine = GroundingEngine.from_snapshot(first, GroundingConfig())
    try:
        assert entered.wait(SAFETY_SECONDS)  # from_snapshot returned while it runs
        assert engine.status().ready
        assert engine.warm(0) is False  # not yet
        release.set()
        assert engine.warm(SAFETY_SECONDS) is True
        assert engine.ground("rotate keys").metadata.selected_ids == ("ops.keys",)
    finally:
        release.set()
        engine.close()


def test_a_failed_warm_up_is_logged_and_the_turns_do_the_work(
    two_snapshots: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = two_snapshots
    calls: list[int] = []
    real = engine_module.noise_level

    def noise(kb: KnowledgeBase, quantile: float) -> float:
        calls.append(1)
        if len(calls) <= 2:  # the first snapshot's warm-up, then the reload's
            raise RuntimeError("disk went away")
        return real(kb, quantile)

    monkeypatch.setattr(engine_module, "noise_level", noise)
    with (
        caplog.at_level(logging.ERROR, logger="groundwire"),
        GroundingEngine.from_snapshot(first, GroundingConfig()) as engine,
    ):
        assert engine.warm(SAFETY_SECONDS)  # finished, though it failed
        assert engine.reload(second).last_error is None  # a failed warm-up installs
        outcome = engine.ground("when do tokens expire")
        assert outcome.metadata.selected_ids == ("ops.tokens",)
    failures = [r for r in caplog.records if "warming the snapshot failed" in r.getMessage()]
    assert len(failures) == 2


def test_warm_without_a_snapshot_is_false(make_engine: Callable[..., GroundingEngine]) -> None:
    broken = {"id": "ops", "version": "1", "entries": [{"id": "bad id!"}]}
    engine = make_engine(GroundingConfig(sources=[broken]))
    assert engine.ready(SAFETY_SECONDS) is False
    assert engine.warm(SAFETY_SECONDS) is False


def test_warm_times_out_while_the_first_build_runs(
    make_engine: Callable[..., GroundingEngine],
    entry_factory: Callable[..., dict[str, Any]],
    source_factory: Callable[..., dict[str, Any]],
) -> None:
    source = source_factory(entry_factory("ops.keys", title="Keys", summary="Rotate keys."))
    blocking_cache = BlockingCache()
    engine = make_engine(GroundingConfig(sources=[source]), cache=blocking_cache)
    assert blocking_cache.entered.wait(SAFETY_SECONDS)
    assert engine.warm(0) is False
    blocking_cache.release.set()
    assert engine.warm(SAFETY_SECONDS) is True


def test_the_example_handbook_warms(handbook_path: Path) -> None:
    with GroundingEngine(GroundingConfig(sources=load_sources(handbook_path))) as engine:
        assert engine.warm(SAFETY_SECONDS) is True
