"""A provider that wraps any Python callable: a local model, a test double, a proxy."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, Final, TypeVar

from groundwire.config import RetryPolicy
from groundwire.errors import (
    ConfigError,
    GroundwireError,
    ProviderError,
    ProviderTimeoutError,
)
from groundwire.llm.base import ChatRequest, Completion, StreamEvent, ToolCall
from groundwire.llm.retry import (
    acall_with_retry,
    astream_with_retry,
    call_with_retry,
    stream_with_retry,
)

__all__ = ["CallableProvider"]

T = TypeVar("T")
_END: Final = object()
#: What a wrapped callable may return (or await, or yield chunks of).
_RETURNS = "a str, a Completion, an iterable or async iterable of str/ToolCall chunks, or an awaitable of a str or Completion"  # noqa: E501


class CallableProvider:
    """A provider over ``fn(request: ChatRequest)``, sync or async.

    ``fn`` may return a ``str`` or a :class:`Completion`, a coroutine of either, or a
    (sync or async) generator of chunks: ``str`` text deltas and :class:`ToolCall` s.
    :meth:`complete` joins chunks; :meth:`stream` turns a plain answer into one text
    event. An exception from ``fn`` becomes a :class:`ProviderError` (a ``TimeoutError``
    a :class:`ProviderTimeoutError`); raise ``ProviderError(..., retryable=True)`` to
    ask for a retry. ``retry`` defaults to a single attempt. Async calls run a sync ``fn``
    in a worker thread, so it never blocks the event loop; ``fn`` owns its time limits.
    """

    def __init__(
        self,
        fn: Callable[[ChatRequest], Any],
        *,
        name: str = "callable",
        retry: RetryPolicy | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigError(f"fn={fn!r} is invalid: expected a function of a ChatRequest")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"name={name!r} is invalid: expected a non-empty string")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigError(f"retry={retry!r} is invalid: expected a RetryPolicy or None")
        self.fn = fn
        self.name = name
        self.retry = retry if retry is not None else RetryPolicy(attempts=1)
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)

    def __repr__(self) -> str:
        return f"CallableProvider({self.fn!r}, name={self.name!r})"

    # --- complete --------------------------------------------------------------------------------
    def complete(self, request: ChatRequest) -> Completion:
        """Call ``fn`` once (retried per ``retry``) and return its answer as a completion."""
        return call_with_retry(lambda: self._complete_once(request), self.retry)

    async def acomplete(self, request: ChatRequest) -> Completion:
        """Async :meth:`complete`."""
        return await acall_with_retry(lambda: self._acomplete_once(request), self.retry)

    def _complete_once(self, request: ChatRequest) -> Completion:
        with self._boundary():
            result = self.fn(request)
            if inspect.isawaitable(result) or isinstance(result, AsyncIterator):
                return _run_coroutine(self._aresolve(result, request))
            return self._resolve(result, request)

    async def _acomplete_once(self, request: ChatRequest) -> Completion:
        with self._boundary():
            result = await self._acall(request)
            return await self._aresolve(result, request)

    def _resolve(self, result: object, request: ChatRequest) -> Completion:
        if isinstance(result, Completion | str):
            return self._completion(result, request)
        assembler = _Assembler(self.name, request.model)
        for chunk in _chunks(result):
            assembler.add(chunk)
        return assembler.completion()

    async def _aresolve(self, result: object, request: ChatRequest) -> Completion:
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, AsyncIterator):
            assembler = _Assembler(self.name, request.model)
            async for chunk in result:
                assembler.add(chunk)
            return assembler.completion()
        if isinstance(result, Completion | str):
            return self._completion(result, request)
        return await asyncio.to_thread(self._resolve, result, request)

    def _completion(self, result: Completion | str, request: ChatRequest) -> Completion:
        if isinstance(result, str):
            assembler = _Assembler(self.name, request.model)
            assembler.add(result)
            return assembler.completion()
        return replace(
            result, provider=result.provider or self.name, model=result.model or request.model
        )

    # --- stream ----------------------------------------------------------------------------------
    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        """Events of ``fn``'s answer: one per yielded chunk, ``done`` last."""
        return stream_with_retry(lambda: self._stream_once(request), self.retry)

    def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Async :meth:`stream`."""
        return astream_with_retry(lambda: self._astream_once(request), self.retry)

    def _stream_once(self, request: ChatRequest) -> Iterator[StreamEvent]:
        assembler = _Assembler(self.name, request.model)
        with self._boundary():
            result = self.fn(request)
            if inspect.isawaitable(result):
                result = _run_coroutine(_await(result))
            if isinstance(result, Completion | str):
                yield from _events_of(self._completion(result, request))
                return
            chunks: Iterable[object] = (
                _sync_iter(result) if isinstance(result, AsyncIterator) else _chunks(result)
            )
            for chunk in chunks:
                event = assembler.add(chunk)
                if event is not None:
                    yield event
            yield StreamEvent(kind="done", completion=assembler.completion())

    async def _astream_once(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        assembler = _Assembler(self.name, request.model)
        with self._boundary():
            result = await self._acall(request)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, Completion | str):
                for whole in _events_of(self._completion(result, request)):
                    yield whole
                return
            if isinstance(result, AsyncIterator):
                async for chunk in result:
                    if (event := assembler.add(chunk)) is not None:
                        yield event
            else:
                iterator = iter(_chunks(result))
                while (chunk := await asyncio.to_thread(next, iterator, _END)) is not _END:
                    if (event := assembler.add(chunk)) is not None:
                        yield event
            yield StreamEvent(kind="done", completion=assembler.completion())

    # --- the boundary ----------------------------------------------------------------------------
    async def _acall(self, request: ChatRequest) -> object:
        if self._is_async:
            return self.fn(request)
        return await asyncio.to_thread(self.fn, request)

    def _boundary(self) -> _Boundary:
        return _Boundary(self.name)


class _Boundary:
    """Turns what ``fn`` raises into provider errors; groundwire's own errors pass."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is None or isinstance(exc, GroundwireError) or not isinstance(exc, Exception):
            return
        if isinstance(exc, TimeoutError):
            raise ProviderTimeoutError(
                f"{self.name}: the callable timed out: {exc}", provider=self.name
            ) from exc
        raise ProviderError(
            f"{self.name}: the callable raised {type(exc).__name__}: {exc}", provider=self.name
        ) from exc


