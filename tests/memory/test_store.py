"""The memory store: writes, bounds, soft delete, pinning, tenancy, files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from memory_helpers import ACME, DAY, GLOBEX, OTHER_AGENT, T0, Clock, WordEmbedder

from groundwire import ConfigError, MemoryStoreError, QueryError
from groundwire.config import (
    MEMORY_MAX_BATCH,
    MEMORY_MAX_CONTENT_CHARS,
    MEMORY_MAX_ENTITIES,
    MEMORY_MAX_HINTS,
    MEMORY_MAX_METADATA_BYTES,
)
from groundwire.memory import MemoryEntity, MemoryRelation, MemoryScope, MemoryStore
from groundwire.memory.schema import LATEST_VERSION
from groundwire.memory.writes import memory_id_for


def fts_rows(store: MemoryStore, table: str = "memories_fts") -> int:
    """Rows of a full-text index, after FTS5's own check that index and content agree."""
    conn = sqlite3.connect(store.path)
    try:
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def test_remember_stores_every_field(store: MemoryStore) -> None:
    memory = store.remember(
        ACME,
        "Alice prefers email.",
        type="preference",
        importance=0.9,
        sources=["conv:D1:3"],
        metadata={"speaker": "Alice"},
        created_at=T0 - DAY,
    )
    assert memory.id == memory_id_for(ACME, "Alice prefers email.")
    assert len(memory.id) == 32
    assert int(memory.id, 16) >= 0
    assert (memory.type, memory.importance, memory.sources) == ("preference", 0.9, ("conv:D1:3",))
    assert memory.metadata == {"speaker": "Alice"}
    assert memory.created_at == T0 - DAY
    assert memory.accessed_at == T0 - DAY
    assert memory.updated_at == T0
    assert not memory.pinned
    assert not memory.deleted
    assert store.get(ACME, memory.id) == memory
    assert memory.tag == f"[MEM:{memory.id}]"


def test_the_same_content_is_one_memory_whose_sources_merge(store: MemoryStore) -> None:
    first = store.remember(ACME, "Thanks!", sources=["t1"])
    again = store.remember(ACME, "Thanks!", sources=["t2", "t1"])
    assert again.id == first.id
    assert again.sources == ("t1", "t2")
    assert store.stats(ACME)["memories"] == 1
    assert fts_rows(store) == 1


def test_forgotten_memory_revives_when_remembered_again(store: MemoryStore) -> None:
    memory = store.remember(ACME, "The office moved to Berlin.")
    assert store.forget(ACME, memory.id)
    assert store.get(ACME, memory.id) is None
    assert store.recall(ACME, "office Berlin").memories == ()
    revived = store.remember(ACME, "The office moved to Berlin.")
    assert revived.id == memory.id
    assert not revived.deleted
    assert store.recall(ACME, "office Berlin").ids == (memory.id,)


def test_forget_removes_text_hints_graph_and_vectors_in_one_transaction(
    tmp_path: Path, clock: Clock
) -> None:
    embedder = WordEmbedder()
    with MemoryStore(tmp_path / "m.db", embedder=embedder, clock=clock) as store:
        memory = store.remember(
            ACME,
            "Bob runs the payments team.",
            hints=["who leads payments"],
            entities=[MemoryEntity("Bob")],
            relations=[MemoryRelation("Bob", "leads", "Payments")],
        )
        keep = store.remember(ACME, "Carol runs design.", entities=[MemoryEntity("Bob")])
        assert fts_rows(store) == 2
        assert fts_rows(store, "memory_hints_fts") == 1
        assert store.forget(ACME, memory.id)
        assert not store.forget(ACME, memory.id)  # already gone
        assert fts_rows(store) == 1
        assert fts_rows(store, "memory_hints_fts") == 0
        for query in ("payments team", "who leads payments", "Bob"):
            assert memory.id not in store.recall(ACME, query).ids
        details = store.details(ACME, keep.id)
        assert details is not None
        assert details["entities"][0]["name"] == "Bob"
        bob = store.entities(ACME, name="bob")[0]
        assert bob["mentions"] == 1  # the forgotten memory's mention was taken back
        conn = sqlite3.connect(store.path)
        left = conn.execute(
            "SELECT COUNT(*) FROM memory_entity_mentions WHERE memory_id = ?", (memory.id,)
        ).fetchone()[0]
        conn.close()
        assert left == 0


