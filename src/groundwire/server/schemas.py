"""Request and response bodies of the HTTP API (pydantic; they make the OpenAPI schema).

Requests forbid unknown fields, so a misspelt option is a 422 naming it rather than
silently ignored. There is no principal field anywhere: who a request acts as comes
from its API key (``docs/SERVER.md``), never from the body. Responses carry the JSON of
:mod:`groundwire.payloads` (the CLI's ``--json`` shapes) plus the knowledge base and the
snapshot generation that answered (``handbook@3``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from groundwire.config import SERVER_MAX_LIMIT, SERVER_MAX_TURNS

__all__ = [
    "AskRequest",
    "EntryResponse",
    "EvidenceRequest",
    "EvidenceResponse",
    "GroundRequest",
    "GroundResponse",
    "KbStatus",
    "ReloadRequest",
    "ReloadResponse",
    "SearchHit",
    "SearchRequest",
    "SearchResponse",
    "StatusResponse",
    "TurnIn",
    "ValidateResponse",
]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_LABEL = Field(min_length=1, max_length=256)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Strict):
    """An earlier message of the conversation."""

    role: Literal["user", "assistant"]
    text: str = Field(min_length=1)


class _Query(_Strict):
    kb: str | None = Field(
        default=None, pattern=_NAME, description="Knowledge base name (default: the first)."
    )
    query: str = Field(min_length=1, description="The question or search text.")


class GroundRequest(_Query):
    """One turn: what the model would receive for ``query``."""

    turns: list[TurnIn] = Field(default_factory=list, max_length=SERVER_MAX_TURNS)
    integrations: list[str] = Field(
        default_factory=list, max_length=64, description="Integrations enabled for this turn."
    )
    blocked_domains: list[str] = Field(default_factory=list, max_length=64)
    max_tokens: int | None = Field(default=None, ge=1, le=100_000)
    gate: Literal["relevance", "off"] = "relevance"
    mode: Literal["lexical", "dense", "hybrid"] = Field(
        default="lexical", description="Ranking channels (dense, hybrid: the server's vectors)."
    )
    explain: StrictBool = Field(
        default=False, description="Add breakdowns, context assembly and channels."
    )


class SearchRequest(_Query):
    """Rank entries (or chunks) for ``query``; no context, no expansion."""

    limit: int = Field(default=10, ge=1, le=SERVER_MAX_LIMIT)
    integrations: list[str] | None = Field(default=None, max_length=64)
    blocked_domains: list[str] = Field(default_factory=list, max_length=64)
    mode: Literal["lexical", "dense", "hybrid"] = "lexical"
    explain: StrictBool = Field(
        default=True,
        description="Each hit's per-field breakdown (lexical mode); false skips computing it.",
    )


class EvidenceRequest(_Query):
    """Bounded, cited excerpts of documents for ``query``."""

    limit: int | None = Field(default=None, ge=1, le=SERVER_MAX_LIMIT)
    max_tokens: int | None = Field(default=None, ge=1, le=100_000)
    max_excerpt_chars: int | None = Field(default=None, ge=1, le=100_000)
    min_sources: int | None = Field(default=None, ge=1, le=SERVER_MAX_LIMIT)
    gate: Literal["relevance", "off"] = "relevance"


class AskRequest(_Strict):
    """A question answered by the configured model, grounded and citation-checked."""

    kb: str | None = Field(default=None, pattern=_NAME)
    question: str = Field(min_length=1)


class ReloadRequest(_Strict):
    """Which knowledge base to open again (default: every one the key may use)."""

    kb: str | None = Field(default=None, pattern=_NAME)


class _Answered(BaseModel):
    kb: str
    snapshot: str = Field(description="The generation that answered: '<kb>@<generation>'.")


class GroundResponse(_Answered):
    """The engine's outcome (entries) or an evidence result (documents), as the CLI's JSON."""

    kind: Literal["knowledge", "documents"]
    block: Any = None
    metadata: dict[str, Any]
    candidates: list[dict[str, Any]] = Field(default_factory=list)
    explain: dict[str, Any] | None = None
    status: str | None = None
    reason: str | None = None
    citations: list[str] | None = None
    excerpts: list[dict[str, Any]] | None = None
    settings: dict[str, Any] | None = None
    documents: dict[str, Any] | None = None


class SearchHit(BaseModel):
    id: str
    title: str
    score: float
    breakdown: dict[str, float] = Field(default_factory=dict)
    channels: dict[str, dict[str, Any]] | None = None


class SearchResponse(_Answered):
    mode: str
    hits: list[SearchHit]
    retrieval: dict[str, Any] | None = None


class EvidenceResponse(_Answered):
    status: str
    reason: str | None
    block: str | None
    citations: list[str]
    excerpts: list[dict[str, Any]]
    metadata: dict[str, Any]
    settings: dict[str, Any]
    documents: dict[str, Any]


class EntryResponse(_Answered):
    entry: dict[str, Any]


class KbStatus(BaseModel):
    name: str
    kind: Literal["knowledge", "documents"]
    origin: str
    snapshot: str
    generation: int
    age_seconds: float
    entries: int
    integrations: list[str]
    domains: list[str]
    last_reload_error: str | None
    status: dict[str, Any] | None = None


class StatusResponse(BaseModel):
    version: str
    auth: bool
    key_id: str
    knowledge_bases: list[KbStatus]


class ValidateResponse(_Answered):
    ok: bool
    entries: int
    issues: list[dict[str, Any]]


class ReloadResult(BaseModel):
    kb: str
    reloaded: bool
    snapshot: str
    error: str | None
    issues: list[dict[str, Any]]


class ReloadResponse(BaseModel):
    results: list[ReloadResult]
