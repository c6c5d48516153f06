"""What the decision step proposed, what the policy made of it, and the audit trail.

Adds are applied. Updates and deletes follow ``update_policy``: ``block`` records them
and applies nothing, ``shadow`` stages them for review (a record of what the pipeline
would do), ``apply`` applies them — except those the contradiction check flagged, which
go to review. A reviewer approves (applied then) or rejects a staged proposal. Every
applied operation gets an ``memory_audit`` row with its inputs: the fact, the source
memory, the target as it was, the verdict and who applied it. All of it runs inside
the caller's write transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from groundwire.errors import QueryError
from groundwire.memory.pipeline.calls import JobContext
from groundwire.memory.pipeline.contradiction import Verdict, check
from groundwire.memory.pipeline.extract import (
    DECISION_SYSTEM,
    EXTRACTION_SYSTEM,
    Decision,
    Fact,
    decision_prompt,
    extraction_prompt,
    facts_schema,
    parse_decisions,
    parse_facts,
)
from groundwire.memory.pipeline.jobs import EXTRACT, Job
from groundwire.memory.records import Memory, MemoryScope
from groundwire.memory.writes import forget_memory, prepare, write_memory, write_vectors

if TYPE_CHECKING:
    from groundwire.memory.store import MemoryStore

__all__ = [
    "REVIEWABLE",
    "Proposal",
    "apply_proposals",
    "plan",
    "proposal_rows",
    "review",
    "run_extract",
]

#: Statuses a reviewer may still act on.
REVIEWABLE: Final = ("shadow", "review")
_KEYS: Final = (
    "id",
    "job_id",
    "position",
    "source_memory_id",
    "operation",
    "target_memory_id",
    "content",
    "reason",
    "status",
    "flagged",
    "contradiction",
    "result_memory_id",
    "created_at",
    "resolved_at",
)


@dataclass(frozen=True, slots=True)
class Proposal:
    """One fact's operation and the status the policy gave it."""

    position: int
    operation: str
    fact: Fact
    target: Memory | None
    reason: str
    status: str
    verdict: Verdict | None = None

    @property
    def flagged(self) -> bool:
        """Whether the contradiction check found the fact contradicts its target."""
        return self.verdict is not None and self.verdict.contradicts


def plan(
    facts: Sequence[Fact],
    decisions: Sequence[Decision],
    policy: str,
    verdict_of: Callable[[Fact, Memory], Verdict],
    min_confidence: float,
) -> list[Proposal]:
    """Each decision with its status under ``policy`` (contradiction checks included)."""
    out: list[Proposal] = []
    for fact, decision in zip(facts, decisions, strict=True):
        op, target, verdict = decision.operation, decision.target, None
        if op == "add":
            status = "applied"
        elif op == "none":
            status = "skipped"
        else:
            assert target is not None
            verdict = verdict_of(fact, target)
            flagged = verdict.contradicts and (
                verdict.method == "syntactic" or verdict.confidence >= min_confidence
            )
            if not flagged and verdict.contradicts:
                verdict = Verdict(
                    verdict.method,
                    False,
                    verdict.confidence,
                    verdict.reasoning,
                    verdict.overlap,
                    "below the confidence threshold",
                )
            status = {"block": "blocked", "shadow": "shadow"}.get(policy) or (
                "review" if flagged else "applied"
            )
        out.append(Proposal(decision.position, op, fact, target, decision.reason, status, verdict))
    return out


def _apply(
    conn: sqlite3.Connection,
    store: MemoryStore,
    scope: MemoryScope,
    operation: str,
    fields: Mapping[str, Any],
    target_id: str | None,
    now: float,
) -> tuple[str | None, bool]:
    """Write one operation; (the memory written, whether the target was still there)."""
    written: str | None = None
    if operation in ("add", "update"):
        item = prepare(scope, fields)
        write_memory(conn, store.analyzer, scope, item, now)
        written = item.id
    present = True
    if operation in ("update", "delete") and target_id is not None and target_id != written:
        seq = store._visible(conn, scope, target_id)
        present = seq is not None
        if seq is not None:
            forget_memory(conn, seq, now)
    return written, present


