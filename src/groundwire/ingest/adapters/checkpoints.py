"""The checkpoint store: delta state per source id in one SQLite file.

Per source it keeps the **cursor** (and a human-readable watermark), a **lease** (one
sync at a time), the **items** last committed (key, version, digest, group: the dedupe
and idempotency keys of originals), **tombstones** of removed items, provider **event**
keys already handled (push notifications delivered twice), the **replay checkpoint** of
the batch in flight, the documents each group composed, and an open **watch channel**.

The runner loads a checkpoint before calling the provider and commits a batch (cursor,
items, tombstones, documents, in one transaction) before acknowledging it. A process
killed between the two leaves the old cursor and the replay checkpoint: the next run
pulls the same batch again and, because custody and the evidence ledger are idempotent,
records nothing twice.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groundwire.config import SYNC_LEASE_SECONDS
from groundwire.errors import SyncError
from groundwire.ingest._sqlite import open_database, transaction
from groundwire.ingest.adapters.base import Labels, WatchChannel

__all__ = ["Checkpoint", "CheckpointStore", "ReplayCheckpoint", "StoredItem"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cursors (
    source TEXT PRIMARY KEY, cursor TEXT, watermark TEXT, committed_at REAL, batches INTEGER);
CREATE TABLE IF NOT EXISTS leases (
    source TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    source TEXT NOT NULL, key TEXT NOT NULL, grp TEXT NOT NULL, version TEXT NOT NULL,
    digest TEXT NOT NULL, size INTEGER NOT NULL, media_type TEXT NOT NULL, name TEXT NOT NULL,
    account TEXT NOT NULL, uri TEXT NOT NULL, labels TEXT NOT NULL, meta TEXT NOT NULL,
    dedupe TEXT, PRIMARY KEY (source, key));
CREATE INDEX IF NOT EXISTS items_by_group ON items (source, grp);
CREATE INDEX IF NOT EXISTS items_by_dedupe ON items (source, dedupe);
CREATE TABLE IF NOT EXISTS tombstones (
    source TEXT NOT NULL, key TEXT NOT NULL, reason TEXT NOT NULL, removed_at REAL NOT NULL,
    PRIMARY KEY (source, key));
CREATE TABLE IF NOT EXISTS events (
    source TEXT NOT NULL, event TEXT NOT NULL, seen_at REAL NOT NULL,
    PRIMARY KEY (source, event));
CREATE TABLE IF NOT EXISTS replay (
    source TEXT PRIMARY KEY, batch TEXT NOT NULL, cursor_before TEXT, changes INTEGER NOT NULL,
    started_at REAL NOT NULL, attempts INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    source TEXT NOT NULL, grp TEXT NOT NULL, document_id TEXT NOT NULL,
    PRIMARY KEY (source, grp, document_id));
CREATE TABLE IF NOT EXISTS channels (source TEXT PRIMARY KEY, channel TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class StoredItem:
    """An item as committed: enough to skip it when unchanged and to compose its group."""

    key: str
    group: str
    version: str
    digest: str
    size: int
    media_type: str
    name: str
    account: str
    uri: str
    labels: Labels
    meta: Mapping[str, Any]
    dedupe: str | None = None


@dataclass(frozen=True, slots=True)
class ReplayCheckpoint:
    """A batch that was started and never committed (its process died): it is replayed."""

    batch: str
    cursor_before: str | None
    changes: int
    started_at: float
    attempts: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What the store knows of one source before a run."""

    source: str
    cursor: str | None
    watermark: str | None
    batches: int
    replay: ReplayCheckpoint | None
    channel: WatchChannel | None


def _labels_json(labels: Labels) -> str:
    return json.dumps([labels.tenant, list(labels.acl)])


