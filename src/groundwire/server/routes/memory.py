"""``/v1/memory``: the agent memory of ``groundwire serve --memory STORE``, per principal.

Every call needs the ``memory`` grant and a principal (a key's, or ``--no-auth`` with
``--tenant/--subject``): the memory scope is built from it with
:meth:`~groundwire.MemoryScope.of` and the server's ``--memory-agent``, so a key reads
and writes only its tenant's memories and sees only those its ACL labels allow. There is
no anonymous memory (403: fail closed).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from groundwire import MemoryScope, MemoryStore
from groundwire.config import MEMORY_MAX_CONTENT_CHARS, MEMORY_MAX_KEY_CHARS, SERVER_MAX_LIMIT
from groundwire.payloads import memory_json, recall_json
from groundwire.server.auth import Grant
from groundwire.server.limits import within_deadline
from groundwire.server.problems import Problem, problem_responses
from groundwire.server.state import ServerState, record, state_of

__all__ = ["router"]

router = APIRouter(prefix="/v1/memory", tags=["memory"])
_ERRORS = problem_responses(400, 401, 403, 404, 409, 413, 422, 429, 503)


#: An ACL label as the library accepts it (docs/ACCESS.md: no whitespace, quotes,
#: backslashes, commas, control or zero-width characters, or ``*``).
_LABEL = r"^(user|group):[^\s\"'\\,*\x00-\x1f\x7f\u200b-\u200f\u2060\ufeff]{1,256}$"


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)
    limit: int | None = Field(default=None, ge=1, le=SERVER_MAX_LIMIT, strict=True)


class RememberRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=MEMORY_MAX_CONTENT_CHARS)
    type: Literal["fact", "preference", "decision", "constraint", "event", "episode"] = "fact"
    importance: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    pinned: StrictBool = False
    acl: list[Annotated[str, Field(pattern=_LABEL)]] = Field(default_factory=list, max_length=64)


def _scope(request: Request, state: ServerState) -> tuple[Grant, MemoryStore, MemoryScope]:
    grant = state.allow(request.headers, "memory")
    record(request, grant)
    if state.memory is None:
        raise Problem(
            409,
            "no-memory",
            "this server has no memory store; start it with --memory STORE",
        )
    principal = grant.principal
    if principal is None:
        raise Problem(
            403,
            "memory-needs-principal",
            "agent memory belongs to a tenant: this request has no principal (serve with "
            "--keys, or --no-auth --tenant T --subject S)",
        )
    return grant, state.memory, MemoryScope.of(principal, state.settings.memory_agent)


@router.post("/recall", responses=_ERRORS)
async def recall(request: Request, body: RecallRequest) -> dict[str, Any]:
    """The memories that best answer a query, best first, each with its explain."""
    state = state_of(request)
    _, store, scope = _scope(request, state)
    state.check_text("query", body.query)
    result = await within_deadline(
        state.settings.request_timeout_s,
        lambda: store.recall(scope, body.query, limit=body.limit),
    )
    return recall_json(result)


@router.post("", responses=_ERRORS)
async def remember(request: Request, body: RememberRequest) -> dict[str, Any]:
    """Store one memory in this principal's tenant (``acl`` narrows who may see it)."""
    state = state_of(request)
    _, store, scope = _scope(request, state)
    memory = await within_deadline(
        state.settings.request_timeout_s,
        lambda: store.remember(
            scope,
            body.content,
            type=body.type,
            importance=body.importance,
            pinned=body.pinned,
            acl=body.acl,
        ),
    )
    return memory_json(memory)


#: A memory id as the store accepts one: up to 256 characters, not blank, no line break.
_MEMORY_ID = Path(pattern=r"^[^\n]*\S[^\n]*$", max_length=MEMORY_MAX_KEY_CHARS)


def _missing(memory_id: str) -> Problem:
    return Problem(
        404,
        "unknown-memory",
        f"no memory {memory_id!r} that this key may see",
        field="memory_id",
    )


async def _by_id(request: Request, memory_id: str, work: Any) -> Any:
    """``work(store, scope)`` for one memory id; 404 when it returns nothing (not visible)."""
    state = state_of(request)
    _, store, scope = _scope(request, state)
    found = await within_deadline(state.settings.request_timeout_s, work, store, scope)
    if not found:
        raise _missing(memory_id)
    return found


@router.get("/{memory_id}", responses=_ERRORS)
async def get(request: Request, memory_id: str = _MEMORY_ID) -> dict[str, Any]:
    """One memory this principal may see; 404 for any other id."""
    found = await _by_id(request, memory_id, lambda store, scope: store.get(scope, memory_id))
    return memory_json(found)


@router.delete("/{memory_id}", responses=_ERRORS)
async def forget(request: Request, memory_id: str = _MEMORY_ID) -> dict[str, Any]:
    """Forget a memory (text, hints, vectors and graph, in one transaction)."""
    await _by_id(request, memory_id, lambda store, scope: store.forget(scope, memory_id))
    return {"id": memory_id, "forgotten": True}