class _Assembler:
    """Collects str and ToolCall chunks into events and one completion."""

    def __init__(self, provider: str, model: str | None) -> None:
        self.provider = provider
        self.model = model
        self.text: list[str] = []
        self.calls: list[ToolCall] = []

    def add(self, chunk: object) -> StreamEvent | None:
        if isinstance(chunk, str):
            if not chunk:
                return None
            self.text.append(chunk)
            return StreamEvent(kind="text", text=chunk)
        if isinstance(chunk, ToolCall):
            self.calls.append(chunk)
            return StreamEvent(kind="tool_call", tool_call=chunk)
        raise ConfigError(
            f"{self.provider}: the callable yielded {type(chunk).__name__}; chunks must be "
            "str (text) or ToolCall"
        )

    def completion(self) -> Completion:
        return Completion(
            text="".join(self.text),
            tool_calls=tuple(self.calls),
            finish_reason="tool_calls" if self.calls else "stop",
            model=self.model,
            provider=self.provider,
        )


def _chunks(result: object) -> Iterable[object]:
    if isinstance(result, Iterable) and not isinstance(result, str | bytes):
        return result
    raise ConfigError(f"the callable returned {type(result).__name__}; expected {_RETURNS}")


def _events_of(completion: Completion) -> Iterator[StreamEvent]:
    if completion.text:
        yield StreamEvent(kind="text", text=completion.text)
    for call in completion.tool_calls:
        yield StreamEvent(kind="tool_call", tool_call=call)
    yield StreamEvent(kind="done", completion=completion)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _run_coroutine(coroutine: Awaitable[T]) -> T:
    """Run ``coroutine`` to the end from sync code, in a worker thread if this thread
    already runs an event loop (which cannot be blocked on)."""

    async def main() -> T:
        return await coroutine

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()


def _sync_iter(iterator: AsyncIterator[object]) -> Iterator[object]:
    """Iterate an async iterator from sync code on a private event loop."""
    loop = asyncio.new_event_loop()
    try:
        while (item := loop.run_until_complete(anext(iterator, _END))) is not _END:
            yield item
    finally:
        aclose = getattr(iterator, "aclose", None)
        if callable(aclose):
            loop.run_until_complete(aclose())
        loop.close()
