"""Providers: the real openai/anthropic SDKs against local fake servers, and the callable one.

Each test scripts the fake server (tests/llm/fake_servers.py), calls a provider, and checks
both what came back and what the SDK put on the wire.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from groundwire import (
    AnthropicProvider,
    CallableProvider,
    ChatRequest,
    Completion,
    ConfigError,
    Message,
    MissingExtraError,
    OpenAIProvider,
    Provider,
    ProviderError,
    ProviderTimeoutError,
    QueryError,
    StreamEvent,
    ToolCall,
    ToolSpec,
    create_provider,
)

pytestmark = pytest.mark.integration

SEARCH = ToolSpec(
    name="search_knowledge_base",
    description="Search the team's knowledge base.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
)


def ask(text: str = "How long do refunds take?", **options: Any) -> ChatRequest:
    return ChatRequest(messages=(Message("user", text),), **options)


def openai(fake: Any, **options: Any) -> OpenAIProvider:
    options.setdefault("max_retries", 0)
    return OpenAIProvider("gpt-test", api_key="sk-test", base_url=fake.openai.base_url, **options)


def anthropic(fake: Any, **options: Any) -> AnthropicProvider:
    options.setdefault("max_retries", 0)
    return AnthropicProvider(
        "claude-test", api_key="ak-test", base_url=fake.anthropic.base_url, **options
    )


def anthropic_key(headers: Any) -> str:
    """The key the anthropic SDK sent: ``x-api-key``, or a bearer token in recent SDKs."""
    return str(headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer "))


def texts(events: list[StreamEvent]) -> list[str]:
    return [event.text for event in events if event.kind == "text"]


def done(events: list[StreamEvent]) -> Completion:
    assert events[-1].kind == "done"
    assert [e.kind for e in events].count("done") == 1
    completion = events[-1].completion
    assert completion is not None
    return completion


async def collect(events: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in events]


# --- OpenAI-compatible -------------------------------------------------------------------------
def test_openai_complete_sends_system_messages_tools_and_options(fake: Any) -> None:
    fake.openai.enqueue_text("Refunds take 5 business days.")
    provider = openai(fake, default_headers={"x-team": "billing"})
    request = ask(system="Answer briefly.", tools=(SEARCH,), temperature=0.2, max_tokens=300)

    completion = provider.complete(request)

    assert completion.text == "Refunds take 5 business days."
    assert completion.tool_calls == ()
    assert completion.finish_reason == "stop"
    assert (completion.provider, completion.model) == ("openai", "gpt-test")
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (12, 7)
    sent = fake.openai.last_request
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["x-team"] == "billing"
    body = sent.json
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "How long do refunds take?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search_knowledge_base",
                "description": "Search the team's knowledge base.",
                "parameters": dict(SEARCH.parameters),
            },
        }
    ]
    assert (body["temperature"], body["max_tokens"]) == (0.2, 300)
    assert "stream" not in body or body["stream"] is False


def test_openai_request_model_overrides_the_default(fake: Any) -> None:
    fake.openai.enqueue_text("ok")
    completion = openai(fake).complete(ask(model="gpt-other"))
    assert fake.openai.last_request.json["model"] == "gpt-other"
    assert completion.model == "gpt-other"


def test_openai_stream_yields_text_deltas_then_done(fake: Any) -> None:
    fake.openai.enqueue_text("Refunds take five days.", chunks=["Refunds ", "take ", "five days."])

    events = list(openai(fake).stream(ask(system="Be brief.")))

    assert texts(events) == ["Refunds ", "take ", "five days."]
    completion = done(events)
    assert completion.text == "Refunds take five days."
    assert completion.finish_reason == "stop"
    assert completion.usage.output_tokens == 7
    body = fake.openai.last_request.json
    assert body["stream"] is True
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_openai_tool_call_in_a_json_answer(fake: Any) -> None:
    fake.openai.enqueue_tool_call("search_knowledge_base", {"query": "refunds"}, id="call_abc")

    completion = openai(fake).complete(ask(tools=(SEARCH,)))

    assert completion.text == ""
    assert completion.tool_calls == (
        ToolCall(id="call_abc", name="search_knowledge_base", arguments={"query": "refunds"}),
    )
    assert completion.finish_reason == "tool_calls"


def test_openai_tool_calls_assembled_from_streamed_deltas(
    fake: Any, fake_servers_module: Any
) -> None:
    fake.openai.enqueue_tool_calls(
        [
            fake_servers_module.ToolCallSpec("search_knowledge_base", {"query": "refund window"}),
            fake_servers_module.ToolCallSpec("lookup", {"id": "billing.refunds", "depth": 2}),
        ],
        text="Let me check.",
    )

    events = list(openai(fake).stream(ask(tools=(SEARCH,))))

    calls = [event.tool_call for event in events if event.kind == "tool_call"]
    assert calls == [
        ToolCall(id="call_0", name="search_knowledge_base", arguments={"query": "refund window"}),
        ToolCall(id="call_1", name="lookup", arguments={"id": "billing.refunds", "depth": 2}),
    ]
    completion = done(events)
    assert completion.text == "Let me check."
    assert completion.tool_calls == tuple(calls)
    assert completion.finish_reason == "tool_calls"


def test_openai_sends_assistant_tool_calls_and_tool_results(fake: Any) -> None:
    fake.openai.enqueue_text("Five days.")
    call = ToolCall(id="call_7", name="search_knowledge_base", arguments={"query": "refunds"})
    request = ChatRequest(
        messages=(
            Message("user", "Refunds?"),
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", '{"results": []}', tool_call_id="call_7"),
        ),
        tools=(SEARCH,),
    )

    openai(fake).complete(request)

    assert fake.openai.last_request.json["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {
                        "name": "search_knowledge_base",
                        "arguments": '{"query": "refunds"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": '{"results": []}'},
    ]


def test_a_tool_message_without_its_call_id_is_refused_before_sending(fake: Any) -> None:
    request = ChatRequest(messages=(Message("user", "q"), Message("tool", "result")))
    with pytest.raises(QueryError, match="tool_call_id"):
        openai(fake).complete(request)
    with pytest.raises(QueryError, match="tool_call_id"):
        anthropic(fake).complete(request)
    assert fake.openai.request_count == fake.anthropic.request_count == 0


def test_openai_tool_arguments_that_are_not_json_are_kept_raw_for_the_tool_loop(
    fake: Any, fake_servers_module: Any
) -> None:
    bad = fake_servers_module.ToolCallSpec("lookup", raw_arguments='{"id": ')
    fake.openai.enqueue_tool_calls([bad])
    completion = openai(fake).complete(ask())
    (call,) = completion.tool_calls
    assert call.name == "lookup"
    assert call.arguments == {}
    assert call.raw_arguments == '{"id": '
    # Valid arguments carry no raw text.
    fake.openai.enqueue_tool_call("lookup", {"id": 3})
    (good,) = openai(fake).complete(ask()).tool_calls
    assert good.arguments == {"id": 3}
    assert good.raw_arguments is None


def test_openai_empty_tool_arguments_mean_no_arguments(fake: Any, fake_servers_module: Any) -> None:
    fake.openai.enqueue_tool_calls([fake_servers_module.ToolCallSpec("now", raw_arguments="")])
    completion = openai(fake).complete(ask())
    assert completion.tool_calls[0].arguments == {}


def test_openai_empty_output_is_not_an_error_here(fake: Any) -> None:
    fake.openai.enqueue_empty(times=2)
    provider = openai(fake)
    assert provider.complete(ask()).text == ""
    events = list(provider.stream(ask()))
    assert [e.kind for e in events] == ["done"]
    assert done(events).text == ""


def test_openai_async_complete_and_stream(fake: Any) -> None:
    fake.openai.enqueue_text("one two three")
    fake.openai.enqueue_tool_call("search_knowledge_base", {"query": "x"})
    provider = openai(fake)

    async def run() -> tuple[Completion, list[StreamEvent]]:
        completion = await provider.acomplete(ask())
        events = await collect(provider.astream(ask(tools=(SEARCH,))))
        await provider.aclose()
        return completion, events

    completion, events = asyncio.run(run())
    assert completion.text == "one two three"
    assert done(events).tool_calls[0].arguments == {"query": "x"}


def test_openai_async_client_survives_a_new_event_loop(fake: Any) -> None:
    """Each asyncio.run has its own loop; the provider must not reuse a dead loop's pool."""
    fake.openai.enqueue_text("first")
    fake.openai.enqueue_text("second")
    provider = openai(fake)
    assert asyncio.run(provider.acomplete(ask())).text == "first"
    assert asyncio.run(provider.acomplete(ask())).text == "second"


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(400, False), (401, False), (403, False), (404, False), (408, True), (429, True),
     (500, True), (503, True)],
)  # fmt: skip
def test_openai_status_errors_are_mapped(fake: Any, status: int, retryable: bool) -> None:
    fake.openai.enqueue_error(status, "scripted failure")
    with pytest.raises(ProviderError, match=f"HTTP {status}: scripted failure") as caught:
        openai(fake).complete(ask())
    error = caught.value
    assert type(error) is ProviderError
    assert (error.status, error.retryable, error.provider) == (status, retryable, "openai")
    assert error.__cause__ is not None  # converted at the boundary, the SDK error kept
    assert fake.openai.request_count == 1  # the SDK's own retries are off


