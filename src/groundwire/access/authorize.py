"""One fail-closed evaluation for every host authorization callback in groundwire.

Every predicate a host hands over — ``allow(entry)`` on searches and turns,
``authorize(principal, source)`` on document evidence, ``authorize(principal, entry)``
on the engine and on scoped readers — is checked and called here, with one rule:

- At the call site, :func:`check_callback` refuses anything that is not callable and any
  ``async def`` function (a coroutine object is truthy, so calling one would allow
  everything): a :class:`~groundwire.ConfigError` that says to pass a synchronous one.
- Per item, **only** ``True`` allows. ``False`` denies. Anything else — another value
  (``"no"``, ``1``, ``None``, ``numpy.True_``), an awaitable, an exception — denies too
  and is a *failure*.
- With a deadline, items not decided when it passes are denied and the overrun is a
  failure. The callback runs in a worker thread (with the caller's context variables),
  so even one call that never returns is cut off; like the grounding timeout, the
  abandoned call is left to finish on its own and its answer is ignored.

Failures are reported in results as counts per kind (``"allow raised KeyError for 3
entries; denied"``) and never name an item or repeat an exception's text, since both can
reveal what the principal may not see. The details, item by item, go to the
``groundwire.access`` logger for the operator.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from groundwire.errors import ConfigError

__all__ = [
    "Authorization",
    "authorize_items",
    "authorize_mask",
    "check_callback",
    "is_async_callable",
    "predicate_of",
    "verdict_failure",
]

logger = logging.getLogger("groundwire.access")

_T = TypeVar("_T")
_EMPTY = np.zeros(0, dtype=bool)


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` returns a coroutine or async iterator instead of a verdict."""
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - an object's async __call__
    return (
        inspect.iscoroutinefunction(fn)
        or inspect.isasyncgenfunction(fn)
        or (not inspect.isroutine(fn) and inspect.iscoroutinefunction(call))
    )


def check_callback(fn: object, option: str) -> None:
    """Refuse a callback that cannot give a synchronous True/False (ConfigError); None is fine."""
    if fn is None:
        return
    if not callable(fn):
        raise ConfigError(
            f"{option}={fn!r} is invalid: expected a callable returning True or False"
        )
    if is_async_callable(fn):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise ConfigError(
            f"{option}={name} is an async function; groundwire calls it synchronously before "
            "ranking, and a coroutine would count as 'allowed'. Pass a synchronous function "
            "(resolve permissions first, then look them up)"
        )


@dataclass(frozen=True, slots=True)
class Authorization:
    """The verdicts on a sequence of items: ``allowed[i]`` for item ``i``.

    ``denied`` counts items not allowed (``False``, failures, deadline); ``errors`` holds
    one line per kind of failure, with its count, safe to show with results.
    """

    allowed: npt.NDArray[np.bool_]
    denied: int
    errors: tuple[str, ...]


#: Failures logged item by item per evaluation; the rest are counted in one more line.
_LOGGED_FAILURES = 5


class _Verdicts:
    """Verdicts decided so far; the worker appends, the caller reads a prefix."""

    __slots__ = ("failures", "values")

    def __init__(self) -> None:
        self.values: list[bool] = []
        self.failures: list[tuple[int, str]] = []  # (position, kind)

    def fail(self, position: int, kind: str, option: str, item: str, detail: object) -> None:
        """Record a failure; the first few are logged with the item for the operator."""
        if len(self.failures) < _LOGGED_FAILURES:
            logger.warning("%s %s for %s (denied): %s", option, kind, item, detail)
        self.failures.append((position, kind))


def verdict_failure(verdict: object) -> str | None:
    """None when ``verdict`` is a real True/False; else the kind of failure (an awaitable
    is closed). For callers that combine several callbacks and report each by name."""
    if verdict is True or verdict is False:
        return None
    if inspect.isawaitable(verdict):
        close = getattr(verdict, "close", None)
        if callable(close):  # a coroutine never awaited: close it quietly
            close()
        return "returned an awaitable (is it an async function?)"
    kind = type(verdict)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    return f"returned {name}, not True or False"


