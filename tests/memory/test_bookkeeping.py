"""Recall bookkeeping: access counts are exact, cost no cache, and add up across processes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from memory_helpers import ACME, BARE, DAY, T0, Clock

from groundwire.memory import MemoryEntity, MemoryStore, bookkeeping
from groundwire.memory import recall as recall_module

SAFETY_S = 120  # a bound on waiting for children; never reached when the test passes

#: Only the hub stage on: its threshold is the derived cache under test.
HUB_ONLY = replace(BARE, hub=True)


def counts(store: MemoryStore) -> dict[str, tuple[int, float]]:
    return {m.id: (m.access_count, m.accessed_at) for m in store.memories(ACME, limit=1000)}


def test_touch_counts_each_returned_memory_once_and_nothing_else(
    store: MemoryStore, clock: Clock
) -> None:
    notes = [store.remember(ACME, f"backup note {i} about the nightly backup") for i in range(6)]
    other = store.remember(ACME, "The office plant needs water.")
    clock.now = T0 + DAY
    first = store.recall(ACME, "backup", limit=4)
    clock.now = T0 + 2 * DAY
    second = store.recall(ACME, "backup", limit=2)
    store.recall(ACME, "backup", touch=False)
    seen = counts(store)
    for note in notes:
        expected = [r for r in (first.ids, second.ids) if note.id in r]
        stamp = T0 + 2 * DAY if note.id in second.ids else T0 + DAY if expected else T0
        assert seen[note.id] == (len(expected), stamp)
    assert seen[other.id] == (0, T0)
    assert sum(n for n, _ in seen.values()) == 6  # 4 + 2: one count per returned memory


def test_touch_resets_decay_for_the_next_recall_only(store: MemoryStore, clock: Clock) -> None:
    memory = store.remember(ACME, "The VPN certificate expires every year.", importance=0.8)
    clock.now = T0 + 10 * DAY
    cfg = replace(HUB_ONLY, importance=True)
    decayed = store.recall(ACME, "vpn certificate", config=cfg)  # reads, then touches
    assert decayed.memories[0].stages["importance_effective"] == pytest.approx(0.8 * 0.95**10)
    fresh = store.recall(ACME, "vpn certificate", config=cfg, touch=False)
    assert fresh.memories[0].stages["importance_effective"] == pytest.approx(0.8)
    assert store.get(ACME, memory.id).access_count == 1  # type: ignore[union-attr]


def test_bookkeeping_keeps_the_hub_cache_and_writes_invalidate_it(
    store: MemoryStore, tmp_path: Path
) -> None:
    for i in range(11):
        store.remember(ACME, f"Acme note {i}", entities=[MemoryEntity("Acme")])
    for i in range(10):
        store.remember(ACME, f"roadmap {i}", entities=[MemoryEntity(f"Entity{i}")])
    lone = store.remember(ACME, "Roadmap review with Dana", entities=[MemoryEntity("Dana")])
    key = (ACME.tenant, ACME.agent)
    first = {i.id: i for i in store.recall(ACME, "roadmap review").memories}
    assert "hub" not in first[lone.id].stages
    cached = store.caches.hubs[key]
    store.recall(ACME, "roadmap review", session_id="s1")  # touch and session rows
    assert store.caches.hubs[key] is cached  # bookkeeping left the derived cache valid
    # Another connection makes Dana a hub: the next recall must see the new threshold.
    with MemoryStore(store.path) as other:
        for i in range(40):
            other.remember(ACME, f"Dana note {i}", entities=[MemoryEntity("Dana")])
    items = {i.id: i for i in store.recall(ACME, "roadmap review", config=HUB_ONLY).memories}
    assert items[lone.id].stages["hub"] == 0.7
    assert store.caches.hubs[key] is not cached
    # And one of this store's own writes invalidates it too.
    cached = store.caches.hubs[key]
    store.remember(ACME, "Roadmap review notes", entities=[MemoryEntity("Dana")])
    store.recall(ACME, "roadmap review", touch=False)
    assert store.caches.hubs[key] is not cached


RECALLER = textwrap.dedent(
    """
    import json, sys
    from groundwire.memory import MemoryScope, MemoryStore
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scope = MemoryScope("acme", "support-bot")
    words = ["backup", "restore", "deploy", "backup restore", "deploy backup"]
    with MemoryStore(path) as store:
        for i in range(count):
            found = store.recall(scope, words[i % len(words)], limit=3, session_id=name)
            if found.tracked:  # counts and session rows went in together
                print(json.dumps(found.ids), flush=True)
            if i % 7 == 0:
                store.remember(scope, f"{name} wrote a deploy note {i}")
    """
)


@pytest.mark.integration
def test_processes_touching_one_store_lose_no_access_count(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with MemoryStore(path) as store:
        for i in range(8):
            store.remember(ACME, f"{['backup', 'restore', 'deploy'][i % 3]} runbook step {i}")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", RECALLER, str(path), f"p{n}", "40"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    returned: dict[str, int] = {}
    for child in children:
        out, err = child.communicate(timeout=SAFETY_S)
        assert child.returncode == 0, err
        for line in out.splitlines():
            for memory_id in json.loads(line):
                returned[memory_id] = returned.get(memory_id, 0) + 1
    assert returned  # at least some bookkeeping went through under contention
    with MemoryStore(path) as store:
        stored = {m.id: m.access_count for m in store.memories(ACME, limit=1000)}
    assert {k: v for k, v in stored.items() if v} == returned


def test_bookkeeping_commits_with_the_read_in_one_transaction(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = [store.remember(ACME, f"pager rota note {i}") for i in range(3)]
    own: list[object] = []
    monkeypatch.setattr(store, "_track", lambda *a, **k: own.append(a) or True)
    result = store.recall(ACME, "pager rota", session_id="s1")
    assert result.tracked
    assert own == []  # no transaction of its own was needed
    assert {counts(store)[n.id][0] for n in notes} == {1}
    assert [r["recall_count"] for r in store.session_memories(ACME, "s1")] == [1, 1, 1]


def test_a_commit_during_the_read_sends_bookkeeping_to_its_own_transaction(
    store: MemoryStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = [store.remember(ACME, f"pager rota note {i}") for i in range(3)]
    real_run = recall_module.run

    def run_then_other_writer_commits(*args: object, **kwargs: object) -> object:
        ranked = real_run(*args, **kwargs)  # type: ignore[arg-type]
        with MemoryStore(store.path) as other:  # the read's snapshot is now stale
            other.remember(ACME, "An unrelated note from another process.")
        return ranked

    monkeypatch.setattr(recall_module, "run", run_then_other_writer_commits)
    own: list[int] = []
    real_track = store._track
    monkeypatch.setattr(store, "_track", lambda *a: own.append(1) or real_track(*a))
    clock.now = T0 + DAY
    result = store.recall(ACME, "pager rota", session_id="s1")
    assert result.tracked
    assert own == [1]  # SQLite refused to make the stale read a write
    assert {counts(store)[n.id] for n in notes} == {(1, T0 + DAY)}  # once, not lost, not twice
    assert [r["recall_count"] for r in store.session_memories(ACME, "s1")] == [1, 1, 1]


def test_a_failed_bookkeeping_write_is_undone_whole_then_written_once(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = [store.remember(ACME, f"pager rota note {i}") for i in range(3)]
    real_record = bookkeeping.record
    calls: list[int] = []

    def fails_after_the_touch(*args: Any, **kwargs: Any) -> None:
        real_record(*args, **kwargs)  # the access counts are written, then it fails
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(bookkeeping, "record", fails_after_the_touch)
    result = store.recall(ACME, "pager rota", session_id="s1")
    assert result.tracked
    assert len(calls) == 2  # in the read's transaction (undone), then in its own
    assert {counts(store)[n.id][0] for n in notes} == {1}
    assert [r["recall_count"] for r in store.session_memories(ACME, "s1")] == [1, 1, 1]


def test_an_interrupted_bookkeeping_write_leaves_nothing_half_written(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = [store.remember(ACME, f"pager rota note {i}") for i in range(3)]
    real_record = bookkeeping.record

    def interrupted(*args: Any, **kwargs: Any) -> None:
        real_record(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(bookkeeping, "record", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.recall(ACME, "pager rota", session_id="s1")
    monkeypatch.undo()
    assert {counts(store)[n.id][0] for n in notes} == {0}
    assert store.session_memories(ACME, "s1") == []
    assert store.recall(ACME, "pager rota", session_id="s1").tracked  # the store goes on
    assert {counts(store)[n.id][0] for n in notes} == {1}


def test_a_revived_memory_restarts_its_decay_and_keeps_its_count(
    store: MemoryStore, clock: Clock
) -> None:
    memory = store.remember(ACME, "The staging cluster is in Frankfurt.")
    clock.now = T0 + DAY
    store.recall(ACME, "staging cluster")
    assert counts(store)[memory.id] == (1, T0 + DAY)
    assert store.forget(ACME, memory.id)
    revived = store.remember(ACME, memory.content, created_at=T0 + 3 * DAY)
    assert (revived.access_count, revived.accessed_at) == (1, T0 + 3 * DAY)
