"""What the SDK-backed providers share: settings, error mapping, retries, client lifetimes.

Each provider subclass says how to build its SDK clients, how a :class:`ChatRequest`
becomes the SDK's arguments, and how a response or a stream of events becomes a
:class:`Completion`. This base turns SDK exceptions into :class:`ProviderError` at the
boundary, retries transient ones with the provider's :class:`RetryPolicy`, and keeps
one async client per event loop (an async HTTP pool cannot outlive its loop).
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import replace
from types import ModuleType
from typing import Any, NoReturn

from groundwire.config import RetryPolicy
from groundwire.errors import ConfigError, ProviderError, ProviderTimeoutError
from groundwire.llm.base import ChatRequest, Completion, StreamEvent, ToolCall
from groundwire.llm.retry import (
    acall_with_retry,
    astream_with_retry,
    call_with_retry,
    stream_with_retry,
)

__all__ = ["SDKProvider", "StreamAssembler", "resolve_policy", "setting", "tool_call"]

#: HTTP statuses worth retrying, as the official SDKs retry them: request timeout, lock
#: conflict, rate limit; every 5xx (529 is Anthropic's "overloaded") is added by range.
_RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: Class names (anywhere in an exception's MRO) of transport errors from httpx-style
#: libraries that an SDK may let escape while a stream is being read.
_TIMEOUT_NAMES = frozenset({"TimeoutException", "ReadTimeout", "ConnectTimeout", "WriteTimeout"})
_TRANSPORT_NAMES = frozenset({"TransportError", "NetworkError", "RemoteProtocolError"})
#: Error types a stream may report mid-way (Anthropic's ``event: error``, an OpenAI-compatible
#: ``data: {"error": ...}``) that mean "busy, try again" rather than "bad request".
_RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "server_error", "timeout_error"}
)


def setting(value: str | None, env_var: str) -> str | None:
    """``value`` when given (non-empty), else the environment variable's (None if unset)."""
    if value:
        return value
    return os.environ.get(env_var) or None


def resolve_policy(retry: RetryPolicy | None, max_retries: int | None) -> RetryPolicy:
    """The policy a provider retries with: ``retry`` (or the default), with ``max_retries``
    retries after the first attempt when given."""
    policy = retry if retry is not None else RetryPolicy()
    if not isinstance(policy, RetryPolicy):
        raise ConfigError(f"retry={policy!r} is invalid: expected a RetryPolicy or None")
    if max_retries is None:
        return policy
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
        raise ConfigError(f"max_retries={max_retries!r} is invalid: expected an integer >= 0")
    return replace(policy, attempts=max_retries + 1)


def tool_call(call_id: str, tool: str, raw: object) -> ToolCall:
    """A tool call with its arguments parsed from a JSON string (or a mapping as is).

    Arguments that are not a JSON object are a model mistake, not a provider failure:
    the call keeps them in ``raw_arguments`` (with empty ``arguments``) so a tool loop
    can send the model an error and let it retry.
    """
    if isinstance(raw, Mapping):
        return ToolCall(call_id, tool, dict(raw))
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ToolCall(call_id, tool, {})  # servers send "" for a tool without parameters
    try:
        value = json.loads(raw) if isinstance(raw, str | bytes) else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        return ToolCall(call_id, tool, {}, raw_arguments=text)
    return ToolCall(call_id, tool, value)


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


class StreamAssembler(ABC):
    """Turns one SDK's stream chunks into :class:`StreamEvent` s, then the ``done`` event."""

    @abstractmethod
    def feed(self, chunk: Any) -> list[StreamEvent]:
        """Events for one chunk (text deltas, completed tool calls)."""

    @abstractmethod
    def finish(self) -> list[StreamEvent]:
        """The events left when the stream ends: pending tool calls, then ``done``."""