def _labels_of(text: str) -> Labels:
    tenant, acl = json.loads(text)
    return Labels(tenant, tuple(acl))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class CheckpointStore:
    """Delta state of every source, in the SQLite file at ``path`` (created when missing)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._db = open_database(self.path, _SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise SyncError(
                f"{self.path}: cannot open the checkpoint store ({exc}); check the state folder"
            ) from exc
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self._db)

    # -- lease ---------------------------------------------------------------------------------
    @contextmanager
    def lease(
        self, source: str, seconds: float = SYNC_LEASE_SECONDS, now: float | None = None
    ) -> Iterator[None]:
        """Hold ``source`` for one sync; SyncError (retryable) while another holder lives.

        A lease whose time ran out, or whose holder on this host is no longer running (a
        killed sync), is taken over.
        """
        now = time.time() if now is None else now
        host = socket.gethostname()
        with self._transaction() as db:
            row = db.execute(
                "SELECT owner, host, pid, expires_at FROM leases WHERE source = ?", (source,)
            ).fetchone()
            if row is not None and row[0] != self.owner:
                stale = row[3] <= now or (row[1] == host and not _pid_alive(row[2]))
                if not stale:
                    raise SyncError(
                        f"source {source!r} is being synced by {row[1]} (pid {row[2]}) until "
                        f"{time.strftime('%H:%M:%S', time.localtime(row[3]))}; try again later",
                        source_id=source,
                        retryable=True,
                    )
            db.execute(
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)",
                (source, self.owner, host, os.getpid(), now + seconds),
            )
        try:
            yield
        finally:
            with self._transaction() as db:
                db.execute(
                    "DELETE FROM leases WHERE source = ? AND owner = ?", (source, self.owner)
                )

    # -- reading -------------------------------------------------------------------------------
    def load(self, source: str) -> Checkpoint:
        """The cursor, replay checkpoint and channel of ``source`` (empty for a new one)."""
        db = self._db
        row = db.execute(
            "SELECT cursor, watermark, batches FROM cursors WHERE source = ?", (source,)
        ).fetchone()
        replay = db.execute(
            "SELECT batch, cursor_before, changes, started_at, attempts FROM replay "
            "WHERE source = ?",
            (source,),
        ).fetchone()
        channel = db.execute("SELECT channel FROM channels WHERE source = ?", (source,)).fetchone()
        return Checkpoint(
            source=source,
            cursor=row[0] if row else None,
            watermark=row[1] if row else None,
            batches=row[2] if row else 0,
            replay=ReplayCheckpoint(*replay) if replay else None,
            channel=WatchChannel(**json.loads(channel[0])) if channel else None,
        )

    def _item(self, row: Sequence[Any]) -> StoredItem:
        return StoredItem(
            key=row[0],
            group=row[1],
            version=row[2],
            digest=row[3],
            size=row[4],
            media_type=row[5],
            name=row[6],
            account=row[7],
            uri=row[8],
            labels=_labels_of(row[9]),
            meta=json.loads(row[10]),
            dedupe=row[11],
        )

    _COLUMNS = (
        "key, grp, version, digest, size, media_type, name, account, uri, labels, meta, dedupe"
    )

    def item(self, source: str, key: str) -> StoredItem | None:
        """The committed item ``key`` of ``source``, or None."""
        row = self._db.execute(
            f"SELECT {self._COLUMNS} FROM items WHERE source = ? AND key = ?", (source, key)
        ).fetchone()
        return self._item(row) if row else None

    def versions(self, source: str) -> dict[str, str]:
        """Every committed key of ``source`` → its version."""
        rows = self._db.execute("SELECT key, version FROM items WHERE source = ?", (source,))
        return dict(rows.fetchall())

    def members(self, source: str, group: str) -> list[StoredItem]:
        """The committed items of one group, by key."""
        rows = self._db.execute(
            f"SELECT {self._COLUMNS} FROM items WHERE source = ? AND grp = ? ORDER BY key",
            (source, group),
        )
        return [self._item(row) for row in rows.fetchall()]

    def dedupe_owner(self, source: str, dedupe: str) -> str | None:
        """The key already committed under the dedupe key ``dedupe``, or None."""
        row = self._db.execute(
            "SELECT key FROM items WHERE source = ? AND dedupe = ? ORDER BY key LIMIT 1",
            (source, dedupe),
        ).fetchone()
        return row[0] if row else None

    def documents(self, source: str, group: str) -> list[str]:
        """Documents the group composed at its last commit."""
        rows = self._db.execute(
            "SELECT document_id FROM documents WHERE source = ? AND grp = ? ORDER BY document_id",
            (source, group),
        )
        return [row[0] for row in rows.fetchall()]

    def tombstones(self, source: str) -> dict[str, str]:
        """Keys removed from ``source`` → why."""
        rows = self._db.execute("SELECT key, reason FROM tombstones WHERE source = ?", (source,))
        return dict(rows.fetchall())

    # -- writing -------------------------------------------------------------------------------
    def begin(self, source: str, batch: str, cursor_before: str | None, changes: int) -> None:
        """Record the batch in flight (the replay checkpoint), before any of it is processed."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT batch, attempts FROM replay WHERE source = ?", (source,)
            ).fetchone()
            attempts = row[1] + 1 if row is not None and row[0] == batch else 1
            db.execute(
                "INSERT OR REPLACE INTO replay VALUES (?, ?, ?, ?, ?, ?)",
                (source, batch, cursor_before, changes, time.time(), attempts),
            )

    def commit(
        self,
        source: str,
        *,
        cursor: str | None,
        watermark: str | None,
        upserts: Iterable[StoredItem] = (),
        removed: Mapping[str, str] | None = None,
        documents: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Save a processed batch atomically: cursor, items, tombstones, group documents.

        Clears the replay checkpoint. Nothing is saved when any part fails.
        """
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        source,
                        item.key,
                        item.group,
                        item.version,
                        item.digest,
                        item.size,
                        item.media_type,
                        item.name,
                        item.account,
                        item.uri,
                        _labels_json(item.labels),
                        json.dumps(dict(item.meta), sort_keys=True),
                        item.dedupe,
                    )
                    for item in upserts
                ],
            )
            keys = sorted((removed or {}).items())
            db.executemany(
                "DELETE FROM items WHERE source = ? AND key = ?", [(source, k) for k, _ in keys]
            )
            db.executemany(
                "INSERT OR REPLACE INTO tombstones VALUES (?, ?, ?, ?)",
                [(source, key, reason, now) for key, reason in keys],
            )
            for group, ids in (documents or {}).items():
                db.execute("DELETE FROM documents WHERE source = ? AND grp = ?", (source, group))
                db.executemany(
                    "INSERT INTO documents VALUES (?, ?, ?)", [(source, group, d) for d in ids]
                )
            db.execute(
                "INSERT INTO cursors VALUES (?, ?, ?, ?, 1) ON CONFLICT (source) DO UPDATE SET "
                "cursor = excluded.cursor, watermark = excluded.watermark, "
                "committed_at = excluded.committed_at, batches = batches + 1",
                (source, cursor, watermark, now),
            )
            db.execute("DELETE FROM replay WHERE source = ?", (source,))

    def claim_event(self, source: str, event: str) -> bool:
        """Whether provider event ``event`` is new (True records it; False: seen before)."""
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO events VALUES (?, ?, ?)", (source, event, time.time())
            )
            return cursor.rowcount == 1

    def save_channel(self, channel: WatchChannel | None, source: str) -> None:
        """Remember (or forget, with None) the open watch channel of ``source``."""
        with self._transaction() as db:
            if channel is None:
                db.execute("DELETE FROM channels WHERE source = ?", (source,))
            else:
                fields = {name: getattr(channel, name) for name in channel.__slots__}
                db.execute(
                    "INSERT OR REPLACE INTO channels VALUES (?, ?)", (source, json.dumps(fields))
                )

    def forget(self, source: str) -> None:
        """Drop every piece of state of ``source`` (its next run is a first, full sync)."""
        with self._transaction() as db:
            for table in ("cursors", "items", "tombstones", "events", "replay", "documents"):
                db.execute(f"DELETE FROM {table} WHERE source = ?", (source,))