def test_openai_auth_error_names_the_key_setting(fake: Any) -> None:
    fake.openai.enqueue_error(401, "Incorrect API key provided")
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        openai(fake).complete(ask())


def test_openai_stream_creation_error_is_mapped(fake: Any) -> None:
    fake.openai.enqueue_error(429, "slow down")
    with pytest.raises(ProviderError, match="HTTP 429") as caught:
        list(openai(fake).stream(ask()))
    assert caught.value.retryable


def test_openai_connection_refused_is_retryable(fake: Any) -> None:
    url = fake.openai.base_url
    fake.close()
    provider = OpenAIProvider("gpt-test", api_key="k", base_url=url, max_retries=0)
    with pytest.raises(ProviderError, match="failed") as caught:
        provider.complete(ask())
    assert caught.value.retryable
    assert not isinstance(caught.value, ProviderTimeoutError)
    assert f"connection to {url} failed" in str(caught.value)  # names the URL it tried


def test_openai_dropped_connection_mid_stream_is_a_retryable_error(fake: Any) -> None:
    fake.openai.enqueue_disconnect(after_chunks=2, text="one two three four")
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError) as caught:
        seen.extend(openai(fake).stream(ask()))
    assert texts(seen) == ["one ", "two "]
    assert caught.value.retryable


