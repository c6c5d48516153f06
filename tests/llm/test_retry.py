"""Retries: transient errors only, bounded attempts, exponential backoff with jitter, no real
waiting (the policy's sleep records the delays), streams retried only before their first event."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from groundwire import (
    AnthropicProvider,
    CallableProvider,
    ChatRequest,
    ConfigError,
    Message,
    MissingExtraError,
    OpenAIProvider,
    ProviderError,
    ProviderTimeoutError,
    RetryPolicy,
    StreamEvent,
)
from groundwire.llm.retry import (
    acall_with_retry,
    astream_with_retry,
    call_with_retry,
    is_transient,
    stream_with_retry,
)

REQUEST = ChatRequest(messages=(Message("user", "How long do refunds take?"),))


class Sleeps(list[float]):
    """A RetryPolicy.sleep that records each delay instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def policy(sleeps: Sleeps, **options: Any) -> RetryPolicy:
    options.setdefault("jitter", 0.0)
    return RetryPolicy(sleep=sleeps, **options)


def transient(message: str = "busy") -> ProviderError:
    return ProviderError(message, status=503, retryable=True)


# --- the policy ----------------------------------------------------------------------------------
def test_default_policy_matches_the_documented_defaults() -> None:
    default = RetryPolicy()
    assert (default.attempts, default.initial_s, default.max_s, default.jitter) == (
        3,
        0.5,
        8.0,
        0.5,
    )


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 21}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"initial_s": -1}, "initial_s"),
        ({"initial_s": 2.0, "max_s": 1.0}, "max_s"),
        ({"jitter": float("nan")}, "jitter"),
        ({"sleep": "later"}, "sleep"),
    ],
)
def test_policy_values_are_validated(options: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        RetryPolicy(**options)


def test_only_retryable_provider_errors_are_transient() -> None:
    assert is_transient(transient())
    assert is_transient(ProviderTimeoutError("slow"))
    assert not is_transient(ProviderError("bad request", status=400))
    assert not is_transient(ValueError("bug"))


# --- call_with_retry -----------------------------------------------------------------------------
def test_backoff_doubles_from_initial_and_stops_after_the_attempts() -> None:
    sleeps = Sleeps()
    calls: list[int] = []

    def always_busy() -> str:
        calls.append(1)
        raise transient(f"busy {len(calls)}")

    with pytest.raises(ProviderError, match="busy 4"):  # the last error, not tenacity's
        call_with_retry(always_busy, policy(sleeps, attempts=4, initial_s=0.5, max_s=8.0))
    assert len(calls) == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_backoff_is_capped_and_jitter_stays_in_bounds() -> None:
    sleeps = Sleeps()
    calls = iter(range(10))

    def busy() -> None:
        next(calls)
        raise transient()

    with pytest.raises(ProviderError):
        call_with_retry(busy, policy(sleeps, attempts=5, initial_s=1.0, max_s=3.0, jitter=0.25))
    assert len(sleeps) == 4
    assert 1.0 <= sleeps[0] <= 1.25
    assert 2.0 <= sleeps[1] <= 2.25
    assert sleeps[2:] == [3.0, 3.0]  # 4 + jitter and 8 + jitter, both capped


def test_a_success_after_failures_is_returned() -> None:
    sleeps = Sleeps()
    outcomes: Iterator[str | None] = iter([None, None, "answer"])

    def flaky() -> str:
        outcome = next(outcomes)
        if outcome is None:
            raise transient()
        return outcome

    assert call_with_retry(flaky, policy(sleeps)) == "answer"
    assert len(sleeps) == 2


def test_non_transient_errors_are_not_retried() -> None:
    sleeps = Sleeps()
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise ProviderError("bad request", status=400)

    def bug() -> None:
        calls.append(1)
        raise KeyError("oops")

    with pytest.raises(ProviderError, match="bad request"):
        call_with_retry(refused, policy(sleeps))
    with pytest.raises(KeyError):
        call_with_retry(bug, policy(sleeps))
    assert calls == [1, 1]
    assert sleeps == []


def test_async_retry_awaits_an_async_sleep() -> None:
    waited: list[float] = []
    outcomes = iter([transient(), transient(), "answer"])

    async def fake_sleep(seconds: float) -> None:
        waited.append(seconds)

    async def flaky() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    retry = RetryPolicy(sleep=fake_sleep, jitter=0.0)
    assert asyncio.run(acall_with_retry(flaky, retry)) == "answer"
    assert waited == [0.5, 1.0]


def test_each_retry_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = iter([transient("first busy"), "ok"])

    def flaky() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with caplog.at_level(logging.WARNING, logger="groundwire.llm"):
        assert call_with_retry(flaky, policy(Sleeps())) == "ok"
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "first busy" in caplog.records[0].getMessage()


def test_one_attempt_needs_no_tenacity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tenacity", None)
    assert call_with_retry(lambda: "direct", RetryPolicy(attempts=1)) == "direct"
    with pytest.raises(MissingExtraError, match=r"groundwire\[llm\]"):
        call_with_retry(lambda: "x", RetryPolicy(attempts=2))


# --- streams -------------------------------------------------------------------------------------
def test_a_stream_is_reopened_only_before_its_first_item() -> None:
    sleeps = Sleeps()
    opened: list[int] = []

    def open_stream() -> Iterator[str]:
        opened.append(1)
        if len(opened) == 1:
            raise transient("refused at open")
        yield "a"
        yield "b"
        raise transient("dropped mid-way")

    items: list[str] = []
    with pytest.raises(ProviderError, match="dropped mid-way"):
        items.extend(stream_with_retry(open_stream, policy(sleeps)))
    assert items == ["a", "b"]
    assert len(opened) == 2  # one retry before the first item, none after it
    assert sleeps == [0.5]


def test_an_async_stream_is_reopened_only_before_its_first_item() -> None:
    opened: list[int] = []

    async def open_stream() -> Any:
        opened.append(1)
        if len(opened) < 3:
            raise transient()
        yield "x"
        raise transient("after first")

    async def run() -> list[str]:
        items: list[str] = []
        stream = astream_with_retry(open_stream, policy(Sleeps()))
        items.append(await anext(stream))
        with pytest.raises(ProviderError, match="after first"):
            await anext(stream)
        return items

    assert asyncio.run(run()) == ["x"]
    assert len(opened) == 3


def test_closing_a_retried_stream_closes_the_inner_one() -> None:
    closed: list[bool] = []

    def open_stream() -> Iterator[str]:
        try:
            yield "a"
            yield "b"
        finally:
            closed.append(True)

    stream = stream_with_retry(open_stream, policy(Sleeps()))
    assert next(stream) == "a"
    stream.close()
    assert closed == [True]


# --- against the fake servers --------------------------------------------------------------------
def test_retries_stop_after_the_attempts_counted_on_the_server(fake: Any) -> None:
    sleeps = Sleeps()
    fake.openai.enqueue_error(503, "overloaded", times=5)
    provider = OpenAIProvider(
        "gpt-test", api_key="k", base_url=fake.openai.base_url, retry=policy(sleeps, attempts=3)
    )
    with pytest.raises(ProviderError, match="HTTP 503") as caught:
        provider.complete(REQUEST)
    assert caught.value.retryable
    assert fake.openai.request_count == 3  # our 3 attempts; the SDK's own retries are off
    assert sleeps == [0.5, 1.0]


def test_max_retries_sets_the_attempts(fake: Any) -> None:
    fake.anthropic.enqueue_error(529, "overloaded", times=5)
    provider = AnthropicProvider(
        "claude-test",
        api_key="k",
        base_url=fake.anthropic.base_url,
        retry=policy(Sleeps(), attempts=5),
        max_retries=1,
    )
    with pytest.raises(ProviderError, match="HTTP 529"):
        provider.complete(REQUEST)
    assert fake.anthropic.request_count == 2


def test_a_rate_limit_then_success(fake: Any) -> None:
    sleeps = Sleeps()
    fake.openai.enqueue_error(429, "slow down", headers={"retry-after": "0"})
    fake.openai.enqueue_text("after the limit")
    provider = OpenAIProvider(
        "gpt-test", api_key="k", base_url=fake.openai.base_url, retry=policy(sleeps)
    )
    assert provider.complete(REQUEST).text == "after the limit"
    assert fake.openai.request_count == 2
    assert sleeps == [0.5]


def test_client_errors_are_not_retried(fake: Any) -> None:
    sleeps = Sleeps()
    fake.openai.enqueue_error(400, "bad schema", times=3)
    provider = OpenAIProvider(
        "gpt-test", api_key="k", base_url=fake.openai.base_url, retry=policy(sleeps)
    )
    with pytest.raises(ProviderError, match="bad schema"):
        provider.complete(REQUEST)
    assert fake.openai.request_count == 1
    assert sleeps == []


def test_timeouts_are_retried(fake: Any) -> None:
    gate = threading.Event()
    fake.openai.enqueue_text("late", wait=gate, times=2)
    provider = OpenAIProvider(
        "gpt-test",
        api_key="k",
        base_url=fake.openai.base_url,
        timeout_s=0.2,
        retry=policy(Sleeps(), attempts=2),
    )
    try:
        with pytest.raises(ProviderTimeoutError):
            provider.complete(REQUEST)
    finally:
        gate.set()
    assert fake.openai.request_count == 2


def test_a_stream_failing_before_its_first_chunk_is_retried(fake: Any) -> None:
    fake.openai.enqueue_disconnect(after_chunks=0)
    fake.openai.enqueue_error(502, "bad gateway")
    fake.openai.enqueue_text("third time lucky")
    provider = OpenAIProvider(
        "gpt-test", api_key="k", base_url=fake.openai.base_url, retry=policy(Sleeps())
    )
    events = list(provider.stream(REQUEST))
    assert events[-1].completion is not None
    assert events[-1].completion.text == "third time lucky"
    assert fake.openai.request_count == 3


def test_a_stream_failing_after_its_first_chunk_is_not_retried(fake: Any) -> None:
    fake.anthropic.enqueue_disconnect(after_chunks=1, text="partial answer here")
    fake.anthropic.enqueue_text("never asked for")
    provider = AnthropicProvider(
        "claude-test", api_key="k", base_url=fake.anthropic.base_url, retry=policy(Sleeps())
    )
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError) as caught:
        seen.extend(provider.stream(REQUEST))
    assert caught.value.retryable  # transient, yet not retried: text was already out
    assert [e.text for e in seen] == ["partial "]
    assert fake.anthropic.request_count == 1
    assert fake.anthropic.pending == 1


def test_async_provider_calls_retry_too(fake: Any) -> None:
    fake.anthropic.enqueue_error(500, "oops")
    fake.anthropic.enqueue_text("async recovered")
    fake.anthropic.enqueue_error(503, "oops")
    fake.anthropic.enqueue_text("stream recovered")
    provider = AnthropicProvider(
        "claude-test", api_key="k", base_url=fake.anthropic.base_url, retry=policy(Sleeps())
    )

    async def run() -> tuple[str, str]:
        completion = await provider.acomplete(REQUEST)
        events = [event async for event in provider.astream(REQUEST)]
        assert events[-1].completion is not None
        return completion.text, events[-1].completion.text

    assert asyncio.run(run()) == ("async recovered", "stream recovered")
    assert fake.anthropic.request_count == 4


def test_a_callable_provider_retries_when_it_asks_to() -> None:
    outcomes = iter([transient("warming up"), "ready"])

    def answer(request: ChatRequest) -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert CallableProvider(answer, retry=policy(Sleeps())).complete(REQUEST).text == "ready"
    with pytest.raises(ProviderError, match="busy"):  # no retry by default
        CallableProvider(lambda r: (_ for _ in ()).throw(transient())).complete(REQUEST)
