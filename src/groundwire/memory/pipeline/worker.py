"""The write pipeline of a memory store: what a host calls, and the worker that runs jobs.

A host writes through :class:`MemoryPipeline` (``remember_turns``, ``remember``,
``end_session``): each write and the jobs it implies commit in one transaction. A
worker (``run_forever``, or ``groundwire memory worker STORE``) claims jobs one at a
time and runs them: model calls first, outside any transaction, then the job's effects
and its ``done`` state in one transaction that only commits while the worker still
holds the lease. A failure is recorded on the job (retried with backoff, ``dead`` after
the last attempt) and never stops the worker.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from groundwire.config import MemoryPipelineConfig
from groundwire.errors import ConfigError, MemoryStoreError, QueryError
from groundwire.llm.base import Provider
from groundwire.llm.fallback import Candidate
from groundwire.memory import views
from groundwire.memory.pipeline import jobs
from groundwire.memory.pipeline.calls import (
    BadOutputError,
    BudgetExhaustedError,
    CallError,
    DeferredError,
    JobContext,
    LeaseLostError,
    ModelCaller,
    PipelineError,
    StoppedError,
)
from groundwire.memory.pipeline.hints import run_hints
from groundwire.memory.pipeline.jobs import EXTRACT, FEEDBACK, HINTS, JOB_KINDS, SCORE, Job
from groundwire.memory.pipeline.proposals import proposal_rows, review, run_extract
from groundwire.memory.pipeline.session import run_feedback, run_score
from groundwire.memory.pipeline.summary import (
    SUMMARY_SYSTEM,
    SummarizedRecall,
    SummaryCard,
    check_card,
    summary_prompt,
)
from groundwire.memory.records import Memory, MemoryScope, check_key
from groundwire.memory.store import MemoryStore
from groundwire.memory.writes import prepare, write_memory, write_vectors

logger = logging.getLogger("groundwire")

__all__ = ["JobOutcome", "MemoryPipeline"]

#: The code that runs each kind of job.
_HANDLERS: dict[str, Callable[[JobContext, Job], Mapping[str, Any]]] = {
    EXTRACT: run_extract,
    HINTS: run_hints,
    FEEDBACK: run_feedback,
    SCORE: run_score,
}


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What one run of a job came to: ``done``, ``failed`` (retried later), ``dead``,
    ``deferred`` (call budget), ``released`` (the worker stopped) or ``lost`` (another
    worker holds its lease now)."""

    job_id: int
    kind: str
    state: str
    result: Mapping[str, Any] | None = None
    error: str | None = None


def _turn(index: int, turn: object) -> tuple[str, str]:
    if isinstance(turn, Mapping):
        role, text = turn.get("role"), turn.get("content", turn.get("text"))
    elif isinstance(turn, tuple | list) and len(turn) == 2:
        role, text = turn
    else:
        role, text = getattr(turn, "role", None), getattr(turn, "text", None)
        text = getattr(turn, "content", None) if text is None else text
    if not isinstance(role, str) or not role.strip() or not isinstance(text, str):
        raise QueryError(
            f"turns[{index}] is invalid: expected (role, text), {{'role', 'content'}} or a Turn"
        )
    return role.strip(), text


