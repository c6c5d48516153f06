"""Fallback: creation failure, failure before the first chunk and empty output move to the next
candidate with the same request; a failure after the first chunk propagates; all failing is
one error listing every attempt."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest

from groundwire import (
    AnthropicProvider,
    CallableProvider,
    ChatRequest,
    Completion,
    ConfigError,
    Message,
    OpenAIProvider,
    ProviderError,
    StreamEvent,
    ToolCall,
)
from groundwire.llm.fallback import (
    FallbackAttempt,
    acomplete_with_fallback,
    astream_with_fallback,
    complete_with_fallback,
    stream_with_fallback,
)

REQUEST = ChatRequest(
    messages=(Message("user", "How long do refunds take?"),),
    system="Answer briefly.\n\n<knowledge>refunds: 5 business days</knowledge>",
)


class Scripted:
    """A provider whose answers are scripted per call; it records every request it gets.

    ``script`` items: a str (answer), an Exception (raised when the stream is created or
    the completion asked for), or a list of str/Exception (stream chunks; an exception in
    the list is raised when reached).
    """

    def __init__(self, name: str, *script: Any) -> None:
        self.name = name
        self.script = list(script)
        self.requests: list[ChatRequest] = []
        self.closed = 0

    def _next(self, request: ChatRequest) -> Any:
        self.requests.append(request)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def complete(self, request: ChatRequest) -> Completion:
        item = self._next(request)
        text = "".join(item) if isinstance(item, list) else item
        return Completion(text=text, provider=self.name, model=request.model)

    async def acomplete(self, request: ChatRequest) -> Completion:
        return self.complete(request)

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        item = self._next(request)  # raises here: a stream-creation failure
        return self._events(item if isinstance(item, list) else [item], request)

    def _events(self, chunks: list[Any], request: ChatRequest) -> Iterator[StreamEvent]:
        try:
            for chunk in chunks:
                if isinstance(chunk, Exception):
                    raise chunk
                yield StreamEvent(kind="text", text=chunk)
            text = "".join(chunks)
            yield StreamEvent(
                kind="done", completion=Completion(text, provider=self.name, model=request.model)
            )
        finally:
            self.closed += 1

    def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        events = self.stream(request)

        async def run() -> AsyncIterator[StreamEvent]:
            for event in events:
                yield event

        return run()


def failure(message: str, *, retryable: bool = True) -> ProviderError:
    return ProviderError(message, status=503 if retryable else 400, retryable=retryable)


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if e.kind == "text"]


def outcomes(attempts: tuple[FallbackAttempt, ...]) -> list[tuple[str, str]]:
    return [(a.provider, a.outcome) for a in attempts]


# --- complete ------------------------------------------------------------------------------------
def test_the_first_answer_wins_and_later_candidates_are_not_asked() -> None:
    first, second = Scripted("first", "Five days."), Scripted("second", "unused")
    result = complete_with_fallback([first, second], REQUEST)
    assert result.completion.text == "Five days."
    assert result.provider is first
    assert outcomes(result.attempts) == [("first", "answered")]
    assert second.requests == []


def test_a_failure_and_an_empty_answer_move_on_with_the_same_request() -> None:
    failing = Scripted("failing", failure("HTTP 503"))
    empty = Scripted("empty", "  \n ")
    answering = Scripted("answering", "Five days.")

    result = complete_with_fallback([failing, empty, answering], REQUEST)

    assert result.completion.text == "Five days."
    assert result.provider is answering
    assert outcomes(result.attempts) == [
        ("failing", "failed"),
        ("empty", "empty"),
        ("answering", "answered"),
    ]
    assert result.attempts[0].error is not None
    # One enriched request for all: no second grounding, no second knowledge block.
    assert failing.requests[0] is empty.requests[0] is answering.requests[0] is REQUEST


def test_a_tool_call_without_text_is_an_answer() -> None:
    call = ToolCall("c1", "search_knowledge_base", {"query": "refunds"})
    tools = CallableProvider(lambda r: Completion(text="", tool_calls=(call,)), name="tools")
    result = complete_with_fallback([tools, Scripted("unused", "x")], REQUEST)
    assert result.completion.tool_calls == (call,)


def test_provider_model_pairs_ask_each_provider_for_its_model() -> None:
    first, second = Scripted("a", failure("down")), Scripted("b", "ok")
    result = complete_with_fallback([(first, "model-a"), (second, "model-b")], REQUEST)
    assert [r.model for r in first.requests + second.requests] == ["model-a", "model-b"]
    assert second.requests[0] == replace(REQUEST, model="model-b")
    assert result.model == "model-b"
    assert [a.model for a in result.attempts] == ["model-a", "model-b"]


def test_all_failing_raises_one_error_listing_every_attempt() -> None:
    last = failure("HTTP 400 bad request", retryable=False)
    providers = [
        Scripted("openai", failure("HTTP 503 overloaded")),
        Scripted("anthropic", ""),
        Scripted("local", last),
    ]
    with pytest.raises(ProviderError) as caught:
        complete_with_fallback(providers, REQUEST)
    message = str(caught.value)
    assert message.startswith("all 3 provider attempt(s) failed: ")
    assert "1) openai: HTTP 503 overloaded" in message
    assert "2) anthropic: empty output" in message
    assert "3) local: HTTP 400 bad request" in message
    assert caught.value.retryable  # one of them may succeed later
    assert caught.value.__cause__ is last


def test_errors_that_are_not_provider_errors_propagate_at_once() -> None:
    buggy = CallableProvider(lambda r: 42)  # a wrong return type is a ConfigError
    second = Scripted("second", "unused")
    with pytest.raises(ConfigError):
        complete_with_fallback([buggy, second], REQUEST)
    assert second.requests == []


@pytest.mark.parametrize(
    "candidates", [[], "openai", [object()], [(CallableProvider(lambda r: "x"),)]]
)
def test_candidates_are_validated(candidates: Any) -> None:
    with pytest.raises(ConfigError, match="candidate"):
        complete_with_fallback(candidates, REQUEST)


def test_async_complete_falls_back_the_same_way() -> None:
    first = Scripted("first", failure("down"))
    second = Scripted("second", "")
    third = Scripted("third", "async answer")
    result = asyncio.run(acomplete_with_fallback([first, second, third], REQUEST))
    assert result.completion.text == "async answer"
    assert outcomes(result.attempts) == [
        ("first", "failed"),
        ("second", "empty"),
        ("third", "answered"),
    ]
    with pytest.raises(ProviderError, match="all 1 provider"):
        asyncio.run(acomplete_with_fallback([Scripted("x", "")], REQUEST))


# --- stream --------------------------------------------------------------------------------------
def test_stream_creation_failure_moves_on() -> None:
    first = Scripted("first", failure("refused"))
    second = Scripted("second", ["Five ", "days."])
    stream = stream_with_fallback([first, second], REQUEST)
    assert stream.provider is None
    events = list(stream)
    assert texts(events) == ["Five ", "days."]
    assert events[-1].kind == "done"
    assert stream.provider is second
    assert outcomes(stream.attempts) == [("first", "failed"), ("second", "answered")]
    assert first.requests[0] is second.requests[0] is REQUEST


def test_a_failure_before_the_first_chunk_moves_on() -> None:
    first = Scripted("first", [failure("dropped before any text")])
    second = Scripted("second", ["ok"])
    events = list(stream_with_fallback([first, second], REQUEST))
    assert texts(events) == ["ok"]
    assert first.closed == 1  # the abandoned stream was closed


def test_an_empty_or_blank_stream_moves_on_without_leaking_whitespace() -> None:
    empty = Scripted("empty", [])
    blank = Scripted("blank", [" ", "\n"])
    answering = Scripted("answering", ["\n", "Five days."])
    stream = stream_with_fallback([empty, blank, answering], REQUEST)
    events = list(stream)
    assert texts(events) == ["\n", "Five days."]  # the answerer's own whitespace is kept
    assert outcomes(stream.attempts) == [
        ("empty", "empty"),
        ("blank", "empty"),
        ("answering", "answered"),
    ]


def test_a_failure_after_the_first_chunk_propagates() -> None:
    first = Scripted("first", ["Five ", failure("connection reset")])
    second = Scripted("second", ["never"])
    stream = stream_with_fallback([first, second], REQUEST)
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError, match="connection reset"):
        seen.extend(stream)
    assert texts(seen) == ["Five "]
    assert second.requests == []  # text already shown cannot be taken back
    assert stream.provider is first


def test_a_stream_where_all_fail_lists_every_attempt() -> None:
    stream = stream_with_fallback([Scripted("a", failure("boom")), Scripted("b", [])], REQUEST)
    with pytest.raises(ProviderError, match=r"1\) a: boom; 2\) b: empty output"):
        list(stream)


def test_closing_a_fallback_stream_closes_the_provider_stream() -> None:
    provider = Scripted("only", ["one ", "two ", "three"])
    stream = stream_with_fallback([provider], REQUEST)
    assert next(stream).text == "one "
    stream.close()
    assert provider.closed == 1


def test_async_stream_fallback_paths() -> None:
    first = Scripted("first", failure("refused"))
    second = Scripted("second", [failure("dropped")])
    third = Scripted("third", [" "])
    fourth = Scripted("fourth", ["async ", "answer", failure("late failure")])

    async def run() -> tuple[list[StreamEvent], Any, ProviderError | None]:
        stream = astream_with_fallback([first, second, third, fourth], REQUEST)
        seen: list[StreamEvent] = []
        error: ProviderError | None = None
        try:
            async for event in stream:
                seen.append(event)  # noqa: PERF401 - keeps what arrived before the error
        except ProviderError as exc:
            error = exc
        return seen, stream, error

    seen, stream, error = asyncio.run(run())
    assert texts(seen) == ["async ", "answer"]
    assert error is not None
    assert "late failure" in str(error)
    assert stream.provider is fourth
    assert outcomes(stream.attempts) == [
        ("first", "failed"),
        ("second", "failed"),
        ("third", "empty"),
        ("fourth", "answered"),
    ]


# --- with the real SDKs against the fake servers -------------------------------------------------
def test_real_providers_fall_back_with_the_same_enriched_request(fake: Any) -> None:
    fake.openai.enqueue_error(503, "overloaded")
    fake.anthropic.enqueue_text("Refunds take five business days.")
    primary = OpenAIProvider("gpt-test", api_key="k", base_url=fake.openai.base_url, max_retries=0)
    backup = AnthropicProvider(
        "claude-test", api_key="k", base_url=fake.anthropic.base_url, max_retries=0
    )

    stream = stream_with_fallback([primary, backup], REQUEST)
    events = list(stream)

    assert texts(events) == ["Refunds ", "take ", "five ", "business ", "days."]
    assert stream.provider is backup
    assert stream.model == "claude-test"
    sent_openai = fake.openai.last_request.json
    sent_anthropic = fake.anthropic.last_request.json
    assert sent_openai["messages"][0] == {"role": "system", "content": REQUEST.system}
    assert sent_anthropic["system"] == REQUEST.system  # the block once, not appended again


def test_real_empty_output_falls_back_between_two_openai_compatible_hosts(
    fake: Any, make_fake: Any
) -> None:
    other = make_fake()
    fake.openai.enqueue_empty()
    other.openai.enqueue_text("from the second host")
    first = OpenAIProvider("m1", api_key="k", base_url=fake.openai.base_url, name="vllm")
    second = OpenAIProvider("m2", base_url=other.openai.base_url, name="ollama")

    result = complete_with_fallback([first, second], REQUEST)

    assert result.completion.text == "from the second host"
    assert (result.completion.provider, result.model) == ("ollama", "m2")
    assert outcomes(result.attempts) == [("vllm", "empty"), ("ollama", "answered")]
    assert fake.openai.request_count == other.openai.request_count == 1


def test_real_mid_stream_disconnect_propagates(fake: Any) -> None:
    fake.openai.enqueue_disconnect(after_chunks=1, text="Refunds take five days")
    fake.anthropic.enqueue_text("never asked")
    primary = OpenAIProvider("gpt-test", api_key="k", base_url=fake.openai.base_url)
    backup = AnthropicProvider("claude-test", api_key="k", base_url=fake.anthropic.base_url)
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError):
        seen.extend(stream_with_fallback([primary, backup], REQUEST))
    assert texts(seen) == ["Refunds "]
    assert fake.openai.request_count == 1  # not retried either: a chunk was out
    assert fake.anthropic.request_count == 0
