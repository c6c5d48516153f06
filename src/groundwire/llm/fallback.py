"""Fallback across providers (and models) for one already prepared request.

Every candidate gets the SAME request — the caller's, grounding already applied — so a
fallback never retrieves again nor appends knowledge twice. A candidate is skipped when
it fails to start, fails before its first chunk, or answers with nothing (no text beyond
whitespace and no tool calls). A failure after the first chunk propagates: text already
shown cannot be taken back. Each provider retries its own transient errors (its
:class:`RetryPolicy`) before the next candidate is tried.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from groundwire.errors import ConfigError, ProviderError
from groundwire.llm.base import ChatRequest, Completion, Provider, StreamEvent

__all__ = [
    "AsyncFallbackStream",
    "Candidate",
    "FallbackAttempt",
    "FallbackProvider",
    "FallbackResult",
    "FallbackStream",
    "acomplete_with_fallback",
    "astream_with_fallback",
    "complete_with_fallback",
    "stream_with_fallback",
]

#: A provider (with the request's model), or a provider and the model to ask it for.
Candidate = Provider | tuple[Provider, str | None]
_END: Final = object()


@dataclass(frozen=True, slots=True)
class FallbackAttempt:
    """One candidate's turn: it ``answered``, ``failed`` (``error``) or returned ``empty``."""

    provider: str
    model: str | None
    outcome: Literal["answered", "failed", "empty"]
    error: ProviderError | None = None

    def describe(self) -> str:
        """One line: who was asked and what happened."""
        who = f"{self.provider} ({self.model})" if self.model else self.provider
        if self.outcome == "failed":
            return f"{who}: {self.error}"
        return f"{who}: {'empty output' if self.outcome == 'empty' else 'answered'}"


@dataclass(frozen=True, slots=True)
class FallbackResult:
    """The completion, the provider that gave it, and every attempt in order."""

    completion: Completion
    provider: Provider
    model: str | None
    attempts: tuple[FallbackAttempt, ...]


def complete_with_fallback(candidates: Sequence[Candidate], request: ChatRequest) -> FallbackResult:
    """Ask each candidate in turn with ``request``; return the first non-empty answer.

    Raises :class:`ProviderError` listing every attempt when none answers.
    """
    attempts: list[FallbackAttempt] = []
    last: ProviderError | None = None
    for provider, asked in _candidates(candidates, request):
        name, model = _name(provider), _model(provider, asked)
        try:
            completion = provider.complete(asked)
        except ProviderError as exc:
            attempts.append(FallbackAttempt(name, model, "failed", exc))
            last = exc
            continue
        if _is_empty(completion):
            attempts.append(FallbackAttempt(name, model, "empty"))
            continue
        attempts.append(FallbackAttempt(name, model, "answered"))
        return FallbackResult(completion, provider, completion.model or model, tuple(attempts))
    raise _all_failed(attempts) from last


async def acomplete_with_fallback(
    candidates: Sequence[Candidate], request: ChatRequest
) -> FallbackResult:
    """Async :func:`complete_with_fallback`."""
    attempts: list[FallbackAttempt] = []
    last: ProviderError | None = None
    for provider, asked in _candidates(candidates, request):
        name, model = _name(provider), _model(provider, asked)
        try:
            completion = await provider.acomplete(asked)
        except ProviderError as exc:
            attempts.append(FallbackAttempt(name, model, "failed", exc))
            last = exc
            continue
        if _is_empty(completion):
            attempts.append(FallbackAttempt(name, model, "empty"))
            continue
        attempts.append(FallbackAttempt(name, model, "answered"))
        return FallbackResult(completion, provider, completion.model or model, tuple(attempts))
    raise _all_failed(attempts) from last


