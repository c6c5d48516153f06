"""``/v1/ground``, ``/v1/search``, ``/v1/evidence``, ``/v1/entries/{id}``: reading knowledge.

Each handler passes the gate (:meth:`ServerState.allow`), leases the current generation
of its knowledge base for the whole call (a reload swaps generations between calls,
never under one), runs the library off the event loop within the request deadline, and
answers with the JSON of :mod:`groundwire.payloads`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from fastapi import APIRouter, Query, Request

from groundwire import (
    HybridSettings,
    Principal,
    Scope,
    Turn,
    retrieve_evidence,
    search_channels,
)
from groundwire.payloads import channel_hits_json, entry_json, evidence_json, outcome_json
from groundwire.server.auth import Grant
from groundwire.server.limits import within_deadline
from groundwire.server.problems import Problem, problem_responses
from groundwire.server.registry import Served
from groundwire.server.schemas import (
    EntryResponse,
    EvidenceRequest,
    EvidenceResponse,
    GroundRequest,
    GroundResponse,
    SearchRequest,
    SearchResponse,
)
from groundwire.server.state import ServerState, record, state_of

__all__ = ["ground_turn", "router", "search_hits"]

router = APIRouter(prefix="/v1", tags=["knowledge"])
_ERRORS = problem_responses(400, 401, 403, 404, 409, 413, 422, 429, 503)


def _answered(served: Served) -> dict[str, str]:
    return {"kb": served.name, "snapshot": served.snapshot}


def _needs_vectors(served: Served, mode: str) -> None:
    opened = served.opened
    if mode != "lexical" and (opened.vectors is None or opened.embedder is None):
        raise Problem(
            409,
            "mode-unavailable",
            f"mode {mode!r} needs vectors, and knowledge base {served.name!r} is served "
            "without them; use mode 'lexical'",
            field="mode",
        )


def ground_turn(
    state: ServerState, served: Served, body: GroundRequest, principal: Principal | None
) -> dict[str, Any]:
    """One turn on ``served`` as ``principal``: the outcome (entries) or evidence (documents)."""
    _needs_vectors(served, body.mode)
    if served.opened.kind == "documents":
        if body.turns or body.integrations or body.blocked_domains or body.mode != "lexical":
            raise Problem(
                409,
                "not-for-documents",
                f"knowledge base {served.name!r} holds documents: turns, integrations and "
                "blocked_domains and mode apply to knowledge entries only",
                field="turns" if body.turns else "integrations",
            )
        options: dict[str, Any] = {"gate": body.gate}
        if body.max_tokens is not None:
            options["max_total_tokens"] = body.max_tokens
        data = _evidence(served, body.query, principal, options)
        state.telemetry.failure(served.name, data["reason"] if data["block"] is None else None)
        return {**_answered(served), "kind": "documents", **data}
    engine = served.opened.engine
    assert engine is not None  # a knowledge base is always served with its engine
    config = engine.config
    outcome = engine.ground(
        body.query,
        recent_turns=[Turn(turn.role, turn.text) for turn in body.turns],
        scope=Scope(tuple(body.integrations)),
        principal=principal,
        blocked_domains=tuple(body.blocked_domains) or None,
        retrieval=dataclasses.replace(
            config.retrieval,
            gate=body.gate,
            hybrid=dataclasses.replace(config.retrieval.hybrid, mode=body.mode),
        ),
        context=None
        if body.max_tokens is None
        else dataclasses.replace(config.context, max_tokens=body.max_tokens),
        vectors=served.opened.vectors,
        embedder=served.opened.embedder,
    )
    state.telemetry.failure(served.name, outcome.metadata.failure_reason)
    return {**_answered(served), "kind": "knowledge", **outcome_json(outcome, explain=body.explain)}


def _evidence(
    served: Served, query: str, principal: Principal | None, options: dict[str, Any]
) -> dict[str, Any]:
    started = time.perf_counter()
    result = retrieve_evidence(served.kb, query, principal=principal, **options)
    opened = served.opened
    return evidence_json(
        result,
        (time.perf_counter() - started) * 1000,
        files=opened.files,
        chunks=opened.chunks,
        skipped=opened.skipped,
    )


def search_hits(served: Served, body: SearchRequest, principal: Principal | None) -> dict[str, Any]:
    """Ranked hits of what ``principal`` may see in ``served``, each with its breakdown."""
    reader = served.kb.reader(principal)
    scope = None if body.integrations is None else Scope(tuple(body.integrations))
    blocked = tuple(body.blocked_domains)
    if body.mode != "lexical":
        _needs_vectors(served, body.mode)
        opened = served.opened
        assert opened.vectors is not None
        view = reader.knowledge_base
        fused, report = search_channels(
            view,
            body.query,
            body.limit,
            HybridSettings(mode=body.mode),
            vectors=reader.vectors_for(opened.vectors),
            embedder=opened.embedder,
            mask=view.eligibility(scope, blocked),
        )
        data = channel_hits_json(view, fused, report)
        for row in data["hits"]:
            entry = view.get(row["id"])
            row["title"] = entry.title if entry is not None else ""
        return {**_answered(served), "mode": body.mode, **data}
    if body.explain:
        hits = reader.search(body.query, k=body.limit, scope=scope, blocked_domains=blocked)
        found = [(hit.id, hit.score, dict(hit.breakdown)) for hit in hits]
    else:  # the breakdown costs far more than the ranking: skip it when not wanted
        ids, scores = reader.search_ids(
            body.query, k=body.limit, scope=scope, blocked_domains=blocked
        )
        found = [(entry_id, score, {}) for entry_id, score in zip(ids, scores, strict=True)]
    rows = []
    for entry_id, score, breakdown in found:
        entry = reader.get(entry_id)
        rows.append(
            {
                "id": entry_id,
                "title": entry.title if entry is not None else "",
                "score": score,
                "breakdown": breakdown,
            }
        )
    return {**_answered(served), "mode": "lexical", "hits": rows, "retrieval": None}


async def _leased(state: ServerState, name: str, work: Any, *args: Any) -> dict[str, Any]:
    """``work(served, *args)`` on a leased generation of ``name``, within the deadline."""

    def run() -> dict[str, Any]:
        with state.registry.lease(name) as served:
            result: dict[str, Any] = work(served, *args)
            return result

    return await within_deadline(state.settings.request_timeout_s, run)


def _gate(request: Request, call: str, kb: str | None, query: str | None) -> tuple[Grant, str]:
    state = state_of(request)
    grant = state.allow(request.headers, call)
    name = state.resolve(grant, call, kb)
    if query is not None:
        state.check_text("query", query)
    if query is None:
        record(request, grant, kb=name)
    else:
        record(request, grant, kb=name, query=query)
    return grant, name


@router.post("/ground", response_model=GroundResponse, responses=_ERRORS)
async def ground(request: Request, body: GroundRequest) -> dict[str, Any]:
    """What one turn would receive: the knowledge block, its citations and metadata.

    For documents, the evidence block (quoted excerpts with spans) and its status.
    ``explain`` adds each candidate's per-field and per-channel breakdown, exact and
    alias hits, and how the context was assembled.
    """
    state = state_of(request)
    grant, name = _gate(request, "ground", body.kb, body.query)
    for n, turn in enumerate(body.turns):
        state.check_text(f"turns[{n}].text", turn.text)
    return await _leased(
        state, name, lambda served: ground_turn(state, served, body, grant.principal)
    )


@router.post("/search", response_model=SearchResponse, responses=_ERRORS)
async def search(request: Request, body: SearchRequest) -> dict[str, Any]:
    """Rank entries (or document chunks) for a query and explain each score."""
    state = state_of(request)
    grant, name = _gate(request, "search", body.kb, body.query)
    return await _leased(state, name, search_hits, body, grant.principal)


@router.post("/evidence", response_model=EvidenceResponse, responses=_ERRORS)
async def evidence(request: Request, body: EvidenceRequest) -> dict[str, Any]:
    """Bounded, cited excerpts of a documents knowledge base, or why there are none."""
    state = state_of(request)
    grant, name = _gate(request, "evidence", body.kb, body.query)
    options: dict[str, Any] = {"gate": body.gate}
    for field, option in (
        ("limit", "limit"),
        ("max_tokens", "max_total_tokens"),
        ("max_excerpt_chars", "max_excerpt_chars"),
        ("min_sources", "min_sources"),
    ):
        value = getattr(body, field)
        if value is not None:
            options[option] = value

    def run(served: Served) -> dict[str, Any]:
        if served.opened.kind != "documents":
            raise Problem(
                409,
                "not-documents",
                f"knowledge base {served.name!r} holds knowledge entries; evidence is for "
                "documents: use /v1/ground",
                field="kb",
            )
        return {**_answered(served), **_evidence(served, body.query, grant.principal, options)}

    return await _leased(state, name, run)


@router.get("/entries/{entry_id:path}", response_model=EntryResponse, responses=_ERRORS)
async def entry(
    request: Request,
    entry_id: str,
    kb: str | None = Query(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"),
) -> dict[str, Any]:
    """One entry (or chunk) this key's principal may see; 404 for any other id."""
    state = state_of(request)
    grant, name = _gate(request, "entries", kb, None)

    def run(served: Served) -> dict[str, Any]:
        found = served.kb.reader(grant.principal).get(entry_id)
        if found is None:  # unknown and not visible look the same: nothing leaks
            raise Problem(
                404,
                "unknown-entry",
                f"no entry {entry_id!r} in {served.name!r} that this key may see",
                field="entry_id",
            )
        return {**_answered(served), "entry": entry_json(found)}

    return await _leased(state, name, run)