def _audit(
    conn: sqlite3.Connection,
    scope: MemoryScope,
    proposal_id: int,
    job_id: int,
    operation: str,
    memory_id: str | None,
    target_id: str | None,
    inputs: Mapping[str, Any],
    actor: str,
    now: float,
) -> None:
    conn.execute(
        "INSERT INTO memory_audit (tenant, agent, proposal_id, job_id, operation, memory_id,"
        " target_memory_id, inputs, actor, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            scope.tenant,
            scope.agent,
            proposal_id,
            job_id,
            operation,
            memory_id,
            target_id,
            json.dumps(inputs, ensure_ascii=False, sort_keys=True),
            actor,
            now,
        ),
    )


def apply_proposals(
    conn: sqlite3.Connection,
    store: MemoryStore,
    scope: MemoryScope,
    job_id: int,
    source: Memory,
    proposals: Sequence[Proposal],
    vectors: Mapping[str, bytes],
    now: float,
    on_written: Callable[[sqlite3.Connection, str], None],
) -> dict[str, int]:
    """Record every proposal and apply those with status ``applied``; counts by status
    and operation. ``on_written`` runs for each memory written (to queue its hints)."""
    write_vectors(conn, store.embedder, vectors, now)
    summary = {"facts": len(proposals), "flagged": 0}
    for p in proposals:
        verdict = None if p.verdict is None else p.verdict.as_json()
        cursor = conn.execute(
            "INSERT INTO memory_proposals (tenant, agent, job_id, position, source_memory_id,"
            " operation, target_memory_id, content, fact, reason, status, flagged, contradiction,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                scope.tenant,
                scope.agent,
                job_id,
                p.position,
                source.id,
                p.operation,
                None if p.target is None else p.target.id,
                p.fact.item.content,
                json.dumps(p.fact.fields, ensure_ascii=False, sort_keys=True),
                p.reason,
                p.status,
                int(p.flagged),
                None if verdict is None else json.dumps(verdict),
                now,
            ),
        )
        proposal_id = int(cursor.lastrowid or 0)
        summary["flagged"] += int(p.flagged)
        summary[p.status] = summary.get(p.status, 0) + 1
        if p.status != "applied":
            continue
        target_id = None if p.target is None else p.target.id
        written, present = _apply(conn, store, scope, p.operation, p.fact.fields, target_id, now)
        summary[p.operation] = summary.get(p.operation, 0) + 1
        conn.execute(
            "UPDATE memory_proposals SET result_memory_id = ?, resolved_at = ? WHERE id = ?",
            (written, now, proposal_id),
        )
        inputs = {
            "fact": dict(p.fact.data),
            "source_memory_id": source.id,
            "target": None if p.target is None else {"id": target_id, "content": p.target.content},
            "target_present": present,
            "reason": p.reason,
            "contradiction": verdict,
        }
        _audit(
            conn,
            scope,
            proposal_id,
            job_id,
            p.operation,
            written,
            target_id,
            inputs,
            "pipeline",
            now,
        )
        if written is not None:
            on_written(conn, written)
    return summary