class _Progress:
    """What a fallback stream knows so far: the attempts and, once committed, who answers."""

    def __init__(self, candidates: Sequence[Candidate], request: ChatRequest) -> None:
        self._candidates = _candidates(candidates, request)
        self.provider: Provider | None = None
        self.model: str | None = None
        self._attempts: list[FallbackAttempt] = []

    @property
    def attempts(self) -> tuple[FallbackAttempt, ...]:
        """The candidates tried so far, in order."""
        return tuple(self._attempts)

    def _commit(self, provider: Provider, name: str, model: str | None, event: StreamEvent) -> None:
        self.provider = provider
        done = event.completion if event.kind == "done" else None
        self.model = (done.model if done is not None else None) or model
        self._attempts.append(FallbackAttempt(name, model, "answered"))


class FallbackStream(_Progress, Iterator[StreamEvent]):
    """The events of the first candidate whose stream produces output.

    ``provider`` and ``model`` name that candidate once its first chunk arrived (None
    before); ``attempts`` grows as candidates are tried. Leading whitespace-only text is
    held back until a real chunk arrives, so a blank answer can still fall back. Iterate
    it once; :meth:`close` releases the current stream early.
    """

    def __init__(self, candidates: Sequence[Candidate], request: ChatRequest) -> None:
        super().__init__(candidates, request)
        self._events = self._run()

    def __iter__(self) -> FallbackStream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        """Stop early and close the stream being read."""
        self._events.close()

    def _run(self) -> Generator[StreamEvent, None, None]:
        last: ProviderError | None = None
        for provider, asked in self._candidates:
            name, model = _name(provider), _model(provider, asked)
            pending: list[StreamEvent] = []
            try:
                events = iter(provider.stream(asked))
            except ProviderError as exc:
                self._attempts.append(FallbackAttempt(name, model, "failed", exc))
                last = exc
                continue
            try:
                while True:
                    try:
                        event = next(events, None)
                    except ProviderError as exc:
                        if self.provider is not None:
                            raise
                        self._attempts.append(FallbackAttempt(name, model, "failed", exc))
                        last = exc
                        break
                    if self.provider is None:
                        if event is None or _blank_end(event):
                            self._attempts.append(FallbackAttempt(name, model, "empty"))
                            break
                        if not _substantive(event):
                            pending.append(event)
                            continue
                        self._commit(provider, name, model, event)
                        yield from pending
                    if event is None:
                        return
                    yield event
                    if event.kind == "done":
                        return
            finally:
                _close(events)
        raise _all_failed(self._attempts) from last


class AsyncFallbackStream(_Progress, AsyncIterator[StreamEvent]):
    """Async :class:`FallbackStream`; :meth:`aclose` releases the current stream early."""

    def __init__(self, candidates: Sequence[Candidate], request: ChatRequest) -> None:
        super().__init__(candidates, request)
        self._events = self._run()

    def __aiter__(self) -> AsyncFallbackStream:
        return self

    async def __anext__(self) -> StreamEvent:
        return await anext(self._events)

    async def aclose(self) -> None:
        """Stop early and close the stream being read."""
        await self._events.aclose()

    async def _run(self) -> AsyncGenerator[StreamEvent, None]:
        last: ProviderError | None = None
        for provider, asked in self._candidates:
            name, model = _name(provider), _model(provider, asked)
            pending: list[StreamEvent] = []
            try:
                events = aiter(provider.astream(asked))
            except ProviderError as exc:
                self._attempts.append(FallbackAttempt(name, model, "failed", exc))
                last = exc
                continue
            try:
                while True:
                    try:
                        event = await anext(events, None)
                    except ProviderError as exc:
                        if self.provider is not None:
                            raise
                        self._attempts.append(FallbackAttempt(name, model, "failed", exc))
                        last = exc
                        break
                    if self.provider is None:
                        if event is None or _blank_end(event):
                            self._attempts.append(FallbackAttempt(name, model, "empty"))
                            break
                        if not _substantive(event):
                            pending.append(event)
                            continue
                        self._commit(provider, name, model, event)
                        for held in pending:
                            yield held
                    if event is None:
                        return
                    yield event
                    if event.kind == "done":
                        return
            finally:
                aclose = getattr(events, "aclose", None)
                if callable(aclose):
                    await aclose()
        raise _all_failed(self._attempts) from last


