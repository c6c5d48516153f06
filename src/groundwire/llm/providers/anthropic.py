"""Anthropic's messages API through the official ``anthropic`` SDK."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from groundwire.config import DEFAULT_ANTHROPIC_MAX_TOKENS, DEFAULT_PROVIDER_TIMEOUT_S, RetryPolicy
from groundwire.errors import ConfigError, MissingExtraError, QueryError
from groundwire.llm.base import ChatRequest, Completion, StreamEvent, ToolCall, Usage
from groundwire.llm.providers._sdk import SDKProvider, StreamAssembler, setting, tool_call

__all__ = ["AnthropicProvider"]


class AnthropicProvider(SDKProvider):
    """Claude models over the ``anthropic`` SDK's messages API.

    Settings come from the arguments, else the environment: ``ANTHROPIC_API_KEY``,
    ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_MODEL`` (the default model; a request's
    ``model`` overrides it). The API requires ``max_tokens``: a request's own, else
    ``max_tokens`` here (default 1024). ``timeout_s``, ``retry``, ``max_retries``,
    ``default_headers`` and ``name`` work as for :class:`OpenAIProvider`; the SDK's own
    retries are turned off.
    """

    model_env = "ANTHROPIC_MODEL"
    default_base_url = "https://api.anthropic.com"

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = DEFAULT_PROVIDER_TIMEOUT_S,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        max_tokens: int = DEFAULT_ANTHROPIC_MAX_TOKENS,
        default_headers: Mapping[str, str] | None = None,
        name: str = "anthropic",
    ) -> None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ConfigError(f"max_tokens={max_tokens!r} is invalid: expected an integer >= 1")
        self.base_url = setting(base_url, "ANTHROPIC_BASE_URL")
        key = setting(api_key, "ANTHROPIC_API_KEY")
        if key is None:
            raise ConfigError(
                "AnthropicProvider needs an API key: pass api_key=... or set ANTHROPIC_API_KEY"
            )
        self._api_key = key
        self.max_tokens = max_tokens
        self._headers = dict(default_headers or {})
        super().__init__(
            name=name,
            model=setting(model, "ANTHROPIC_MODEL"),
            timeout_s=timeout_s,
            retry=retry,
            max_retries=max_retries,
        )

    def _import_sdk(self) -> ModuleType:
        try:
            import anthropic
        except ImportError as exc:
            raise MissingExtraError("anthropic", "anthropic", "AnthropicProvider") from exc
        return anthropic

    def _make_client(self, *, asynchronous: bool) -> Any:
        factory = self._sdk.AsyncAnthropic if asynchronous else self._sdk.Anthropic
        return factory(
            # An explicit key also keeps the SDK from looking for profiles on disk.
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=0,  # groundwire retries (RetryPolicy); SDK retries would multiply them
            default_headers=self._headers or None,
        )

    def _endpoint(self, client: Any) -> Any:
        return client.messages.create

    def _key_hint(self) -> str:
        return "api_key= or ANTHROPIC_API_KEY"

    def _arguments(self, request: ChatRequest, model: str) -> dict[str, Any]:
        system = [request.system] if request.system else []
        system += [m.content for m in request.messages if m.role == "system" and m.content]
        arguments: dict[str, Any] = {
            "model": model,
            "messages": _messages(request),
            "max_tokens": request.max_tokens or self.max_tokens,
        }
        if system:
            arguments["system"] = "\n\n".join(system)
        if request.tools:
            arguments["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": dict(tool.parameters),
                }
                for tool in request.tools
            ]
        if request.temperature is not None:
            # In the body, not as a keyword: recent SDKs dropped the keyword (newer models
            # fix the temperature), older ones have it; the API reads the body either way.
            arguments["extra_body"] = {"temperature": request.temperature}
        return arguments

    def _completion(self, response: Any, model: str) -> Completion:
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in response.content or []:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append(tool_call(block.id, block.name, block.input))
        usage = response.usage
        return Completion(
            text="".join(text),
            tool_calls=tuple(calls),
            finish_reason=response.stop_reason,
            model=response.model or model,
            provider=self.name,
            usage=Usage(
                input_tokens=getattr(usage, "input_tokens", None),
                output_tokens=getattr(usage, "output_tokens", None),
            ),
        )

    def _assembler(self, model: str) -> StreamAssembler:
        return _Assembler(self.name, model)


def _messages(request: ChatRequest) -> list[dict[str, Any]]:
    """Messages in Anthropic's shape: system text goes top-level, tool results are
    ``tool_result`` blocks of a user turn (consecutive ones share that turn)."""
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            if not message.tool_call_id:
                raise QueryError("a tool message needs tool_call_id: the id of the call it answers")
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            previous = out[-1] if out else None
            if (
                previous is not None
                and previous["role"] == "user"
                and isinstance(previous["content"], list)
                and all(b.get("type") == "tool_result" for b in previous["content"])
            ):
                previous["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif message.role == "assistant" and message.tool_calls:
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks += [
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": dict(call.arguments),
                }
                for call in message.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": message.role, "content": message.content})
    return out


class _Assembler(StreamAssembler):
    """Message stream events → text deltas; tool_use blocks from their input_json deltas."""

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.text: list[str] = []
        self.blocks: dict[int, dict[str, Any]] = {}
        self.calls: list[ToolCall] = []
        self.finish_reason: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None

    def feed(self, chunk: Any) -> list[StreamEvent]:
        kind = getattr(chunk, "type", None)
        if kind == "message_start":
            message = chunk.message
            self.model = message.model or self.model
            self.input_tokens = getattr(message.usage, "input_tokens", None)
            self.output_tokens = getattr(message.usage, "output_tokens", None)
        elif kind == "content_block_start":
            block = chunk.content_block
            if block.type == "tool_use":
                self.blocks[chunk.index] = {"id": block.id, "name": block.name, "json": []}
            elif block.type == "text" and block.text:
                return self._text(block.text)
        elif kind == "content_block_delta":
            delta = chunk.delta
            if delta.type == "text_delta" and delta.text:
                return self._text(delta.text)
            if delta.type == "input_json_delta" and chunk.index in self.blocks:
                self.blocks[chunk.index]["json"].append(delta.partial_json)
        elif kind == "content_block_stop" and chunk.index in self.blocks:
            block = self.blocks.pop(chunk.index)
            call = tool_call(block["id"], block["name"], "".join(block["json"]))
            self.calls.append(call)
            return [StreamEvent(kind="tool_call", tool_call=call)]
        elif kind == "message_delta":
            self.finish_reason = chunk.delta.stop_reason or self.finish_reason
            usage = getattr(chunk, "usage", None)
            if usage is not None and getattr(usage, "output_tokens", None) is not None:
                self.output_tokens = usage.output_tokens
        return []

    def _text(self, text: str) -> list[StreamEvent]:
        self.text.append(text)
        return [StreamEvent(kind="text", text=text)]

    def finish(self) -> list[StreamEvent]:
        completion = Completion(
            text="".join(self.text),
            tool_calls=tuple(self.calls),
            finish_reason=self.finish_reason,
            model=self.model,
            provider=self.provider,
            usage=Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens),
        )
        return [StreamEvent(kind="done", completion=completion)]