def test_openai_dropped_connection_without_response_is_retryable(fake: Any) -> None:
    fake.openai.enqueue_disconnect()
    with pytest.raises(ProviderError) as caught:
        openai(fake).complete(ask())
    assert caught.value.retryable


def test_openai_error_event_inside_a_stream(fake: Any) -> None:
    fake.openai.enqueue_stream_error("model overloaded", after_chunks=1, error_type="server_error")
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError, match="model overloaded") as caught:
        seen.extend(openai(fake).stream(ask()))
    assert caught.value.retryable


def test_openai_timeout_is_a_provider_timeout(fake: Any) -> None:
    gate = threading.Event()
    fake.openai.enqueue_text("too late", wait=gate)
    provider = openai(fake, timeout_s=0.3)
    try:
        with pytest.raises(ProviderTimeoutError, match="no answer within") as caught:
            provider.complete(ask())
    finally:
        gate.set()
    assert caught.value.retryable
    assert caught.value.provider == "openai"


def test_the_request_timeout_overrides_the_provider_timeout(fake: Any) -> None:
    gate = threading.Event()
    fake.openai.enqueue_text("too late", wait=gate)
    provider = openai(fake, timeout_s=60)
    try:
        with pytest.raises(ProviderTimeoutError):
            list(provider.stream(ask(timeout_s=0.3)))
    finally:
        gate.set()