def proposal_rows(
    conn: sqlite3.Connection, scope: MemoryScope, status: str | None, limit: int
) -> list[dict[str, Any]]:
    """The scope's proposals, newest first (one status, or all)."""
    where, params = "tenant = ? AND agent = ?", [scope.tenant, scope.agent]
    if status is not None:
        where, params = f"{where} AND status = ?", [*params, status]
    rows = conn.execute(
        f"SELECT {', '.join(_KEYS)} FROM memory_proposals WHERE {where} ORDER BY id DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    out = []
    for row in rows:
        item = dict(zip(_KEYS, row, strict=True))
        item["flagged"] = bool(item["flagged"])
        item["contradiction"] = item["contradiction"] and json.loads(item["contradiction"])
        out.append(item)
    return out


def review(
    conn: sqlite3.Connection,
    store: MemoryStore,
    scope: MemoryScope,
    proposal_id: int,
    approve: bool,
    actor: str,
    vectors: Mapping[str, bytes],
    now: float,
) -> dict[str, Any]:
    """Approve (apply, audited as ``actor``) or reject a staged proposal of ``scope``."""
    row = conn.execute(
        "SELECT job_id, operation, target_memory_id, fact, status, source_memory_id,"
        " contradiction, reason FROM memory_proposals WHERE id = ? AND tenant = ? AND agent = ?",
        (proposal_id, scope.tenant, scope.agent),
    ).fetchone()
    if row is None:
        raise QueryError(f"no proposal {proposal_id} in this scope: list them with proposals()")
    job_id, operation, target_id, fact_json, status, source_id, verdict, reason = row
    if status not in REVIEWABLE:
        raise QueryError(
            f"proposal {proposal_id} is {status!r}: only {' or '.join(REVIEWABLE)} ones can be"
            " reviewed"
        )
    written = None
    if approve:
        fields = json.loads(fact_json)
        write_vectors(conn, store.embedder, vectors, now)
        written, present = _apply(conn, store, scope, operation, fields, target_id, now)
        inputs = {
            "fact": fields,
            "source_memory_id": source_id,
            "target": target_id,
            "target_present": present,
            "reason": reason,
            "contradiction": verdict and json.loads(verdict),
        }
        _audit(conn, scope, proposal_id, job_id, operation, written, target_id, inputs, actor, now)
    conn.execute(
        "UPDATE memory_proposals SET status = ?, result_memory_id = ?, resolved_at = ?"
        " WHERE id = ?",
        ("approved" if approve else "rejected", written, now, proposal_id),
    )
    return {
        "id": proposal_id,
        "status": "approved" if approve else "rejected",
        "memory_id": written,
    }


# -- the extract job ------------------------------------------------------------------------
def _similar(ctx: JobContext, scope: MemoryScope, fact: Fact, source: Memory) -> list[Memory]:
    """Stored memories like ``fact`` (not episodes, not the fact itself)."""
    cfg = ctx.store.recall_config
    query = fact.item.content[: cfg.max_query_chars]
    found = ctx.store.recall(scope, query, limit=min(cfg.limit + 10, 200), touch=False)
    similar = [
        r.memory
        for r in found.memories
        if r.memory.type != "episode"
        and r.memory.id not in (source.id, fact.item.id)
        and {"content", "hint", "vector"} & set(r.channels)
    ]
    return similar[: ctx.config.decision_candidates]


def run_extract(ctx: JobContext, job: Job) -> Mapping[str, Any]:
    cfg, scope = ctx.config, job.scope
    source = ctx.source(job)
    if source is None:
        return ctx.finish(job, lambda conn: {"skipped": "the memory was forgotten"})
    system = EXTRACTION_SYSTEM.format(schema=json.dumps(facts_schema(cfg.max_facts)))
    reply = ctx.ask(
        EXTRACT,
        job,
        system,
        extraction_prompt(source.content),
        cfg.extraction_timeout_s,
        memory_id=source.id,
    )
    facts = ctx.parsed(reply, lambda: parse_facts(reply.text, cfg.max_facts, scope, source))
    candidates = [_similar(ctx, scope, fact, source) for fact in facts]
    if any(candidates):
        prompt, labels = decision_prompt(facts, candidates)
        answer = ctx.ask(
            "decision",
            job,
            DECISION_SYSTEM,
            prompt,
            cfg.extraction_timeout_s,
            memory_id=source.id,
        )
        decisions = ctx.parsed(
            answer, lambda: parse_decisions(answer.text, facts, candidates, labels)
        )
    else:
        decisions = [Decision(i, "add", None, "no similar memory") for i in range(len(facts))]

    def verdict_of(fact: Fact, target: Memory) -> Verdict:
        assert ctx.caller is not None
        return check(
            fact.item.content,
            target.content,
            semantic=cfg.semantic_contradiction and cfg.update_policy != "block",
            ask=lambda system, prompt: ctx.ask(
                "contradiction",
                job,
                system,
                prompt,
                cfg.contradiction_timeout_s,
                memory_id=source.id,
            ),
            reject=ctx.caller.reject,
        )

    proposals = plan(
        facts, decisions, cfg.update_policy, verdict_of, cfg.contradiction_min_confidence
    )
    writing = [
        p.fact.item for p in proposals if p.status == "applied" and p.operation in ("add", "update")
    ]
    vectors = ctx.store._embed([i.content_hash for i in writing], [i.content for i in writing])
    now = ctx.store.now()

    def effects(conn: sqlite3.Connection) -> Mapping[str, Any]:
        def written(conn: sqlite3.Connection, memory_id: str) -> None:
            ctx.queue_hints(conn, scope, memory_id, now)

        return apply_proposals(
            conn, ctx.store, scope, job.id, source, proposals, vectors, now, written
        )

    return ctx.finish(job, effects)