def test_pin_and_unpin(store: MemoryStore) -> None:
    memory = store.remember(ACME, "Never deploy on Fridays.", type="constraint")
    assert store.pin(ACME, memory.id)
    assert store.get(ACME, memory.id).pinned  # type: ignore[union-attr]
    assert store.pin(ACME, memory.id, False)
    assert not store.get(ACME, memory.id).pinned  # type: ignore[union-attr]
    assert not store.pin(GLOBEX, memory.id)
    assert not store.pin(ACME, "0" * 32)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"content": ""}, "content"),
        ({"content": "x" * (MEMORY_MAX_CONTENT_CHARS + 1)}, "over the limit"),
        ({"content": "ok", "type": "rumour"}, "type='rumour'"),
        ({"content": "ok", "importance": 1.5}, "importance"),
        ({"content": "ok", "importance": float("nan")}, "importance"),
        ({"content": "ok", "pinned": "yes"}, "pinned"),
        ({"content": "ok", "acl": ["alice"]}, "ACL labels"),
        ({"content": "ok", "sources": "turn-1"}, "sources must be a list"),
        ({"content": "ok", "metadata": {"x": object()}}, "metadata is not JSON"),
        ({"content": "ok", "metadata": {"x": "y" * MEMORY_MAX_METADATA_BYTES}}, "bytes"),
        ({"content": "ok", "entities": [{"name": ""}]}, "entities[0].name"),
        ({"content": "ok", "entities": [{"nom": "x"}]}, "MemoryEntity"),
        (
            {"content": "ok", "entities": [{"name": "x"}] * (MEMORY_MAX_ENTITIES + 1)},
            "entities has",
        ),
        ({"content": "ok", "relations": [{"source": "a", "type": "", "target": "b"}]}, "type"),
        (
            {
                "content": "ok",
                "attributes": [{"entity": "a", "aspect": "b", "value": "c", "confidence": 2}],
            },
            "confidence",
        ),
        ({"content": "ok", "hints": ["h"] * (MEMORY_MAX_HINTS + 1)}, "hints has"),
        ({"content": "ok", "created_at": -1}, "created_at"),
        ({"content": "ok", "colour": "red"}, "unknown field"),
    ],
)
def test_bad_writes_fail_clearly_and_write_nothing(
    store: MemoryStore, fields: dict[str, object], message: str
) -> None:
    store.remember(ACME, "A memory that must survive.")
    with pytest.raises(QueryError, match="items\\[1\\]: .*" + message.replace("[", "\\[")):
        store.remember_many(ACME, [{"content": "first good item"}, fields])
    assert [m.content for m in store.memories(ACME)] == ["A memory that must survive."]


def test_batch_limit(store: MemoryStore) -> None:
    with pytest.raises(QueryError, match="split the batch"):
        store.remember_many(ACME, [{"content": f"m{i}"} for i in range(MEMORY_MAX_BATCH + 1)])


def test_a_scope_is_required(store: MemoryStore) -> None:
    with pytest.raises(QueryError, match="MemoryScope"):
        store.remember("acme", "text")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="tenant"):
        MemoryScope("", "agent")
    with pytest.raises(QueryError, match="line break"):
        MemoryScope("acme", "a\nb")


def test_tenants_and_agents_never_see_each_other(store: MemoryStore) -> None:
    ours = store.remember(ACME, "The launch code name is Bluebird.")
    theirs = store.remember(GLOBEX, "The launch code name is Redwing.")
    other = store.remember(OTHER_AGENT, "The launch code name is Greenfinch.")
    assert store.recall(ACME, "launch code name").ids == (ours.id,)
    assert store.recall(GLOBEX, "launch code name").ids == (theirs.id,)
    assert store.recall(OTHER_AGENT, "launch code name").ids == (other.id,)
    assert store.get(GLOBEX, ours.id) is None
    assert not store.forget(GLOBEX, ours.id)
    assert store.get(ACME, ours.id) is not None


def test_a_foreign_id_cannot_be_overwritten(store: MemoryStore) -> None:
    store.remember(ACME, "ours", id="shared-id")
    with pytest.raises(QueryError, match="another scope"):
        store.remember(GLOBEX, "theirs", id="shared-id")
    with pytest.raises(QueryError, match="other content"):
        store.remember(ACME, "different", id="shared-id")