def stream_with_fallback(candidates: Sequence[Candidate], request: ChatRequest) -> FallbackStream:
    """Stream from the first candidate that produces output; see :class:`FallbackStream`.

    When every candidate fails or answers empty, iterating raises :class:`ProviderError`
    listing each attempt.
    """
    return FallbackStream(candidates, request)


def astream_with_fallback(
    candidates: Sequence[Candidate], request: ChatRequest
) -> AsyncFallbackStream:
    """Async :func:`stream_with_fallback`."""
    return AsyncFallbackStream(candidates, request)


def _candidates(
    candidates: Sequence[Candidate], request: ChatRequest
) -> list[tuple[Provider, ChatRequest]]:
    """Each candidate's provider and the request it is asked (the model set when named)."""
    if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence):
        raise ConfigError(f"candidates={candidates!r} is invalid: expected a list of providers")
    if not candidates:
        raise ConfigError("candidates=[] is invalid: fallback needs at least one provider")
    out: list[tuple[Provider, ChatRequest]] = []
    for candidate in candidates:
        if isinstance(candidate, tuple):
            if len(candidate) != 2 or not isinstance(candidate[0], Provider):
                raise ConfigError(f"candidate {candidate!r} is invalid: expected (provider, model)")
            provider, model = candidate
            out.append((provider, replace(request, model=model) if model else request))
        elif isinstance(candidate, Provider):
            out.append((candidate, request))
        else:
            raise ConfigError(
                f"candidate {candidate!r} is invalid: expected a provider or (provider, model)"
            )
    return out


def _model(provider: Provider, request: ChatRequest) -> str | None:
    """The model a candidate is asked for: the request's, else the provider's default."""
    default = getattr(provider, "model", None)
    return request.model or (default if isinstance(default, str) else None)


def _name(provider: Provider) -> str:
    return getattr(provider, "name", None) or type(provider).__name__


def _is_empty(completion: Completion) -> bool:
    return not completion.text.strip() and not completion.tool_calls


def _substantive(event: StreamEvent) -> bool:
    """A chunk that commits the stream: real text, a tool call, or a non-empty ``done``."""
    if event.kind == "text":
        return bool(event.text.strip())
    if event.kind == "done":
        return event.completion is not None and not _is_empty(event.completion)
    return True


def _blank_end(event: StreamEvent) -> bool:
    return event.kind == "done" and (event.completion is None or _is_empty(event.completion))


def _close(events: object) -> None:
    close = getattr(events, "close", None)
    if callable(close):
        close()


def _all_failed(attempts: Sequence[FallbackAttempt]) -> ProviderError:
    summary = "; ".join(f"{n}) {a.describe()}" for n, a in enumerate(attempts, 1))
    retryable = any(a.error is not None and a.error.retryable for a in attempts)
    return ProviderError(
        f"all {len(attempts)} provider attempt(s) failed: {summary}", retryable=retryable
    )


class FallbackProvider:
    """A :class:`Provider` over candidates in fallback order, one fallback per call.

    Lets code written against one provider (a tool loop, the grounded assistant) use a
    fallback list. ``last`` is the most recent call's result (who answered, attempts).
    """

    name = "fallback"

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        _candidates(candidates, ChatRequest(messages=()))  # validate now, not mid-turn
        self._candidates = tuple(candidates)
        self.last: FallbackResult | None = None

    def complete(self, request: ChatRequest) -> Completion:
        """One completion from the first candidate that answers."""
        self.last = complete_with_fallback(self._candidates, request)
        return self.last.completion

    async def acomplete(self, request: ChatRequest) -> Completion:
        """Async :meth:`complete`."""
        self.last = await acomplete_with_fallback(self._candidates, request)
        return self.last.completion

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        """Stream from the first candidate that starts answering."""
        return stream_with_fallback(self._candidates, request)

    def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Async :meth:`stream`."""
        return astream_with_fallback(self._candidates, request)
