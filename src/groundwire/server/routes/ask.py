"""``/v1/ask``: a grounded answer from the configured model, streamed as Server-Sent Events.

Events, in order (each ``data`` is one JSON object):

- ``grounding``: the knowledge base, snapshot, kind, and what the model is given
  (``failure_reason`` when no block: the answer is then not grounded, and says so);
- ``text`` (any number): a piece of the answer. For entries, as the model streams it;
  for documents only after every citation was checked (``GroundedAssistant``);
- ``done``: the checked answer, the CLI's ``ask --json`` shape: each citation valid or
  not, ``citations_ok``, status (``answered``/``insufficient``/``rejected``);
- ``error`` instead of ``done`` when the provider failed mid-way: a problem document.

Citations are validated before ``done``; a client should show them only from ``done``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from groundwire import (
    ChatRequest,
    GroundedAssistant,
    GroundwireError,
    Message,
    Principal,
    validate_citations,
)
from groundwire.cli.ask import _ASK_SYSTEM
from groundwire.payloads import ask_json
from groundwire.server.auth import Grant
from groundwire.server.problems import Problem, library_problem, problem_responses
from groundwire.server.registry import Served
from groundwire.server.schemas import AskRequest
from groundwire.server.state import ServerState, record, state_of

__all__ = ["router"]

logger = logging.getLogger("groundwire.server")
router = APIRouter(prefix="/v1", tags=["answers"])


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _knowledge(
    served: Served, question: str, principal: Principal | None, provider: Any
) -> Iterator[str]:
    engine = served.opened.engine
    assert engine is not None
    outcome = engine.ground(question, principal=principal)
    block = outcome.block
    reason = outcome.metadata.failure_reason
    yield _event(
        "grounding",
        {
            "kb": served.name,
            "snapshot": served.snapshot,
            "kind": "knowledge",
            "failure_reason": reason,
            "offered": [] if block is None else [c.tag for c in block.citations],
        },
    )
    system = _ASK_SYSTEM if block is None else f"{_ASK_SYSTEM}\n\n{block.content}"
    request = ChatRequest(messages=(Message("user", question),), system=system)
    pieces: list[str] = []
    completion = None
    for event in provider.stream(request):
        if event.kind == "text":
            pieces.append(event.text)
            yield _event("text", {"text": event.text})
        elif event.kind == "done":
            completion = event.completion
    text = completion.text if completion is not None and completion.text else "".join(pieces)
    report = validate_citations(text, block.citations if block is not None else [])
    answer = ask_json("knowledge", "answered", reason, text, report, completion)
    yield _event("done", {"kb": served.name, "snapshot": served.snapshot, **answer})


def _documents(
    served: Served, question: str, principal: Principal | None, provider: Any
) -> Iterator[str]:
    assistant = GroundedAssistant(served.kb, provider, on_rejection="return", principal=principal)
    yield _event(
        "grounding",
        {"kb": served.name, "snapshot": served.snapshot, "kind": "documents",
         "failure_reason": None, "offered": []},
    )  # fmt: skip
    for event in assistant.stream_answer(question):
        if event.kind == "text":
            yield _event("text", {"text": event.text})
        elif event.answer is not None:
            answer = event.answer
            data = ask_json(
                "documents",
                answer.status,
                answer.reason,
                answer.text if answer.status != "rejected" else "",
                answer.citations,
                answer.completion,
            )
            yield _event("done", {"kb": served.name, "snapshot": served.snapshot, **data})


def _stream(state: ServerState, name: str, grant: Grant, question: str) -> Iterator[str]:
    """The events of one answer; a failure after the first byte becomes an ``error`` event."""
    assert state.provider is not None
    provider = None
    try:
        with state.registry.lease(name) as served:
            provider = state.provider()
            answer = _documents if served.opened.kind == "documents" else _knowledge
            yield from answer(served, question, grant.principal, provider)
    except GroundwireError as exc:
        yield _event("error", library_problem(exc).document("/v1/ask"))
    except Exception:
        logger.exception("ask failed")
        problem = Problem(500, "internal-error", "the answer failed; the error is logged")
        yield _event("error", problem.document("/v1/ask"))
    finally:
        close = getattr(provider, "close", None)
        if callable(close):
            close()


@router.post(
    "/ask",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"},
        **problem_responses(400, 401, 403, 404, 413, 422, 429, 503),
    },
)
async def ask(request: Request, body: AskRequest) -> StreamingResponse:
    """Answer a question with the server's model, grounded in a knowledge base (SSE)."""
    state = state_of(request)
    grant = state.allow(request.headers, "ask")
    name = state.resolve(grant, "ask", body.kb)
    state.check_text("question", body.question)
    record(request, grant, kb=name, query=body.question)
    if state.provider is None:
        raise Problem(
            503,
            "no-provider",
            "this server has no model provider; start it with --provider NAME --model NAME",
        )
    return StreamingResponse(
        _stream(state, name, grant, body.question),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