def test_acl_labels_limit_who_sees_a_memory(store: MemoryStore) -> None:
    alice = MemoryScope("acme", "support-bot", "alice", ("eng",))
    bob = MemoryScope("acme", "support-bot", "bob")
    private = store.remember(ACME, "Alice's salary review is in June.", acl=["user:alice"])
    team = store.remember(ACME, "The eng offsite is in June.", acl=["group:eng"])
    public = store.remember(ACME, "The company picnic is in June.")
    assert set(store.recall(alice, "June").ids) == {private.id, team.id, public.id}
    assert store.recall(bob, "June").ids == (public.id,)
    assert store.recall(ACME, "June").ids == (public.id,)  # no subject: open memories only
    assert store.get(bob, private.id) is None
    assert not store.forget(bob, private.id)
    # Remembering the same text again cannot widen who may see it.
    store.remember(ACME, "Alice's salary review is in June.")
    assert store.get(bob, private.id) is None


def test_scope_of_a_principal() -> None:
    class Principal:
        tenant, subject, groups = "acme", "alice", ["eng", "ops", "eng"]

    scope = MemoryScope.of(Principal(), "support-bot")
    assert scope == MemoryScope("acme", "support-bot", "alice", ("eng", "ops"))
    assert scope.labels == ("user:alice", "group:eng", "group:ops")


def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m.db")
    store.close()
    store.close()
    with pytest.raises(MemoryStoreError, match="closed"):
        store.remember(ACME, "x")


def test_files_that_are_not_stores_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(MemoryStoreError, match="not a groundwire memory store"):
        MemoryStore(other)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(MemoryStoreError, match="not a usable memory store"):
        MemoryStore(garbage)
    with pytest.raises(MemoryStoreError, match="cannot be opened"):
        MemoryStore(tmp_path / "missing-folder" / "m.db")


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    MemoryStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO schema_migrations VALUES (?, 'from the future', 0)", (LATEST_VERSION + 1,)
    )
    conn.commit()
    conn.close()
    with pytest.raises(MemoryStoreError, match="newer than this groundwire"):
        MemoryStore(path)


def test_store_settings(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "m.db") as store:
        conn = sqlite3.connect(store.path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()
        assert store.schema_version == LATEST_VERSION
    with pytest.raises(ConfigError, match="MemoryRecallConfig"):
        MemoryStore(tmp_path / "m.db", recall="fast")  # type: ignore[arg-type]


def test_embeddings_are_cached_by_content_hash(tmp_path: Path) -> None:
    embedder = WordEmbedder()
    with MemoryStore(tmp_path / "m.db", embedder=embedder) as store:
        store.remember(ACME, "shared words")
        store.remember(GLOBEX, "shared words")  # same text, another tenant: no new vector
        store.remember(ACME, "shared words", sources=["again"])
        assert store.stats()["embeddings"] == 1
        assert embedder.calls == 1


def test_remote_embedders_need_consent(tmp_path: Path) -> None:
    class Remote(WordEmbedder):
        location = "remote"

    with pytest.raises(ConfigError, match="allow_remote=True"):
        MemoryStore(tmp_path / "m.db", embedder=Remote())
    MemoryStore(tmp_path / "m.db", embedder=Remote(), allow_remote_embedder=True).close()
    with pytest.raises(ConfigError, match="expected an Embedder"):
        MemoryStore(tmp_path / "m.db", embedder=object())


def test_embed_missing_backfills(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as plain:
        plain.remember(ACME, "written without an embedder")
    with MemoryStore(path, embedder=WordEmbedder()) as store:
        assert store.embed_missing(ACME) == 1
        assert store.embed_missing(ACME) == 0
        assert store.stats()["embeddings"] == 1


def test_stats_counts(store: MemoryStore) -> None:
    store.remember(ACME, "a fact", entities=[MemoryEntity("X")], hints=["what fact"])
    gone = store.remember(ACME, "gone")
    store.forget(ACME, gone.id)
    store.remember(GLOBEX, "theirs")
    stats = store.stats(ACME)
    assert (stats["memories"], stats["forgotten"], stats["entities"], stats["hints"]) == (
        1,
        1,
        1,
        1,
    )
    assert store.stats()["memories"] == 2
    assert stats["bytes"] > 0
    assert stats["schema_version"] == LATEST_VERSION


def test_the_hashing_embedder_drives_the_vector_channel(tmp_path: Path) -> None:
    from groundwire import HashingEmbedder

    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder()) as store:
        memory = store.remember(ACME, "Quarterly planning happens in the big room.")
        item = store.recall(ACME, "quarterly planning").memories[0]
        assert item.id == memory.id
        assert item.channels["vector"] > 0
