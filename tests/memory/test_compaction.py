"""MemoryStore.optimize: the text indexes merge into one segment; recall does not change."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from memory_helpers import ACME, BARE, GLOBEX

from groundwire.errors import MemoryStoreError
from groundwire.memory import MemoryStore
from groundwire.memory.compaction import TEXT_INDEXES, segments


def _fill(store: MemoryStore, batches: int) -> None:
    for batch in range(batches):  # each write transaction leaves its own segment
        store.remember(ACME, f"Alice met Bob about project {batch} in Berlin.")
        store.remember(GLOBEX, f"Carol reviewed budget {batch} with Dave.")
        memory = store.remember(ACME, f"Erin owns the roadmap item {batch}.")
        store.add_hints(ACME, memory.id, [f"who owns roadmap item {batch}?"])


def _recall(store: MemoryStore, query: str) -> list[tuple[str, float]]:
    return [
        (hit.memory.id, hit.score)
        for hit in store.recall(ACME, query, config=BARE, touch=False).memories
    ]


def test_optimize_on_an_empty_store(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "empty.db") as store:
        assert store.optimize() == {
            "before": dict.fromkeys(TEXT_INDEXES, 0),
            "after": dict.fromkeys(TEXT_INDEXES, 0),
        }
        assert store.recall(ACME, "anything").memories == ()


def test_optimize_merges_segments_and_keeps_scores_and_rows(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "memory.db") as store:
        _fill(store, 12)
        store.forget(ACME, store.remember(ACME, "Alice left Berlin.").id)
        queries = ("Alice Berlin project", "who owns roadmap item 3", "Carol budget")
        before = {q: _recall(store, q) for q in queries}
        counts = store.stats()
        result = store.optimize()
        assert all(n > 1 for n in result["before"].values())
        assert result["after"] == dict.fromkeys(TEXT_INDEXES, 1)
        assert {q: _recall(store, q) for q in queries} == before
        assert store.stats()["memories"] == counts["memories"]
        store.remember(ACME, "Alice returned to Berlin.")  # writes go on as before
        assert _recall(store, "Alice returned")[0][0] == _recall(store, "returned Berlin")[0][0]
    conn = sqlite3.connect(tmp_path / "memory.db")
    for table in TEXT_INDEXES:  # FTS5's own check: the index agrees with its content
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    assert segments(conn)["memories_fts"] == 2
    conn.close()


def test_optimize_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    with MemoryStore(path) as store:
        _fill(store, 3)
    with MemoryStore(path, busy_timeout_s=0.05) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        with pytest.raises(MemoryStoreError, match="locked by another writer"):
            store.optimize()
        other.execute("ROLLBACK")
        other.close()
        assert store.optimize()["after"] == dict.fromkeys(TEXT_INDEXES, 1)


def test_optimize_beside_concurrent_writers_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with MemoryStore(path) as store:
        _fill(store, 2)

        def write(start: int) -> None:
            for n in range(start, start + 20):
                store.remember(ACME, f"note {n} about the Zurich office")

        threads = [threading.Thread(target=write, args=(s,)) for s in (0, 100)]
        for thread in threads:
            thread.start()
        for _ in range(5):
            store.optimize()
        for thread in threads:
            thread.join()
        store.optimize()
        assert len(store.memories(ACME, limit=200)) == 2 * 2 + 40
        assert len(_recall(store, "Zurich office")) == 10
