"""Helpers shared by the named-integration tests: one retrieval call and the ids it kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import groundwire as gw

Entry = Callable[..., dict[str, Any]]
Build = Callable[..., gw.KnowledgeBase]


def select(
    kb: gw.KnowledgeBase,
    query: str,
    scope: gw.Scope | None = None,
    principal: gw.Principal | None = None,
    blocked: tuple[str, ...] = (),
    allow: Any = None,
    **config: Any,
) -> gw.Selection:
    """Retrieve ``query`` with the default configuration overridden by ``config``."""
    request = gw.RetrievalRequest(
        query, scope=gw.Scope() if scope is None else scope, principal=principal
    )
    return gw.retrieve(kb, request, gw.RetrievalConfig(**config), blocked, allow)


def ids(selection: gw.Selection) -> set[str]:
    """The primary and expanded entry ids of a selection."""
    return {item.entry.id for item in selection.primary} | {e.id for e in selection.expanded}
