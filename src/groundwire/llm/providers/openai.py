"""OpenAI-compatible chat completions through the official ``openai`` SDK.

One provider covers OpenAI itself and every server that speaks its chat completions
API: Azure OpenAI, vLLM, Ollama, the llama.cpp server, LM Studio — pick one with
``base_url``. See docs/LLM.md, "Providers".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from groundwire.config import DEFAULT_PROVIDER_TIMEOUT_S, RetryPolicy
from groundwire.errors import ConfigError, MissingExtraError, QueryError
from groundwire.llm.base import ChatRequest, Completion, StreamEvent, Usage
from groundwire.llm.providers._sdk import SDKProvider, StreamAssembler, setting, tool_call

__all__ = ["OpenAIProvider"]

#: What the SDK needs as a key when a local server (given by base_url) checks none.
_NO_KEY = "not-needed"


class OpenAIProvider(SDKProvider):
    """Chat completions over the ``openai`` SDK, for OpenAI and any compatible server.

    Settings come from the arguments, else the environment: ``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL`` and ``OPENAI_MODEL`` (the default model; a request's ``model``
    overrides it). A key is required for OpenAI itself; with a ``base_url`` (a local
    server) a missing key is sent as a placeholder. ``timeout_s`` bounds the connect and
    each read of one attempt. Transient errors are retried by ``retry`` (a
    :class:`RetryPolicy`; ``max_retries`` sets its retries after the first attempt, default
    2); the SDK's own retries are turned off so the two never multiply. ``default_headers``
    go with every request (Azure's ``api-key``, a gateway's auth). ``name`` labels errors
    and completions.
    """

    model_env = "OPENAI_MODEL"
    default_base_url = "https://api.openai.com/v1"

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        timeout_s: float = DEFAULT_PROVIDER_TIMEOUT_S,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        default_headers: Mapping[str, str] | None = None,
        name: str = "openai",
    ) -> None:
        self.base_url = setting(base_url, "OPENAI_BASE_URL")
        key = setting(api_key, "OPENAI_API_KEY")
        if key is None and self.base_url is None:
            raise ConfigError(
                "OpenAIProvider needs an API key: pass api_key=... or set OPENAI_API_KEY "
                "(a local OpenAI-compatible server given by base_url= needs none)"
            )
        self._api_key = key or _NO_KEY
        self._organization = organization
        self._headers = dict(default_headers or {})
        super().__init__(
            name=name,
            model=setting(model, "OPENAI_MODEL"),
            timeout_s=timeout_s,
            retry=retry,
            max_retries=max_retries,
        )

    def _import_sdk(self) -> ModuleType:
        try:
            import openai
        except ImportError as exc:
            raise MissingExtraError("openai", "openai", "OpenAIProvider") from exc
        return openai

    def _make_client(self, *, asynchronous: bool) -> Any:
        factory = self._sdk.AsyncOpenAI if asynchronous else self._sdk.OpenAI
        return factory(
            api_key=self._api_key,
            base_url=self.base_url,
            organization=self._organization,
            timeout=self.timeout_s,
            max_retries=0,  # groundwire retries (RetryPolicy); SDK retries would multiply them
            default_headers=self._headers or None,
        )

    def _endpoint(self, client: Any) -> Any:
        return client.chat.completions.create

    def _key_hint(self) -> str:
        return "api_key= or OPENAI_API_KEY"

    def _arguments(self, request: ChatRequest, model: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {"model": model, "messages": _messages(request)}
        if request.tools:
            arguments["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": dict(tool.parameters),
                    },
                }
                for tool in request.tools
            ]
        if request.temperature is not None:
            arguments["temperature"] = request.temperature
        if request.max_tokens is not None:
            # max_tokens, not max_completion_tokens: every compatible server accepts it.
            arguments["max_tokens"] = request.max_tokens
        return arguments

    def _completion(self, response: Any, model: str) -> Completion:
        choices = response.choices or []
        message = choices[0].message if choices else None
        calls = tuple(
            tool_call(call.id or f"call_{index}", call.function.name, call.function.arguments)
            for index, call in enumerate((message.tool_calls if message else None) or [])
        )
        return Completion(
            text=(message.content if message else None) or "",
            tool_calls=calls,
            finish_reason=choices[0].finish_reason if choices else None,
            model=response.model or model,
            provider=self.name,
            usage=_usage(response.usage),
        )

    def _assembler(self, model: str) -> StreamAssembler:
        return _Assembler(self.name, model)


def _messages(request: ChatRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role == "tool":
            if not message.tool_call_id:
                raise QueryError("a tool message needs tool_call_id: the id of the call it answers")
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        elif message.role == "assistant" and message.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": json.dumps(dict(call.arguments)),
                            },
                        }
                        for call in message.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=getattr(usage, "prompt_tokens", None),
        output_tokens=getattr(usage, "completion_tokens", None),
    )


class _Assembler(StreamAssembler):
    """Chat completion chunks → text deltas; tool calls from their indexed argument deltas."""

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()

    def feed(self, chunk: Any) -> list[StreamEvent]:
        if getattr(chunk, "model", None):
            self.model = chunk.model
        if getattr(chunk, "usage", None) is not None:
            self.usage = _usage(chunk.usage)
        events: list[StreamEvent] = []
        for choice in chunk.choices or []:
            if (choice.index or 0) != 0:
                continue  # n > 1 is never asked for
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
                events.append(StreamEvent(kind="text", text=delta.content))
            for position, part in enumerate((delta.tool_calls if delta else None) or []):
                index = part.index if part.index is not None else position
                call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
                if part.id:
                    call["id"] = part.id
                function = part.function
                if function is not None:
                    if function.name and not call["name"]:
                        call["name"] = function.name
                    if function.arguments:
                        call["arguments"].append(function.arguments)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return events

    def finish(self) -> list[StreamEvent]:
        calls = tuple(
            tool_call(call["id"] or f"call_{index}", call["name"], "".join(call["arguments"]))
            for index, call in sorted(self.calls.items())
        )
        completion = Completion(
            text="".join(self.text),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            model=self.model,
            provider=self.provider,
            usage=self.usage,
        )
        return [
            *(StreamEvent(kind="tool_call", tool_call=call) for call in calls),
            StreamEvent(kind="done", completion=completion),
        ]
