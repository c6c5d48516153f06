"""``/v1/status``, ``/v1/validate``, ``/v1/reload``, ``/v1/metrics``, ``/healthz``, ``/readyz``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse

import groundwire
from groundwire.payloads import issue_json, status_json, validation_json
from groundwire.server.limits import within_deadline
from groundwire.server.problems import Problem, problem_responses
from groundwire.server.registry import Served
from groundwire.server.schemas import (
    ReloadRequest,
    ReloadResponse,
    StatusResponse,
    ValidateResponse,
)
from groundwire.server.state import record, state_of

__all__ = ["health", "router"]

router = APIRouter(prefix="/v1", tags=["operations"])
health = APIRouter(tags=["health"])
_ERRORS = problem_responses(400, 401, 403, 404, 413, 422, 429, 503)
_KB = Query(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _kb_status(served: Served, last_error: str | None) -> dict[str, Any]:
    opened = served.opened
    return {
        "name": served.name,
        "kind": opened.kind,
        "origin": served.origin,
        "snapshot": served.snapshot,
        "generation": served.generation,
        "age_seconds": round(served.age(), 3),
        "entries": len(served.kb),
        "integrations": list(served.integrations),
        "domains": list(served.domains),
        "last_reload_error": last_error,
        "status": None if opened.engine is None else status_json(opened.engine.status()),
    }


@router.get("/status", response_model=StatusResponse, responses=_ERRORS)
async def status(request: Request) -> dict[str, Any]:
    """The knowledge bases this key may use: snapshot, age, size, facets, engine status."""
    state = state_of(request)
    grant = state.allow(request.headers, "status")
    record(request, grant)
    registry = state.registry
    return {
        "version": groundwire.__version__,
        "auth": state.auth,
        "key_id": grant.key_id,
        "knowledge_bases": [
            _kb_status(registry.current(name), registry.last_error(name))
            for name in registry.names
            if grant.may_use(name)
        ],
    }


@router.get("/validate", response_model=ValidateResponse, responses=_ERRORS)
async def validate(request: Request, kb: str | None = _KB) -> dict[str, Any]:
    """The validation issues of a knowledge base (those its served snapshot was built with)."""
    state = state_of(request)
    grant = state.allow(request.headers, "validate")
    name = state.resolve(grant, "validate", kb)
    with state.registry.lease(name) as served:
        record(request, grant, served)
        report = validation_json(len(served.kb), served.opened.issues)
        return {"kb": served.name, "snapshot": served.snapshot, **report}


@router.post("/reload", response_model=ReloadResponse, responses=_ERRORS)
async def reload(request: Request, body: ReloadRequest | None = None) -> dict[str, Any]:
    """Open knowledge bases again and swap each in atomically; requests keep running.

    A source that no longer opens (validation errors, a damaged snapshot) is not
    installed: the current generation keeps serving and the result says why.
    """
    state = state_of(request)
    grant = state.allow(request.headers, "reload")
    wanted = None if body is None else body.kb
    names = (
        [state.resolve(grant, "reload", wanted)]
        if wanted is not None
        else [name for name in state.registry.names if grant.may_use(name)]
    )
    record(request, grant, kb=",".join(names))
    results = []
    for name in names:
        outcome = await within_deadline(
            max(state.settings.request_timeout_s, 600.0), state.registry.reload, name
        )
        results.append(
            {
                "kb": name,
                "reloaded": outcome.reloaded,
                "snapshot": f"{name}@{outcome.generation}",
                "error": outcome.error,
                "issues": [issue_json(issue) for issue in outcome.issues],
            }
        )
    return {"results": results}


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}, **_ERRORS},
)
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus metrics: requests, latency histogram, grounding failures, snapshot age."""
    state = state_of(request)
    grant = state.allow(request.headers, "metrics")
    record(request, grant)
    return PlainTextResponse(
        state.telemetry.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )


@health.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process answers (no authentication: for load balancers and supervisors)."""
    return {"status": "ok"}


@health.get("/readyz", responses=problem_responses(503))
async def readyz(request: Request) -> dict[str, Any]:
    """Every knowledge base is open and serving (503 problem otherwise)."""
    registry = state_of(request).registry
    missing = []
    for name in registry.names:
        try:
            registry.current(name)
        except Problem:
            missing.append(name)
    if missing:
        raise Problem(503, "not-ready", f"not open yet: {', '.join(missing)}")
    return {"status": "ready", "knowledge_bases": list(registry.names)}