def test_openai_configuration_from_the_environment(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.openai.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "gpt-env")
    fake.openai.enqueue_text("from env")

    provider = OpenAIProvider(max_retries=0)

    assert provider.complete(ask()).text == "from env"
    sent = fake.openai.last_request
    assert sent.headers["authorization"] == "Bearer sk-env"
    assert sent.json["model"] == "gpt-env"


def test_arguments_win_over_the_environment(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_MODEL", "gpt-env")
    fake.openai.enqueue_text("ok")
    openai(fake).complete(ask())
    assert fake.openai.last_request.headers["authorization"] == "Bearer sk-test"
    assert fake.openai.last_request.json["model"] == "gpt-test"


def test_openai_missing_key_names_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"OPENAI_API_KEY") as caught:
        OpenAIProvider("gpt-test")
    assert "api_key=" in str(caught.value)


def test_a_local_server_needs_no_key(fake: Any) -> None:
    fake.openai.enqueue_text("local")
    provider = OpenAIProvider("llama3", base_url=fake.openai.base_url, max_retries=0)
    assert provider.complete(ask()).text == "local"
    assert fake.openai.last_request.headers["authorization"] == "Bearer not-needed"


def test_a_missing_model_names_the_fix(fake: Any) -> None:
    provider = OpenAIProvider(api_key="k", base_url=fake.openai.base_url)
    with pytest.raises(ConfigError, match="OPENAI_MODEL"):
        provider.complete(ask())
    assert fake.openai.request_count == 0


def test_missing_sdks_raise_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai now raises ImportError
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'groundwire\[openai\]'") as caught:
        OpenAIProvider("gpt-test", api_key="k")
    assert (caught.value.package, caught.value.extra) == ("openai", "openai")
    assert isinstance(caught.value, ImportError)
    with pytest.raises(MissingExtraError, match=r"groundwire\[anthropic\]"):
        AnthropicProvider("claude-test", api_key="k")


@pytest.mark.parametrize(
    ("option", "value"),
    [("timeout_s", 0), ("timeout_s", "60"), ("max_retries", -1), ("retry", 3), ("name", "")],
)
def test_provider_options_are_validated(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=option):
        OpenAIProvider("m", api_key="k", **{option: value})


# --- Anthropic -----------------------------------------------------------------------------------
def test_anthropic_complete_sends_top_level_system_and_max_tokens(fake: Any) -> None:
    fake.anthropic.enqueue_text("Five business days.")
    request = ChatRequest(
        messages=(Message("system", "Cite sources."), Message("user", "Refunds?")),
        system="Answer briefly.",
        tools=(SEARCH,),
        temperature=0.0,
    )

    completion = anthropic(fake).complete(request)

    assert completion.text == "Five business days."
    assert (completion.provider, completion.model, completion.finish_reason) == (
        "anthropic",
        "claude-test",
        "end_turn",
    )
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (12, 7)
    sent = fake.anthropic.last_request
    assert sent.path == "/v1/messages"
    assert anthropic_key(sent.headers) == "ak-test"
    assert "anthropic-version" in sent.headers
    body = sent.json
    assert body["system"] == "Answer briefly.\n\nCite sources."
    assert body["messages"] == [{"role": "user", "content": "Refunds?"}]
    assert body["max_tokens"] == 1024
    assert body["temperature"] == 0.0
    assert body["tools"] == [
        {
            "name": "search_knowledge_base",
            "description": "Search the team's knowledge base.",
            "input_schema": dict(SEARCH.parameters),
        }
    ]


