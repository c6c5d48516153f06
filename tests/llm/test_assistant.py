"""GroundedAssistant: no call on insufficient evidence, citation rejection, buffered streaming."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_servers import Reply

from groundwire import (
    AnswerEvent,
    AnthropicProvider,
    ChatRequest,
    CitationError,
    Completion,
    ConfigError,
    GroundedAnswer,
    GroundedAssistant,
    KnowledgeBase,
    OpenAIProvider,
    ProviderError,
    StreamEvent,
    chunk_text,
    chunks_to_documents,
)

GUIDE = (
    "# Quokka care\n\nQuokkas eat leaves, grasses and shrubs. Keepers feed them at dawn.\n\n"
    "## Habitat\n\nQuokkas live on Rottnest Island off Western Australia."
)
FAQ = "Visitors must not feed quokkas bread: it makes them ill."


def knowledge_base() -> KnowledgeBase:
    chunks = (
        *chunk_text(GUIDE, "guide.md", kind="markdown"),
        *chunk_text(FAQ, "faq.txt"),
    )
    return KnowledgeBase.from_documents(chunks_to_documents(chunks))


@dataclass
class Scripted:
    """A Provider that answers from a script; ``answer`` may use ``{id}`` (first excerpt id)."""

    answer: str
    name: str = "scripted"
    fail: bool = False
    requests: list[ChatRequest] = field(default_factory=list)
    streamed: list[str] = field(default_factory=list)  # pieces handed out so far

    def _text(self, request: ChatRequest) -> str:
        self.requests.append(request)
        if self.fail:
            raise ProviderError("down", provider=self.name, retryable=True)
        content = request.messages[-1].content
        first_id = content.split('{"id": "', 1)[1].split('"', 1)[0] if '{"id": "' in content else ""
        return self.answer.format(id=first_id)

    def complete(self, request: ChatRequest) -> Completion:
        return Completion(self._text(request), provider=self.name)

    async def acomplete(self, request: ChatRequest) -> Completion:
        return self.complete(request)

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        text = self._text(request)
        pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
        for piece in pieces:
            self.streamed.append(piece)
            yield StreamEvent("text", piece)
        yield StreamEvent("done", completion=Completion(text, provider=self.name))

    async def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        for event in self.stream(request):
            yield event


def test_answers_with_valid_citations_and_lists_sources() -> None:
    provider = Scripted("Quokkas eat leaves [evidence:{id}].")
    answer = GroundedAssistant(knowledge_base(), provider).answer("what do quokkas eat")
    assert isinstance(answer, GroundedAnswer)
    assert answer.answered
    assert answer.status == "answered"
    assert answer.reason is None
    assert answer.text.startswith("Quokkas eat leaves [evidence:")
    assert answer.citations is not None
    assert answer.citations.ok
    assert [e.id for e in answer.sources] == list(answer.citations.cited_ids)
    (request,) = provider.requests
    assert request.system is not None
    assert "[evidence:ID]" in request.system
    assert "untrusted data" in request.system
    user = request.messages[0]
    assert user.role == "user"
    assert "Question: what do quokkas eat" in user.content
    assert "<untrusted_evidence>" in user.content  # the quoted block, not in the system prompt
    assert "Quokkas eat leaves" not in request.system  # evidence never in the system prompt


def test_insufficient_evidence_makes_no_provider_call() -> None:
    provider = Scripted("never [evidence:{id}]")
    answer = GroundedAssistant(knowledge_base(), provider).answer("zebra migration routes")
    assert (answer.status, answer.reason, answer.text) == ("insufficient", "no-match", "")
    assert answer.citations is None
    assert answer.completion is None
    assert provider.requests == []


def test_too_few_sources_is_insufficient_without_a_call() -> None:
    provider = Scripted("never")
    assistant = GroundedAssistant(knowledge_base(), provider, min_sources=2, limit=3)
    answer = assistant.answer("rottnest island habitat")
    assert (answer.status, answer.reason) == ("insufficient", "too-few-sources")
    assert provider.requests == []


def test_citing_outside_the_evidence_raises_by_default() -> None:
    provider = Scripted("Quokkas eat leaves [evidence:{id}] and bread [evidence:secret.md#0].")
    with pytest.raises(CitationError, match="outside the returned evidence") as caught:
        GroundedAssistant(knowledge_base(), provider).answer("what do quokkas eat")
    assert caught.value.invalid == ("[evidence:secret.md#0]",)
    assert "bread" not in str(caught.value)  # the rejected text is not in the error


def test_citing_nothing_raises() -> None:
    provider = Scripted("Quokkas eat leaves.")
    with pytest.raises(CitationError, match="cites none"):
        GroundedAssistant(knowledge_base(), provider).answer("what do quokkas eat")


def test_rejection_can_be_returned_without_the_text() -> None:
    provider = Scripted("Quokkas eat bread [KB:guide.md#0@000000000000].")
    assistant = GroundedAssistant(knowledge_base(), provider, on_rejection="return")
    answer = assistant.answer("what do quokkas eat")
    assert (answer.status, answer.reason, answer.text) == ("rejected", "invalid-citation", "")
    assert answer.sources == ()
    assert answer.citations is not None
    assert answer.citations.invalid[0].problem == "wrong-version"
    no_cite = GroundedAssistant(knowledge_base(), Scripted("Leaves."), on_rejection="return")
    assert no_cite.answer("what do quokkas eat").reason == "no-citation"


def test_stream_yields_nothing_before_the_whole_answer_is_checked() -> None:
    provider = Scripted("Quokkas eat leaves, grasses and shrubs [evidence:{id}].")
    events = GroundedAssistant(knowledge_base(), provider).stream_answer("what do quokkas eat")
    first = next(events)
    # By the time anything is yielded the provider's stream was fully consumed.
    total = "".join(provider.streamed)
    assert total.endswith("].")
    assert first.kind == "text"
    rest = list(events)
    pieces = [first.text] + [e.text for e in rest if e.kind == "text"]
    assert "".join(pieces) == total
    assert rest[-1].kind == "done"
    assert rest[-1].answer is not None
    assert rest[-1].answer.text == total


def test_stream_of_a_rejected_answer_yields_no_text() -> None:
    provider = Scripted("Quokkas eat leaves [evidence:made-up#9].")
    events = GroundedAssistant(knowledge_base(), provider).stream_answer("what do quokkas eat")
    with pytest.raises(CitationError):
        next(events)
    assert "".join(provider.streamed).endswith("].")  # read in full, shown never
    returned = GroundedAssistant(knowledge_base(), Scripted("[evidence:x]"), on_rejection="return")
    (done,) = list(returned.stream_answer("what do quokkas eat"))
    assert done.kind == "done"
    assert done.answer is not None
    assert done.answer.status == "rejected"


def test_stream_on_insufficient_evidence_yields_done_only() -> None:
    provider = Scripted("never")
    events = list(GroundedAssistant(knowledge_base(), provider).stream_answer("zebra"))
    assert [e.kind for e in events] == ["done"]
    assert events[0].answer is not None
    assert events[0].answer.status == "insufficient"
    assert provider.requests == []


def test_providers_fall_back_in_order_without_a_second_retrieval() -> None:
    down, up = Scripted("x", name="down", fail=True), Scripted("Leaves [evidence:{id}].")
    answer = GroundedAssistant(knowledge_base(), [down, up]).answer("what do quokkas eat")
    assert answer.answered
    assert down.requests[0] == up.requests[0]  # the same request, the same evidence
    with pytest.raises(ProviderError, match="down"):
        GroundedAssistant(knowledge_base(), [down]).answer("what do quokkas eat")


def test_async_variants_match() -> None:
    async def main() -> tuple[GroundedAnswer, list[AnswerEvent], GroundedAnswer]:
        assistant = GroundedAssistant(knowledge_base(), Scripted("Leaves [evidence:{id}]."))
        answer = await assistant.aanswer("what do quokkas eat")
        events = [e async for e in assistant.astream_answer("what do quokkas eat")]
        none = await GroundedAssistant(knowledge_base(), Scripted("x")).aanswer("zebra")
        return answer, events, none

    answer, events, none = asyncio.run(main())
    assert answer.answered
    assert events[-1].answer is not None
    assert events[-1].answer.text == answer.text
    assert "".join(e.text for e in events if e.kind == "text") == answer.text
    assert none.status == "insufficient"


def test_async_rejection_raises() -> None:
    async def main() -> None:
        assistant = GroundedAssistant(knowledge_base(), Scripted("Leaves."))
        await assistant.aanswer("what do quokkas eat")

    with pytest.raises(CitationError):
        asyncio.run(main())


def test_authorization_runs_before_the_provider() -> None:
    provider = Scripted("Leaves [evidence:{id}].")
    seen: list[str] = []

    def only_faq(principal: object, source: object) -> bool:
        seen.append(getattr(source, "id", ""))
        return getattr(source, "id", "") == "faq.txt"

    assistant = GroundedAssistant(knowledge_base(), provider, authorize=only_faq, principal="u1")
    answer = assistant.answer("quokkas")
    assert answer.answered
    assert {e.source_id for e in answer.evidence.excerpts} == {"faq.txt"}
    assert "guide.md" not in provider.requests[0].messages[0].content
    assert sorted(seen) == ["faq.txt", "guide.md"]


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    kb = knowledge_base()
    with pytest.raises(ConfigError, match="Provider"):
        GroundedAssistant(kb, [])
    with pytest.raises(ConfigError, match="Provider"):
        GroundedAssistant(kb, object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="on_rejection"):
        GroundedAssistant(kb, Scripted("x"), on_rejection="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="min_sources"):
        GroundedAssistant(kb, Scripted("x"), limit=1, min_sources=2)
    with pytest.raises(ConfigError, match="KnowledgeBase"):
        GroundedAssistant(str(tmp_path), Scripted("x"))  # type: ignore[arg-type]


# -- the real SDKs against the scripted fake servers (tests/llm/fake_servers.py) ----------------
def _openai(endpoint: Any, name: str = "openai", **options: Any) -> Any:
    return OpenAIProvider(
        "gpt-fake", api_key="test-key", base_url=endpoint.base_url, name=name, **options
    )


def _first_id(question: str) -> str:
    assistant = GroundedAssistant(knowledge_base(), Scripted("unused"))
    return assistant.evidence(question).excerpts[0].id


def test_sdk_insufficient_evidence_sends_no_request(fake: Any) -> None:
    fake.openai.default = Reply(text="should never be asked")
    with _openai(fake.openai) as provider:
        assistant = GroundedAssistant(knowledge_base(), provider)
        assert assistant.answer("zebra migration routes").status == "insufficient"
        events = list(assistant.stream_answer("zebra migration routes"))
    assert [e.kind for e in events] == ["done"]
    assert fake.openai.request_count == 0


def test_sdk_answer_is_checked_and_outside_ids_are_rejected(fake: Any) -> None:
    cited = _first_id("what do quokkas eat")
    fake.openai.enqueue_text(f"Leaves and grasses [evidence:{cited}].")
    fake.openai.enqueue_text(f"Leaves [evidence:{cited}] and bread [evidence:bakery.md#0].")
    with _openai(fake.openai) as provider:
        assistant = GroundedAssistant(knowledge_base(), provider)
        answer = assistant.answer("what do quokkas eat")
        assert answer.answered
        assert answer.text == f"Leaves and grasses [evidence:{cited}]."
        assert answer.completion is not None
        assert answer.completion.provider == "openai"
        with pytest.raises(CitationError) as caught:
            assistant.answer("what do quokkas eat")
    assert caught.value.invalid == ("[evidence:bakery.md#0]",)
    sent = fake.openai.requests[0].json
    assert sent["messages"][0]["role"] == "system"
    assert "[evidence:ID]" in sent["messages"][0]["content"]
    assert "<untrusted_evidence>" in sent["messages"][1]["content"]


def test_sdk_stream_shows_nothing_of_a_broken_stream_and_falls_back(
    fake: Any, make_fake: Any
) -> None:
    """A stream that drops after two chunks yields nothing; the next provider answers.

    An unbuffered stream would already have shown the first two chunks.
    """
    cited = _first_id("what do quokkas eat")
    fake.openai.enqueue_disconnect(after_chunks=2, text="Quokkas eat bread and cake daily.")
    fake.openai.default = Reply(status=500, error_message="still down")
    backup = make_fake()
    backup.openai.enqueue_text(
        f"Leaves [evidence:{cited}].", chunks=["Lea", "ves [evi", f"dence:{cited}]."]
    )
    with (
        _openai(fake.openai, "primary", max_retries=0) as primary,
        _openai(backup.openai, "backup") as secondary,
    ):
        assistant = GroundedAssistant(knowledge_base(), [primary, secondary])
        events = list(assistant.stream_answer("what do quokkas eat"))
    text = "".join(e.text for e in events if e.kind == "text")
    assert "bread" not in text
    assert text == f"Leaves [evidence:{cited}]."
    assert events[-1].answer is not None
    assert events[-1].answer.completion is not None
    assert events[-1].answer.completion.provider == "backup"
    assert fake.openai.requests[0].stream
    assert backup.openai.request_count == 1


def test_sdk_async_stream_with_anthropic(fake: Any) -> None:
    cited = _first_id("where do quokkas live")
    fake.anthropic.enqueue_text(f"On Rottnest Island [evidence:{cited}].")

    async def main() -> list[AnswerEvent]:
        provider = AnthropicProvider(
            "claude-fake", api_key="test-key", base_url=fake.anthropic.base_url
        )
        try:
            assistant = GroundedAssistant(knowledge_base(), provider)
            return [e async for e in assistant.astream_answer("where do quokkas live")]
        finally:
            await provider.aclose()

    events = asyncio.run(main())
    assert "".join(e.text for e in events if e.kind == "text") == (
        f"On Rottnest Island [evidence:{cited}]."
    )
    sent = fake.anthropic.last_request.json
    assert sent["stream"] is True
    assert "[evidence:ID]" in str(sent["system"])
