"""The audit log in a SQLite table: append-only by trigger, hash-chained like every sink.

One table, ``audit_log(sequence INTEGER PRIMARY KEY, record TEXT)``, holds each record's
canonical JSON. Triggers abort any UPDATE or DELETE, so the log cannot be changed through
SQL by mistake; the hash chain (:mod:`groundwire.access.audit`) detects a change made
around them (triggers dropped, the file edited). Writers serialize on ``BEGIN
IMMEDIATE``, so processes sharing the file append one at a time and an idempotency key
is reserved exactly once.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from groundwire.access.audit import AuditEnvelope, AuditSink
from groundwire.config import AUDIT_BUSY_TIMEOUT_S
from groundwire.errors import AuditIntegrityError, ConfigError

__all__ = ["SQLiteAuditSink"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_log (
    sequence INTEGER PRIMARY KEY,
    record TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
"""


class SQLiteAuditSink(AuditSink):
    """An audit log in the SQLite file ``path`` (created when missing). Thread-safe."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.is_symlink():
            raise ConfigError(f"{self.path}: the audit log may not be a symbolic link")
        try:
            self._db = sqlite3.connect(
                self.path,
                timeout=AUDIT_BUSY_TIMEOUT_S,
                isolation_level=None,  # explicit transactions only
                check_same_thread=False,  # guarded by the sink's lock
            )
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise ConfigError(
                f"{self.path}: cannot open the audit log ({exc}); pass a writable SQLite file"
            ) from exc
        self._db_lock = threading.Lock()

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._db_lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise AuditIntegrityError(
                    f"{self.path}: cannot lock the audit log ({exc})"
                ) from exc
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _read_from(self, sequence: int, *, refresh: bool) -> list[str]:
        try:
            rows = self._db.execute(
                "SELECT record FROM audit_log WHERE sequence >= ? ORDER BY sequence", (sequence,)
            ).fetchall()
        except sqlite3.Error as exc:
            raise AuditIntegrityError(f"{self.path}: cannot read the audit log ({exc})") from exc
        if not all(isinstance(row[0], str) for row in rows):
            raise AuditIntegrityError(f"{self.path}: an audit record is not text")
        return [row[0] for row in rows]

    def _write(self, line: str, record: AuditEnvelope) -> None:
        try:
            self._db.execute(
                "INSERT INTO audit_log(sequence, record) VALUES (?, ?)", (record.sequence, line)
            )
        except sqlite3.Error as exc:
            raise AuditIntegrityError(
                f"{self.path}: cannot append to the audit log ({exc})"
            ) from exc

    def close(self) -> None:
        """Close the database connection."""
        with self._db_lock:
            self._db.close()