def test_anthropic_max_tokens_from_request_then_provider(fake: Any) -> None:
    fake.anthropic.enqueue_text("a", times=2)
    anthropic(fake, max_tokens=256).complete(ask())
    anthropic(fake).complete(ask(max_tokens=64))
    assert [r.json["max_tokens"] for r in fake.anthropic.requests] == [256, 64]


def test_anthropic_stream_yields_text_deltas_then_done(fake: Any) -> None:
    fake.anthropic.enqueue_text("Five business days.", chunks=["Five ", "business ", "days."])
    events = list(anthropic(fake).stream(ask()))
    assert texts(events) == ["Five ", "business ", "days."]
    completion = done(events)
    assert completion.text == "Five business days."
    assert completion.finish_reason == "end_turn"
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (12, 7)
    assert fake.anthropic.last_request.json["stream"] is True


def test_anthropic_tool_use_in_json_and_in_a_stream(fake: Any) -> None:
    fake.anthropic.enqueue_tool_call("search_knowledge_base", {"query": "refunds"}, id="toolu_1")
    fake.anthropic.enqueue_tool_call(
        "search_knowledge_base", {"query": "refund window", "k": 3}, text="Checking."
    )
    provider = anthropic(fake)

    completion = provider.complete(ask(tools=(SEARCH,)))
    events = list(provider.stream(ask(tools=(SEARCH,))))

    assert completion.tool_calls == (
        ToolCall("toolu_1", "search_knowledge_base", {"query": "refunds"}),
    )
    assert completion.finish_reason == "tool_use"
    streamed = [e.tool_call for e in events if e.kind == "tool_call"]
    assert streamed == [
        ToolCall("toolu_0", "search_knowledge_base", {"query": "refund window", "k": 3})
    ]
    assert texts(events) == ["Checking."]
    assert done(events).tool_calls == tuple(streamed)


def test_anthropic_sends_tool_use_and_grouped_tool_results(fake: Any) -> None:
    fake.anthropic.enqueue_text("Done.")
    first = ToolCall("toolu_a", "search_knowledge_base", {"query": "a"})
    second = ToolCall("toolu_b", "search_knowledge_base", {"query": "b"})
    request = ChatRequest(
        messages=(
            Message("user", "Compare a and b."),
            Message("assistant", "Searching both.", tool_calls=(first, second)),
            Message("tool", "result a", tool_call_id="toolu_a"),
            Message("tool", "result b", tool_call_id="toolu_b"),
        )
    )

    anthropic(fake).complete(request)

    assert fake.anthropic.last_request.json["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching both."},
                {"type": "tool_use", "id": "toolu_a", "name": "search_knowledge_base",
                 "input": {"query": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "search_knowledge_base",
                 "input": {"query": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "result a"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "result b"},
            ],
        },
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(400, False), (401, False), (403, False), (404, False), (429, True), (500, True),
     (529, True)],
)  # fmt: skip
def test_anthropic_status_errors_are_mapped(fake: Any, status: int, retryable: bool) -> None:
    fake.anthropic.enqueue_error(status, "scripted failure")
    with pytest.raises(ProviderError, match=f"HTTP {status}: scripted failure") as caught:
        anthropic(fake).complete(ask())
    assert (caught.value.status, caught.value.retryable) == (status, retryable)
    assert caught.value.provider == "anthropic"
    assert fake.anthropic.request_count == 1


def test_anthropic_auth_error_names_the_key_setting(fake: Any) -> None:
    fake.anthropic.enqueue_error(401, "invalid x-api-key")
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        anthropic(fake).complete(ask())


def test_anthropic_error_event_mid_stream(fake: Any) -> None:
    fake.anthropic.enqueue_stream_error("Overloaded", after_chunks=1)
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError, match="Overloaded") as caught:
        seen.extend(anthropic(fake).stream(ask()))
    assert caught.value.retryable  # overloaded_error: worth another try