class SDKProvider(ABC):
    """Base of providers built on an official SDK: see the module docstring."""

    name: str
    #: The environment variable holding the default model, named in errors.
    model_env: str = ""
    #: The API address the SDK uses without a ``base_url`` (named in connection errors).
    default_base_url: str = ""
    base_url: str | None = None

    def __init__(
        self,
        *,
        name: str,
        model: str | None,
        timeout_s: float,
        retry: RetryPolicy | None,
        max_retries: int | None,
    ) -> None:
        if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or timeout_s <= 0:
            raise ConfigError(f"timeout_s={timeout_s!r} is invalid: expected a number > 0")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"name={name!r} is invalid: expected a non-empty string")
        self.name = name
        self.model = model
        self.timeout_s = float(timeout_s)
        self.retry = resolve_policy(retry, max_retries)
        self._sdk = self._import_sdk()
        self._client: Any = self._make_client(asynchronous=False)
        self._async: tuple[weakref.ref[asyncio.AbstractEventLoop], Any] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

    # --- what a subclass provides --------------------------------------------------------------
    @abstractmethod
    def _import_sdk(self) -> ModuleType:
        """The SDK module (MissingExtraError when it is not installed)."""

    @abstractmethod
    def _make_client(self, *, asynchronous: bool) -> Any:
        """A sync or async SDK client with this provider's settings, SDK retries off."""

    @abstractmethod
    def _endpoint(self, client: Any) -> Any:
        """The SDK's create function on ``client``."""

    @abstractmethod
    def _arguments(self, request: ChatRequest, model: str) -> dict[str, Any]:
        """The SDK call's keyword arguments for ``request``."""

    @abstractmethod
    def _completion(self, response: Any, model: str) -> Completion:
        """A :class:`Completion` from one SDK response."""

    @abstractmethod
    def _assembler(self, model: str) -> StreamAssembler:
        """A fresh assembler for one streamed response."""

    # --- the Provider protocol -----------------------------------------------------------------
    def complete(self, request: ChatRequest) -> Completion:
        """One full completion, retried on transient errors."""
        return call_with_retry(lambda: self._complete_once(request), self.retry)

    async def acomplete(self, request: ChatRequest) -> Completion:
        """Async :meth:`complete`."""
        return await acall_with_retry(lambda: self._acomplete_once(request), self.retry)

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        """Stream events (text deltas, tool calls, ``done`` last); retried before the first."""
        return stream_with_retry(lambda: self._stream_once(request), self.retry)

    def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Async :meth:`stream`."""
        return astream_with_retry(lambda: self._astream_once(request), self.retry)

    def close(self) -> None:
        """Close the sync HTTP client (an async one is closed by :meth:`aclose`)."""
        self._client.close()

    async def aclose(self) -> None:
        """Close the HTTP clients, the async one of the running event loop included."""
        self._client.close()
        if self._async is not None and self._async[0]() is asyncio.get_running_loop():
            await self._async[1].close()
        self._async = None

    def __enter__(self) -> SDKProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- one attempt ---------------------------------------------------------------------------
    def _prepare(self, request: ChatRequest) -> tuple[dict[str, Any], str]:
        model = request.model or self.model
        if not model:
            raise ConfigError(
                f"{self.name}: no model given: pass model= to {type(self).__name__}, set "
                f"{self.model_env}, or set ChatRequest.model"
            )
        arguments = self._arguments(request, model)
        arguments["timeout"] = request.timeout_s if request.timeout_s else self.timeout_s
        return arguments, model

    def _complete_once(self, request: ChatRequest) -> Completion:
        arguments, model = self._prepare(request)
        try:
            response = self._endpoint(self._client)(**arguments)
        except Exception as exc:
            self._fail(exc, model, arguments["timeout"])
        return self._completion(response, model)

    async def _acomplete_once(self, request: ChatRequest) -> Completion:
        arguments, model = self._prepare(request)
        try:
            response = await self._endpoint(self._async_client())(**arguments)
        except Exception as exc:
            self._fail(exc, model, arguments["timeout"])
        return self._completion(response, model)

    def _stream_once(self, request: ChatRequest) -> Iterator[StreamEvent]:
        arguments, model = self._prepare(request)
        try:
            chunks = self._endpoint(self._client)(**arguments, stream=True)
        except Exception as exc:
            self._fail(exc, model, arguments["timeout"])
        assembler = self._assembler(model)
        try:
            for chunk in chunks:
                yield from assembler.feed(chunk)
            yield from assembler.finish()
        except Exception as exc:
            self._fail(exc, model, arguments["timeout"])
        finally:
            chunks.close()

    async def _astream_once(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        arguments, model = self._prepare(request)
        try:
            chunks = await self._endpoint(self._async_client())(**arguments, stream=True)
        except Exception as exc:
            self._fail(exc, model, arguments["timeout"])
        assembler = self._assembler(model)
        try:
            async for chunk in chunks:
                for event in assembler.feed(chunk):
                    yield event
            for event in assembler.finish():
                yield event
        except Exception as exc:
            self._fail(exc, model, arguments["timeout"])
        finally:
            await chunks.close()

    def _async_client(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0]() is not loop:
            self._async = (weakref.ref(loop), self._make_client(asynchronous=True))
        return self._async[1]

    # --- errors at the boundary ----------------------------------------------------------------
    def _fail(self, exc: Exception, model: str, timeout: float) -> NoReturn:
        """Raise ``exc`` as a :class:`ProviderError` (chained), or as is when it is not an
        SDK or transport error (groundwire's own errors, a bug)."""
        mapped = self._mapped(exc, model, timeout)
        if mapped is exc:
            raise exc
        raise mapped from exc

    def _mapped(self, exc: Exception, model: str, timeout: float) -> Exception:
        """``exc`` as a :class:`ProviderError` when it is an SDK or transport error, else as is."""
        if isinstance(exc, ProviderError | ConfigError):
            return exc
        sdk = self._sdk
        names = _names(exc)
        where = f"{self.name} ({model})"
        if isinstance(exc, sdk.APITimeoutError) or names & _TIMEOUT_NAMES:
            return ProviderTimeoutError(
                f"{where}: no answer within {timeout:g} s; raise timeout_s (the provider's, "
                "or the request's) if the model is slow, or check the server",
                provider=self.name,
            )
        if isinstance(exc, sdk.APIConnectionError) or names & _TRANSPORT_NAMES:
            url = self.base_url or self.default_base_url
            return ProviderError(
                f"{where}: connection to {url} failed ({_message(exc)}); check the URL "
                "(base_url) and that the server is running",
                provider=self.name,
                retryable=True,
            )
        if isinstance(exc, sdk.APIStatusError) and exc.status_code >= 400:
            return self._status_error(exc.status_code, _message(exc), where)
        if isinstance(exc, sdk.APIError):  # an error event inside a 200 stream
            kind = _error_type(exc)
            return ProviderError(
                f"{where}: the provider reported an error: {_message(exc)}"
                + (f" ({kind})" if kind else ""),
                provider=self.name,
                retryable=kind in _RETRYABLE_ERROR_TYPES,
            )
        base = getattr(sdk, "OpenAIError", None) or getattr(sdk, "AnthropicError", None)
        if base is not None and isinstance(exc, base):
            return ProviderError(f"{where}: {_message(exc)}", provider=self.name)
        return exc

    def _status_error(self, status: int, message: str, where: str) -> ProviderError:
        retryable = status in _RETRYABLE_STATUSES or status >= 500
        hint = {
            401: f"check the API key ({self._key_hint()})",
            403: "the key may lack access to this model or endpoint",
            404: "check the model name and base_url",
            429: "rate limited; retry later or lower the request rate",
        }.get(status, "retrying may succeed" if retryable else "the request was refused")
        return ProviderError(
            f"{where}: HTTP {status}: {message}; {hint}",
            provider=self.name,
            status=status,
            retryable=retryable,
        )

    def _key_hint(self) -> str:
        return "api_key="


def _error_type(exc: BaseException) -> str | None:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("type"), str):
            return str(error["type"])
    return None


def _message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return str(error["message"])
    message = getattr(exc, "message", None)
    return str(message) if message else (str(exc) or type(exc).__name__)
