"""The job queue in ``memory_jobs``: enqueue once, lease, finish, fail with backoff.

States: ``pending`` (ready at ``run_after``), ``leased`` (a worker holds it until
``lease_expires_at``), ``done``, ``failed`` (an attempt failed; ready again at
``run_after``), ``dead`` (out of attempts). A lease that expired — its worker crashed
or hung — makes the job claimable again, and that attempt counts. Every function runs
inside the caller's write transaction, so a claim, a renewal and a completion are each
atomic, and a completion commits together with the job's effects: a worker that lost
its lease (``complete`` returns False) rolls its effects back, and a job is applied once.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from groundwire.memory.records import MemoryScope

__all__ = [
    "EXTRACT",
    "FEEDBACK",
    "HINTS",
    "JOB_KINDS",
    "SCORE",
    "Job",
    "backoff",
    "claim",
    "complete",
    "enqueue",
    "fail",
    "job_counts",
    "key_for",
    "release",
    "renew",
]

EXTRACT: Final = "extract"
HINTS: Final = "prospective_index"
FEEDBACK: Final = "session_feedback"
SCORE: Final = "continuity_score"
#: Every job kind, in the order a status report lists them.
JOB_KINDS: Final = (EXTRACT, HINTS, FEEDBACK, SCORE)
#: Longest error text kept on a job row.
_ERROR_CHARS: Final = 2_000

_COLUMNS: Final = (
    "id, tenant, agent, kind, memory_id, session_id, payload, state, attempts, max_attempts,"
    " run_after, lease_owner, lease_expires_at, last_error, idempotency_key, result"
)


@dataclass(frozen=True, slots=True)
class Job:
    """One row of the queue. ``payload`` holds what the job needs beyond its ids (the
    writer's subject and groups, a transcript); ``result`` what it did, once done."""

    id: int
    tenant: str
    agent: str
    kind: str
    memory_id: str | None
    session_id: str | None
    payload: Mapping[str, Any]
    state: str
    attempts: int
    max_attempts: int
    run_after: float
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    last_error: str | None = None
    idempotency_key: str | None = None
    result: Mapping[str, Any] | None = field(default=None)

    @property
    def scope(self) -> MemoryScope:
        """The scope the job acts for: its tenant and agent, and the writer's identity."""
        groups = tuple(self.payload.get("groups", ()))
        return MemoryScope(self.tenant, self.agent, self.payload.get("subject"), groups)


def _job(row: Sequence[Any]) -> Job:
    return Job(
        id=int(row[0]),
        tenant=row[1],
        agent=row[2],
        kind=row[3],
        memory_id=row[4],
        session_id=row[5],
        payload=json.loads(row[6]),
        state=row[7],
        attempts=int(row[8]),
        max_attempts=int(row[9]),
        run_after=float(row[10]),
        lease_owner=row[11],
        lease_expires_at=None if row[12] is None else float(row[12]),
        last_error=row[13],
        idempotency_key=row[14],
        result=None if row[15] is None else json.loads(row[15]),
    )


def key_for(kind: str, *parts: str) -> str:
    """The idempotency key of a job: the same work is enqueued once."""
    return json.dumps([kind, *parts], ensure_ascii=False)


def enqueue(
    conn: sqlite3.Connection,
    scope: MemoryScope,
    kind: str,
    now: float,
    max_attempts: int,
    *,
    memory_id: str | None = None,
    session_id: str | None = None,
    payload: Mapping[str, Any] | None = None,
) -> int:
    """Queue a job unless the same work is queued already; the job's id either way.

    The idempotency key is one job per memory (extraction, hints) or per session
    (feedback, score). The payload records the writer's subject and groups.
    """
    parts = (
        [memory_id or ""]
        if kind in (EXTRACT, HINTS)
        else [scope.tenant, scope.agent, session_id or ""]
    )
    key = key_for(kind, *parts)
    body = {"subject": scope.subject, "groups": list(scope.groups), **(payload or {})}
    conn.execute(
        "INSERT INTO memory_jobs (tenant, agent, kind, memory_id, session_id, payload, state,"
        " attempts, max_attempts, run_after, idempotency_key, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)"
        " ON CONFLICT (idempotency_key) DO NOTHING",
        (
            scope.tenant,
            scope.agent,
            kind,
            memory_id,
            session_id,
            json.dumps(body, ensure_ascii=False, sort_keys=True),
            max_attempts,
            now,
            key,
            now,
            now,
        ),
    )
    (job_id,) = conn.execute(
        "SELECT id FROM memory_jobs WHERE idempotency_key = ?", (key,)
    ).fetchone()
    return int(job_id)


def get(conn: sqlite3.Connection, job_id: int) -> Job | None:
    """The job with this id, if any."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM memory_jobs WHERE id = ?", (job_id,)).fetchone()
    return None if row is None else _job(row)


def claim(
    conn: sqlite3.Connection, owner: str, now: float, lease_s: float, kinds: Sequence[str]
) -> Job | None:
    """Lease the next ready job of ``kinds`` to ``owner`` (oldest ``run_after`` first).

    Ready: pending or failed with ``run_after`` passed, or leased with an expired lease.
    A job whose expired lease was its last attempt becomes ``dead`` instead.
    """
    marks = ", ".join("?" for _ in kinds)
    while True:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM memory_jobs WHERE kind IN ({marks}) AND ("
            " (state IN ('pending', 'failed') AND run_after <= ?)"
            " OR (state = 'leased' AND lease_expires_at <= ?))"
            " ORDER BY run_after, id LIMIT 1",
            (*kinds, now, now),
        ).fetchone()
        if row is None:
            return None
        job = _job(row)
        if job.state == "leased" and job.attempts >= job.max_attempts:
            error = f"lease expired on attempt {job.attempts} of {job.max_attempts}"
            _set_final(conn, job.id, "dead", now, error=error)
            continue
        conn.execute(
            "UPDATE memory_jobs SET state = 'leased', lease_owner = ?, lease_expires_at = ?,"
            " attempts = attempts + 1, started_at = ?, updated_at = ? WHERE id = ?",
            (owner, now + lease_s, now, now, job.id),
        )
        claimed = get(conn, job.id)
        assert claimed is not None
        return claimed


def _owned(conn: sqlite3.Connection, job_id: int, owner: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM memory_jobs WHERE id = ? AND state = 'leased' AND lease_owner = ?",
        (job_id, owner),
    ).fetchone()
    return row is not None


def renew(conn: sqlite3.Connection, job_id: int, owner: str, now: float, lease_s: float) -> bool:
    """Extend ``owner``'s lease (before a model call); False when the lease was lost."""
    cursor = conn.execute(
        "UPDATE memory_jobs SET lease_expires_at = ?, updated_at = ?"
        " WHERE id = ? AND state = 'leased' AND lease_owner = ?",
        (now + lease_s, now, job_id, owner),
    )
    return cursor.rowcount == 1


def _set_final(
    conn: sqlite3.Connection,
    job_id: int,
    state: str,
    now: float,
    *,
    error: str | None = None,
    result: Mapping[str, Any] | None = None,
) -> None:
    conn.execute(
        "UPDATE memory_jobs SET state = ?, lease_owner = NULL, lease_expires_at = NULL,"
        " last_error = COALESCE(?, last_error), result = COALESCE(?, result),"
        " finished_at = ?, updated_at = ? WHERE id = ?",
        (
            state,
            None if error is None else error[:_ERROR_CHARS],
            None if result is None else json.dumps(result, ensure_ascii=False, sort_keys=True),
            now,
            now,
            job_id,
        ),
    )


def complete(
    conn: sqlite3.Connection, job: Job, owner: str, now: float, result: Mapping[str, Any]
) -> bool:
    """Mark ``job`` done with ``result`` if ``owner`` still holds it (False: lease lost,
    and the caller must roll its effects back)."""
    if not _owned(conn, job.id, owner):
        return False
    _set_final(conn, job.id, "done", now, result=result)
    return True


def backoff(attempts: int, initial_s: float, max_s: float) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: doubling, capped."""
    return float(min(max_s, initial_s * 2.0 ** max(0, attempts - 1)))


def fail(
    conn: sqlite3.Connection,
    job: Job,
    owner: str,
    now: float,
    error: str,
    *,
    initial_s: float,
    max_s: float,
    final: bool = False,
) -> str | None:
    """Record a failed attempt: ``failed`` (retried after a backoff) or, out of attempts
    or when ``final``, ``dead``. Returns the new state (None when the lease was lost)."""
    if not _owned(conn, job.id, owner):
        return None
    if final or job.attempts >= job.max_attempts:
        _set_final(conn, job.id, "dead", now, error=error)
        return "dead"
    conn.execute(
        "UPDATE memory_jobs SET state = 'failed', lease_owner = NULL, lease_expires_at = NULL,"
        " last_error = ?, run_after = ?, finished_at = ?, updated_at = ? WHERE id = ?",
        (
            error[:_ERROR_CHARS],
            now + backoff(job.attempts, initial_s, max_s),
            now,
            now,
            job.id,
        ),
    )
    return "failed"


def release(
    conn: sqlite3.Connection, job: Job, owner: str, now: float, run_after: float, reason: str
) -> bool:
    """Give a leased job back without counting the attempt (the worker stops, or the
    per-minute call budget is spent): it is ready again at ``run_after``."""
    if not _owned(conn, job.id, owner):
        return False
    conn.execute(
        "UPDATE memory_jobs SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,"
        " attempts = MAX(0, attempts - 1), run_after = ?, last_error = ?, updated_at = ?"
        " WHERE id = ?",
        (run_after, reason[:_ERROR_CHARS], now, job.id),
    )
    return True


def job_counts(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> dict[str, Any]:
    """Jobs by kind and state (``where`` filters memory_jobs, e.g. by tenant and agent)."""
    rows = conn.execute(
        f"SELECT kind, state, COUNT(*) FROM memory_jobs WHERE {where} GROUP BY kind, state"
        " ORDER BY kind, state",
        list(params),
    ).fetchall()
    out: dict[str, dict[str, int]] = {}
    for kind, state, count in rows:
        out.setdefault(kind, {})[state] = int(count)
    return out
