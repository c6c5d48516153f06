"""Retries with exponential backoff and jitter for transient provider errors.

A call is retried only when it raises a :class:`ProviderError` whose ``retryable`` is
true (rate limits, 5xx, transport failures, timeouts); anything else propagates at once.
Backoff comes from ``tenacity``; a :class:`RetryPolicy` of one attempt never imports it.

A stream is retried only until its first event: once an event has reached the caller,
a failure propagates, since text already shown cannot be taken back.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from groundwire.config import RetryPolicy
from groundwire.errors import MissingExtraError, ProviderError

if TYPE_CHECKING:
    from tenacity import AsyncRetrying, RetryCallState, Retrying

__all__ = [
    "acall_with_retry",
    "astream_with_retry",
    "call_with_retry",
    "is_transient",
    "stream_with_retry",
]

T = TypeVar("T")
logger = logging.getLogger("groundwire.llm")

#: Marks a stream that ended before its first item.
_END: Final = object()


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth another attempt: a :class:`ProviderError` marked retryable."""
    return isinstance(exc, ProviderError) and exc.retryable


def call_with_retry(fn: Callable[[], T], policy: RetryPolicy) -> T:
    """Call ``fn`` and return its result, retrying transient errors as ``policy`` says."""
    if policy.attempts == 1:
        return fn()
    return _retrying(policy)(fn)


async def acall_with_retry(fn: Callable[[], Awaitable[T]], policy: RetryPolicy) -> T:
    """Async :func:`call_with_retry`: await ``fn()``, retrying transient errors."""
    if policy.attempts == 1:
        return await fn()

    async def attempt() -> T:  # a coroutine function, so tenacity awaits each attempt
        return await fn()

    return cast(T, await _aretrying(policy)(attempt))


def stream_with_retry(open_stream: Callable[[], Iterator[T]], policy: RetryPolicy) -> Iterator[T]:
    """Yield the items of ``open_stream()``, reopening it on a transient error before the
    first item. The stream is opened on the first ``next()``; it is closed when this
    generator ends or is closed."""

    def first() -> tuple[Iterator[T], object]:
        iterator = open_stream()
        try:
            return iterator, next(iterator, _END)
        except BaseException:
            _close(iterator)
            raise

    iterator, head = call_with_retry(first, policy)
    try:
        if head is _END:
            return
        yield cast(T, head)
        yield from iterator
    finally:
        _close(iterator)


async def astream_with_retry(
    open_stream: Callable[[], AsyncIterator[T]], policy: RetryPolicy
) -> AsyncIterator[T]:
    """Async :func:`stream_with_retry`."""

    async def first() -> tuple[AsyncIterator[T], object]:
        iterator = open_stream()
        try:
            return iterator, await anext(iterator, _END)
        except BaseException:
            await _aclose(iterator)
            raise

    iterator, head = await acall_with_retry(first, policy)
    try:
        if head is _END:
            return
        yield cast(T, head)
        async for item in iterator:
            yield item
    finally:
        await _aclose(iterator)


def _close(iterator: object) -> None:
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


async def _aclose(iterator: object) -> None:
    aclose = getattr(iterator, "aclose", None)
    if callable(aclose):
        await aclose()


def _tenacity() -> ModuleType:
    try:
        import tenacity
    except ImportError as exc:
        raise MissingExtraError("tenacity", "llm", "Retrying provider calls") from exc
    return tenacity


def _options(tenacity: ModuleType, policy: RetryPolicy) -> dict[str, Any]:
    return {
        "stop": tenacity.stop_after_attempt(policy.attempts),
        "wait": tenacity.wait_exponential_jitter(
            max=policy.max_s, jitter=policy.jitter, **{_first_wait(tenacity): policy.initial_s}
        ),
        "retry": tenacity.retry_if_exception(is_transient),
        "before_sleep": _log_retry,
        "reraise": True,  # the caller sees the last ProviderError, not tenacity's RetryError
    }


def _first_wait(tenacity: ModuleType) -> str:
    """The first-wait argument: ``multiplier`` in recent tenacity, ``initial`` in older ones."""
    parameters = inspect.signature(tenacity.wait_exponential_jitter).parameters
    return "multiplier" if "multiplier" in parameters else "initial"


def _retrying(policy: RetryPolicy) -> Retrying:
    tenacity = _tenacity()

    def sleep(seconds: float) -> None:
        if policy.sleep is None:
            time.sleep(seconds)
            return
        result = policy.sleep(seconds)
        if inspect.iscoroutine(result):  # an async sleep given to a sync call: nothing to await
            result.close()

    retrying: Retrying = tenacity.Retrying(sleep=sleep, **_options(tenacity, policy))
    return retrying


def _aretrying(policy: RetryPolicy) -> AsyncRetrying:
    tenacity = _tenacity()

    async def sleep(seconds: float) -> None:
        if policy.sleep is None:
            await asyncio.sleep(seconds)
            return
        result = policy.sleep(seconds)
        if inspect.isawaitable(result):
            await result

    retrying: AsyncRetrying = tenacity.AsyncRetrying(sleep=sleep, **_options(tenacity, policy))
    return retrying


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    logger.warning(
        "provider call failed (attempt %d): %s; retrying in %.2f s",
        state.attempt_number,
        error,
        wait,
    )
