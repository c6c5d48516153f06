"""Recall bookkeeping: access counts and times, and the session rows of the feedback loop.

A recall counts an access on every memory it returns (``memory_access``: the time feeds
importance decay) and, with a session id, records rank, injection and text hits in
``sessions`` / ``session_memories``. The rows are written in the recall's own read
transaction, made a write (:func:`record_in_read`): one transaction and one commit per
recall. When SQLite refuses that — another connection holds the write lock or has
committed since the read began — the store writes the same rows in a short transaction
of its own. Either way all of them or none are committed before ``recall`` returns.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence

from groundwire.memory.recall import Ranked
from groundwire.memory.records import MemoryScope, RecalledMemory

__all__ = ["record", "record_in_read"]

logger = logging.getLogger("groundwire")


def record_in_read(
    conn: sqlite3.Connection,
    scope: MemoryScope,
    session_id: str | None,
    result: Ranked,
    now: float,
    touch: bool,
) -> bool | None:
    """A recall's bookkeeping in the recall's own read transaction, made a write and
    committed: one transaction per recall, no busy-timeout switch.

    Upgrading a read never waits: while another connection holds the write lock, or
    once it has committed since the read began, SQLite refuses the first write at
    once (``SQLITE_BUSY``). Then nothing is written, the transaction is ended and
    None returned: the caller writes the same rows in a transaction of its own.
    """
    ranked = result.memories
    chosen = {r.memory.id for r in ranked}
    try:
        record(conn, scope, session_id, ranked, chosen, now, touch, result.seqs)
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")  # nothing half written: all of it or none
        logger.debug("memory recall bookkeeping: read not upgraded (%s)", exc)
        return None
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return True


def record(
    conn: sqlite3.Connection,
    scope: MemoryScope,
    session_id: str | None,
    ranked: Sequence[RecalledMemory],
    injected: set[str],
    now: float,
    touch: bool,
    seqs: Sequence[int] = (),
) -> None:
    """Write a recall's bookkeeping (inside the caller's transaction, which it makes a write).

    ``seqs``: the row numbers of ``ranked`` when the caller has them (one rowid lookup per
    memory instead of one by id).
    """
    if touch:
        if seqs:
            keys, where = json.dumps(list(seqs)), "seq IN (SELECT value FROM json_each(?))"
        else:
            keys = json.dumps([r.memory.id for r in ranked])
            where = "seq IN (SELECT seq FROM memories WHERE id IN (SELECT value FROM json_each(?)))"
        conn.execute(
            "UPDATE memory_access SET accessed_at = ?, access_count = access_count + 1"
            f" WHERE {where}",
            (now, keys),
        )
    if session_id is None:
        return
    conn.execute(
        "INSERT INTO sessions (id, tenant, agent, started_at, updated_at, recall_count)"
        " VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (tenant, agent, id) DO UPDATE SET"
        " recall_count = recall_count + 1, updated_at = excluded.updated_at",
        (session_id, scope.tenant, scope.agent, now, now),
    )
    conn.executemany(
        "INSERT INTO session_memories (tenant, agent, session_id, memory_id, rank, was_injected,"
        " fts_hit_count, recall_count, first_recalled_at, last_recalled_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT (tenant, agent, session_id, memory_id)"
        " DO UPDATE SET rank = MIN(rank, excluded.rank),"
        " was_injected = MAX(was_injected, excluded.was_injected),"
        " fts_hit_count = fts_hit_count + excluded.fts_hit_count,"
        " recall_count = recall_count + 1, last_recalled_at = excluded.last_recalled_at",
        [
            (
                scope.tenant,
                scope.agent,
                session_id,
                r.memory.id,
                r.rank,
                int(r.memory.id in injected),
                int("content" in r.channels or "hint" in r.channels),
                now,
                now,
            )
            for r in ranked
        ],
    )
