"""Every error as a problem document (RFC 9457): type, title, status, detail, field.

Handlers turn each failure into ``application/problem+json`` — a request that fails
validation (the field at fault named as ``query`` or ``turns[1].text``), a library
error (its message, which names what and where), a route that does not exist, an
unexpected exception (logged with its traceback on the server, never sent). Nothing a
client receives ever holds a stack trace or a secret.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from groundwire import (
    ConfigError,
    GroundwireError,
    KnowledgeIndexError,
    MemoryStoreError,
    MissingExtraError,
    ProviderError,
    QueryError,
)

__all__ = [
    "PROBLEM_TYPE",
    "Problem",
    "ProblemDocument",
    "install_handlers",
    "problem_response",
    "problem_responses",
]

logger = logging.getLogger("groundwire.server")

MEDIA_TYPE = "application/problem+json"
#: The prefix of every problem ``type``: a URN, so it never points at a host.
PROBLEM_TYPE = "urn:groundwire:problem:"

_TITLES = {
    400: "Bad request",
    401: "Authentication required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Invalid request",
    429: "Too many requests",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
}
_SLUGS = {
    400: "bad-request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    413: "body-too-large",
    415: "unsupported-media-type",
    422: "invalid-request",
    429: "rate-limited",
    500: "internal-error",
    503: "unavailable",
}


class ProblemDocument(BaseModel):
    """The body of every error response (RFC 9457); ``field`` names the input at fault."""

    type: str
    title: str
    status: int
    detail: str
    field: str | None = None
    instance: str | None = None


class Problem(Exception):  # noqa: N818 - it is an answer (a problem document), not a bug
    """An error to answer with a problem document (raised anywhere in a request)."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        field: str | None = None,
        title: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.field = field
        self.title = title or _TITLES.get(status, "Error")
        self.headers = dict(headers or {})

    def document(self, instance: str | None = None) -> dict[str, Any]:
        """The JSON body."""
        return {
            "type": PROBLEM_TYPE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "field": self.field,
            "instance": instance,
        }


def problem_response(problem: Problem, instance: str | None = None) -> JSONResponse:
    """``problem`` as an ``application/problem+json`` response."""
    return JSONResponse(
        problem.document(instance),
        status_code=problem.status,
        headers=problem.headers,
        media_type=MEDIA_TYPE,
    )


def field_of(location: Sequence[Any]) -> str | None:
    """A pydantic error location as a field path: ``("body", "turns", 1, "text")`` →
    ``turns[1].text``; the body as a whole (``("body",)``) → None."""
    parts = list(location)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]  # where the value came from, not its name
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or None


def _validation_problem(exc: RequestValidationError) -> Problem:
    errors = list(exc.errors())
    first = errors[0] if errors else {"loc": (), "msg": "the request is invalid"}
    field = field_of(first.get("loc", ()))
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        detail = f"the body is not valid JSON ({message}); send a JSON object"
    elif first.get("type") == "extra_forbidden" and field:
        detail = f"{field}: unknown field; see the OpenAPI schema at /openapi.json"
    else:
        where = f"{field}: " if field else "body: "
        detail = where + message
    more = len(errors) - 1
    if more > 0:
        detail += f" (and {more} more {'problem' if more == 1 else 'problems'})"
    return Problem(422, "invalid-request", detail, field=field)


def library_problem(exc: GroundwireError) -> Problem:
    """A library error as a problem: its message already names what, where and the fix."""
    if isinstance(exc, MissingExtraError):
        return Problem(503, "missing-extra", str(exc))
    if isinstance(exc, QueryError | ConfigError):
        return Problem(422, "invalid-value", str(exc))
    if isinstance(exc, KnowledgeIndexError):
        return Problem(404, "not-found", str(exc))
    if isinstance(exc, ProviderError):
        return Problem(502, "provider-failed", str(exc), title="Model provider failed")
    if isinstance(exc, MemoryStoreError):
        return Problem(503, "memory-unavailable", str(exc))
    return Problem(500, "data-error", str(exc), title="Knowledge error")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (routes of one path may be several)."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches({**request.scope, "method": "*"})
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def install_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` with a problem document."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc, request.url.path)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(_validation_problem(exc), request.url.path)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(status, "Error")
        if status == 400:
            detail = f"{detail.rstrip('.')}: send a UTF-8 JSON object as the body"
        elif status == 404:
            detail = f"no route {request.url.path}; see /docs for the API"
        headers = dict(exc.headers or {})
        if status == 405:
            allowed = _allowed_methods(request)
            detail = (
                f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}"
            )
            headers["Allow"] = ", ".join(allowed)
        problem = Problem(status, _SLUGS.get(status, "http-error"), detail, headers=headers)
        return problem_response(problem, request.url.path)

    async def on_library(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, GroundwireError)
        return problem_response(library_problem(exc), request.url.path)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
        problem = Problem(
            500,
            "internal-error",
            "the server failed to handle this request; the error is logged on the server",
        )
        return problem_response(problem, request.url.path)

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(GroundwireError, on_library)
    app.add_exception_handler(Exception, on_unexpected)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries: each status answered with a problem document."""
    schema = {"$ref": "#/components/schemas/ProblemDocument"}
    return {
        status: {
            "model": ProblemDocument,  # registers the schema under components
            "description": _TITLES.get(status, "Error"),
            "content": {MEDIA_TYPE: {"schema": schema}},
        }
        for status in statuses
    }
