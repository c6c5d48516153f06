"""Compacting the full-text indexes: fewer FTS5 segments, fewer index lookups per recall.

Each write transaction that touches the text adds an FTS5 segment; FTS5's automerge
folds them level by level, but a store written over time keeps several (a recall then
reads each segment's index for every query term). ``optimize`` merges each index into
one segment. BM25 scores do not depend on the segment layout, so recall returns the
same memories with the same scores; only the work per recall shrinks.
"""

from __future__ import annotations

import sqlite3
from typing import Final

__all__ = ["TEXT_INDEXES", "optimize", "segments"]

#: The store's FTS5 tables (memory content, prospective hints).
TEXT_INDEXES: Final = ("memories_fts", "memory_hints_fts")


def segments(conn: sqlite3.Connection) -> dict[str, int]:
    """The number of segments each text index has now (0 for an empty index)."""
    return {
        table: int(conn.execute(f"SELECT COUNT(DISTINCT segid) FROM {table}_idx").fetchone()[0])
        for table in TEXT_INDEXES
    }


def optimize(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """Merge every text index into a single segment, inside the caller's write transaction.

    Returns the segment counts ``before`` and ``after``.
    """
    before = segments(conn)
    for table in TEXT_INDEXES:
        if before[table] > 1:
            conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
    return {"before": before, "after": segments(conn)}
