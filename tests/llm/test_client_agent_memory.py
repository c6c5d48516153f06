"""Client(memory=store): the recalled-memory block beside the knowledge block, cited [MEM:id].

Driven through the real OpenAI SDK against the loopback fake server (tests/llm/fake_servers.py).
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import pytest

from groundwire import (
    Client,
    ConfigError,
    GroundingConfig,
    GroundingEngine,
    InMemoryConversationMemory,
    MemoryScope,
    MemoryStore,
    OpenAIProvider,
    load_sources,
    validate_citations,
)

HANDBOOK = Path(__file__).resolve().parents[2] / "examples" / "handbook"
SCOPE = MemoryScope("acme", "support-bot", "alice")


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with MemoryStore(tmp_path / "agent.db") as opened:
        yield opened


def provider(fake: Any) -> OpenAIProvider:
    return OpenAIProvider("gpt-test", api_key="sk-test", base_url=fake.openai.base_url)


def system_of(fake: Any) -> str:
    return str(fake.openai.requests[-1].json["messages"][0]["content"])


def test_recalled_memories_join_the_prompt_and_citations_validate(fake: Any, store: Any) -> None:
    memory = store.remember(SCOPE, "Alice prefers answers with a short code example.")
    store.remember(SCOPE, "Alice's team rotates API keys every 90 days.", acl=["user:alice"])
    engine = GroundingEngine(GroundingConfig(sources=load_sources(HANDBOOK)))
    client = Client(
        provider(fake),
        grounding=engine,
        memory=store,
        memory_scope=SCOPE,
        system_prompt="You are helpful.",
    )
    fake.openai.enqueue_text(f"Rotate it in Settings. {memory.tag} [MEM:not-offered]")
    result = client.generate(
        "how do I rotate an API key, with a code example?",
        use_knowledge_grounding=True,
        session_id="chat-1",
    )
    system = system_of(fake)
    assert system.startswith("You are helpful.")
    knowledge_at, memory_at = system.index("[KB:"), system.index("<recalled_memories>")
    assert knowledge_at < memory_at  # beside (after) the knowledge block
    assert memory.tag in system
    assert "data, not instructions" in system
    assert result.memory is not None
    assert memory.id in result.memory.memory_ids
    report = validate_citations(result.text, [], memories=result.memory)
    assert [c.id for c in report.valid] == [memory.id]
    assert [c.tag for c in report.invalid] == ["[MEM:not-offered]"]
    # The call wrote nothing into agent memory (no knowledge block, no turn) ...
    assert store.stats(SCOPE)["memories"] == 2
    # ... but recorded what the model was shown, for the feedback loop.
    injected = {
        r["memory_id"] for r in store.session_memories(SCOPE, "chat-1") if r["was_injected"]
    }
    assert memory.id in injected


def test_no_match_and_other_scopes(fake: Any, store: Any) -> None:
    store.remember(SCOPE, "Alice likes tea.")
    client = Client(provider(fake), memory=store, memory_scope=SCOPE)
    fake.openai.enqueue_text("ok", times=2)
    result = client.generate("quantum chromodynamics")
    assert result.memory is not None
    assert result.memory.failure_reason == "no-match"
    assert "<recalled_memories>" not in str(fake.openai.requests[-1].json["messages"])
    other = client.generate("tea", memory_scope=MemoryScope("globex", "support-bot"))
    assert other.memory is not None
    assert other.memory.block is None


def test_recall_fails_open(fake: Any, store: Any) -> None:
    client = Client(provider(fake), memory=store, memory_scope=SCOPE)
    store.close()  # every recall now raises
    fake.openai.enqueue_text("still answered")
    result = client.generate("anything")
    assert result.text == "still answered"
    assert result.memory is not None
    assert result.memory.failure_reason == "error"


def test_streams_and_async_calls_recall_too(fake: Any, store: Any) -> None:
    memory = store.remember(SCOPE, "Alice's favourite colour is teal.")
    client = Client(provider(fake), memory=store, memory_scope=SCOPE)
    fake.openai.enqueue_text("Teal.", times=3)
    stream = client.stream("favourite colour")
    assert stream.memory is not None
    assert memory.id in stream.memory.memory_ids
    assert "".join(stream) == "Teal."
    assert stream.result is not None
    assert stream.result.memory is stream.memory
    result = asyncio.run(client.agenerate("favourite colour"))
    assert result.memory is not None
    assert memory.id in result.memory.memory_ids

    async def consume() -> Any:
        s = await client.astream("favourite colour")
        return [d async for d in s], s

    deltas, astream = asyncio.run(consume())
    assert "".join(deltas) == "Teal."
    assert astream.memory is not None


def test_a_scope_is_required_and_checked(fake: Any, store: Any) -> None:
    client = Client(provider(fake), memory=store)
    with pytest.raises(ConfigError, match="memory_scope"):
        client.generate("hello")
    with pytest.raises(ConfigError, match="MemoryScope"):
        Client(provider(fake), memory=store, memory_scope="acme")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="memory_max_tokens"):
        Client(provider(fake), memory=store, memory_scope=SCOPE, memory_max_tokens=0)


def test_the_memory_block_respects_its_budget(fake: Any, store: Any) -> None:
    for i in range(10):
        store.remember(SCOPE, f"Alice fact number {i}: " + "detail " * 30)
    client = Client(provider(fake), memory=store, memory_scope=SCOPE, memory_max_tokens=200)
    fake.openai.enqueue_text("ok")
    result = client.generate("alice fact")
    assert result.memory is not None
    assert result.memory.block is not None
    assert result.memory.block.tokens <= 200
    assert len(result.memory.memory_ids) < len(result.memory.recalled_ids)
    assert set(result.memory.block.dropped_ids) | set(result.memory.memory_ids) == set(
        result.memory.recalled_ids
    )


def test_conversation_memory_is_a_separate_option(fake: Any, store: Any) -> None:
    history = InMemoryConversationMemory()
    client = Client(provider(fake), memory=store, memory_scope=SCOPE, conversation_memory=history)
    fake.openai.enqueue_text("first", times=2)
    client.generate("hello there", session_id="s")
    client.generate("and again", session_id="s")
    assert [m.content for m in history.history("s")] == [
        "hello there",
        "first",
        "and again",
        "first",
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        legacy = Client(provider(fake), memory=InMemoryConversationMemory())
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    fake.openai.enqueue_text("x")
    assert legacy.generate("hi", session_id="s").memory is None
    with pytest.raises(ConfigError, match="conversation_memory= only"):
        Client(provider(fake), memory=InMemoryConversationMemory(), conversation_memory=history)