def test_anthropic_timeout_and_async(fake: Any) -> None:
    gate = threading.Event()
    fake.anthropic.enqueue_text("late", wait=gate)
    fake.anthropic.enqueue_text("async answer")
    provider = anthropic(fake, timeout_s=0.3)
    try:
        with pytest.raises(ProviderTimeoutError):
            provider.complete(ask())
    finally:
        gate.set()

    async def run() -> list[StreamEvent]:
        return await collect(provider.astream(ask()))

    assert done(asyncio.run(run())).text == "async answer"


def test_anthropic_configuration_from_the_environment(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.anthropic.base_url)
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-env")
    fake.anthropic.enqueue_text("from env")
    assert AnthropicProvider(max_retries=0).complete(ask()).text == "from env"
    assert anthropic_key(fake.anthropic.last_request.headers) == "ak-env"
    assert fake.anthropic.last_request.json["model"] == "claude-env"


def test_anthropic_missing_key_names_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"ANTHROPIC_API_KEY") as caught:
        AnthropicProvider("claude-test")
    assert "api_key=" in str(caught.value)


# --- create_provider -----------------------------------------------------------------------------
def test_create_provider_by_name_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk")
    monkeypatch.setenv("OPENAI_MODEL", "gpt-env")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak")

    chosen = create_provider("openai:gpt-4o-mini", timeout_s=5)
    assert isinstance(chosen, OpenAIProvider)
    assert (chosen.name, chosen.model, chosen.timeout_s) == ("openai", "gpt-4o-mini", 5.0)
    from_env = create_provider("openai")
    assert isinstance(from_env, OpenAIProvider)
    assert from_env.model == "gpt-env"
    claude = create_provider("anthropic:claude-sonnet-4-5")
    assert isinstance(claude, AnthropicProvider)
    assert claude.model == "claude-sonnet-4-5"


def test_create_provider_local_presets_keep_colons_in_the_model() -> None:
    ollama = create_provider("ollama:llama3.1:8b")
    assert isinstance(ollama, OpenAIProvider)
    assert (ollama.name, ollama.model) == ("ollama", "llama3.1:8b")
    assert ollama.base_url == "http://localhost:11434/v1"
    other = create_provider("vllm:qwen", base_url="http://gpu-box:9000/v1")
    assert isinstance(other, OpenAIProvider)
    assert other.base_url == "http://gpu-box:9000/v1"


@pytest.mark.parametrize("spec", ["gemini:pro", "", "  ", ":model"])
def test_create_provider_unknown_names(spec: str) -> None:
    with pytest.raises(ConfigError, match="provider=") as caught:
        create_provider(spec)
    if spec.strip():
        assert "anthropic, llamacpp, lmstudio, ollama, openai, vllm" in str(caught.value)


# --- CallableProvider ----------------------------------------------------------------------------
def test_callable_sync_string_and_completion() -> None:
    seen: list[ChatRequest] = []

    def answer(request: ChatRequest) -> str:
        seen.append(request)
        return "plain answer"

    request = ask(model="local")
    completion = CallableProvider(answer, name="local-fn").complete(request)
    assert completion == Completion(
        text="plain answer", finish_reason="stop", model="local", provider="local-fn"
    )
    assert seen == [request]

    call = ToolCall("c1", "search_knowledge_base", {"query": "q"})
    given = Completion(text="", tool_calls=(call,), finish_reason="tool_calls")
    returned = CallableProvider(lambda r: given).complete(ask())
    assert returned.tool_calls == (call,)
    assert returned.provider == "callable"


def test_callable_generators_join_for_complete_and_stream_per_chunk() -> None:
    call = ToolCall("c1", "lookup", {"id": "x"})

    def chunks(request: ChatRequest) -> Iterator[str | ToolCall]:
        yield "Hello "
        yield ""
        yield "world"
        yield call

    provider = CallableProvider(chunks)
    completion = provider.complete(ask())
    assert (completion.text, completion.tool_calls) == ("Hello world", (call,))
    assert completion.finish_reason == "tool_calls"
    events = list(provider.stream(ask()))
    assert [e.kind for e in events] == ["text", "text", "tool_call", "done"]
    assert texts(events) == ["Hello ", "world"]
    assert done(events).text == "Hello world"


