"""The memory store's SQLite layout and its forward-only migrations.

Each migration is a tuple of statements applied in one write transaction together with
its row in ``schema_migrations``; a file is upgraded by applying, in order, every
migration above its recorded version. Migrations are never edited once released: a
change of layout is a new migration. ``tests/fixtures/memory/`` keeps one database
written at each version, and a test opens and upgrades every one of them.

The full-text indexes are *external content* FTS5 tables over the ``terms`` columns
(text already analyzed by groundwire's :class:`~groundwire.Analyzer`), kept in sync by
triggers: a row enters the index when it is live and leaves it in the same statement
that soft-deletes it, so text search never sees a forgotten memory.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Final

from groundwire.config import MEMORY_FTS_AUTOMERGE
from groundwire.errors import MemoryStoreError

__all__ = ["LATEST_VERSION", "MIGRATIONS", "current_version", "migrate"]

# Terms are Analyzer output (letters, digits, combining marks, CJK bigrams) joined by
# spaces; the tokenizer only has to split on the spaces, never to fold or stem again.
_TOKENIZE: Final = "tokenize = \"unicode61 remove_diacritics 0 categories 'L* N* Co M*'\""

_V1_CORE: Final[tuple[str, ...]] = (
    "CREATE TABLE memories ("
    " seq INTEGER PRIMARY KEY,"  # the FTS rowid
    " id TEXT NOT NULL UNIQUE,"
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " content TEXT NOT NULL,"
    " terms TEXT NOT NULL,"
    " type TEXT NOT NULL CHECK (type IN"
    "  ('fact', 'preference', 'decision', 'constraint', 'event', 'episode')),"
    " importance REAL NOT NULL CHECK (importance BETWEEN 0 AND 1),"
    " created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL,"
    " accessed_at REAL NOT NULL,"
    " access_count INTEGER NOT NULL DEFAULT 0,"
    " pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),"
    " deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),"
    " deleted_at REAL,"
    " sources TEXT NOT NULL DEFAULT '[]',"  # JSON list: ids of the turns it came from
    " metadata TEXT NOT NULL DEFAULT '{}',"  # JSON object
    " acl TEXT NOT NULL DEFAULT '',"  # labels joined by newlines; '' = whole tenant
    " content_hash TEXT NOT NULL)",
    "CREATE INDEX memories_scope ON memories (tenant, agent, deleted)",
    "CREATE INDEX memories_hash ON memories (tenant, agent, content_hash)",
    "CREATE TABLE memory_acl ("
    " memory_seq INTEGER NOT NULL REFERENCES memories (seq) ON DELETE CASCADE,"
    " label TEXT NOT NULL,"
    " PRIMARY KEY (memory_seq, label)) WITHOUT ROWID",
    # The index's content is the live rows only, so FTS5's own integrity check holds.
    "CREATE VIEW live_memories AS SELECT seq, terms FROM memories WHERE deleted = 0",
    f"CREATE VIRTUAL TABLE memories_fts USING fts5(terms, content = 'live_memories',"
    f" content_rowid = 'seq', {_TOKENIZE})",
    "CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories WHEN new.deleted = 0 BEGIN"
    " INSERT INTO memories_fts (rowid, terms) VALUES (new.seq, new.terms); END",
    "CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories WHEN old.deleted = 0 BEGIN"
    " INSERT INTO memories_fts (memories_fts, rowid, terms)"
    " VALUES ('delete', old.seq, old.terms); END",
    # One trigger, two ordered statements: the old terms leave before the new ones enter.
    "CREATE TRIGGER memories_fts_update AFTER UPDATE OF terms, deleted ON memories BEGIN"
    " INSERT INTO memories_fts (memories_fts, rowid, terms)"
    " SELECT 'delete', old.seq, old.terms WHERE old.deleted = 0;"
    " INSERT INTO memories_fts (rowid, terms) SELECT new.seq, new.terms WHERE new.deleted = 0;"
    " END",
    "CREATE TABLE embeddings ("
    " content_hash TEXT NOT NULL,"
    " model_id TEXT NOT NULL,"
    " dimensions INTEGER NOT NULL CHECK (dimensions > 0),"
    " vector BLOB NOT NULL,"  # float32, little endian, normalized
    " created_at REAL NOT NULL,"
    " PRIMARY KEY (content_hash, model_id)) WITHOUT ROWID",
    "CREATE TABLE sessions ("
    " id TEXT NOT NULL,"
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " started_at REAL NOT NULL,"
    " updated_at REAL NOT NULL,"
    " ended_at REAL,"
    " recall_count INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (tenant, agent, id))",
    "CREATE TABLE session_memories ("
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " session_id TEXT NOT NULL,"
    " memory_id TEXT NOT NULL REFERENCES memories (id),"
    " rank INTEGER NOT NULL,"  # best (lowest) rank the memory reached in the session
    " was_injected INTEGER NOT NULL DEFAULT 0 CHECK (was_injected IN (0, 1)),"
    " fts_hit_count INTEGER NOT NULL DEFAULT 0,"
    " recall_count INTEGER NOT NULL DEFAULT 0,"
    " relevance_score REAL,"  # written back by continuity scoring
    " first_recalled_at REAL NOT NULL,"
    " last_recalled_at REAL NOT NULL,"
    " PRIMARY KEY (tenant, agent, session_id, memory_id),"
    " FOREIGN KEY (tenant, agent, session_id) REFERENCES sessions (tenant, agent, id))",
)

_V2_GRAPH: Final[tuple[str, ...]] = (
    "CREATE TABLE entities ("
    " id INTEGER PRIMARY KEY,"
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " name TEXT NOT NULL,"  # as first written
    " canonical_name TEXT NOT NULL,"  # lower-cased, whitespace-normalized
    " entity_type TEXT NOT NULL DEFAULT '',"
    " mentions INTEGER NOT NULL DEFAULT 1,"
    " created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL,"
    " UNIQUE (tenant, agent, canonical_name),"
    " UNIQUE (tenant, agent, name))",
    "CREATE TABLE entity_terms ("  # the query tokens an entity's canonical name holds
    " term TEXT NOT NULL,"
    " entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,"
    " PRIMARY KEY (term, entity_id)) WITHOUT ROWID",
    "CREATE TABLE relations ("
    " id INTEGER PRIMARY KEY,"
    " source_entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,"
    " target_entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,"
    " relation_type TEXT NOT NULL,"
    " strength REAL NOT NULL DEFAULT 1.0,"
    " mentions INTEGER NOT NULL DEFAULT 1,"
    " confidence REAL NOT NULL DEFAULT 1.0,"  # running average over mentions
    " created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL,"
    " UNIQUE (source_entity_id, target_entity_id, relation_type))",
    "CREATE INDEX relations_target ON relations (target_entity_id)",
    "CREATE TABLE memory_entity_mentions ("
    " memory_id TEXT NOT NULL REFERENCES memories (id),"
    " entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,"
    " mention_text TEXT NOT NULL,"
    " confidence REAL NOT NULL DEFAULT 1.0,"
    " created_at REAL NOT NULL,"
    " PRIMARY KEY (memory_id, entity_id, mention_text)) WITHOUT ROWID",
    "CREATE INDEX mentions_entity ON memory_entity_mentions (entity_id, memory_id)",
    "CREATE TABLE aspects ("
    " id INTEGER PRIMARY KEY,"
    " entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,"
    " name TEXT NOT NULL,"
    " canonical_name TEXT NOT NULL,"
    " weight REAL NOT NULL DEFAULT 1.0,"  # learned by the write pipeline's feedback
    " created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL,"
    " UNIQUE (entity_id, canonical_name))",
    "CREATE TABLE entity_attributes ("
    " id INTEGER PRIMARY KEY,"
    " entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,"
    " aspect_id INTEGER NOT NULL REFERENCES aspects (id) ON DELETE CASCADE,"
    " memory_id TEXT NOT NULL REFERENCES memories (id),"
    " group_key TEXT NOT NULL DEFAULT '',"
    " claim_key TEXT,"  # NULL: a sibling that never supersedes or is superseded
    " value TEXT NOT NULL,"
    " status TEXT NOT NULL DEFAULT 'active'"
    "  CHECK (status IN ('active', 'superseded', 'deleted')),"
    " superseded_by INTEGER REFERENCES entity_attributes (id),"
    " confidence REAL NOT NULL DEFAULT 1.0,"
    " created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL)",
    "CREATE INDEX attributes_claim ON entity_attributes (aspect_id, group_key, claim_key, status)",
    "CREATE INDEX attributes_memory ON entity_attributes (memory_id)",
    "CREATE TABLE memory_hints ("
    " id INTEGER PRIMARY KEY,"
    " memory_id TEXT NOT NULL REFERENCES memories (id),"
    " hint TEXT NOT NULL,"
    " terms TEXT NOT NULL,"
    " created_at REAL NOT NULL,"
    " UNIQUE (memory_id, hint))",
    f"CREATE VIRTUAL TABLE memory_hints_fts USING fts5(terms, content = 'memory_hints',"
    f" content_rowid = 'id', {_TOKENIZE})",
    "CREATE TRIGGER memory_hints_fts_insert AFTER INSERT ON memory_hints BEGIN"
    " INSERT INTO memory_hints_fts (rowid, terms) VALUES (new.id, new.terms); END",
    "CREATE TRIGGER memory_hints_fts_delete AFTER DELETE ON memory_hints BEGIN"
    " INSERT INTO memory_hints_fts (memory_hints_fts, rowid, terms)"
    " VALUES ('delete', old.id, old.terms); END",
    "CREATE TRIGGER memory_hints_fts_update AFTER UPDATE OF terms ON memory_hints BEGIN"
    " INSERT INTO memory_hints_fts (memory_hints_fts, rowid, terms)"
    " VALUES ('delete', old.id, old.terms);"
    " INSERT INTO memory_hints_fts (rowid, terms) VALUES (new.id, new.terms); END",
    # Forgetting a memory drops its hints and graph links in the same statement.
    "CREATE TRIGGER memories_forget_links AFTER UPDATE OF deleted ON memories"
    " WHEN old.deleted = 0 AND new.deleted = 1 BEGIN"
    " DELETE FROM memory_hints WHERE memory_id = new.id;"
    " UPDATE entities SET mentions = MAX(0, mentions - ("
    "  SELECT COUNT(*) FROM memory_entity_mentions mm"
    "  WHERE mm.memory_id = new.id AND mm.entity_id = entities.id))"
    " WHERE id IN (SELECT entity_id FROM memory_entity_mentions WHERE memory_id = new.id);"
    " DELETE FROM memory_entity_mentions WHERE memory_id = new.id;"
    # A withdrawn claim hands currentness back to the live attribute it had superseded.
    " UPDATE entity_attributes SET status = 'active', superseded_by = NULL,"
    "  updated_at = new.deleted_at"
    " WHERE status = 'superseded' AND superseded_by IN"
    "  (SELECT id FROM entity_attributes WHERE memory_id = new.id)"
    " AND memory_id IN (SELECT id FROM memories WHERE deleted = 0);"
    " UPDATE entity_attributes SET status = 'deleted', updated_at = new.deleted_at"
    " WHERE memory_id = new.id; END",
    # The queue the write pipeline's workers consume (extraction, hints, scoring, ...).
    "CREATE TABLE memory_jobs ("
    " id INTEGER PRIMARY KEY,"
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " kind TEXT NOT NULL,"
    " memory_id TEXT REFERENCES memories (id),"
    " session_id TEXT,"
    " payload TEXT NOT NULL DEFAULT '{}',"
    " state TEXT NOT NULL DEFAULT 'pending'"
    "  CHECK (state IN ('pending', 'leased', 'done', 'failed', 'dead')),"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " max_attempts INTEGER NOT NULL DEFAULT 5,"
    " run_after REAL NOT NULL,"
    " lease_owner TEXT,"
    " lease_expires_at REAL,"
    " last_error TEXT,"
    " idempotency_key TEXT UNIQUE,"
    " created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL)",
    "CREATE INDEX memory_jobs_ready ON memory_jobs (state, run_after)",
    "CREATE TABLE session_scores ("
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " session_id TEXT NOT NULL,"
    " score REAL NOT NULL CHECK (score BETWEEN 0 AND 1),"
    " confidence REAL NOT NULL CHECK (confidence BETWEEN 0 AND 1),"
    " memories_recalled INTEGER NOT NULL DEFAULT 0,"
    " memories_used INTEGER NOT NULL DEFAULT 0,"
    " novel_context_count INTEGER NOT NULL DEFAULT 0,"
    " reasoning TEXT NOT NULL DEFAULT '',"
    " continuity_reasoning TEXT NOT NULL DEFAULT '',"
    " created_at REAL NOT NULL,"
    " PRIMARY KEY (tenant, agent, session_id),"
    " FOREIGN KEY (tenant, agent, session_id) REFERENCES sessions (tenant, agent, id))",
)

_V3_PIPELINE: Final[tuple[str, ...]] = (
    # What a job did (JSON), and when its last attempt started and finished.
    "ALTER TABLE memory_jobs ADD COLUMN result TEXT",
    "ALTER TABLE memory_jobs ADD COLUMN started_at REAL",
    "ALTER TABLE memory_jobs ADD COLUMN finished_at REAL",
    "CREATE INDEX memory_jobs_lease ON memory_jobs (state, lease_expires_at)",
    # Aspect feedback is applied once per session: re-running it changes nothing.
    "ALTER TABLE sessions ADD COLUMN feedback_at REAL",
    # Every model call the pipeline made or is making (outcome NULL while it runs): the
    # per-memory and per-minute budgets count these rows; rejected output is kept here.
    "CREATE TABLE model_calls ("
    " id INTEGER PRIMARY KEY,"
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " job_id INTEGER,"
    " memory_id TEXT,"
    " session_id TEXT,"
    " kind TEXT NOT NULL,"
    " provider TEXT,"
    " model TEXT,"
    " started_at REAL NOT NULL,"
    " duration_ms REAL,"
    " outcome TEXT CHECK (outcome IN"
    "  ('ok', 'rejected', 'timeout', 'error', 'empty', 'abandoned')),"
    " error TEXT,"
    " output TEXT)",
    "CREATE INDEX model_calls_memory ON model_calls (memory_id)",
    "CREATE INDEX model_calls_started ON model_calls (started_at)",
    # What the extraction's decision step proposed, and what became of it.
    "CREATE TABLE memory_proposals ("
    " id INTEGER PRIMARY KEY,"
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " job_id INTEGER NOT NULL,"
    " position INTEGER NOT NULL,"  # the fact's index in the extraction
    " source_memory_id TEXT NOT NULL,"
    " operation TEXT NOT NULL CHECK (operation IN ('add', 'update', 'delete', 'none')),"
    " target_memory_id TEXT,"
    " content TEXT NOT NULL,"
    " fact TEXT NOT NULL,"  # JSON: the validated fact with its graph
    " reason TEXT NOT NULL DEFAULT '',"
    " status TEXT NOT NULL CHECK (status IN ('applied', 'blocked', 'shadow', 'review',"
    "  'approved', 'rejected', 'skipped')),"
    " flagged INTEGER NOT NULL DEFAULT 0 CHECK (flagged IN (0, 1)),"
    " contradiction TEXT,"  # JSON: method, contradicts, confidence, reasoning
    " result_memory_id TEXT,"
    " created_at REAL NOT NULL,"
    " resolved_at REAL,"
    " UNIQUE (job_id, position))",
    "CREATE INDEX memory_proposals_status ON memory_proposals (tenant, agent, status)",
    # Append-only: every operation applied to memory by the pipeline, with its inputs.
    "CREATE TABLE memory_audit ("
    " id INTEGER PRIMARY KEY,"
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " proposal_id INTEGER REFERENCES memory_proposals (id),"
    " job_id INTEGER,"
    " operation TEXT NOT NULL,"
    " memory_id TEXT,"
    " target_memory_id TEXT,"
    " inputs TEXT NOT NULL,"  # JSON
    " actor TEXT NOT NULL,"
    " applied_at REAL NOT NULL)",
    "CREATE INDEX memory_audit_scope ON memory_audit (tenant, agent, applied_at)",
    # Per-scope counters: feedback telemetry and the every-N-sessions decay counter.
    "CREATE TABLE pipeline_counters ("
    " tenant TEXT NOT NULL,"
    " agent TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " value INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (tenant, agent, name)) WITHOUT ROWID",
)

_V4_ACCESS: Final[tuple[str, ...]] = (
    # Recall bookkeeping rewrites these small rows instead of the wide memory rows (content,
    # terms, sources): a touch dirties and checkpoints far fewer bytes and pages.
    "CREATE TABLE memory_access ("
    " seq INTEGER PRIMARY KEY REFERENCES memories (seq) ON DELETE CASCADE,"
    " accessed_at REAL NOT NULL,"
    " access_count INTEGER NOT NULL DEFAULT 0)",
    "INSERT INTO memory_access (seq, accessed_at, access_count)"
    " SELECT seq, accessed_at, access_count FROM memories",
    "ALTER TABLE memories DROP COLUMN accessed_at",
    "ALTER TABLE memories DROP COLUMN access_count",
    # Every memory has its access row from the start (a new memory counts as accessed when
    # it was created, as before); a revived one resets its access time in writes.py.
    "CREATE TRIGGER memories_access_insert AFTER INSERT ON memories BEGIN"
    " INSERT INTO memory_access (seq, accessed_at) VALUES (new.seq, new.created_at); END",
)

# FTS5 keeps this in each index's own config table, so it holds for every connection.
_V5_AUTOMERGE: Final[tuple[str, ...]] = tuple(
    f"INSERT INTO {table} ({table}, rank) VALUES ('automerge', {MEMORY_FTS_AUTOMERGE})"
    for table in ("memories_fts", "memory_hints_fts")
)

#: Every migration, oldest first: (version, name, statements). Append only.
MIGRATIONS: Final[tuple[tuple[int, str, tuple[str, ...]], ...]] = (
    (1, "memories, full-text index, embeddings, sessions", _V1_CORE),
    (2, "knowledge graph, attributes, hints, job queue, session scores", _V2_GRAPH),
    (3, "write pipeline: job results, model calls, proposals, audit, counters", _V3_PIPELINE),
    (4, "access times and counts in their own narrow table", _V4_ACCESS),
    (5, "text indexes merge segments sooner (FTS5 automerge)", _V5_AUTOMERGE),
)
#: The version this code writes.
LATEST_VERSION: Final = MIGRATIONS[-1][0]

_LEDGER: Final = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
)


def current_version(conn: sqlite3.Connection) -> int:
    """The highest applied migration (0 for a new file)."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if found is None:
        return 0
    (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
    return int(version)


def migrate(conn: sqlite3.Connection, path: str, *, target: int = LATEST_VERSION) -> int:
    """Bring the database up to ``target``, each migration in its own write transaction.

    Concurrent openers are safe: the version is re-read after the write lock is taken.
    Returns the version reached. Raises :class:`MemoryStoreError` for a file written by a
    newer groundwire, or one that holds tables but is not a memory store.
    """
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = _check(conn, path)
            if version >= target:
                conn.execute("COMMIT")
                return version
            number, name, statements = MIGRATIONS[version]  # versions are 1, 2, ...
            conn.execute(_LEDGER)
            for statement in statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (number, name, time.time()),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def _check(conn: sqlite3.Connection, path: str) -> int:
    version = current_version(conn)
    if version > LATEST_VERSION:
        raise MemoryStoreError(
            f"memory store {path!r} has schema version {version}, newer than this "
            f"groundwire's {LATEST_VERSION}: upgrade groundwire to open it"
        )
    if version == 0:
        (tables,) = conn.execute(
            "SELECT COUNT(*) FROM sqlite_master WHERE type IN ('table', 'view')"
        ).fetchone()
        if tables:
            raise MemoryStoreError(
                f"{path!r} is a SQLite database but not a groundwire memory store (it has "
                "tables and no schema_migrations): pass the path of a new file or of a store"
            )
    return version
