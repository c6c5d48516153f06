"""JSON payloads of groundwire's results: the one shape every interface prints or serves.

The CLI's ``--json``, the HTTP server and the MCP tools build their JSON here, so a
grounding outcome, a search hit, an evidence result, a status, a validation issue or a
memory has the same field names everywhere (snake_case, stable). Built on the public
API only; every function returns plain ``dict``/``list``/``str``/number/``None`` values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from groundwire import (
    CitationCheck,
    CitationReport,
    Completion,
    EvidenceResult,
    GroundingOutcome,
    GroundingStatus,
    Hit,
    HybridReport,
    KnowledgeBase,
    KnowledgeEntry,
    Memory,
    MemoryRecall,
    ScoredEntry,
    SkippedSource,
    ValidationIssue,
)

__all__ = [
    "ask_json",
    "channel_hits_json",
    "check_json",
    "entry_json",
    "evidence_json",
    "hit_json",
    "issue_json",
    "memory_details_json",
    "memory_json",
    "outcome_json",
    "recall_json",
    "skipped_json",
    "status_json",
    "validation_json",
]

#: Entry metadata never shown: ACL labels may name other subjects and groups.
_HIDDEN_METADATA = frozenset({"acl"})


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data (tuples become lists, unknown objects strings)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str(value)


# -- entries, hits, outcomes --------------------------------------------------------------------
def entry_json(entry: KnowledgeEntry) -> dict[str, Any]:
    """One entry as a reader sees it (its links already cut to what the reader may see)."""
    return {
        "id": entry.id,
        "title": entry.title,
        "summary": entry.summary,
        "body": entry.body,
        "domain": entry.domain,
        "kind": entry.kind,
        "status": entry.status,
        "integrations": list(entry.integrations),
        "aliases": list(entry.aliases),
        "keywords": list(entry.keywords),
        "related": list(entry.related),
        "parent": entry.parent,
        "version": entry.version,
        "source_id": entry.source_id,
        "citation": entry.citation.tag,
        "metadata": {
            str(key): _plain(value)
            for key, value in entry.metadata.items()
            if key not in _HIDDEN_METADATA
        },
    }


def hit_json(hit: Hit) -> dict[str, Any]:
    """A lexical search hit: id, score and the per-field/per-boost breakdown."""
    return {"id": hit.id, "score": hit.score, "breakdown": dict(hit.breakdown)}


def channel_hits_json(
    kb: KnowledgeBase, hits: Sequence[Any], report: HybridReport
) -> dict[str, Any]:
    """Hits of ``search_channels`` (dense or hybrid) with their per-channel parts."""
    rows = [
        {
            "id": kb.entry(hit.doc).id,
            "score": hit.score,
            "channels": {
                name: {"rank": part.rank, "score": part.score, "contribution": part.contribution}
                for name, part in hit.channels.items()
            },
        }
        for hit in hits
    ]
    return {"hits": rows, "retrieval": report.as_dict()}


def _candidate_json(item: ScoredEntry, explain: bool, selected: frozenset[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"id": item.entry.id, "score": item.score, "coverage": item.coverage}
    if explain:
        entry = item.entry
        row.update(
            title=entry.title,
            kind=entry.kind,
            domain=entry.domain,
            integrations=list(entry.integrations),
            citation=entry.citation.tag,
            selected=entry.id in selected,
            lexical_score=item.lexical_score,
            exact=item.exact,
            alias=item.alias,
            breakdown=dict(item.breakdown),
            channels={
                name: {
                    "rank": part.rank,
                    "score": part.score,
                    "normalized": part.normalized,
                    "contribution": part.contribution,
                }
                for name, part in item.channels.items()
            },
        )
    return row


def outcome_json(outcome: GroundingOutcome, *, explain: bool = False) -> dict[str, Any]:
    """A grounding outcome: ``{"block", "metadata", "candidates"}``.

    ``explain`` adds, for a person looking at why: each candidate's title, citation,
    whether the gate kept it, its per-field breakdown and per-channel scores, exact and
    alias hits; the query as used; how the context was assembled (included, summary-only
    and dropped ids, tokens, truncation); the expanded entries; and, for dense or hybrid
    ranking, the channel report.
    """
    meta = outcome.metadata
    block = outcome.block
    retrieval = outcome.retrieval
    selected = frozenset(meta.selected_ids)
    data: dict[str, Any] = {
        "block": None
        if block is None
        else {
            "kind": block.kind,
            "trusted": block.trusted,
            "content": block.content,
            "citations": [citation.tag for citation in block.citations],
            "metadata": dict(block.metadata),
        },
        "metadata": {
            "selected_ids": list(meta.selected_ids),
            "expanded_ids": list(meta.expanded_ids),
            "candidate_count": meta.candidate_count,
            "context_tokens": meta.context_tokens,
            "truncated": meta.truncated,
            "duration_ms": meta.duration_ms,
            "confidence": meta.confidence,
            "failure_reason": meta.failure_reason,
            "truncated_query": meta.truncated_query,
            "out_of_scope_count": meta.out_of_scope_count,
            "out_of_scope_integrations": list(meta.out_of_scope_integrations),
            "named_integrations": list(meta.named_integrations),
            "authorization_errors": list(meta.authorization_errors),
            "channels": None if meta.channels is None else _plain(meta.channels),
        },
        "candidates": [
            _candidate_json(item, explain, selected)
            for item in (retrieval.candidates if retrieval else ())
        ],
    }
    if explain:
        context = retrieval.context if retrieval is not None else None
        data["explain"] = {
            "query": retrieval.query if retrieval is not None else "",
            "expanded": [
                {"id": entry.id, "title": entry.title, "citation": entry.citation.tag}
                for entry in (retrieval.expanded if retrieval is not None else ())
            ],
            "context": None
            if context is None
            else {
                "included_ids": list(context.included_ids),
                "summary_ids": list(context.summary_ids),
                "dropped_ids": list(context.dropped_ids),
                "tokens": context.tokens,
                "truncated": context.truncated,
            },
            "channels": None
            if retrieval is None or retrieval.channels is None
            else _plain(retrieval.channels),
        }
    return data


# -- evidence -----------------------------------------------------------------------------------
def skipped_json(skipped: Sequence[SkippedSource]) -> list[dict[str, str]]:
    """Files left out of a documents index, with the reason."""
    return [{"path": item.path, "reason": item.reason} for item in skipped]


def evidence_json(
    result: EvidenceResult,
    duration_ms: float,
    *,
    files: int,
    chunks: int,
    skipped: Sequence[SkippedSource] = (),
) -> dict[str, Any]:
    """An evidence result, with a summary of the documents it was drawn from."""
    return {
        "status": result.status,
        "reason": result.reason,
        "block": result.text if result.ready else None,
        "citations": [citation.tag for citation in result.citations],
        "excerpts": [
            {
                "id": excerpt.id,
                "chunk_ids": list(excerpt.chunk_ids),
                "source": excerpt.source_id,
                "path": excerpt.path,
                "heading": excerpt.heading,
                "span": [excerpt.start, excerpt.end],
                "version": excerpt.version,
                "sha256": excerpt.sha256,
                "score": excerpt.score,
                "cut": excerpt.cut,
                "text": excerpt.text,
            }
            for excerpt in result.excerpts
        ],
        "metadata": {
            "tokens": result.tokens,
            "max_tokens": result.settings.max_total_tokens,
            "candidate_count": result.candidate_count,
            "candidates_truncated": result.candidates_truncated,
            "context_truncated": result.context_truncated,
            "sources": len(result.source_ids),
            "duration_ms": round(duration_ms, 3),
            "truncated_query": result.truncated_query,
        },
        "settings": result.settings.as_dict(),
        "documents": {"files": files, "chunks": chunks, "skipped": skipped_json(skipped)},
    }


# -- status and validation ----------------------------------------------------------------------
def issue_json(issue: ValidationIssue) -> dict[str, Any]:
    """One validation issue: severity, code, message and where (source, entry, field)."""
    return {
        "severity": issue.severity,
        "code": issue.code,
        "message": issue.message,
        "source_id": issue.source_id,
        "entry_id": issue.entry_id,
        "field": issue.field,
        "origin": issue.origin,
    }


def status_json(status: GroundingStatus) -> dict[str, Any]:
    """A grounding engine's status."""
    return {
        "enabled": status.enabled,
        "ready": status.ready,
        "entry_count": status.entry_count,
        "last_error": status.last_error,
        "validation_issues": [issue_json(issue) for issue in status.validation_issues],
    }


