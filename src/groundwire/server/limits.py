"""Limits every request is held to: body size, text length, rate per key, time.

- :class:`BodyLimit` (ASGI middleware) answers 413 before a handler reads a body over
  ``max_body_bytes``, whether or not the client declared its length.
- :class:`TokenBuckets` gives each API key ``burst`` requests at once, refilled at
  ``rate`` per second; past it, 429 with ``Retry-After`` (whole seconds, at least 1).
- :func:`check_text` refuses a query or question over ``max_query_chars`` (422 naming
  the field): the library would cut it, an API says so instead.
- :func:`within_deadline` runs blocking work off the event loop and answers 503 when it
  takes longer than ``request_timeout_s`` (the work is bounded by its own time budgets
  too; the client stops waiting).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from groundwire.config import SERVER_WORKERS
from groundwire.server.problems import Problem, problem_response

__all__ = ["BodyLimit", "TokenBuckets", "check_text", "within_deadline"]

T = TypeVar("T")


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets a 413 problem document."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _problem(self) -> Problem:
        return Problem(
            413,
            "body-too-large",
            f"the request body is over {self.max_bytes:,} bytes; send a shorter query or "
            "fewer turns",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await problem_response(self._problem(), scope.get("path"))(scope, receive, send)
                    return
        # Read the body first (it is small by construction), so a handler never sees part
        # of one that turns out too large, and a chunked body is held to the same limit.
        chunks: list[bytes] = []
        seen = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await problem_response(self._problem(), scope.get("path"))(scope, receive, send)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class TokenBuckets:
    """One token bucket per key: ``burst`` tokens, refilled at ``rate`` per second.

    ``rate`` 0 disables the limit. Thread-safe; the clock is injectable for tests.
    """

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)

    def take(self, key: str) -> float | None:
        """Spend one token of ``key``'s bucket; None if allowed, else seconds to wait."""
        if self.rate <= 0:
            return None
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return None
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate

    def check(self, key: str) -> None:
        """Raise a 429 problem with ``Retry-After`` when ``key`` has no token left."""
        wait = self.take(key)
        if wait is not None:
            seconds = max(1, math.ceil(wait))
            raise Problem(
                429,
                "rate-limited",
                f"rate limit of {self.rate:g} requests/s (bursts of {self.burst}) exceeded "
                f"for this key; retry after {seconds} s",
                headers={"Retry-After": str(seconds)},
            )


def check_text(field: str, text: str, limit: int) -> None:
    """A 422 problem naming ``field`` when ``text`` is over ``limit`` characters."""
    if len(text) > limit:
        raise Problem(
            422,
            "text-too-long",
            f"{field} has {len(text):,} characters, over the limit of {limit:,}; shorten it "
            "(the server does not cut it for you)",
            field=field,
        )


_workers: anyio.CapacityLimiter | None = None


def _limiter(workers: int) -> anyio.CapacityLimiter:
    """One limiter per process (made in the event loop that first needs it)."""
    global _workers
    if _workers is None:
        _workers = anyio.CapacityLimiter(workers)
    return _workers


async def within_deadline(seconds: float, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in a worker thread; a 503 problem when it takes over ``seconds``.

    At most ``SERVER_WORKERS`` run at once: the work is CPU-bound Python, so more threads
    only contend for the GIL (measured: benchmarks/bench_server.py); the rest wait their
    turn, still within their deadline.
    """
    with anyio.move_on_after(seconds) as scope:
        return await anyio.to_thread.run_sync(
            work, *args, abandon_on_cancel=True, limiter=_limiter(SERVER_WORKERS)
        )
    assert scope.cancelled_caught
    raise Problem(
        503,
        "timeout",
        f"the request took longer than {seconds:g} s and was abandoned; retry, or ask less",
        headers={"Retry-After": "1"},
    )
