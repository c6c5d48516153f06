"""The grounded client: opt-in grounding, option isolation, memory, fallback, fail-open."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import pytest

from groundwire import (
    Client,
    ConfigError,
    ContextConfig,
    GenerateResult,
    GroundingConfig,
    GroundingEngine,
    GroundingMetadata,
    GroundingOutcome,
    InMemoryConversationMemory,
    KnowledgeBlock,
    Principal,
    QueryError,
    Scope,
    SQLiteConversationMemory,
    Turn,
)
from groundwire.errors import ProviderError
from groundwire.llm.base import ChatRequest, Completion, Message, StreamEvent, ToolCall, ToolSpec
from groundwire.llm.providers import CallableProvider

SAFETY_SECONDS = 30  # a wait the test itself releases; never reached when it passes
BLOCK = "<knowledge>Zebras have stripes. [KB:animals.zebra@v1]</knowledge>"
FOUND = GroundingMetadata(selected_ids=("animals.zebra",), confidence="high", context_tokens=12)


# -- doubles ----------------------------------------------------------------------------------
class FakeProvider:
    """A Provider that records every request and answers (or fails) as told.

    ``mode``: ``ok``; ``error`` (raises); ``empty`` (no text, no tool calls); for streams
    also ``creation`` (``stream()`` itself raises) and ``first`` (raises before the first
    chunk); ``late`` (raises after the first chunk).
    """

    def __init__(
        self,
        name: str = "fake",
        *,
        text: str = "The answer.",
        mode: str = "ok",
        tool_calls: tuple[ToolCall, ...] = (),
    ) -> None:
        self.name = name
        self.text = text
        self.mode = mode
        self.tool_calls = tool_calls
        self.requests: list[ChatRequest] = []

    def _completion(self) -> Completion:
        if self.mode == "empty":
            return Completion(text="", provider=self.name, model="m")
        return Completion(
            text=self.text,
            tool_calls=self.tool_calls,
            finish_reason="stop",
            provider=self.name,
            model="m",
        )

    def _fail(self) -> ProviderError:
        return ProviderError(f"{self.name} is down", provider=self.name, status=503)

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        if self.mode in ("error", "creation", "first"):
            raise self._fail()
        return self._completion()

    async def acomplete(self, request: ChatRequest) -> Completion:
        return self.complete(request)

    def _events(self) -> Iterator[StreamEvent]:
        if self.mode == "first":
            raise self._fail()
        completion = self._completion()
        words = completion.text.split(" ") if completion.text else []
        for index, word in enumerate(words):
            yield StreamEvent("text", text=word if index == 0 else f" {word}")
            if self.mode == "late":
                raise self._fail()
        yield from (StreamEvent("tool_call", tool_call=call) for call in completion.tool_calls)
        yield StreamEvent("done", completion=completion)

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        self.requests.append(request)
        if self.mode in ("creation", "error"):
            raise self._fail()
        return self._events()

    def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        events = self.stream(request)

        async def generate() -> AsyncIterator[StreamEvent]:
            for event in events:
                yield event

        return generate()


class StubEngine:
    """A grounding engine double: returns a fixed outcome and records each call."""

    def __init__(self, outcome: GroundingOutcome | None = None, *, raises: bool = False) -> None:
        self.outcome = outcome or GroundingOutcome(
            KnowledgeBlock(content=BLOCK, citations=(), metadata={}), FOUND
        )
        self.raises = raises
        self.calls: list[tuple[str, Any, Any]] = []
        self.async_calls: list[tuple[str, Any, Any]] = []

    def ground(
        self, query: str, recent_turns: Sequence[Turn] | None = None, scope: Any = None
    ) -> GroundingOutcome:
        self.calls.append((query, recent_turns, scope))
        if self.raises:
            raise RuntimeError("engine exploded")
        return self.outcome

    async def aground(
        self, query: str, recent_turns: Sequence[Turn] | None = None, scope: Any = None
    ) -> GroundingOutcome:
        self.async_calls.append((query, recent_turns, scope))
        if self.raises:
            raise RuntimeError("engine exploded")
        return self.outcome


class CountingEngine:
    """Wraps a real engine and counts its turns."""

    def __init__(self, inner: GroundingEngine) -> None:
        self.inner = inner
        self.calls = 0
        self.async_calls = 0
        self.blocks: list[str] = []

    def ground(self, *args: Any, **kwargs: Any) -> GroundingOutcome:
        self.calls += 1
        outcome = self.inner.ground(*args, **kwargs)
        self.blocks += [outcome.block.content] if outcome.block else []
        return outcome

    async def aground(self, *args: Any, **kwargs: Any) -> GroundingOutcome:
        self.async_calls += 1
        outcome = await self.inner.aground(*args, **kwargs)
        self.blocks += [outcome.block.content] if outcome.block else []
        return outcome


def engine_of(double: object) -> GroundingEngine:
    return cast(GroundingEngine, double)


def drain(stream: Iterator[str]) -> str:
    return "".join(stream)


async def adrain(stream: AsyncIterator[str]) -> str:
    return "".join([delta async for delta in stream])


# -- fixtures -----------------------------------------------------------------------------------
@pytest.fixture
def make_engine() -> Iterator[Callable[..., GroundingEngine]]:
    engines: list[GroundingEngine] = []

    def make(config: GroundingConfig) -> GroundingEngine:
        engine = GroundingEngine(config)
        engines.append(engine)
        assert engine.ready(timeout=SAFETY_SECONDS)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def animals(
    entry_factory: Callable[..., dict[str, Any]], source_factory: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    return source_factory(
        entry_factory("animals.zebra", title="Zebra", summary="Zebras have stripes."),
        entry_factory("animals.giraffe", title="Giraffe", summary="Giraffes have long necks."),
        entry_factory(
            "slack.okapi", title="Okapi", summary="Okapi notes in Slack.", integrations=["slack"]
        ),
    )


# -- opt-in -------------------------------------------------------------------------------------
def test_without_the_opt_in_nothing_is_grounded() -> None:
    provider, engine = FakeProvider(), StubEngine()
    client = Client(provider, grounding=engine_of(engine), system_prompt="Be brief.")
    result = client.generate("tell me about zebras")
    assert engine.calls == []
    assert result.knowledge is None
    assert provider.requests[0].system == "Be brief."
    assert provider.requests[0].messages == (Message("user", "tell me about zebras"),)
    assert result == GenerateResult(
        text="The answer.", provider="fake", model="m", finish_reason="stop"
    )


@pytest.mark.parametrize("opt_in", [1, "yes", "true", None])
def test_only_exactly_true_opts_in(opt_in: Any) -> None:
    engine = StubEngine()
    client = Client(FakeProvider(), grounding=engine_of(engine))
    result = client.generate("zebras", use_knowledge_grounding=opt_in)
    assert engine.calls == []
    assert result.knowledge is None


def test_opt_in_grounds_once_and_appends_the_block_to_the_system_prompt() -> None:
    provider, engine = FakeProvider(), StubEngine()
    client = Client(provider, grounding=engine_of(engine), system_prompt="Be brief.")
    result = client.generate("tell me about zebras", use_knowledge_grounding=True)
    assert len(engine.calls) == 1
    assert engine.calls[0][0] == "tell me about zebras"
    assert provider.requests[0].system == f"Be brief.\n\n{BLOCK}"
    assert provider.requests[0].messages == (Message("user", "tell me about zebras"),)
    assert result.knowledge == FOUND
    assert result.text == "The answer."


def test_without_a_system_prompt_the_block_stands_alone() -> None:
    provider = FakeProvider()
    Client(provider, grounding=engine_of(StubEngine())).generate(
        "zebras", use_knowledge_grounding=True
    )
    assert provider.requests[0].system == BLOCK


def test_opt_in_without_an_engine_answers_ungrounded() -> None:
    provider = FakeProvider()
    result = Client(provider).generate("zebras", use_knowledge_grounding=True)
    assert result.knowledge is None
    assert provider.requests[0].system is None


@pytest.mark.parametrize("empty", ["", "   \n\t"])
def test_empty_input_skips_grounding(empty: str) -> None:
    provider, engine = FakeProvider(), StubEngine()
    client = Client(provider, grounding=engine_of(engine), system_prompt="S")
    history = [{"role": "user", "content": "zebras?"}]
    result = client.generate(empty, conversation_messages=history, use_knowledge_grounding=True)
    assert engine.calls == []
    assert result.knowledge is None
    assert provider.requests[0].system == "S"


def test_nothing_to_send_is_a_clear_error() -> None:
    with pytest.raises(QueryError, match="nothing to send"):
        Client(FakeProvider()).generate("")


def test_the_per_call_system_prompt_replaces_the_clients() -> None:
    provider = FakeProvider()
    client = Client(provider, grounding=engine_of(StubEngine()), system_prompt="client")
    client.generate("zebras", system_prompt="call", use_knowledge_grounding=True)
    assert provider.requests[0].system == f"call\n\n{BLOCK}"


# -- option isolation --------------------------------------------------------------------------
def test_the_callers_options_are_never_changed() -> None:
    tool = ToolSpec("lookup", "Look up a thing.", {"type": "object", "properties": {}})
    options: dict[str, Any] = {
        "input": "zebras",
        "system_prompt": "Be brief.",
        "conversation_messages": [
            {"role": "system", "content": "old system"},
            {"role": "user", "content": "hi", "extra": {"nested": [1, 2]}},
            {"role": "assistant", "content": "hello"},
        ],
        "use_knowledge_grounding": True,
        "knowledge_context": {"enabled_integrations": ["slack"]},
        "model": "m1",
        "temperature": 0.2,
        "max_tokens": 50,
        "tools": [tool],
        "timeout_s": 5.0,
    }
    before = copy.deepcopy(options)
    engine = StubEngine()
    provider = FakeProvider()
    client = Client(provider, grounding=engine_of(engine))

    client.generate(**options)
    drain(client.stream(**options))
    asyncio.run(client.agenerate(**options))
    asyncio.run(adrain(asyncio.run(client.astream(**options))))

    assert options == before
    assert options["conversation_messages"] is not None
    # The engine never receives the caller's mapping, only a copy of it.
    for _, _, scope in engine.calls + engine.async_calls:
        assert scope == before["knowledge_context"]
        assert scope is not options["knowledge_context"]
    request = provider.requests[0]
    assert request.model == "m1"
    assert request.temperature == 0.2
    assert request.max_tokens == 50
    assert request.tools == (tool,)
    assert request.timeout_s == 5.0


# -- system prompt --------------------------------------------------------------------------------
def test_a_callable_system_prompt_resolves_before_the_append() -> None:
    calls: list[int] = []

    def system_prompt() -> str:
        calls.append(1)
        return f"dynamic {len(calls)}"

    provider = FakeProvider()
    client = Client(provider, grounding=engine_of(StubEngine()), system_prompt=system_prompt)
    client.generate("zebras", use_knowledge_grounding=True)
    client.generate("zebras", use_knowledge_grounding=True)
    assert [r.system for r in provider.requests] == [
        f"dynamic 1\n\n{BLOCK}",
        f"dynamic 2\n\n{BLOCK}",
    ]
    assert len(calls) == 2  # once per call


def test_a_callable_system_prompt_is_resolved_once_across_a_fallback() -> None:
    calls: list[int] = []

    def system_prompt() -> str:
        calls.append(1)
        return "dynamic"

    first, second = FakeProvider("a", mode="error"), FakeProvider("b")
    client = Client([first, second], grounding=engine_of(StubEngine()), system_prompt=system_prompt)
    client.generate("zebras", use_knowledge_grounding=True)
    assert calls == [1]
    assert first.requests[0].system == second.requests[0].system == f"dynamic\n\n{BLOCK}"


def test_a_system_prompt_function_must_return_text() -> None:
    client = Client(FakeProvider(), system_prompt=lambda: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="must return a string"):
        client.generate("hi")


def test_a_bad_system_prompt_is_refused_up_front() -> None:
    with pytest.raises(ConfigError, match="system_prompt"):
        Client(FakeProvider(), system_prompt=42)  # type: ignore[arg-type]


# -- recent turns and memory ----------------------------------------------------------------------
def test_recent_turns_are_the_last_four_user_and_assistant_messages() -> None:
    engine = StubEngine()
    provider = FakeProvider()
    history = [
        Message("system", "be nice"),
        Message("user", "one"),
        Message("assistant", "two"),
        {"role": "tool", "content": "tool output", "tool_call_id": "t1"},
        {"role": "user", "content": "three"},
        Message("assistant", "four"),
        {"role": "user", "content": ["an", "image part"]},  # non-text content: empty text
        Message("assistant", "six"),
    ]
    Client(provider, grounding=engine_of(engine)).generate(
        "seven", conversation_messages=history, use_knowledge_grounding=True
    )
    assert engine.calls[0][1] == (
        Turn("user", "three"),
        Turn("assistant", "four"),
        Turn("user", ""),
        Turn("assistant", "six"),
    )
    # The provider gets every earlier message, then the input.
    assert len(provider.requests[0].messages) == len(history) + 1
    assert provider.requests[0].messages[-1] == Message("user", "seven")


def test_memory_supplies_recent_turns_and_earlier_messages() -> None:
    memory = InMemoryConversationMemory()
    for text in ("u1", "a1", "u2", "a2", "u3", "a3"):
        memory.append("s1", Message("user" if text[0] == "u" else "assistant", text))
    engine, provider = StubEngine(), FakeProvider()
    client = Client(provider, grounding=engine_of(engine), conversation_memory=memory)
    client.generate("u4", session_id="s1", use_knowledge_grounding=True)
    assert [t.text for t in engine.calls[0][1]] == ["u2", "a2", "u3", "a3"]
    assert [m.content for m in provider.requests[0].messages] == [
        *("u1", "a1", "u2", "a2", "u3", "a3", "u4")
    ]


def test_explicit_conversation_messages_override_memory() -> None:
    memory = InMemoryConversationMemory()
    memory.append("s1", Message("user", "from memory"))
    engine, provider = StubEngine(), FakeProvider()
    client = Client(provider, grounding=engine_of(engine), conversation_memory=memory)
    client.generate(
        "now",
        session_id="s1",
        conversation_messages=[Message("user", "explicit")],
        use_knowledge_grounding=True,
    )
    assert engine.calls[0][1] == (Turn("user", "explicit"),)
    assert [m.content for m in provider.requests[0].messages] == ["explicit", "now"]
    # The turn is still recorded in the session.
    assert [m.content for m in memory.history("s1")] == ["from memory", "now", "The answer."]


def test_memory_holds_only_the_input_and_the_answer() -> None:
    memory = InMemoryConversationMemory()
    provider = FakeProvider()
    client = Client(
        provider,
        grounding=engine_of(StubEngine()),
        conversation_memory=memory,
        system_prompt="SYSTEM TEXT",
    )
    client.generate("first question", session_id="s", use_knowledge_grounding=True)
    drain(client.stream("second question", session_id="s", use_knowledge_grounding=True))
    asyncio.run(client.agenerate("third question", session_id="s", use_knowledge_grounding=True))
    stored = memory.history("s")
    assert stored == [
        Message("user", "first question"),
        Message("assistant", "The answer."),
        Message("user", "second question"),
        Message("assistant", "The answer."),
        Message("user", "third question"),
        Message("assistant", "The answer."),
    ]
    # Later turns carry the block once, in the system prompt, never in the messages.
    last = provider.requests[-1]
    assert last.system == f"SYSTEM TEXT\n\n{BLOCK}"
    assert all(BLOCK not in m.content and "SYSTEM TEXT" not in m.content for m in last.messages)


def test_memory_keeps_the_answer_text_not_the_tool_calls() -> None:
    memory = InMemoryConversationMemory()
    call = ToolCall("t1", "lookup", {"q": "zebra"})
    client = Client(FakeProvider(text="Looking.", tool_calls=(call,)), conversation_memory=memory)
    result = client.generate("zebras", session_id="s")
    assert result.tool_calls == (call,)
    assert memory.history("s") == [Message("user", "zebras"), Message("assistant", "Looking.")]


def test_a_failed_turn_writes_nothing_to_memory() -> None:
    memory = InMemoryConversationMemory()
    client = Client(FakeProvider(mode="error"), conversation_memory=memory)
    with pytest.raises(ProviderError):
        client.generate("zebras", session_id="s")
    assert memory.history("s") == []


def test_session_id_needs_memory() -> None:
    with pytest.raises(ConfigError, match="memory"):
        Client(FakeProvider()).generate("hi", session_id="s")


def test_sqlite_memory_carries_a_conversation_across_clients(tmp_path: Any) -> None:
    path = tmp_path / "memory.db"
    with SQLiteConversationMemory(path) as memory:
        first = Client(FakeProvider(text="first answer"), conversation_memory=memory)
        first.generate("q1", session_id="s")
    provider = FakeProvider()
    with SQLiteConversationMemory(path) as memory:
        Client(provider, conversation_memory=memory).generate("q2", session_id="s")
        assert [m.content for m in memory.history("s")] == [
            *("q1", "first answer", "q2", "The answer.")
        ]
    assert [m.content for m in provider.requests[0].messages] == ["q1", "first answer", "q2"]


# -- scope --------------------------------------------------------------------------------------
@pytest.mark.parametrize("scope", [Scope(("slack",)), {"enabled_integrations": ["slack"]}, None])
def test_knowledge_context_is_passed_as_the_scope(scope: Any) -> None:
    engine = StubEngine()
    Client(FakeProvider(), grounding=engine_of(engine)).generate(
        "okapi", use_knowledge_grounding=True, knowledge_context=scope
    )
    assert engine.calls[0][2] == scope


def test_the_scope_decides_what_a_real_engine_may_use(
    make_engine: Callable[..., GroundingEngine], animals: dict[str, Any]
) -> None:
    engine = make_engine(GroundingConfig(sources=[animals], timeout_ms=60_000))
    provider = FakeProvider()
    client = Client(provider, grounding=engine)
    outside = client.generate("okapi notes", use_knowledge_grounding=True)
    inside = client.generate(
        "okapi notes",
        use_knowledge_grounding=True,
        knowledge_context={"enabled_integrations": ["slack"]},
    )
    assert "slack.okapi" not in (outside.knowledge.selected_ids if outside.knowledge else ())
    assert inside.knowledge is not None
    assert inside.knowledge.selected_ids[0] == "slack.okapi"
    assert "slack.okapi" in (provider.requests[1].system or "")
    assert "slack.okapi" not in (provider.requests[0].system or "")


def test_grounding_runs_as_the_knowledge_principal(
    make_engine: Callable[..., GroundingEngine],
) -> None:
    tenant_kb = {
        "id": "zoo",
        "version": "1",
        "entries": [
            {"id": "acme.okapi", "title": "Okapi care", "summary": "okapi notes for acme",
             "domain": "zoo", "integrations": [], "tenant": "acme", "acl": ["group:keepers"]},
        ],
    }  # fmt: skip
    engine = make_engine(GroundingConfig(sources=[tenant_kb], timeout_ms=60_000))
    client = Client(FakeProvider(), grounding=engine)
    anonymous = client.generate("okapi notes", use_knowledge_grounding=True)
    keeper = client.generate(
        "okapi notes",
        use_knowledge_grounding=True,
        knowledge_principal=Principal("acme", "kim", ["keepers"]),
    )
    visitor = client.generate(
        "okapi notes", use_knowledge_grounding=True, knowledge_principal=Principal("acme", "v")
    )
    assert anonymous.knowledge is not None
    assert anonymous.knowledge.failure_reason == "no-match"
    assert keeper.knowledge is not None
    assert keeper.knowledge.selected_ids == ("acme.okapi",)
    assert visitor.knowledge is not None
    assert visitor.knowledge.selected_ids == ()


# -- fallback reuses one enriched request -------------------------------------------------------
def _one_block_each(providers: Sequence[FakeProvider], engine: CountingEngine) -> None:
    (block,) = engine.blocks
    systems = [request.system for p in providers for request in p.requests]
    assert len(systems) == len(providers)
    assert len(set(systems)) == 1
    assert (systems[0] or "").count(block) == 1
    assert systems[0] == f"Base.\n\n{block}"


@pytest.mark.parametrize(
    "modes",
    [("error", "ok"), ("empty", "ok"), ("error", "empty", "ok")],
    ids=["failure", "empty-output", "both"],
)
def test_generate_fallback_grounds_once(
    make_engine: Callable[..., GroundingEngine], animals: dict[str, Any], modes: tuple[str, ...]
) -> None:
    engine = CountingEngine(make_engine(GroundingConfig(sources=[animals], timeout_ms=60_000)))
    providers = [FakeProvider(f"p{i}", mode=mode) for i, mode in enumerate(modes)]
    client = Client(providers, grounding=engine_of(engine), system_prompt="Base.")
    result = client.generate("zebra", use_knowledge_grounding=True)
    assert engine.calls == 1
    assert result.provider == providers[-1].name
    assert result.knowledge is not None
    assert result.knowledge.selected_ids[0] == "animals.zebra"
    _one_block_each(providers, engine)
    asyncio.run(client.agenerate("zebra", use_knowledge_grounding=True))
    assert (engine.calls, engine.async_calls) == (1, 1)


@pytest.mark.parametrize(
    "modes",
    [("creation", "ok"), ("first", "ok"), ("empty", "ok"), ("creation", "first", "empty", "ok")],
    ids=["stream-creation", "before-first-chunk", "empty-output", "all"],
)
def test_stream_fallback_grounds_once(
    make_engine: Callable[..., GroundingEngine], animals: dict[str, Any], modes: tuple[str, ...]
) -> None:
    engine = CountingEngine(make_engine(GroundingConfig(sources=[animals], timeout_ms=60_000)))
    providers = [FakeProvider(f"p{i}", mode=mode) for i, mode in enumerate(modes)]
    client = Client(providers, grounding=engine_of(engine), system_prompt="Base.")
    stream = client.stream("zebra", use_knowledge_grounding=True)
    assert drain(stream) == "The answer."
    assert stream.result is not None
    assert stream.result.provider == providers[-1].name
    assert engine.calls == 1
    _one_block_each(providers, engine)

    for p in providers:
        p.requests.clear()
    engine.blocks.clear()
    astream = asyncio.run(client.astream("zebra", use_knowledge_grounding=True))
    assert asyncio.run(adrain(astream)) == "The answer."
    assert (engine.calls, engine.async_calls) == (1, 1)
    _one_block_each(providers, engine)


def test_fallback_across_models_of_one_provider_reuses_the_request() -> None:
    asked: list[ChatRequest] = []

    def answer(request: ChatRequest) -> str:
        asked.append(request)
        if request.model == "big":
            raise ProviderError("big is overloaded", provider="local", status=529)
        return f"{request.model} says hi"

    provider = CallableProvider(answer, name="local")
    engine = StubEngine()
    client = Client(
        [(provider, "big"), (provider, "small")], grounding=engine_of(engine), system_prompt="S"
    )
    result = client.generate("zebras", use_knowledge_grounding=True)
    assert result.text == "small says hi"
    assert (result.provider, result.model) == ("local", "small")
    assert [r.model for r in asked] == ["big", "small"]
    assert {r.system for r in asked} == {f"S\n\n{BLOCK}"}
    assert len(engine.calls) == 1

    asked.clear()
    stream = client.stream("zebras", use_knowledge_grounding=True)
    assert drain(stream) == "small says hi"
    assert stream.result is not None
    assert (stream.result.provider, stream.result.model) == ("local", "small")
    assert {r.system for r in asked} == {f"S\n\n{BLOCK}"}
    assert len(engine.calls) == 2  # one per turn


def test_a_failure_after_the_first_chunk_is_not_retried_elsewhere() -> None:
    first, second = FakeProvider("a", mode="late"), FakeProvider("b")
    memory = InMemoryConversationMemory()
    stream = Client([first, second], conversation_memory=memory).stream("zebras", session_id="s")
    assert next(stream) == "The"
    with pytest.raises(ProviderError, match="a is down"):
        next(stream)
    assert second.requests == []
    assert stream.result is None
    assert memory.history("s") == []


def test_when_every_provider_fails_the_error_names_them() -> None:
    client = Client([FakeProvider("a", mode="error"), FakeProvider("b", mode="empty")])
    with pytest.raises(ProviderError, match=r"a: a is down.*b: empty output"):
        client.generate("zebras")
    with pytest.raises(ProviderError, match="all 2 provider attempt"):
        drain(client.stream("zebras"))


# -- failing open -------------------------------------------------------------------------------
def test_a_grounding_timeout_fails_open(
    make_engine: Callable[..., GroundingEngine], animals: dict[str, Any]
) -> None:
    entered, gate = threading.Event(), threading.Event()

    def blocking_estimator(text: str) -> int:
        entered.set()
        gate.wait(SAFETY_SECONDS)
        return 1

    config = GroundingConfig(
        sources=[animals], context=ContextConfig(token_estimator=blocking_estimator), timeout_ms=30
    )
    engine = make_engine(config)
    provider = FakeProvider()
    client = Client(provider, grounding=engine, system_prompt="Base.")
    try:
        result = client.generate("zebra", use_knowledge_grounding=True)
        stream = client.stream("zebra", use_knowledge_grounding=True)
        streamed = drain(stream)
    finally:
        gate.set()
    assert entered.is_set()
    assert result.knowledge is not None
    assert result.knowledge.failure_reason == "timeout"
    assert result.text == "The answer."
    assert stream.knowledge is not None
    assert stream.knowledge.failure_reason == "timeout"
    assert streamed == "The answer."
    assert [r.system for r in provider.requests] == ["Base.", "Base."]


def test_an_engine_that_raises_does_not_fail_the_turn(caplog: pytest.LogCaptureFixture) -> None:
    provider = FakeProvider()
    client = Client(provider, grounding=engine_of(StubEngine(raises=True)), system_prompt="Base.")
    with caplog.at_level(logging.ERROR, logger="groundwire"):
        result = client.generate("zebras", use_knowledge_grounding=True)
    assert result.text == "The answer."
    assert result.knowledge is not None
    assert result.knowledge.failure_reason == "error"
    assert provider.requests[0].system == "Base."
    assert any(r.exc_info for r in caplog.records)

    async_result = asyncio.run(client.agenerate("zebras", use_knowledge_grounding=True))
    assert async_result.knowledge is not None
    assert async_result.knowledge.failure_reason == "error"
    stream = client.stream("zebras", use_knowledge_grounding=True)
    assert stream.knowledge is not None
    assert stream.knowledge.failure_reason == "error"
    assert drain(stream) == "The answer."


def test_failure_metadata_from_the_engine_is_reported_and_no_block_added() -> None:
    no_match = GroundingOutcome(None, GroundingMetadata(failure_reason="no-match"))
    provider = FakeProvider()
    client = Client(provider, grounding=engine_of(StubEngine(no_match)), system_prompt="Base.")
    result = client.generate("quantum zebras", use_knowledge_grounding=True)
    assert result.knowledge == GroundingMetadata(failure_reason="no-match")
    assert provider.requests[0].system == "Base."


# -- streams --------------------------------------------------------------------------------------
def test_stream_knowledge_is_ready_before_the_provider_is_called() -> None:
    provider, memory = FakeProvider(), InMemoryConversationMemory()
    client = Client(provider, grounding=engine_of(StubEngine()), conversation_memory=memory)
    stream = client.stream("zebras", session_id="s", use_knowledge_grounding=True)
    assert stream.knowledge == FOUND
    assert provider.requests == []
    assert stream.result is None
    assert list(stream) == ["The", " answer."]
    assert stream.result == GenerateResult(
        text="The answer.", provider="fake", model="m", knowledge=FOUND, finish_reason="stop"
    )
    assert memory.history("s")[-1] == Message("assistant", "The answer.")
    assert list(stream) == []  # single use


def test_stream_events_include_tool_calls_and_done() -> None:
    call = ToolCall("t1", "lookup", {"q": "zebra"})
    stream = Client(FakeProvider(text="Hi", tool_calls=(call,))).stream("zebras")
    kinds = [event.kind for event in stream.events()]
    assert kinds == ["text", "tool_call", "done"]
    assert stream.result is not None
    assert stream.result.tool_calls == (call,)


def test_an_abandoned_stream_writes_nothing_to_memory() -> None:
    memory = InMemoryConversationMemory()
    client = Client(FakeProvider(), conversation_memory=memory)
    with client.stream("zebras", session_id="s") as stream:
        assert next(stream) == "The"
    assert memory.history("s") == []
    assert stream.result is None


def test_async_stream_has_knowledge_at_once_and_the_result_at_the_end() -> None:
    engine, memory = StubEngine(), InMemoryConversationMemory()
    client = Client(FakeProvider(), grounding=engine_of(engine), conversation_memory=memory)

    async def run() -> tuple[Any, str, Any]:
        stream = await client.astream("zebras", session_id="s", use_knowledge_grounding=True)
        knowledge = stream.knowledge
        text = await adrain(stream)
        return knowledge, text, stream.result

    knowledge, text, result = asyncio.run(run())
    assert knowledge == FOUND
    assert text == "The answer."
    assert result.knowledge == FOUND
    assert engine.calls == []  # the async path uses aground
    assert len(engine.async_calls) == 1
    assert memory.history("s") == [Message("user", "zebras"), Message("assistant", "The answer.")]


# -- construction -------------------------------------------------------------------------------
def test_providers_must_be_providers() -> None:
    with pytest.raises(ConfigError, match="at least one provider"):
        Client([])
    with pytest.raises(ConfigError, match="neither a Provider"):
        Client([object()])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="neither a Provider"):
        Client([(FakeProvider(), 3)])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="a Provider or a list"):
        Client("openai")  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), "5", True])
def test_timeouts_must_be_positive_seconds(timeout: Any) -> None:
    with pytest.raises(ConfigError, match="timeout_s"):
        Client(FakeProvider(), timeout_s=timeout)


def test_the_client_timeout_is_the_default_of_each_request() -> None:
    provider = FakeProvider()
    client = Client(provider, timeout_s=12)
    client.generate("a")
    client.generate("b", timeout_s=3)
    assert [r.timeout_s for r in provider.requests] == [12.0, 3.0]


@pytest.mark.parametrize(
    "messages",
    ["hello", [{"role": "robot", "content": "x"}], [42], {"role": "user"}],
    ids=["string", "bad-role", "not-a-message", "mapping"],
)
def test_malformed_conversation_messages_are_refused(messages: Any) -> None:
    with pytest.raises(QueryError, match="conversation_messages"):
        Client(FakeProvider()).generate("hi", conversation_messages=messages)


def test_an_opt_in_can_be_written_as_a_mapping_of_options() -> None:
    options: Mapping[str, Any] = {"input": "zebras", "use_knowledge_grounding": True}
    engine = StubEngine()
    result = Client(FakeProvider(), grounding=engine_of(engine)).generate(**options)
    assert result.knowledge == FOUND


# -- end to end: the real OpenAI SDK against a local fake server --------------------------------
# The fake server and its ``fake`` fixture come from tests/llm/fake_servers.py and conftest.py.


def openai_provider(fake: Any, name: str) -> Any:
    pytest.importorskip("openai")
    from groundwire.llm.providers import OpenAIProvider

    return OpenAIProvider(
        "gpt-test", api_key="test-key", base_url=fake.openai.base_url, max_retries=0, name=name
    )


@pytest.mark.integration
def test_e2e_grounded_generate_through_the_openai_sdk(
    fake: Any, make_engine: Callable[..., GroundingEngine], animals: dict[str, Any]
) -> None:
    engine = CountingEngine(make_engine(GroundingConfig(sources=[animals], timeout_ms=60_000)))
    memory = InMemoryConversationMemory()
    client = Client(
        openai_provider(fake, "openai"),
        grounding=engine_of(engine),
        conversation_memory=memory,
        system_prompt=lambda: "You answer about animals.",
    )
    fake.openai.enqueue_text("Zebras are striped. [KB:animals.zebra@v1]")
    fake.openai.enqueue_text("Giraffes are tall.")

    first = client.generate("tell me about the zebra", session_id="s", use_knowledge_grounding=True)
    second = client.generate("and the giraffe?", session_id="s")  # not grounded

    assert first.text == "Zebras are striped. [KB:animals.zebra@v1]"
    assert first.provider == "openai"
    assert first.usage.input_tokens == 12
    assert first.knowledge is not None
    assert first.knowledge.selected_ids[0] == "animals.zebra"
    assert second.knowledge is None
    (block,) = engine.blocks
    sent_first, sent_second = (r.json for r in fake.openai.requests)
    assert sent_first["messages"] == [
        {"role": "system", "content": f"You answer about animals.\n\n{block}"},
        {"role": "user", "content": "tell me about the zebra"},
    ]
    # The next turn sees the conversation, but neither the block nor the system text in it.
    assert sent_second["messages"] == [
        {"role": "system", "content": "You answer about animals."},
        {"role": "user", "content": "tell me about the zebra"},
        {"role": "assistant", "content": "Zebras are striped. [KB:animals.zebra@v1]"},
        {"role": "user", "content": "and the giraffe?"},
    ]
    assert [m.role for m in memory.history("s")] == ["user", "assistant", "user", "assistant"]
    assert all(block not in m.content for m in memory.history("s"))


@pytest.mark.integration
def test_e2e_stream_fallback_reuses_one_block_through_the_openai_sdk(
    fake: Any, make_engine: Callable[..., GroundingEngine], animals: dict[str, Any]
) -> None:
    engine = CountingEngine(make_engine(GroundingConfig(sources=[animals], timeout_ms=60_000)))
    providers = [openai_provider(fake, n) for n in ("primary", "backup", "last")]
    client = Client(providers, grounding=engine_of(engine), system_prompt="Base.")
    fake.openai.enqueue_error(503, "overloaded")  # stream creation fails
    fake.openai.enqueue_stream_error("overloaded", after_chunks=0)  # fails before chunk 1
    fake.openai.enqueue_text("Zebras have stripes.", chunks=["Zebras ", "have stripes."])

    stream = client.stream("zebra", use_knowledge_grounding=True)
    assert stream.knowledge is not None
    assert stream.knowledge.selected_ids[0] == "animals.zebra"
    assert fake.openai.request_count == 0  # the provider is called on the first chunk
    assert list(stream) == ["Zebras ", "have stripes."]

    assert engine.calls == 1
    assert stream.result is not None
    assert stream.result.provider == "last"
    (block,) = engine.blocks
    bodies = [r.json for r in fake.openai.requests]
    assert len(bodies) == 3
    assert all(body["stream"] is True for body in bodies)
    assert all(body["messages"] == bodies[0]["messages"] for body in bodies)
    system = bodies[0]["messages"][0]
    assert system == {"role": "system", "content": f"Base.\n\n{block}"}
    assert system["content"].count(block) == 1


@pytest.mark.integration
def test_e2e_async_turn_fails_open_on_a_grounding_timeout(
    fake: Any, make_engine: Callable[..., GroundingEngine], animals: dict[str, Any]
) -> None:
    gate = threading.Event()

    def blocking_estimator(text: str) -> int:
        gate.wait(SAFETY_SECONDS)
        return 1

    config = GroundingConfig(
        sources=[animals], context=ContextConfig(token_estimator=blocking_estimator), timeout_ms=30
    )
    provider = openai_provider(fake, "openai")
    client = Client(provider, grounding=make_engine(config))
    fake.openai.enqueue_text("An ungrounded answer.")

    async def turn() -> GenerateResult:
        try:
            return await client.agenerate("zebra", use_knowledge_grounding=True)
        finally:
            await provider.aclose()  # the SDK's async client belongs to this event loop

    try:
        result = asyncio.run(turn())
    finally:
        gate.set()
    assert result.text == "An ungrounded answer."
    assert result.knowledge is not None
    assert result.knowledge.failure_reason == "timeout"
    assert fake.openai.last_request.json["messages"] == [{"role": "user", "content": "zebra"}]


# -- files: the search_knowledge_base tool loop through Client.generate ------------------------
def test_generate_with_files_runs_the_tool_loop_through_the_real_sdk(
    fake: Any, tmp_path: Any
) -> None:
    from groundwire import OpenAIProvider

    (tmp_path / "quokka.md").write_text("# Quokkas\n\nQuokkas eat leaves and grasses.\n")
    (tmp_path / "wombat.md").write_text("# Wombats\n\nWombats dig burrows.\n")
    fake.openai.enqueue_tool_call("search_knowledge_base", {"query": "quokka food"})
    fake.openai.enqueue_text("Quokkas eat leaves.")
    provider = OpenAIProvider("gpt-fake", api_key="k", base_url=fake.openai.base_url)
    memory = InMemoryConversationMemory()
    client = Client(provider, conversation_memory=memory, system_prompt="Be brief.")
    result = client.generate(
        "What do quokkas eat?",
        session_id="s1",
        files=[tmp_path / "quokka.md", tmp_path / "wombat.md"],
    )
    assert result.text == "Quokkas eat leaves."
    assert result.provider == "openai"
    first, second = (request.json for request in fake.openai.requests)
    assert first["tools"][0]["function"]["name"] == "search_knowledge_base"
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1
    assert "Quokkas eat leaves and grasses" in tool_messages[0]["content"]
    # Memory keeps the user input and the final answer only: no tool traffic.
    history = memory.history("s1", 10)
    assert [(m.role, m.content) for m in history] == [
        ("user", "What do quokkas eat?"),
        ("assistant", "Quokkas eat leaves."),
    ]


def test_generate_with_files_falls_back_per_model_call(fake: Any, tmp_path: Any) -> None:
    (tmp_path / "a.md").write_text("# Otters\n\nOtters hold hands while sleeping.\n")
    calls: list[str] = []

    def broken(request: ChatRequest) -> str:
        calls.append("broken")
        raise ProviderError("down", retryable=True)

    def answering(request: ChatRequest) -> Completion:
        calls.append("answering")
        if not any(m.role == "tool" for m in request.messages):
            call = ToolCall("c1", "search_knowledge_base", {"query": "otters"})
            return Completion("", tool_calls=(call,))
        return Completion("They hold hands.")

    client = Client([CallableProvider(broken, name="a"), CallableProvider(answering, name="b")])
    result = client.generate("What do otters do?", files=[tmp_path / "a.md"], max_tool_rounds=3)
    assert result.text == "They hold hands."
    assert result.provider == "b"
    assert calls == ["broken", "answering", "broken", "answering"]
