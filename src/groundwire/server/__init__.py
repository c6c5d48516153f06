"""groundwire's server: the HTTP API, the MCP server and the web playground (extra ``[server]``).

Start it with ``groundwire serve KB...`` (or ``groundwire mcp KB...`` for MCP over
stdio); embed it with :func:`create_app` over a :class:`ServerState`. See
``docs/SERVER.md``.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
    import mcp  # noqa: F401
    import prometheus_client  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    from groundwire import MissingExtraError

    raise MissingExtraError(exc.name or "fastapi", "server", "groundwire's server") from exc

from groundwire.server.app import create_app, is_loopback, serve
from groundwire.server.auth import Grant, KeyRing, hash_key, local_grant, new_key
from groundwire.server.registry import Opened, Registry, Served, Source
from groundwire.server.sources import open_path, parse_source, source_for
from groundwire.server.state import ServerState

__all__ = [
    "Grant",
    "KeyRing",
    "Opened",
    "Registry",
    "Served",
    "ServerState",
    "Source",
    "create_app",
    "hash_key",
    "is_loopback",
    "local_grant",
    "new_key",
    "open_path",
    "parse_source",
    "serve",
    "source_for",
]
