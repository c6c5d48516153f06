"""Every model call of the pipeline: budgeted, recorded, deadline-bound, stoppable.

A call goes through groundwire's providers (one :class:`~groundwire.Provider`, or a
fallback list tried in order, each retrying its own transient errors). Before it is
made, one write transaction checks the budgets against ``model_calls`` — at most
``max_calls_per_memory`` for the memory it serves, at most ``max_calls_per_minute``
across every worker of the store — renews the job's lease and records the call; the
outcome is written when it returns. The whole call (retries included) is bounded by its
timeout, and a stop request cancels it at once. Replies are cleaned of ``<think>``
blocks and markdown fences before they are parsed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from groundwire.config import MEMORY_CALL_OUTPUT_CHARS, MemoryPipelineConfig
from groundwire.errors import ProviderError
from groundwire.llm.base import ChatRequest, Completion, Message, Provider
from groundwire.llm.fallback import Candidate, acomplete_with_fallback
from groundwire.memory.pipeline import jobs
from groundwire.memory.pipeline.jobs import HINTS, Job
from groundwire.memory.records import Memory, MemoryScope

if TYPE_CHECKING:
    from groundwire.memory.store import MemoryStore

__all__ = [
    "BadOutputError",
    "BudgetExhaustedError",
    "CallError",
    "CallTimeoutError",
    "DeferredError",
    "JobContext",
    "LeaseLostError",
    "ModelCaller",
    "Reply",
    "StoppedError",
    "clean_output",
    "json_object",
]

_THINK: Final = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_OPEN_THINK: Final = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_FENCE: Final = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_MINUTE: Final = 60.0
#: Seconds between two looks at the stop request while a call runs.
_TICK_S: Final = 0.1
#: An attempt's own timeout is the call's plus this, so the call's deadline (which
#: cancels the attempt and any retry) is what ends a slow call, never a race of the two.
_ATTEMPT_SLACK_S: Final = 1.0


class PipelineError(Exception):
    """Base of the ways a job's work can stop short (recorded on the job, never raised
    to a host)."""


class CallError(PipelineError):
    """The provider failed (status, transport, every fallback) or answered nothing."""


class CallTimeoutError(CallError):
    """The call took longer than its timeout."""


class BadOutputError(PipelineError):
    """The model answered, but not with what the schema asks: rejected and recorded."""


class BudgetExhaustedError(PipelineError):
    """The memory has used its model calls: the job cannot go on."""


class DeferredError(PipelineError):
    """The per-minute budget is spent: the job waits until ``run_after``."""

    def __init__(self, message: str, run_after: float) -> None:
        super().__init__(message)
        self.run_after = run_after


class LeaseLostError(PipelineError):
    """Another worker holds the job now (this one's lease expired)."""


class StoppedError(PipelineError):
    """The worker was asked to stop while the call was running."""


def clean_output(text: str) -> str:
    """A reply without ``<think>`` blocks (an unclosed one hides the rest) or fences.

    When the reply holds a fenced block, its content is what remains.
    """
    text = _THINK.sub("", text)
    unclosed = _OPEN_THINK.search(text)
    if unclosed is not None:
        text = text[: unclosed.start()]
    fenced = _FENCE.search(text)
    if fenced is not None:
        text = fenced.group(1)
    return text.strip()


def json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply (after :func:`clean_output`); ValueError says why not."""
    cleaned = clean_output(text)
    start = cleaned.find("{")
    if start < 0:
        raise ValueError("the answer holds no JSON object")
    try:
        value, _ = json.JSONDecoder().raw_decode(cleaned, start)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer is not valid JSON ({exc.msg} at {exc.pos})") from exc
    if not isinstance(value, dict):
        raise ValueError("the answer's JSON is not an object")
    return value


@dataclass(frozen=True, slots=True)
class Reply:
    """A model's answer: its text and the id of its ``model_calls`` row."""

    text: str
    call_id: int


class ModelCaller:
    """Makes the pipeline's model calls for one worker (see the module docstring).

    ``candidates``: a provider or a fallback list. ``stop``: set to abandon a running
    call. ``owner``: the worker id that holds the jobs' leases.
    """

    def __init__(
        self,
        store: MemoryStore,
        candidates: Provider | Sequence[Candidate],
        config: MemoryPipelineConfig,
        owner: str,
        stop: threading.Event,
    ) -> None:
        self._store = store
        self._candidates = candidates
        self._config = config
        self._owner = owner
        self._stop = stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        #: (job id, attempt) of the job whose calls are being made, and how many so far.
        self._spent: tuple[tuple[int, int] | None, int] = (None, 0)

    def _wait_until(self, moment: float) -> None:
        """Wait (by the store's clock) until ``moment``; StoppedError when asked to stop."""
        while (left := moment - self._store.now()) > 0:
            if self._stop.is_set():
                raise StoppedError("the worker was asked to stop while waiting for the budget")
            self._stop.wait(min(left, 0.25))

    def ask(
        self,
        kind: str,
        *,
        system: str,
        prompt: str,
        timeout_s: float,
        job: Job | None,
        tenant: str,
        agent: str,
        memory_id: str | None = None,
        session_id: str | None = None,
    ) -> Reply:
        """One call; raises a :class:`PipelineError` subclass when no answer came.

        When the per-minute budget is spent, a job that has made no call yet in this
        attempt is deferred (:class:`DeferredError`); one that has waits for a free slot,
        so the calls it already paid for are not thrown away.
        """
        attempt = None if job is None else (job.id, job.attempts)
        while True:
            try:
                call_id = self._reserve(kind, job, tenant, agent, memory_id, session_id)
                break
            except DeferredError as exc:
                if attempt is None or self._spent[0] != attempt:
                    raise
                self._wait_until(exc.run_after)
        if attempt is not None:
            self._spent = (attempt, self._spent[1] + 1 if self._spent[0] == attempt else 1)
        request = ChatRequest(
            messages=(Message("user", prompt),),
            system=system,
            model=self._config.model,
            temperature=0.0,
            max_tokens=self._config.max_output_tokens,
            timeout_s=timeout_s + _ATTEMPT_SLACK_S,
            metadata={"groundwire": f"memory-{kind}"},
        )
        started = time.perf_counter()
        try:
            completion = self._with_deadline(request, timeout_s)
        except StoppedError:
            self._record(call_id, started, "abandoned", "the worker stopped")
            raise
        except CallTimeoutError as exc:
            self._record(call_id, started, "timeout", str(exc))
            raise
        except ProviderError as exc:
            self._record(call_id, started, "error", str(exc))
            raise CallError(str(exc)) from exc
        if not completion.text.strip():
            self._record(call_id, started, "empty", "the model answered with no text")
            raise CallError(f"{kind}: the model answered with no text")
        self._record(call_id, started, "ok", None, completion)
        return Reply(completion.text, call_id)

    def reject(self, reply: Reply, reason: str) -> BadOutputError:
        """Mark a reply's call ``rejected``, keeping the reason and the output; returns
        the :class:`BadOutputError` to raise."""
        with self._store._write() as conn:
            conn.execute(
                "UPDATE model_calls SET outcome = 'rejected', error = ?, output = ? WHERE id = ?",
                (
                    reason[:MEMORY_CALL_OUTPUT_CHARS],
                    reply.text[:MEMORY_CALL_OUTPUT_CHARS],
                    reply.call_id,
                ),
            )
        return BadOutputError(reason)

    # -- the steps of one call ------------------------------------------------------------------
    def _reserve(
        self,
        kind: str,
        job: Job | None,
        tenant: str,
        agent: str,
        memory_id: str | None,
        session_id: str | None,
    ) -> int:
        cfg = self._config
        now = self._store.now()
        with self._store._write() as conn:
            if memory_id is not None:
                (used,) = conn.execute(
                    "SELECT COUNT(*) FROM model_calls WHERE memory_id = ?", (memory_id,)
                ).fetchone()
                if used >= cfg.max_calls_per_memory:
                    raise BudgetExhaustedError(
                        f"memory {memory_id} has used its {cfg.max_calls_per_memory} model "
                        "calls (max_calls_per_memory)"
                    )
            count, oldest = conn.execute(
                "SELECT COUNT(*), MIN(started_at) FROM model_calls WHERE started_at > ?",
                (now - _MINUTE,),
            ).fetchone()
            if count >= cfg.max_calls_per_minute:
                raise DeferredError(
                    f"{cfg.max_calls_per_minute} model calls in the last minute "
                    "(max_calls_per_minute): waiting",
                    float(oldest) + _MINUTE,
                )
            if job is not None and not jobs.renew(conn, job.id, self._owner, now, cfg.lease_s):
                raise LeaseLostError(f"job {job.id} is no longer leased to {self._owner}")
            cursor = conn.execute(
                "INSERT INTO model_calls (tenant, agent, job_id, memory_id, session_id, kind,"
                " started_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (tenant, agent, None if job is None else job.id, memory_id, session_id, kind, now),
            )
            return int(cursor.lastrowid or 0)

    async def _complete(self, request: ChatRequest) -> Completion:
        if isinstance(self._candidates, Provider):
            return await self._candidates.acomplete(request)
        return (await acomplete_with_fallback(self._candidates, request)).completion

    def _with_deadline(self, request: ChatRequest, timeout_s: float) -> Completion:
        """The completion, on this caller's event loop; at the deadline or on stop the
        call is cancelled — its HTTP request and any retry of it, not just abandoned."""
        future = asyncio.run_coroutine_threadsafe(self._complete(request), self._event_loop())
        deadline = time.monotonic() + timeout_s
        while True:
            done, _ = concurrent.futures.wait([future], timeout=_TICK_S)
            if done:
                return future.result()
            if self._stop.is_set():
                future.cancel()
                raise StoppedError("the worker was asked to stop during a model call")
            if time.monotonic() >= deadline:
                future.cancel()
                raise CallTimeoutError(f"the model call took longer than {timeout_s:g} s")

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop (in a daemon thread) that runs this caller's calls: one loop, so
        a provider keeps one async HTTP client across calls."""
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="groundwire-memory-calls", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Stop the event loop of the calls (a new one starts if another call comes)."""
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def _record(
        self,
        call_id: int,
        started: float,
        outcome: str,
        error: str | None,
        completion: Completion | None = None,
    ) -> None:
        elapsed = round((time.perf_counter() - started) * 1000.0, 3)
        provider = model = None
        if completion is not None:
            provider, model = completion.provider, completion.model
        with self._store._write() as conn:
            conn.execute(
                "UPDATE model_calls SET outcome = ?, duration_ms = ?, error = ?, provider = ?,"
                " model = ? WHERE id = ?",
                (
                    outcome,
                    elapsed,
                    error and error[:MEMORY_CALL_OUTPUT_CHARS],
                    provider,
                    model,
                    call_id,
                ),
            )


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a job's code needs: the store, the model caller (None: no provider), the
    configuration and the lease owner."""

    store: MemoryStore
    caller: ModelCaller | None
    config: MemoryPipelineConfig
    owner: str

    def ask(
        self, kind: str, job: Job, system: str, prompt: str, timeout_s: float, **ids: str | None
    ) -> Reply:
        """One model call on behalf of ``job`` (its lease is renewed first)."""
        if self.caller is None:
            raise CallError(f"a {job.kind} job needs a model: the pipeline has no provider")
        return self.caller.ask(
            kind,
            system=system,
            prompt=prompt,
            timeout_s=timeout_s,
            job=job,
            tenant=job.tenant,
            agent=job.agent,
            **ids,
        )

    def parsed(self, reply: Reply, parse: Callable[[], Any]) -> Any:
        """``parse()``, or the reply rejected (recorded) when it raises ValueError."""
        try:
            return parse()
        except ValueError as exc:
            assert self.caller is not None
            raise self.caller.reject(reply, str(exc)) from exc

    def finish(
        self, job: Job, effects: Callable[[sqlite3.Connection], Mapping[str, Any]]
    ) -> Mapping[str, Any]:
        """The job's effects and its ``done`` state in one transaction, committed only
        while this worker still holds the lease (else rolled back: applied once)."""
        with self.store._write() as conn:
            result = effects(conn)
            if not jobs.complete(conn, job, self.owner, self.store.now(), result):
                raise LeaseLostError(f"job {job.id} was taken over before it finished")
        return result

    def source(self, job: Job) -> Memory | None:
        """The job's memory if it is live and belongs to the job's tenant and agent."""
        with self.store._read() as conn:
            memory = None if job.memory_id is None else self.store._get(conn, job.memory_id)
        if memory is None or memory.deleted:
            return None
        return memory if (memory.tenant, memory.agent) == (job.tenant, job.agent) else None

    def queue_hints(
        self, conn: sqlite3.Connection, scope: MemoryScope, memory_id: str, now: float
    ) -> None:
        """Queue a memory's prospective hints (when ``hints`` is on)."""
        if self.config.hints:
            jobs.enqueue(conn, scope, HINTS, now, self.config.max_attempts, memory_id=memory_id)
