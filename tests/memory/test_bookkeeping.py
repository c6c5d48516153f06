"""Recall bookkeeping: access counts are exact, cost no cache, and add up across processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from memory_helpers import ACME, BARE, DAY, T0, Clock

from groundwire.memory import MemoryEntity, MemoryStore

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
