"""Forward-only migrations: every committed fixture opens and upgrades without losing a row."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from memory_helpers import ACME

from groundwire.config import MEMORY_FTS_AUTOMERGE
from groundwire.memory import MemoryScope, MemoryStore
from groundwire.memory.compaction import TEXT_INDEXES
from groundwire.memory.schema import LATEST_VERSION, MIGRATIONS, current_version, migrate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "memory"
VERSIONS = [number for number, _, _ in MIGRATIONS]
TABLES = (
    "memories",
    "memory_access",
    "memory_acl",
    "sessions",
    "session_memories",
    "embeddings",
    "entities",
    "entity_terms",
    "relations",
    "memory_entity_mentions",
    "aspects",
    "entity_attributes",
    "memory_hints",
    "memory_jobs",
    "session_scores",
    "model_calls",
    "memory_proposals",
    "memory_audit",
    "pipeline_counters",
)


def counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {
            t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in TABLES
            if t in present
        }
    finally:
        conn.close()


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    assert list(range(1, LATEST_VERSION + 1)) == VERSIONS


def test_there_is_a_fixture_for_every_version() -> None:
    assert sorted(p.name for p in FIXTURES.glob("memory-v*.sqlite")) == [
        f"memory-v{v}.sqlite" for v in VERSIONS
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_fixture_upgrades_without_losing_a_row(tmp_path: Path, version: int) -> None:
    path = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / f"memory-v{version}.sqlite", path)
    before = counts(path)
    conn = sqlite3.connect(path)
    assert current_version(conn) == version
    conn.close()
    with MemoryStore(path) as store:
        assert store.schema_version == LATEST_VERSION
        after = counts(path)
        assert {t: after[t] for t in before} == before  # nothing lost
        # Text search still agrees with the rows: the fixture's memories are recalled.
        assert len(store.recall(ACME, "deploy freeze friday").memories) == 1
        alice = MemoryScope("acme", "support-bot", "alice")
        assert len(store.recall(alice, "alice email").memories) >= 1
        assert store.recall(ACME, "alice email").ids.count("0" * 31 + "1") == 0  # ACL kept
        # And the upgraded file takes new writes of every kind.
        store.remember(
            ACME, "New after the upgrade.", hints=["what is new"], entities=[{"name": "Alice"}]
        )
        assert len(store.recall(ACME, "what is new").memories) == 1
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    applied = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    conn.close()
    assert applied == VERSIONS


def access_of(store: MemoryStore) -> dict[str, tuple[float, int]]:
    return {
        m.id: (m.accessed_at, m.access_count)
        for scope in (ACME, MemoryScope("acme", "support-bot", "alice"), GLOBEX)
        for m in store.memories(scope, limit=100)
    }


GLOBEX = MemoryScope("globex", "support-bot")


@pytest.mark.parametrize("version", [v for v in VERSIONS if v < 4])
def test_access_times_and_counts_move_to_their_table_unchanged(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / f"memory-v{version}.sqlite", path)
    conn = sqlite3.connect(path)
    with conn:  # counts and times as an old groundwire would have left them
        conn.execute("UPDATE memories SET access_count = seq * 3, accessed_at = 1.5e9 + seq")
    old = {
        r[0]: (r[1], r[2])
        for r in conn.execute("SELECT id, accessed_at, access_count FROM memories")
    }
    conn.close()
    with MemoryStore(path) as store:
        assert access_of(store) == old
        # A new memory gets its access row at once: accessed when it was created.
        memory = store.remember(ACME, "Written after the upgrade.", created_at=1.6e9)
        assert (memory.accessed_at, memory.access_count) == (1.6e9, 0)
    conn = sqlite3.connect(path)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(memories)")}
    conn.close()
    assert not {"accessed_at", "access_count"} & columns  # one place holds them now


def test_the_v4_fixture_keeps_its_access_rows(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "memory-v4.sqlite", path)
    with MemoryStore(path) as store:
        assert sorted(access_of(store).values()) == [(1_700_000_010.0 + n, n) for n in range(4)]


def test_migrating_twice_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, str(path), target=1) == 1
    assert migrate(conn, str(path)) == LATEST_VERSION
    assert migrate(conn, str(path)) == LATEST_VERSION
    conn.close()


def test_a_failed_migration_leaves_the_previous_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import groundwire.memory.schema as schema

    path = tmp_path / "m.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, str(path), target=1)
    broken = (*MIGRATIONS[:1], (2, "broken", ("CREATE TABLE x (a)", "THIS IS NOT SQL")))
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    with pytest.raises(sqlite3.OperationalError):
        schema.migrate(conn, str(path), target=2)
    assert current_version(conn) == 1
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'x'").fetchone()[0] == 0
    conn.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_an_upgraded_store_runs_the_write_pipeline(tmp_path: Path, version: int) -> None:
    from groundwire import CallableProvider, MemoryPipeline

    path = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / f"memory-v{version}.sqlite", path)

    def model(request: object) -> str:
        kind = request.metadata["groundwire"]  # type: ignore[attr-defined]
        return '{"facts": []}' if kind == "memory-extract" else '{"score": 0.5}'

    with MemoryStore(path) as store, MemoryPipeline(store, CallableProvider(model)) as pipeline:
        pipeline.end_session(ACME, "s1")
        outcomes = {o.kind: o for o in pipeline.run_pending()}
        assert {o.state for o in outcomes.values()} == {"done"}
        feedback = outcomes["session_feedback"].result
        score = outcomes["continuity_score"].result
        with store._read() as conn:
            weight = conn.execute("SELECT MAX(weight) FROM aspects").fetchone()[0]
    if version == 1:  # no graph yet, no score yet
        assert feedback == {"aspects_updated": 0, "fts_confirmations": 0, "decayed_aspects": 0,
                            "propagated_attributes": 0}  # fmt: skip
        assert score is not None
        assert score["score"] == 0.5
    elif version == 2:  # the legacy extract job runs; the injected memory confirms 'employer'
        assert outcomes["extract"].result == {"facts": 0, "flagged": 0}
        assert feedback is not None
        assert feedback["aspects_updated"] == 1
        assert weight == 1.0 + 0.1
        assert score == {"skipped": "the session is already scored"}
    else:  # v3 already applied feedback and holds a score: nothing happens twice
        assert feedback == {"skipped": "feedback already applied"}
        assert weight == 1.0
        assert score == {"skipped": "the session is already scored"}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_upgraded_fixture_merges_its_text_indexes_sooner(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "memory.db"
    shutil.copy(FIXTURES / f"memory-v{version}.sqlite", path)
    with MemoryStore(path) as store:
        assert store.schema_version == LATEST_VERSION
        for n in range(6):  # later writes keep merging, and recall finds them
            store.remember(MemoryScope("t", "a"), f"automerge check {n} in Lisbon")
        assert store.optimize()["after"]["memories_fts"] == 1
    conn = sqlite3.connect(path)
    for table in TEXT_INDEXES:
        config = dict(conn.execute(f"SELECT k, v FROM {table}_config").fetchall())
        assert config["automerge"] == MEMORY_FTS_AUTOMERGE
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    conn.close()
