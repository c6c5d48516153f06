"""The knowledge graph: entity and relation upserts, mentions, supersession, the boost."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_helpers import ACME, GLOBEX

from groundwire.memory import MemoryAttribute, MemoryEntity, MemoryRelation, MemoryStore
from groundwire.memory.graph import canonical_name, graph_boost, name_tokens


def rows(store: MemoryStore, sql: str, *params: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(store.path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def boost(store: MemoryStore, query: str, **caps: object) -> object:
    options: dict[str, object] = {
        "max_entities": 20,
        "max_neighbours": 50,
        "max_memories": 200,
        "deadline_ms": 10_000.0,
        "clock": store.timer,
    }
    options.update(caps)
    conn = store._connection()
    return graph_boost(conn, ACME, name_tokens(query), **options)  # type: ignore[arg-type]


@given(st.text(max_size=40))
@settings(max_examples=60, deadline=None)
def test_canonical_names_are_idempotent(name: str) -> None:
    once = canonical_name(name)
    assert canonical_name(once) == once
    assert once == once.lower().strip()
    assert "  " not in once


def test_query_tokens() -> None:
    assert name_tokens("Where's Alice's new job, at ACME-42? a b") == [
        "where",
        "alice",
        "new",
        "job",
        "at",
        "acme",
        "42",
    ]


def test_entities_insert_then_count_mentions(store: MemoryStore) -> None:
    store.remember(ACME, "m1", entities=[MemoryEntity("New  York", "place")])
    store.remember(ACME, "m2", entities=[MemoryEntity("new york")])
    store.remember(GLOBEX, "m3", entities=[MemoryEntity("New York")])  # another tenant's own row
    found = rows(
        store,
        "SELECT tenant, name, canonical_name, entity_type, mentions FROM entities ORDER BY id",
    )
    assert found == [
        ("acme", "New  York", "new york", "place", 2),
        ("globex", "New York", "new york", "", 1),
    ]


def test_a_unique_name_collision_falls_back_to_the_existing_row(store: MemoryStore) -> None:
    store.remember(ACME, "m1", entities=[MemoryEntity("Alice")])
    # Simulate a row whose canonical name no longer matches (written by another tool).
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE entities SET canonical_name = 'alice (old)' WHERE name = 'Alice'")
    conn.commit()
    conn.close()
    store.remember(ACME, "m2", entities=[MemoryEntity("Alice")])
    assert rows(store, "SELECT name, mentions FROM entities") == [("Alice", 2)]


def test_relations_average_confidence_and_count_mentions(store: MemoryStore) -> None:
    store.remember(ACME, "m1", relations=[MemoryRelation("Alice", "works_at", "Acme", 0.9)])
    store.remember(ACME, "m2", relations=[MemoryRelation("alice", "works_at", "ACME", 0.6)])
    store.remember(ACME, "m3", relations=[MemoryRelation("Alice", "works_at", "Acme", 0.3)])
    ((strength, mentions, confidence),) = rows(
        store, "SELECT strength, mentions, confidence FROM relations"
    )
    assert (strength, mentions) == (1.0, 3)
    assert confidence == pytest.approx((0.9 + 0.6 + 0.3) / 3)


def test_mentions_are_idempotent(store: MemoryStore) -> None:
    entities = [MemoryEntity("Alice", mention="alice"), MemoryEntity("Alice", mention="alice")]
    memory = store.remember(ACME, "alice again", entities=entities)
    store.remember(ACME, "alice again", entities=entities)
    assert rows(store, "SELECT memory_id, mention_text FROM memory_entity_mentions") == [
        (memory.id, "alice")
    ]


def claims(store: MemoryStore) -> list[tuple[object, ...]]:
    return rows(
        store,
        "SELECT ea.value, ea.status, (SELECT value FROM entity_attributes n WHERE n.id ="
        " ea.superseded_by) FROM entity_attributes ea ORDER BY ea.id",
    )


def test_structured_supersession_is_scoped_to_the_claim(store: MemoryStore) -> None:
    def employer(value: str, **keys: str) -> list[MemoryAttribute]:
        return [MemoryAttribute("Alice", "employment", value, **keys)]

    store.remember(ACME, "Alice works at Acme.", attributes=employer("Acme", claim_key="employer"))
    store.remember(
        ACME, "Alice joined the Berlin office.", attributes=employer("Berlin", claim_key="office")
    )
    store.remember(ACME, "Alice went to PyCon.", attributes=employer("PyCon"))  # no claim key
    store.remember(ACME, "Alice went to EuroPython.", attributes=employer("EuroPython"))
    store.remember(
        ACME, "Alice moved to Globex.", attributes=employer("Globex", claim_key="employer")
    )
    store.remember(
        ACME,
        "Alice consults for Initech on the side.",
        attributes=employer("Initech", claim_key="employer", group_key="side"),
    )
    assert claims(store) == [
        ("Acme", "superseded", "Globex"),
        ("Berlin", "active", None),
        ("PyCon", "active", None),
        ("EuroPython", "active", None),
        ("Globex", "active", None),
        ("Initech", "active", None),
    ]


def test_forgetting_the_current_claim_restores_the_previous_one(store: MemoryStore) -> None:
    store.remember(
        ACME,
        "Alice works at Acme.",
        attributes=[MemoryAttribute("Alice", "employer", "Acme", claim_key="c")],
    )
    newer = store.remember(
        ACME,
        "Alice moved to Globex.",
        attributes=[MemoryAttribute("Alice", "employer", "Globex", claim_key="c")],
    )
    store.forget(ACME, newer.id)
    assert claims(store) == [("Acme", "active", None), ("Globex", "deleted", None)]


def test_reprocessing_a_memory_does_not_supersede_itself(store: MemoryStore) -> None:
    attribute = [MemoryAttribute("Alice", "employer", "Acme", claim_key="c")]
    store.remember(ACME, "Alice works at Acme.", attributes=attribute)
    store.remember(ACME, "Alice works at Acme.", attributes=attribute)
    assert claims(store) == [("Acme", "active", None)]


@pytest.fixture
def hub_store(store: MemoryStore) -> Iterator[MemoryStore]:
    """Entity e0 mentioned 30 times; e1..e25 once each; 60 relations out of e0."""
    items = [
        {"content": f"hub memory {i}", "entities": [MemoryEntity("e0")]} for i in range(30)
    ] + [
        {
            "content": f"leaf memory {i}",
            "entities": [MemoryEntity(f"e{i}")],
            "relations": [MemoryRelation("e0", "knows", f"n{j}") for j in range(i * 3, i * 3 + 3)],
        }
        for i in range(1, 26)
    ]
    store.remember_many(ACME, items)
    return store


def test_boost_finds_entities_one_hop_both_ways(store: MemoryStore) -> None:
    store.remember(
        ACME,
        "Alice is on the payments team.",
        relations=[MemoryRelation("Alice", "member_of", "Payments")],
    )
    store.remember(ACME, "Payments ships on Tuesdays.", entities=[MemoryEntity("Payments")])
    store.remember(
        ACME, "Bob leads Payments.", relations=[MemoryRelation("Bob", "leads", "Payments")]
    )
    store.remember(ACME, "Unrelated.", entities=[MemoryEntity("Zed")])
    result = boost(store, "what does Alice do")  # Alice → Payments (out) → memories
    assert len(result.entity_ids) == 1
    assert len(result.neighbour_ids) == 1
    assert len(result.memory_ids) == 3  # all three memories mentioning Alice or Payments
    reverse = boost(store, "tell me about payments")  # Payments ← Alice, Bob (in)
    assert len(reverse.neighbour_ids) == 2


def test_boost_caps(hub_store: MemoryStore) -> None:
    every = " ".join(f"e{i}" for i in range(26))
    result = boost(hub_store, every)
    assert len(result.entity_ids) == 20
    assert len(result.neighbour_ids) == 50
    assert len(result.memory_ids) <= 200
    # Entities come by mentions: the hub first.
    assert (
        result.entity_ids[0] == rows(hub_store, "SELECT id FROM entities WHERE name = 'e0'")[0][0]
    )
    small = boost(hub_store, every, max_entities=3, max_neighbours=4, max_memories=5)
    assert (len(small.entity_ids), len(small.neighbour_ids), len(small.memory_ids)) == (3, 4, 5)


def test_boost_memory_cap_counts_distinct_live_memories(store: MemoryStore) -> None:
    items = [{"content": f"memory {i}", "entities": [MemoryEntity("Alice")]} for i in range(250)]
    memories = store.remember_many(ACME, items)
    store.forget(ACME, memories[0].id)
    result = boost(store, "alice")
    assert len(result.memory_ids) == 200
    assert memories[0].id not in result.memory_ids


class StepClock:
    """A clock that advances ``step`` seconds per reading: deadlines without waiting."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_boost_deadline_returns_what_it_has(hub_store: MemoryStore) -> None:
    # Deadline 2.5 s, each clock reading +1 s: step 1 finishes, then time is up.
    result = boost(hub_store, "e0 e1", deadline_ms=2_500.0, clock=StepClock(1.0))
    assert result.timed_out
    assert result.entity_ids
    assert not result.memory_ids
    late = boost(hub_store, "e0 e1", deadline_ms=0.0, clock=StepClock(1.0))
    assert late.timed_out
    on_time = boost(hub_store, "e0 e1", clock=lambda: 0.0)
    assert not on_time.timed_out
    assert on_time.memory_ids


def test_boost_is_empty_on_error(store: MemoryStore) -> None:
    store.remember(ACME, "Alice works here.", entities=[MemoryEntity("Alice")])
    conn = store._connection()
    conn.execute("ALTER TABLE relations RENAME TO relations_gone")
    try:
        result = boost(store, "alice")
        assert result.error is not None
        assert not result.memory_ids
        assert not result.entity_ids
        recall = store.recall(ACME, "alice works")  # recall never fails because of the graph
        assert len(recall.memories) == 1
        assert recall.graph.error is not None
    finally:
        conn.execute("ALTER TABLE relations_gone RENAME TO relations")


def test_boost_respects_tenancy_and_acl(store: MemoryStore) -> None:
    store.remember(GLOBEX, "Alice at Globex.", entities=[MemoryEntity("Alice")])
    private = store.remember(
        ACME, "Alice's review.", entities=[MemoryEntity("Alice")], acl=["user:alice"]
    )
    result = boost(store, "alice")
    assert result.memory_ids == frozenset()  # ACME without subject sees neither
    assert private.id not in result.memory_ids