def validation_json(entries: int, issues: Sequence[ValidationIssue]) -> dict[str, Any]:
    """A validation report: ok (no error), valid entries, every issue."""
    ok = not any(issue.severity == "error" for issue in issues)
    return {"ok": ok, "entries": entries, "issues": [issue_json(issue) for issue in issues]}


# -- answers ------------------------------------------------------------------------------------
def check_json(check: CitationCheck) -> dict[str, Any]:
    """One citation found in an answer, and whether it names evidence the model was given."""
    return {
        "tag": check.tag,
        "kind": check.kind,
        "id": check.id,
        "version": check.version,
        "valid": check.valid,
        "problem": check.problem,
    }


def ask_json(
    kind: str,
    status: str,
    reason: str | None,
    text: str,
    report: CitationReport | None,
    completion: Completion | None,
) -> dict[str, Any]:
    """A checked answer: status, reason, text, each citation checked, what was offered."""
    return {
        "kb_kind": kind,
        "status": status,
        "reason": reason,
        "answer": text,
        "citations": [] if report is None else [check_json(c) for c in report.citations],
        "citations_ok": report is not None and report.ok,
        "offered": [] if report is None else [c.tag for c in report.offered],
        "provider": None if completion is None else completion.provider,
        "model": None if completion is None else completion.model,
    }


# -- agent memory -------------------------------------------------------------------------------
def memory_json(memory: Memory) -> dict[str, Any]:
    """One memory record."""
    return {
        "id": memory.id,
        "content": memory.content,
        "type": memory.type,
        "importance": memory.importance,
        "pinned": memory.pinned,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "accessed_at": memory.accessed_at,
        "access_count": memory.access_count,
        "sources": list(memory.sources),
        "metadata": dict(memory.metadata),
        "acl": list(memory.acl),
    }


def recall_json(result: MemoryRecall) -> dict[str, Any]:
    """A recall: the memories best first, each with its per-channel, per-stage explain."""
    return {
        "query": result.query,
        "memories": [
            {**memory_json(item.memory), "explain": item.explain} for item in result.memories
        ],
        "timed_out": result.timed_out,
        "freshness": result.freshness,
        "graph_error": result.graph.error,
        "session_id": result.session_id,
        "tracked": result.tracked,
        "duration_ms": result.duration_ms,
    }


def memory_details_json(details: Mapping[str, Any]) -> dict[str, Any]:
    """``MemoryStore.details``: the memory with its entities, attributes and hints."""
    memory: Memory = details["memory"]
    return {**memory_json(memory), **{k: v for k, v in details.items() if k != "memory"}}