def test_callable_plain_answer_streams_as_one_text_event() -> None:
    events = list(CallableProvider(lambda r: "whole").stream(ask()))
    assert [e.kind for e in events] == ["text", "done"]
    assert texts(events) == ["whole"]


def test_callable_async_functions_and_async_generators() -> None:
    async def answer(request: ChatRequest) -> str:
        await asyncio.sleep(0)
        return "async answer"

    async def chunks(request: ChatRequest) -> AsyncIterator[str]:
        for piece in ("a", "b", "c"):
            await asyncio.sleep(0)
            yield piece

    assert CallableProvider(answer).complete(ask()).text == "async answer"  # sync over async
    assert CallableProvider(chunks).complete(ask()).text == "abc"
    assert texts(list(CallableProvider(chunks).stream(ask()))) == ["a", "b", "c"]

    async def run() -> tuple[str, str, list[str], list[str]]:
        one = (await CallableProvider(answer).acomplete(ask())).text
        two = (await CallableProvider(chunks).acomplete(ask())).text
        three = texts(await collect(CallableProvider(chunks).astream(ask())))
        four = texts(await collect(CallableProvider(lambda r: iter(["x", "y"])).astream(ask())))
        return one, two, three, four

    assert asyncio.run(run()) == ("async answer", "abc", ["a", "b", "c"], ["x", "y"])


def test_callable_sync_complete_of_an_async_function_inside_a_running_loop() -> None:
    async def answer(request: ChatRequest) -> str:
        return "from a worker loop"

    async def run() -> str:
        return CallableProvider(answer).complete(ask()).text

    assert asyncio.run(run()) == "from a worker loop"


def test_callable_sync_function_runs_off_the_event_loop() -> None:
    loop_threads: list[bool] = []

    def answer(request: ChatRequest) -> str:
        try:
            asyncio.get_running_loop()
            loop_threads.append(True)
        except RuntimeError:
            loop_threads.append(False)
        return "ok"

    assert asyncio.run(CallableProvider(answer).acomplete(ask())).text == "ok"
    assert loop_threads == [False]


def test_callable_errors_become_provider_errors() -> None:
    def broken(request: ChatRequest) -> str:
        raise ValueError("model crashed")

    def slow(request: ChatRequest) -> str:
        raise TimeoutError("took too long")

    def refusing(request: ChatRequest) -> str:
        raise ProviderError("quota", provider="mine", status=429, retryable=True)

    with pytest.raises(ProviderError, match="raised ValueError: model crashed") as caught:
        CallableProvider(broken).complete(ask())
    assert isinstance(caught.value.__cause__, ValueError)
    assert caught.value.retryable is False
    with pytest.raises(ProviderTimeoutError):
        list(CallableProvider(slow).stream(ask()))
    with pytest.raises(ProviderError, match="quota") as passed:
        CallableProvider(refusing).complete(ask())
    assert passed.value.status == 429


def test_callable_bad_results_and_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="expected a str, a Completion"):
        CallableProvider(lambda r: 42).complete(ask())
    with pytest.raises(ConfigError, match="chunks must be str"):
        list(CallableProvider(lambda r: iter([1])).stream(ask()))
    with pytest.raises(ConfigError, match="fn="):
        CallableProvider("not callable")  # type: ignore[arg-type]


def test_every_provider_meets_the_protocol(fake: Any) -> None:
    providers = [openai(fake), anthropic(fake), CallableProvider(lambda r: "x")]
    assert all(isinstance(provider, Provider) for provider in providers)


def test_importing_groundwire_loads_no_sdk() -> None:
    code = (
        "import sys, groundwire\n"
        "groundwire.OpenAIProvider, groundwire.create_provider\n"
        "loaded = [m for m in ('openai', 'anthropic', 'tenacity') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