class MemoryPipeline:
    """Extraction, contradictions, hints, feedback and scoring for one :class:`MemoryStore`.

    ``provider``: a :class:`~groundwire.Provider` or a fallback list (providers, or
    ``(provider, model)`` pairs); without one, only the jobs that need no model run.
    ``config``: a :class:`~groundwire.MemoryPipelineConfig`. ``worker_id`` names the
    leases this pipeline takes (default: host, process id and a random suffix).
    """

    def __init__(
        self,
        store: MemoryStore,
        provider: Provider | Sequence[Candidate] | None = None,
        *,
        config: MemoryPipelineConfig | None = None,
        worker_id: str | None = None,
    ) -> None:
        if not isinstance(store, MemoryStore):
            raise ConfigError(f"store={store!r} is invalid: expected a MemoryStore")
        if config is not None and not isinstance(config, MemoryPipelineConfig):
            raise ConfigError(f"config={config!r} is invalid: expected a MemoryPipelineConfig")
        self.store = store
        self.config = config or MemoryPipelineConfig()
        suffix = uuid.uuid4().hex[:8]
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{suffix}"
        self.stop_event = threading.Event()
        self._caller = (
            None
            if provider is None
            else ModelCaller(store, provider, self.config, self.worker_id, self.stop_event)
        )
        self._context = JobContext(store, self._caller, self.config, self.worker_id)

    # -- writing ---------------------------------------------------------------------------------
    def remember_turns(
        self,
        scope: MemoryScope,
        turns: Iterable[object],
        *,
        session_id: str | None = None,
        sources: Sequence[str] = (),
        acl: Sequence[str] = (),
        created_at: float | None = None,
    ) -> Memory:
        """Store raw conversation turns as an ``episode`` memory and queue its extraction.

        ``turns``: ``(role, text)`` pairs, ``{"role", "content"}`` dicts or
        :class:`~groundwire.Turn` s. ``session_id`` ties them to a session (its transcript
        for scoring). Extracted facts inherit ``acl`` and cite this memory as a source.
        """
        lines = [f"{role}: {text}" for role, text in (_turn(i, t) for i, t in enumerate(turns))]
        if not lines:
            raise QueryError("turns is empty: pass at least one (role, text) turn")
        if session_id is not None:
            check_key("session_id", session_id)
        metadata = {"pipeline": "turns", "turns": len(lines), "session_id": session_id}
        fields = {
            "content": "\n".join(lines),
            "type": "episode",
            "sources": sources,
            "acl": acl,
            "metadata": metadata,
            "created_at": created_at,
        }
        return self._write(scope, fields, extract=self.config.extraction)

    def remember(self, scope: MemoryScope, content: str, **fields: Any) -> Memory:
        """:meth:`MemoryStore.remember`, queueing the memory's prospective hints when
        ``hints`` is on (same keyword arguments)."""
        return self._write(scope, {"content": content, **fields}, extract=False)

    def _write(self, scope: MemoryScope, fields: Mapping[str, Any], *, extract: bool) -> Memory:
        if not isinstance(scope, MemoryScope):
            raise QueryError(f"scope must be a MemoryScope, got {type(scope).__name__}")
        item = prepare(scope, fields)
        vectors = self.store._embed([item.content_hash], [item.content])
        now = self.store.now()
        with self.store._write() as conn:
            write_memory(conn, self.store.analyzer, scope, item, now)
            write_vectors(conn, self.store.embedder, vectors, now)
            if extract:
                self._enqueue(conn, scope, EXTRACT, now, memory_id=item.id)
            elif item.type != "episode":
                self._context.queue_hints(conn, scope, item.id, now)
            memory = self.store._get(conn, item.id)
        assert memory is not None
        return memory

    def _enqueue(
        self, conn: sqlite3.Connection, scope: MemoryScope, kind: str, now: float, **ids: Any
    ) -> int:
        return jobs.enqueue(conn, scope, kind, now, self.config.max_attempts, **ids)

    def end_session(
        self, scope: MemoryScope, session_id: str, *, transcript: str | None = None
    ) -> tuple[int, ...]:
        """End a session and queue its feedback and continuity score; the job ids.

        ``transcript``: the conversation as text (default: the turns remembered with
        this ``session_id``); its last ``transcript_max_chars`` characters are kept.
        """
        check_key("session_id", session_id)
        if transcript is not None and not isinstance(transcript, str):
            raise QueryError("transcript must be a string (the conversation as text)")
        now = self.store.now()
        payload = {}
        if transcript:
            payload["transcript"] = transcript[-self.config.transcript_max_chars :]
        with self.store._write() as conn:
            conn.execute(
                "INSERT INTO sessions (id, tenant, agent, started_at, updated_at) VALUES"
                " (?, ?, ?, ?, ?) ON CONFLICT (tenant, agent, id) DO NOTHING",
                (session_id, scope.tenant, scope.agent, now, now),
            )
            conn.execute(
                "UPDATE sessions SET ended_at = ?, updated_at = ? WHERE tenant = ? AND agent = ?"
                " AND id = ? AND ended_at IS NULL",
                (now, now, scope.tenant, scope.agent, session_id),
            )
            queued = []
            if self.config.feedback:
                queued.append(self._enqueue(conn, scope, FEEDBACK, now, session_id=session_id))
            if self.config.scoring:
                queued.append(
                    self._enqueue(conn, scope, SCORE, now, session_id=session_id, payload=payload)
                )
        return tuple(queued)

    # -- reading ---------------------------------------------------------------------------------
    def recall(
        self, scope: MemoryScope, query: str, *, summary: bool = True, **options: Any
    ) -> SummarizedRecall:
        """:meth:`MemoryStore.recall` (same options) with a summary card of the top
        memories; the card fails open (``card.failure_reason``), never the recall."""
        found = self.store.recall(scope, query, **options)
        top = found.memories[: self.config.summary_top]
        if not summary:
            return SummarizedRecall(found, SummaryCard(None, failure_reason="disabled"))
        if not top:
            return SummarizedRecall(found, SummaryCard(None, failure_reason="no-memories"))
        if self._caller is None:
            card = SummaryCard(None, failure_reason="failed", detail="no provider configured")
            return SummarizedRecall(found, card)
        try:
            reply = self._caller.ask(
                "summary",
                system=SUMMARY_SYSTEM,
                prompt=summary_prompt(query, top),
                timeout_s=self.config.summary_timeout_s,
                job=None,
                tenant=scope.tenant,
                agent=scope.agent,
                session_id=options.get("session_id"),
            )
        except PipelineError as exc:
            return SummarizedRecall(
                found, SummaryCard(None, failure_reason="failed", detail=str(exc))
            )
        card = check_card(reply.text, [r.memory.id for r in top], self.config.summary_max_chars)
        if card.failure_reason is not None:
            self._caller.reject(reply, f"{card.failure_reason}: {card.detail or ''}".strip())
        return SummarizedRecall(found, card)

    def job(self, job_id: int) -> Job | None:
        """One job of the queue, as it is now."""
        with self.store._read() as conn:
            return jobs.get(conn, job_id)

    def proposals(
        self, scope: MemoryScope, *, status: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The scope's extraction proposals, newest first (``status`` filters, e.g.
        ``"shadow"`` or ``"review"`` for those awaiting a reviewer)."""
        with self.store._read() as conn:
            return proposal_rows(conn, scope, status, limit)

    def review(
        self, scope: MemoryScope, proposal_id: int, *, approve: bool, actor: str
    ) -> dict[str, Any]:
        """Approve (apply it, audited as ``actor``) or reject a staged proposal."""
        check_key("actor", actor)
        with self.store._read() as conn:
            row = conn.execute(
                "SELECT fact FROM memory_proposals WHERE id = ? AND tenant = ? AND agent = ?",
                (proposal_id, scope.tenant, scope.agent),
            ).fetchone()
        vectors: dict[str, bytes] = {}
        if row is not None and approve:
            item = prepare(scope, json.loads(row[0]))
            vectors = self.store._embed([item.content_hash], [item.content])
        now = self.store.now()
        with self.store._write() as conn:
            return review(
                conn, self.store, scope, proposal_id, approve, f"review:{actor}", vectors, now
            )

    def status(self, scope: MemoryScope | None = None) -> dict[str, Any]:
        """Jobs by kind and state, model calls, proposals, audit and feedback counters."""
        with self.store._read() as conn:
            counts = views.pipeline_counts(conn, scope)
            where = "1" if scope is None else "tenant = ? AND agent = ?"
            params = [] if scope is None else [scope.tenant, scope.agent]
            return {"jobs": jobs.job_counts(conn, where, params), **counts}

    # -- running ---------------------------------------------------------------------------------
    def _kinds(self) -> tuple[str, ...]:
        return JOB_KINDS if self._caller is not None else (FEEDBACK,)

    def run_once(self) -> JobOutcome | None:
        """Claim the next ready job and run it; None when there is nothing to do."""
        with self.store._write() as conn:
            job = jobs.claim(
                conn, self.worker_id, self.store.now(), self.config.lease_s, self._kinds()
            )
        if job is None:
            return None
        handler = _HANDLERS[job.kind]
        try:
            return JobOutcome(job.id, job.kind, "done", handler(self._context, job))
        except DeferredError as exc:
            return self._release(job, exc.run_after, str(exc), "deferred")
        except StoppedError as exc:
            return self._release(job, self.store.now(), str(exc), "released")
        except LeaseLostError as exc:
            return JobOutcome(job.id, job.kind, "lost", error=str(exc))
        except (BudgetExhaustedError, CallError, BadOutputError) as exc:
            return self._fail(
                job, f"{type(exc).__name__}: {exc}", isinstance(exc, BudgetExhaustedError)
            )
        except Exception as exc:  # a bug or a broken store: recorded, the worker goes on
            logger.warning("memory job %d (%s) failed: %s", job.id, job.kind, exc, exc_info=True)
            return self._fail(job, f"{type(exc).__name__}: {exc}", False)

    def _release(self, job: Job, run_after: float, reason: str, state: str) -> JobOutcome:
        with self.store._write() as conn:
            kept = jobs.release(conn, job, self.worker_id, self.store.now(), run_after, reason)
        return JobOutcome(job.id, job.kind, state if kept else "lost", error=reason)

    def _fail(self, job: Job, error: str, final: bool) -> JobOutcome:
        cfg = self.config
        try:
            with self.store._write() as conn:
                state = jobs.fail(
                    conn,
                    job,
                    self.worker_id,
                    self.store.now(),
                    error,
                    initial_s=cfg.backoff_s,
                    max_s=cfg.backoff_max_s,
                    final=final,
                )
        except (sqlite3.Error, MemoryStoreError) as exc:  # the lease expires; retried then
            logger.warning("memory job %d: could not record its failure: %s", job.id, exc)
            state = "failed"
        return JobOutcome(job.id, job.kind, state or "lost", error=error)

    def run_pending(self, max_jobs: int | None = None) -> list[JobOutcome]:
        """Run ready jobs until none is left (or ``max_jobs`` ran); their outcomes."""
        done: list[JobOutcome] = []
        while max_jobs is None or len(done) < max_jobs:
            outcome = self.run_once()
            if outcome is None:
                break
            done.append(outcome)
        return done

    def run_forever(
        self,
        *,
        poll_interval_s: float | None = None,
        on_outcome: Callable[[JobOutcome], None] | None = None,
    ) -> int:
        """Run jobs until :meth:`stop` (or ``stop_event``) is set, polling when idle;
        returns how many ran. A running model call is abandoned on stop and its job
        handed back unchanged."""
        interval = self.config.poll_interval_s if poll_interval_s is None else poll_interval_s
        replace(self.config, poll_interval_s=interval)  # validates the range
        processed = 0
        while not self.stop_event.is_set():
            try:
                outcome = self.run_once()
            except (sqlite3.Error, MemoryStoreError) as exc:
                logger.warning("memory worker: the store is busy or failed (%s); waiting", exc)
                outcome = None
            if outcome is None:
                self.stop_event.wait(interval)
                continue
            processed += 1
            if on_outcome is not None:
                on_outcome(outcome)
        return processed

    def stop(self) -> None:
        """Ask :meth:`run_forever` to return (safe from a signal handler or thread)."""
        self.stop_event.set()

    def close(self) -> None:
        """Release the pipeline's call loop (the store stays open: it is the host's)."""
        if self._caller is not None:
            self._caller.close()

    def __enter__(self) -> MemoryPipeline:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
