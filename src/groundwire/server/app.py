"""The ASGI app: the ``/v1`` API, MCP at ``/mcp``, the playground at ``/``; and running it.

:func:`create_app` wires a :class:`ServerState` (opened knowledge bases, keys, limits)
into FastAPI; :func:`serve` runs it under uvicorn with a graceful shutdown (requests in
flight get ``shutdown_grace_s`` to finish). Middleware, outermost first: the access log
and metrics, then the body-size limit; every error is a problem document.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from importlib.resources import files
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

import groundwire
from groundwire.server.limits import BodyLimit
from groundwire.server.mcp_server import McpGate, build_mcp
from groundwire.server.problems import install_handlers
from groundwire.server.routes import ask, knowledge, memory, ops
from groundwire.server.state import ServerState
from groundwire.server.telemetry import AccessLog

__all__ = ["create_app", "is_loopback", "serve"]

_STATIC = files("groundwire.server").joinpath("static")
_DESCRIPTION = (
    "Grounding, search and evidence over a team's knowledge bases. Authenticate with "
    "'Authorization: Bearer <key>' (or 'X-API-Key'); every error is an "
    "application/problem+json document. MCP (streamable HTTP) is at /mcp, the "
    "playground at /."
)


def create_app(state: ServerState, *, mcp: bool = True) -> FastAPI:
    """The app over ``state`` (its knowledge bases already opened, or opened at startup)."""
    mcp_server = build_mcp(state) if mcp else None
    mcp_app = (
        None
        if mcp_server is None
        else mcp_server.streamable_http_app(
            streamable_http_path="/",
            stateless_http=True,
            json_response=True,
            max_request_body_size=state.settings.max_body_bytes,
            host=state.settings.host,
        )
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not state.registry.is_open:
            state.registry.open_all()
        try:
            if mcp_server is not None:
                async with mcp_server.session_manager.run():
                    yield
            else:
                yield
        finally:
            state.registry.close()
            if state.memory is not None:
                state.memory.close()

    app = FastAPI(
        title="groundwire",
        version=groundwire.__version__,
        description=_DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.groundwire = state
    install_handlers(app)
    app.include_router(knowledge.router)
    app.include_router(ask.router)
    app.include_router(memory.router)
    app.include_router(ops.router)
    app.include_router(ops.health)
    if mcp_app is not None:
        app.mount("/mcp", McpGate(mcp_app, state), name="mcp")
    app.mount("/static", StaticFiles(directory=str(_STATIC)), name="static")

    @app.get("/", include_in_schema=False)
    async def playground() -> Response:
        return FileResponse(str(_STATIC.joinpath("index.html")), media_type="text/html")

    app.add_middleware(BodyLimit, max_bytes=state.settings.max_body_bytes)
    app.add_middleware(AccessLog, telemetry=state.telemetry, log_queries=state.settings.log_queries)
    return app


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _access_logging() -> None:
    """JSON access-log lines on stderr, one per request (uvicorn's own access log is off)."""
    logger = logging.getLogger("groundwire.server.access")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def serve(app: ASGIApp, state: ServerState, **uvicorn_options: Any) -> None:
    """Run ``app`` under uvicorn until SIGINT/SIGTERM; requests in flight may finish.

    A signal is a request to stop, answered by a graceful shutdown and a normal return
    (uvicorn would raise the signal again afterwards: a KeyboardInterrupt for Ctrl-C).
    """
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                try:
                    yield
                finally:
                    self._captured_signals.clear()  # stopped as asked: nothing to re-raise

    _access_logging()
    settings = state.settings
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=int(max(1, settings.shutdown_grace_s)),
        server_header=False,
        **uvicorn_options,
    )
    Server(config).run()
