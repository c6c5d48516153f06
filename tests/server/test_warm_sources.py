"""A served source is warm before it is installed: at start (before the server listens)
and on a reload (while the current generation keeps serving), no request pays the
first-turn work (labels, the gate's noise level, the tenants' pools)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import groundwire.ground.engine as engine_module
from groundwire import KnowledgeBase
from groundwire.config import DEFAULT_GATE_NOISE_QUANTILE
from groundwire.server.sources import open_path

SOURCE = {
    "id": "ops",
    "version": "1",
    "entries": [
        {"id": "ops.keys", "title": "Keys", "summary": "Rotate signing keys monthly.",
         "domain": "ops", "integrations": []},
    ],
}  # fmt: skip


def docs_folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keys.md").write_text("# Keys\n\nRotate signing keys monthly.\n", encoding="utf-8")
    return docs


@pytest.fixture
def warmed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[KnowledgeBase, float]]:
    """Every noise level measured, with its snapshot and quantile."""
    seen: list[tuple[KnowledgeBase, float]] = []
    real = engine_module.noise_level

    def noise(kb: KnowledgeBase, quantile: float) -> float:
        seen.append((kb, quantile))
        return real(kb, quantile)

    monkeypatch.setattr(engine_module, "noise_level", noise)
    return seen


def test_a_knowledge_snapshot_is_opened_warm(
    tmp_path: Path, warmed: list[tuple[KnowledgeBase, float]]
) -> None:
    folder = tmp_path / "snapshot"
    KnowledgeBase.from_sources([SOURCE]).save(folder)
    opened = open_path(folder, timeout_ms=10_000)
    try:
        assert opened.engine is not None
        assert [kb for kb, _ in warmed] == [opened.kb]  # done before open_path returned
        assert opened.engine.warm(0) is True
    finally:
        opened.close()


def test_knowledge_sources_are_opened_warm(
    tmp_path: Path, warmed: list[tuple[KnowledgeBase, float]]
) -> None:
    source = tmp_path / "ops.json"
    source.write_text(json.dumps(SOURCE), encoding="utf-8")
    opened = open_path(source, timeout_ms=10_000)
    try:
        assert [kb for kb, _ in warmed] == [opened.kb]
    finally:
        opened.close()


def test_documents_are_opened_warm(
    tmp_path: Path, warmed: list[tuple[KnowledgeBase, float]]
) -> None:
    opened = open_path(docs_folder(tmp_path), timeout_ms=10_000)
    assert opened.kind == "documents"
    assert warmed == [(opened.kb, DEFAULT_GATE_NOISE_QUANTILE)]


def test_a_failed_warm_up_still_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(kb: KnowledgeBase, quantile: float) -> float:
        raise OSError("the disk went away")

    monkeypatch.setattr(engine_module, "noise_level", broken)
    opened = open_path(docs_folder(tmp_path), timeout_ms=10_000)
    assert len(opened.kb) == 1
    assert any("warming the snapshot failed" in r.getMessage() for r in caplog.records)
