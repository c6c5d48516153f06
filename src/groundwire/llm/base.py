"""The provider contract: chat requests, completions, streamed events, tool calls.

Every provider (OpenAI-compatible, Anthropic, a wrapped Python callable) turns a
:class:`ChatRequest` into a :class:`Completion`, or into :class:`StreamEvent`s ending
with one ``done`` event that carries the whole completion. Sync and async alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "ChatRequest",
    "Completion",
    "Message",
    "Provider",
    "Role",
    "StreamEvent",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to run a tool: ``arguments`` is the parsed JSON object.

    When the model sent arguments that are not a JSON object, ``arguments`` is empty
    and ``raw_arguments`` holds what it sent, so a tool loop can tell the model.
    """

    id: str
    name: str
    arguments: Mapping[str, Any]
    raw_arguments: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation message. ``tool`` messages answer ``tool_call_id``."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: ``parameters`` is a JSON schema object."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """What a provider is asked: system prompt, messages, tools and sampling options.

    ``model`` None means the provider's configured default. ``timeout_s`` bounds one
    attempt (None: the provider's default).
    """

    messages: tuple[Message, ...]
    system: str | None = None
    model: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts the provider reported (None when it did not)."""

    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished model turn: text, any tool calls, why it stopped, who answered."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    model: str | None = None
    provider: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One streamed event: a ``text`` delta, a complete ``tool_call``, or ``done``.

    The ``done`` event is always last and carries the assembled :class:`Completion`.
    """

    kind: Literal["text", "tool_call", "done"]
    text: str = ""
    tool_call: ToolCall | None = None
    completion: Completion | None = None


@runtime_checkable
class Provider(Protocol):
    """A chat model endpoint. Errors surface as :class:`groundwire.ProviderError`."""

    name: str

    def complete(self, request: ChatRequest) -> Completion:
        """One full completion."""
        ...

    async def acomplete(self, request: ChatRequest) -> Completion:
        """Async :meth:`complete`."""
        ...

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        """Stream the completion as events (``done`` last)."""
        ...

    def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Async :meth:`stream`."""
        ...
