"""What every request handler reaches: the served knowledge bases, keys, limits, metrics.

:class:`ServerState` is built once per app; :meth:`ServerState.allow` is the one gate a
request passes before it touches data: authenticate (401), check the grant (403), spend
a rate-limit token (429). Who the request acts as is the key's principal, and nothing
else: no header, body field or query text can name another (``docs/ACCESS.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from groundwire import MemoryStore
from groundwire.config import ServerSettings
from groundwire.server.auth import Grant, KeyRing, local_grant
from groundwire.server.limits import TokenBuckets, check_text
from groundwire.server.problems import Problem
from groundwire.server.registry import Registry, Served
from groundwire.server.telemetry import Telemetry, note

__all__ = ["ProviderFactory", "ServerState", "record", "state_of"]

#: Makes the model provider of ``ask`` (None: the server has no provider configured).
ProviderFactory = Callable[[], Any]


@dataclass(eq=False)
class ServerState:
    """One app's shared state. ``keys`` None is ``--no-auth`` (``local`` is then the grant);
    ``memory`` is the agent memory store of ``/v1/memory`` (None: not served)."""

    registry: Registry
    settings: ServerSettings = field(default_factory=ServerSettings)
    keys: KeyRing | None = None
    local: Grant = field(default_factory=local_grant)
    provider: ProviderFactory | None = None
    memory: MemoryStore | None = None
    telemetry: Telemetry = field(init=False)
    buckets: TokenBuckets = field(init=False)

    def __post_init__(self) -> None:
        self.telemetry = Telemetry(self.registry)
        self.buckets = TokenBuckets(self.settings.rate_per_second, self.settings.rate_burst)

    @property
    def auth(self) -> bool:
        """Whether requests need an API key."""
        return self.keys is not None

    def grant_of(self, headers: Mapping[str, str]) -> Grant:
        """The grant of the key in ``headers`` (401 problem), or the local grant (no auth)."""
        return self.local if self.keys is None else self.keys.authenticate(headers)

    def allow(self, headers: Mapping[str, str], call: str) -> Grant:
        """Authenticate (401), check that the key may make ``call`` (403), rate-limit (429)."""
        grant = self.grant_of(headers)
        grant.check(call)
        self.buckets.check(grant.key_id)
        return grant

    def resolve(self, grant: Grant, call: str, kb: str | None) -> str:
        """The served name ``kb`` stands for (default: the first the grant reaches).

        404 problem for a name this server does not serve, 403 for one outside the grant.
        """
        if kb is not None and kb not in self.registry.names:
            usable = [name for name in self.registry.names if grant.may_use(name)]
            raise Problem(
                404,
                "unknown-kb",
                f"no knowledge base {kb!r}; this key may use: {', '.join(usable) or 'none'}",
                field="kb",
            )
        name = self.registry.resolve(kb, grant.may_use)
        grant.check(call, name)
        return name

    def check_text(self, field_name: str, text: str) -> None:
        """A 422 problem when ``text`` is over the query length limit."""
        check_text(field_name, text, self.settings.max_query_chars)


def state_of(request: Request) -> ServerState:
    """The app's :class:`ServerState`."""
    state: ServerState = request.app.state.groundwire
    return state


def record(request: Request, grant: Grant, served: Served | None = None, **facts: Any) -> None:
    """Facts for this request's access-log line (key id, knowledge base, snapshot, query)."""
    extra: dict[str, Any] = {"key": grant.key_id, **facts}
    if served is not None:
        extra.update(kb=served.name, snapshot=served.snapshot)
    note(request.scope, **extra)