def _run(
    items: Sequence[_T],
    decide: Callable[[_T], object],
    verdicts: _Verdicts,
    stop: threading.Event,
    option: str,
    describe: Callable[[_T], str],
) -> None:
    for position, item in enumerate(items):
        if stop.is_set():
            return
        try:
            verdict = decide(item)
        except Exception as exc:  # fail closed: a broken callback allows nothing
            verdicts.fail(position, f"raised {type(exc).__name__}", option, describe(item), exc)
            verdicts.values.append(False)
            continue
        failure = verdict_failure(verdict)
        if failure is not None:
            verdicts.fail(position, failure, option, describe(item), repr(verdict))
        verdicts.values.append(verdict is True)


def _plural(count: int, noun: str) -> str:
    if count == 1:
        return f"1 {noun}"
    return f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def authorize_items(
    items: Sequence[_T],
    decide: Callable[[_T], object],
    *,
    option: str,
    noun: str,
    timeout_ms: int | None = None,
    describe: Callable[[_T], str] = repr,
) -> Authorization:
    """Ask ``decide`` about each item, in order, once; fail closed (see the module docstring).

    ``option`` names the callback and ``noun`` the items in error lines; ``describe``
    names an item in the operator's log. ``decide`` must have passed
    :func:`check_callback`.
    """
    if not items:
        return Authorization(_EMPTY, 0, ())
    verdicts = _Verdicts()
    stop = threading.Event()
    args = (items, decide, verdicts, stop, option, describe)
    timed_out = False
    if timeout_ms is None:
        _run(*args)
    else:
        context = contextvars.copy_context()
        worker = threading.Thread(
            target=context.run, args=(_run, *args), name="groundwire-authorize", daemon=True
        )
        worker.start()
        worker.join(timeout_ms / 1000.0)
        if worker.is_alive():
            stop.set()
            timed_out = True
    decided = list(verdicts.values)  # a prefix: the worker may still append, ignored
    failures = [kind for position, kind in list(verdicts.failures) if position < len(decided)]
    allowed = np.zeros(len(items), dtype=bool)
    allowed[: len(decided)] = decided
    counts: dict[str, int] = {}
    for kind in failures:
        counts[kind] = counts.get(kind, 0) + 1
    if len(failures) > _LOGGED_FAILURES:
        logger.warning("%s failed for %d more (denied)", option, len(failures) - _LOGGED_FAILURES)
    errors = [f"{option} {kind} for {_plural(n, noun)}; denied" for kind, n in counts.items()]
    if timed_out or len(decided) < len(items):
        unchecked = len(items) - len(decided)
        logger.warning(
            "%s did not finish within %s ms: %s not checked (denied)",
            option,
            timeout_ms,
            _plural(unchecked, noun),
        )
        errors.append(
            f"{option} did not finish within {timeout_ms} ms; "
            f"{_plural(unchecked, noun)} not checked; denied"
        )
    return Authorization(allowed, int(len(items) - np.count_nonzero(allowed)), tuple(errors))


def authorize_mask(
    mask: npt.NDArray[np.bool_],
    item_at: Callable[[int], _T],
    decide: Callable[[_T], object],
    *,
    option: str,
    noun: str,
    timeout_ms: int | None = None,
    describe: Callable[[_T], str] = repr,
) -> tuple[npt.NDArray[np.bool_], Authorization]:
    """``mask`` narrowed to the positions ``decide`` allows (asked only where ``mask`` is
    True, in position order, through :func:`authorize_items`); a new array."""
    candidates = np.flatnonzero(mask)
    verdicts = authorize_items(
        [item_at(position) for position in candidates.tolist()],
        decide,
        option=option,
        noun=noun,
        timeout_ms=timeout_ms,
        describe=describe,
    )
    narrowed = np.zeros(mask.shape[0], dtype=bool)
    narrowed[candidates[verdicts.allowed]] = True
    return narrowed, verdicts


def predicate_of(principal: Any, authorize: Callable[[Any, _T], object]) -> Callable[[_T], object]:
    """``authorize(principal, item)`` as a one-argument predicate."""

    def decide(item: _T) -> object:
        return authorize(principal, item)

    return decide
