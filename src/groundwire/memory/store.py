"""The agent memory store: one SQLite file, shared safely by threads and processes.

WAL journal, a busy timeout, foreign keys; every write is one ``BEGIN IMMEDIATE``
transaction (writers queue instead of deadlocking), so a process killed mid-write
leaves the file as of its last commit: no half-written memory, no text index that
disagrees with the graph. Reads see a consistent snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from groundwire.config import (
    MEMORY_MAX_BATCH,
    MEMORY_STORE_BUSY_TIMEOUT_S,
    MEMORY_STORE_CACHE_KIB,
    AnalyzerConfig,
    MemoryRecallConfig,
)
from groundwire.embed import Embedder
from groundwire.errors import ConfigError, MemoryStoreError, QueryError
from groundwire.memory import bookkeeping, compaction, views, writes
from groundwire.memory import recall as _recall
from groundwire.memory.graph import visible_sql
from groundwire.memory.records import (
    Memory,
    MemoryAttribute,
    MemoryEntity,
    MemoryRecall,
    MemoryRelation,
    MemoryScope,
    check_key,
)
from groundwire.memory.schema import migrate
from groundwire.memory.vectors import checked_embedder, encode, vectors_of
from groundwire.memory.writes import MemoryInput, check_hints, prepare
from groundwire.text import Analyzer
from groundwire.text.stopwords import EXTENDED_ENGLISH

__all__ = ["MemoryStore"]

logger = logging.getLogger("groundwire")

_COLUMNS = (
    "m.id, m.tenant, m.agent, m.content, m.type, m.importance, m.created_at, m.updated_at,"
    " ma.accessed_at, ma.access_count, m.pinned, m.deleted, m.sources, m.metadata, m.acl,"
    " m.content_hash"
)
#: The memory rows with their access times and counts (every memory has one access row).
_FROM = "memories m JOIN memory_access ma ON ma.seq = m.seq"
#: Milliseconds a recall's bookkeeping write may wait for the lock before it is skipped.
_TRACK_BUSY_MS = 200


def row_memory(row: Sequence[Any]) -> Memory:
    """A :class:`Memory` from a row selected with ``_COLUMNS``."""
    return Memory(
        id=row[0],
        tenant=row[1],
        agent=row[2],
        content=row[3],
        type=row[4],
        importance=float(row[5]),
        created_at=float(row[6]),
        updated_at=float(row[7]),
        accessed_at=float(row[8]),
        access_count=int(row[9]),
        pinned=bool(row[10]),
        deleted=bool(row[11]),
        sources=tuple(json.loads(row[12])),
        metadata=json.loads(row[13]),
        acl=tuple(row[14].split("\n")) if row[14] else (),
        content_hash=row[15],
    )


def _check_scope(scope: object) -> MemoryScope:
    if not isinstance(scope, MemoryScope):
        raise QueryError(
            f"scope must be a MemoryScope(tenant, agent, ...), got {type(scope).__name__}: "
            "every read and write names whose memory it is"
        )
    return scope


class MemoryStore:
    """An agent's long-term memory in one SQLite file: memories, knowledge graph, recall.

    ``path``: the database file (created, or upgraded to the current schema). ``embedder``:
    an optional :class:`~groundwire.Embedder` enabling the vector
    channel (a remote one needs ``allow_remote_embedder=True``). ``recall``: the default
    :class:`~groundwire.MemoryRecallConfig`. ``durable=True`` syncs every commit to disk
    (survives power loss; the default survives any process crash). ``clock``: Unix
    seconds (tests pass their own). Thread-safe; close it (or use ``with``) when done.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        embedder: object | None = None,
        allow_remote_embedder: bool = False,
        recall: MemoryRecallConfig | None = None,
        durable: bool = False,
        busy_timeout_s: float = MEMORY_STORE_BUSY_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._path = os.fspath(path)
        self._embedder: Embedder | None = (
            None if embedder is None else checked_embedder(embedder, allow_remote_embedder)
        )
        if recall is not None and not isinstance(recall, MemoryRecallConfig):
            raise ConfigError(f"recall={recall!r} is invalid: expected a MemoryRecallConfig")
        self._config = recall or MemoryRecallConfig()
        self._clock = clock
        self.timer = timer  # monotonic seconds: the graph lookup's deadline
        self.analyzer = Analyzer(AnalyzerConfig(stopwords="extended"))
        self.stopwords = frozenset(self.analyzer.normalize(w) for w in EXTENDED_ENGLISH)
        self._lock = threading.RLock()
        self._writes = 0  # our own commits, part of the cache key with PRAGMA data_version
        self.caches = _recall.RecallCaches()
        try:
            conn = sqlite3.connect(
                self._path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise MemoryStoreError(
                f"memory store {self._path!r} cannot be opened ({exc}): pass a path in a "
                "writable folder"
            ) from exc
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            conn.execute(f"PRAGMA cache_size = -{MEMORY_STORE_CACHE_KIB}")
            self._version = migrate(conn, self._path)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise MemoryStoreError(
                f"{self._path!r} is not a usable memory store ({exc}): pass the path of a "
                "new file or of a store groundwire wrote"
            ) from exc
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    # -- plumbing -------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    @property
    def schema_version(self) -> int:
        """The schema version of the open file (always the latest after opening)."""
        return self._version

    @property
    def embedder(self) -> Embedder | None:
        """The embedder of the vector channel, if any."""
        return self._embedder

    @property
    def recall_config(self) -> MemoryRecallConfig:
        """The default recall configuration."""
        return self._config

    def now(self) -> float:
        """The store's clock, in Unix seconds."""
        return float(self._clock())

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MemoryStoreError(
                f"memory store {self._path!r} is closed: open a new MemoryStore to use it"
            )
        return self._conn

    @contextmanager
    def _write(self, *, bookkeeping: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock, rolled back whole on any error. ``bookkeeping``:
        it writes nothing a derived cache reads (access counts, sessions): caches stay valid."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise MemoryStoreError(
                    f"memory store {self._path!r} is locked by another writer ({exc}): retry"
                ) from exc
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            if not bookkeeping:
                self._writes += 1

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read (one deferred transaction) under the lock."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def cache_key(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """Changes whenever any connection commits: invalidates derived caches."""
        return (int(conn.execute("PRAGMA data_version").fetchone()[0]), self._writes)

    def close(self) -> None:
        """Close the file; later calls raise. Closing twice is harmless."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------
    def remember(
        self,
        scope: MemoryScope,
        content: str,
        *,
        type: str = "fact",
        importance: float | None = None,
        pinned: bool = False,
        sources: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        acl: Sequence[str] = (),
        entities: Sequence[MemoryEntity | Mapping[str, Any]] = (),
        relations: Sequence[MemoryRelation | Mapping[str, Any]] = (),
        attributes: Sequence[MemoryAttribute | Mapping[str, Any]] = (),
        hints: Sequence[str] = (),
        created_at: float | None = None,
        id: str | None = None,
    ) -> Memory:
        """Store one memory with its graph links, attributes and hints; returns it.

        ``sources`` are the ids it came from (conversation turn ids); ``acl`` its labels
        (``user:<subject>``, ``group:<name>``; none = the whole tenant). An attribute with
        a ``claim_key`` supersedes the active one in the same entity/aspect/group/claim
        slot. The same content in the same scope is the same memory (its id is a hash):
        remembering it again merges sources, links and hints, and revives it if forgotten.
        """
        fields = {
            "content": content,
            "type": type,
            "importance": importance,
            "pinned": pinned,
            "sources": sources,
            "metadata": metadata,
            "acl": acl,
            "entities": entities,
            "relations": relations,
            "attributes": attributes,
            "hints": hints,
            "created_at": created_at,
            "id": id,
        }
        return self.remember_many(scope, [fields])[0]

    def remember_many(self, scope: MemoryScope, items: Iterable[Mapping[str, Any]]) -> list[Memory]:
        """Store many memories (the fields of :meth:`remember` per item) in one transaction.
        All or nothing: one invalid item raises before anything is written."""
        scope = _check_scope(scope)
        batch = list(items)
        if len(batch) > MEMORY_MAX_BATCH:
            limit = f"over the limit of {MEMORY_MAX_BATCH}: split the batch"
            raise QueryError(f"remember_many got {len(batch)} items, {limit}")
        prepared: list[MemoryInput] = []
        for index, item in enumerate(batch):
            if not isinstance(item, Mapping):
                raise QueryError(f"items[{index}] is {type(item).__name__}: expected a dict")
            prepared.append(prepare(scope, item, f"items[{index}]: " if len(batch) > 1 else ""))
        vectors = self._embed([p.content_hash for p in prepared], [p.content for p in prepared])
        now = self.now()
        with self._write() as conn:
            for checked in prepared:
                writes.write_memory(conn, self.analyzer, scope, checked, now)
            writes.write_vectors(conn, self._embedder, vectors, now)
            rows = [self._get(conn, checked.id) for checked in prepared]
        return [row for row in rows if row is not None]

    def add_hints(self, scope: MemoryScope, memory_id: str, hints: Sequence[str]) -> int:
        """Add prospective hints (questions the memory answers); returns how many were new."""
        scope = _check_scope(scope)
        checked = check_hints(hints)
        with self._write() as conn:
            if self._visible(conn, scope, memory_id) is None:
                raise QueryError(f"no memory {memory_id!r} in this scope: check the id")
            return writes.write_hints(conn, self.analyzer, memory_id, checked, self.now())

    def _embed(self, hashes: Sequence[str], texts: Sequence[str]) -> dict[str, bytes]:
        """Vectors for texts not yet embedded by this model (computed outside any lock)."""
        embedder = self._embedder
        if embedder is None or not hashes:
            return {}
        with self._read() as conn:
            marks = ", ".join("?" for _ in hashes)
            known = {
                row[0]
                for row in conn.execute(
                    f"SELECT content_hash FROM embeddings WHERE model_id = ? AND content_hash"
                    f" IN ({marks})",
                    (embedder.model_id, *hashes),
                )
            }
        todo = {h: t for h, t in zip(hashes, texts, strict=True) if h not in known}
        if not todo:
            return {}
        matrix = vectors_of(embedder, list(todo.values()))
        return {h: encode(row) for h, row in zip(todo, matrix, strict=True)}

    def embed_missing(self, scope: MemoryScope, *, batch: int = 256) -> int:
        """Embed the scope's live memories that have no vector for this embedder yet."""
        scope = _check_scope(scope)
        if self._embedder is None:
            raise ConfigError("embed_missing needs an embedder: open the store with embedder=...")
        done = 0
        while True:
            with self._read() as conn:
                rows = conn.execute(
                    "SELECT m.content_hash, MIN(m.content) FROM memories m"
                    " WHERE m.tenant = ? AND m.agent = ? AND m.deleted = 0 AND NOT EXISTS ("
                    " SELECT 1 FROM embeddings v WHERE v.content_hash = m.content_hash"
                    " AND v.model_id = ?) GROUP BY m.content_hash LIMIT ?",
                    (scope.tenant, scope.agent, self._embedder.model_id, batch),
                ).fetchall()
            if not rows:
                return done
            vectors = self._embed([r[0] for r in rows], [r[1] for r in rows])
            with self._write() as conn:
                writes.write_vectors(conn, self._embedder, vectors, self.now())
            done += len(rows)

    def forget(self, scope: MemoryScope, memory_id: str) -> bool:
        """Soft-delete a memory: in one transaction it leaves text search, vectors, hints and
        the graph (its attributes become deleted). False when the scope cannot see it."""
        scope = _check_scope(scope)
        check_key("memory_id", memory_id)
        with self._write() as conn:
            seq = self._visible(conn, scope, memory_id)
            if seq is None:
                return False
            writes.forget_memory(conn, seq, self.now())
            return True

    def pin(self, scope: MemoryScope, memory_id: str, pinned: bool = True) -> bool:
        """Pin (or unpin) a memory: pinned memories never decay. False when not visible."""
        scope = _check_scope(scope)
        check_key("memory_id", memory_id)
        if not isinstance(pinned, bool):
            raise QueryError(f"pinned={pinned!r} is invalid: expected True or False")
        with self._write() as conn:
            seq = self._visible(conn, scope, memory_id)
            if seq is None:
                return False
            conn.execute(
                "UPDATE memories SET pinned = ?, updated_at = ? WHERE seq = ?",
                (int(pinned), self.now(), seq),
            )
            return True

    # -- reading ---------------------------------------------------------------------------------
    def _visible(self, conn: sqlite3.Connection, scope: MemoryScope, memory_id: str) -> int | None:
        condition, params = visible_sql(scope)
        row = conn.execute(
            f"SELECT m.seq FROM memories m WHERE m.id = ? AND {condition}", (memory_id, *params)
        ).fetchone()
        return None if row is None else int(row[0])

    def _get(self, conn: sqlite3.Connection, memory_id: str) -> Memory | None:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM {_FROM} WHERE m.id = ?", (memory_id,)
        ).fetchone()
        return None if row is None else row_memory(row)

    def get(self, scope: MemoryScope, memory_id: str) -> Memory | None:
        """The live memory with this id, if the scope may see it."""
        scope = _check_scope(scope)
        check_key("memory_id", memory_id)
        with self._read() as conn:
            return self._get(conn, memory_id) if self._visible(conn, scope, memory_id) else None

    def memories(self, scope: MemoryScope, *, limit: int = 100, offset: int = 0) -> list[Memory]:
        """The scope's live memories, newest first (ties on id)."""
        scope = _check_scope(scope)
        for name, value in (("limit", limit), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise QueryError(f"{name}={value!r} is invalid: expected an integer >= 0")
        condition, params = visible_sql(scope, by_scope=True)
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE {condition}"
                " ORDER BY m.created_at DESC, m.id LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
        return [row_memory(row) for row in rows]

    def details(self, scope: MemoryScope, memory_id: str) -> dict[str, Any] | None:
        """A memory with its entity mentions, attributes (and their status) and hints."""
        memory = self.get(scope, memory_id)
        if memory is None:
            return None
        with self._read() as conn:
            return {"memory": memory, **views.memory_links(conn, memory_id)}

    def recall(
        self,
        scope: MemoryScope,
        query: str,
        *,
        limit: int | None = None,
        config: MemoryRecallConfig | None = None,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        touch: bool = True,
    ) -> MemoryRecall:
        """The memories that best answer ``query``, best first, each with its ``explain``.

        Only memories ``scope`` may see take part, before any channel's top-k. ``since`` /
        ``until`` bound creation time (Unix seconds; they switch freshness shaping off).
        ``session_id`` records the recall for the write pipeline's feedback (rank,
        injection, text hits); ``touch`` counts an access on each returned memory. Both
        are best effort: a busy or failed write never fails the recall (``tracked``).
        """
        scope = _check_scope(scope)
        cfg = config if config is not None else self._config
        if not isinstance(cfg, MemoryRecallConfig):
            raise ConfigError(f"config={cfg!r} is invalid: expected a MemoryRecallConfig")
        if limit is not None:
            cfg = _recall.with_limit(cfg, limit)
        if session_id is not None:
            check_key("session_id", session_id)
        started = time.perf_counter()
        wanted = session_id is not None or touch  # any bookkeeping to write
        tracked: bool | None = False
        now = 0.0
        with self._read() as conn:
            result = _recall.run(self, conn, scope, query, cfg, since, until)
            if wanted and result.memories:
                now = self.now()
                tracked = bookkeeping.record_in_read(conn, scope, session_id, result, now, touch)
            elif wanted:
                tracked = session_id is None  # nothing to record
        if tracked is None:  # the read could not become a write: a transaction of its own
            tracked = self._track(scope, session_id, result, None, now, touch)
        duration = round((time.perf_counter() - started) * 1000.0, 3)
        return _recall.finish(result, session_id, tracked and session_id is not None, duration)

    def track(
        self,
        scope: MemoryScope,
        session_id: str | None,
        result: MemoryRecall | _recall.Ranked,
        *,
        injected: Sequence[str] | None = None,
        touch: bool = True,
    ) -> bool:
        """Record a recall: access counts and, for a session, rank, injection and text hits.

        ``injected`` are the ids actually put in a prompt (default: every returned one).
        Returns False (and logs) when the write could not be made; never raises for it.
        """
        return self._track(scope, session_id, result, injected, self.now(), touch)

    def _track(
        self,
        scope: MemoryScope,
        session_id: str | None,
        result: MemoryRecall | _recall.Ranked,
        injected: Sequence[str] | None,
        now: float,
        touch: bool,
    ) -> bool:
        """:meth:`track` in a write transaction of its own, waiting at most 200 ms."""
        ranked = result.memories
        if not ranked:
            return session_id is None
        chosen = set(injected) if injected is not None else {r.memory.id for r in ranked}
        seqs = result.seqs if isinstance(result, _recall.Ranked) else ()
        try:
            with self._lock:
                conn = self._connection()
                conn.execute(f"PRAGMA busy_timeout = {_TRACK_BUSY_MS}")
                try:
                    with self._write(bookkeeping=True) as conn:
                        bookkeeping.record(
                            conn, scope, session_id, ranked, chosen, now, touch, seqs
                        )
                finally:
                    conn.execute(f"PRAGMA busy_timeout = {int(MEMORY_STORE_BUSY_TIMEOUT_S * 1000)}")
        except (sqlite3.Error, MemoryStoreError) as exc:
            logger.warning("memory recall bookkeeping skipped: %s", exc)
            return False
        return True

    def end_session(self, scope: MemoryScope, session_id: str) -> bool:
        """Mark a session ended (the write pipeline scores it); False if unknown."""
        scope = _check_scope(scope)
        check_key("session_id", session_id)
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE sessions SET ended_at = ?, updated_at = ? WHERE tenant = ? AND agent = ?"
                " AND id = ? AND ended_at IS NULL",
                (self.now(), self.now(), scope.tenant, scope.agent, session_id),
            )
            return cursor.rowcount > 0

    def session_memories(self, scope: MemoryScope, session_id: str) -> list[dict[str, Any]]:
        """What a session recalled: memory id, best rank, injection, text hits, relevance."""
        scope = _check_scope(scope)
        check_key("session_id", session_id)
        with self._read() as conn:
            return views.session_rows(conn, scope, session_id)

    def entities(
        self, scope: MemoryScope, *, limit: int = 50, name: str | None = None
    ) -> list[dict[str, Any]]:
        """Entities by mentions (or the one named), each with its relations both ways."""
        scope = _check_scope(scope)
        with self._read() as conn:
            return views.entity_rows(conn, scope, limit, name)

    def optimize(self) -> dict[str, dict[str, int]]:
        """Merge each text index into one segment (run it after a bulk import): the same
        recall results for fewer index lookups. One write; segment counts before/after."""
        with self._write() as conn:
            return compaction.optimize(conn)

    def stats(self, scope: MemoryScope | None = None) -> dict[str, Any]:
        """Counts (of one scope, or the whole file), schema version and size on disk."""
        checked = None if scope is None else _check_scope(scope)
        with self._read() as conn:
            stats = {"schema_version": self._version, **views.counts(conn, checked)}
        files = (self._path, f"{self._path}-wal")
        stats["bytes"] = sum(os.path.getsize(p) for p in files if os.path.exists(p))
        return stats
