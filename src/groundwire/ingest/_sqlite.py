"""The SQLite files of the ingest layer (checkpoints, evidence ledger): open and transact."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["open_database", "transaction"]


def open_database(path: str | os.PathLike[str], schema: str) -> sqlite3.Connection:
    """A connection (autocommit; WAL; fsync on commit) with ``schema`` applied.

    Raises OSError or sqlite3.Error; callers turn them into their domain's error.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(target, isolation_level=None, timeout=30.0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(schema)
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (joined when one is already open); rolled back on error."""
    if db.in_transaction:
        yield db
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
