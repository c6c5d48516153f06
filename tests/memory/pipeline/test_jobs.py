"""The job queue: idempotent enqueue, claim order, leases, backoff, dead jobs, fencing."""

from __future__ import annotations

import pytest
from memory_helpers import ACME, T0, Clock

from groundwire.memory import MemoryStore
from groundwire.memory.pipeline import jobs


def _enqueue(store: MemoryStore, kind: str = jobs.FEEDBACK, session: str = "s1") -> int:
    with store._write() as conn:
        return jobs.enqueue(conn, ACME, kind, store.now(), 3, session_id=session)


def _claim(store: MemoryStore, owner: str = "w1", lease: float = 60.0) -> jobs.Job | None:
    with store._write() as conn:
        return jobs.claim(conn, owner, store.now(), lease, jobs.JOB_KINDS)


def test_the_same_work_is_enqueued_once(store: MemoryStore) -> None:
    first = _enqueue(store)
    assert _enqueue(store) == first
    assert _enqueue(store, session="s2") != first
    assert _enqueue(store, kind=jobs.SCORE) != first
    with store._read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM memory_jobs").fetchone()[0] == 3


def test_claims_are_oldest_first_and_leased(store: MemoryStore, clock: Clock) -> None:
    a = _enqueue(store, session="a")
    clock.now += 1
    b = _enqueue(store, session="b")
    job = _claim(store)
    assert job is not None
    assert (job.id, job.state, job.attempts, job.lease_owner) == (a, "leased", 1, "w1")
    assert job.lease_expires_at == clock.now + 60.0
    assert job.scope == ACME
    second = _claim(store, "w2")
    assert second is not None
    assert second.id == b
    assert _claim(store, "w3") is None  # both leased, neither expired


def test_an_expired_lease_is_claimed_again_and_counts_an_attempt(
    store: MemoryStore, clock: Clock
) -> None:
    job_id = _enqueue(store)
    first = _claim(store, "crashed")
    assert first is not None
    clock.now += 59.0
    assert _claim(store, "w2") is None
    clock.now += 1.0  # the lease ends now
    again = _claim(store, "w2")
    assert again is not None
    assert (again.id, again.attempts, again.lease_owner) == (job_id, 2, "w2")
    with store._write() as conn:  # the crashed worker can neither renew nor complete
        assert not jobs.renew(conn, job_id, "crashed", clock.now, 60.0)
        assert not jobs.complete(conn, first, "crashed", clock.now, {"late": True})
        assert jobs.complete(conn, again, "w2", clock.now, {"ok": True})
    with store._read() as conn:
        done = jobs.get(conn, job_id)
    assert done is not None
    assert (done.state, done.result, done.lease_owner) == ("done", {"ok": True}, None)


def test_an_expired_last_attempt_makes_the_job_dead(store: MemoryStore, clock: Clock) -> None:
    job_id = _enqueue(store)  # max_attempts 3
    for _ in range(3):
        assert _claim(store) is not None
        clock.now += 61.0
    assert _claim(store) is None
    with store._read() as conn:
        job = jobs.get(conn, job_id)
    assert job is not None
    assert job.state == "dead"
    assert job.last_error == "lease expired on attempt 3 of 3"


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [(1, 10.0), (2, 20.0), (3, 40.0), (4, 80.0), (7, 640.0), (8, 900.0), (30, 900.0)],
)
def test_backoff_doubles_and_is_capped(attempts: int, expected: float) -> None:
    assert jobs.backoff(attempts, 10.0, 900.0) == expected


def test_failures_back_off_then_the_job_dies(store: MemoryStore, clock: Clock) -> None:
    job_id = _enqueue(store)
    waits = []
    for _ in range(2):
        job = _claim(store)
        assert job is not None
        with store._write() as conn:
            state = jobs.fail(conn, job, "w1", clock.now, "boom", initial_s=10.0, max_s=900.0)
            assert state == "failed"
            after = jobs.get(conn, job_id)
        assert after is not None
        waits.append(after.run_after - clock.now)
        assert _claim(store) is None  # not before its backoff
        clock.now = after.run_after
    assert waits == [10.0, 20.0]
    job = _claim(store)
    assert job is not None
    assert job.attempts == 3
    with store._write() as conn:
        assert jobs.fail(conn, job, "w1", clock.now, "boom", initial_s=10.0, max_s=900.0) == "dead"
        assert jobs.fail(conn, job, "w1", clock.now, "late", initial_s=1, max_s=1) is None


def test_release_hands_the_job_back_without_counting_the_attempt(
    store: MemoryStore, clock: Clock
) -> None:
    job_id = _enqueue(store)
    job = _claim(store)
    assert job is not None
    with store._write() as conn:
        assert jobs.release(conn, job, "w1", clock.now, clock.now + 30, "rate limited")
        assert not jobs.release(conn, job, "w1", clock.now, clock.now, "twice")
        again = jobs.get(conn, job_id)
    assert again is not None
    assert (again.state, again.attempts, again.run_after) == ("pending", 0, T0 + 30)
