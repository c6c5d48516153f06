"""The Haystack retriever component inside real pipelines (haystack-ai), sync and async.

The pipeline is retriever → ``ChatPromptBuilder`` → ``OpenAIChatGenerator``; the
generator talks to a loopback server speaking the OpenAI wire format
(``tests/llm/fake_servers.py``), which records what the model was sent, so the tests
assert which documents reached the model.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from typing import Any

import fake_servers  # registered by tests/conftest.py
import pytest
from haystack import Document, Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.core.errors import SerializationError
from haystack.dataclasses import ChatMessage
from haystack.utils import Secret
from tests.integrations.conftest import ACME_HR, GUEST, LABELED_VIEWS, STAFF

import groundwire as gw
from groundwire.integrations import Access, EntrySearcher, EvidenceSearcher
from groundwire.integrations.haystack import GroundwireRetriever

Policy = Callable[[object, Any], bool]
ROTATE = "how do I rotate an api key"
TEMPLATE = [
    ChatMessage.from_user(
        "Answer from the context and cite it.\n"
        "{% for d in documents %}{{ d.meta.citation }}\n{{ d.content }}\n\n{% endfor %}"
        "Question: {{ query }}"
    )
]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fake OpenAI server on 127.0.0.1; no real credentials or proxies reach the client."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    for name in ("NO_PROXY", "no_proxy"):
        exempt = {h for h in os.environ.get(name, "").split(",") if h} | {"127.0.0.1"}
        monkeypatch.setenv(name, ",".join(sorted(exempt)))
    server = fake_servers.FakeLLMServer()
    yield server
    server.close()
    assert not server.handler_errors, f"the fake server failed: {server.handler_errors}"


def rag(retriever: GroundwireRetriever, fake: Any) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    pipeline.add_component(
        "prompt", ChatPromptBuilder(template=TEMPLATE, required_variables=["documents", "query"])
    )
    pipeline.add_component(
        "llm",
        OpenAIChatGenerator(
            api_key=Secret.from_token("test-key"),
            model="gpt-test",
            api_base_url=fake.openai.base_url,
            max_retries=0,
        ),
    )
    pipeline.connect("retriever.documents", "prompt.documents")
    pipeline.connect("prompt.prompt", "llm.messages")
    return pipeline


def ask(pipeline: Pipeline, query: str, **retriever: Any) -> dict[str, Any]:
    return pipeline.run(
        {"retriever": {"query": query, **retriever}, "prompt": {"query": query}},
        include_outputs_from={"retriever"},
    )


def sent(fake: Any) -> str:
    """The user message the model received last."""
    messages = fake.openai.last_request.json["messages"]
    return str(messages[-1]["content"])


@pytest.fixture
def guarded(entries: EntrySearcher, entry_policy: Policy) -> GroundwireRetriever:
    return GroundwireRetriever(entries, Access(principal=GUEST, authorize=entry_policy))


def test_a_pipeline_hands_the_model_groundwire_documents_in_order(
    entries: EntrySearcher, entry_policy: Policy, fake: Any
) -> None:
    fake.openai.enqueue_text("Rotate it in Settings [KB:security.api-key-rotation@2026-11-15].")
    staff = Access(principal=STAFF, authorize=entry_policy)
    out = ask(rag(GroundwireRetriever(entries, staff), fake), ROTATE)
    expected = entries.search(ROTATE, staff)
    docs: list[Document] = out["retriever"]["documents"]
    assert [d.id for d in docs] == [p.id for p in expected.passages]
    assert [d.score for d in docs] == [p.score for p in expected.passages]
    assert [d.content for d in docs] == [p.text for p in expected.passages]
    assert docs[0].meta == expected.passages[0].metadata("high")
    assert docs[0].meta["citation"] == "[KB:security.api-key-rotation@2026-11-15]"
    assert out["retriever"]["confidence"] == "high"
    assert out["retriever"]["reason"] is None
    prompt = sent(fake)
    positions = [prompt.index(d.meta["citation"]) for d in docs]
    assert positions == sorted(positions)
    reply = out["llm"]["replies"][0]
    assert reply.text == "Rotate it in Settings [KB:security.api-key-rotation@2026-11-15]."


def test_a_denied_document_never_reaches_the_pipeline_or_the_model(
    guarded: GroundwireRetriever, fake: Any
) -> None:
    fake.openai.default = fake_servers.Reply(text="ok")
    pipeline = rag(guarded, fake)
    guest = ask(pipeline, ROTATE)
    assert guest["retriever"]["documents"]
    assert all(not d.id.startswith("security.") for d in guest["retriever"]["documents"])
    assert "[KB:security." not in sent(fake)
    staff = ask(pipeline, ROTATE, access={"principal": STAFF})
    assert staff["retriever"]["documents"][0].id == "security.api-key-rotation"
    assert "[KB:security.api-key-rotation@" in sent(fake)
    again = ask(pipeline, ROTATE)  # the run's access did not stick
    assert all(not d.id.startswith("security.") for d in again["retriever"]["documents"])


def test_run_async_in_an_async_pipeline_run(guarded: GroundwireRetriever, fake: Any) -> None:
    fake.openai.default = fake_servers.Reply(text="ok")
    pipeline = rag(guarded, fake)

    async def both() -> list[dict[str, Any]]:
        return [
            await pipeline.run_async(
                {
                    "retriever": {"query": ROTATE, "access": {"principal": who}},
                    "prompt": {"query": ROTATE},
                },
                include_outputs_from={"retriever"},
            )
            for who in (STAFF, GUEST)
        ]

    staff, guest = asyncio.run(both())
    sync = ask(pipeline, ROTATE, access={"principal": STAFF})
    assert [d.id for d in staff["retriever"]["documents"]] == [
        d.id for d in sync["retriever"]["documents"]
    ]
    assert all(not d.id.startswith("security.") for d in guest["retriever"]["documents"])
    assert fake.openai.request_count == 3


def test_documents_and_top_k(evidence: EvidenceSearcher, source_policy: Policy) -> None:
    question = "how are webhook deliveries retried?"
    retriever = GroundwireRetriever(evidence, Access(principal=STAFF, authorize=source_policy))
    docs = retriever.run(question, top_k=2)["documents"]
    assert len(docs) == 2
    assert docs[0].meta["source"] == "api/webhooks.md"
    assert docs[0].meta["span"][1] - docs[0].meta["span"][0] == len(docs[0].content)
    guest = retriever.run(question, access={"principal": GUEST})["documents"]
    assert guest
    assert all(not d.meta["source"].startswith("api/") for d in guest)
    assert retriever.run(question, top_k=0)["documents"] == []


def test_an_abstaining_gate_says_why(entries: EntrySearcher) -> None:
    out = GroundwireRetriever(entries).run("what is the capital of peru")
    assert out == {"documents": [], "confidence": "none", "reason": "low-relevance"}


def test_the_component_declares_its_sockets_and_refuses_to_serialize(
    entries: EntrySearcher,
) -> None:
    pipeline = Pipeline()
    pipeline.add_component("retriever", GroundwireRetriever(entries))
    outputs = pipeline.outputs()["retriever"]
    assert outputs["documents"]["type"] == list[Document]
    assert set(outputs) == {"documents", "confidence", "reason"}
    inputs = pipeline.inputs()["retriever"]
    assert inputs["query"]["is_mandatory"]
    assert not inputs["access"]["is_mandatory"]
    with pytest.raises(SerializationError, match="cannot be serialized"):
        pipeline.dumps()


def test_bad_arguments_are_named(entries: EntrySearcher) -> None:
    with pytest.raises(gw.ConfigError, match="expected a groundwire Searcher"):
        GroundwireRetriever(entries.source)  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="top_k=-1 is invalid"):
        GroundwireRetriever(entries, top_k=-1)
    with pytest.raises(gw.ConfigError, match="unknown access field"):
        GroundwireRetriever(entries).run(ROTATE, access={"who": "x"})


def test_telemetry_is_off_in_these_tests() -> None:
    from haystack.telemetry import _telemetry

    assert _telemetry.telemetry is None


def test_each_run_sees_exactly_its_principals_tenant_and_acl(
    labeled: gw.KnowledgeBase, fake: Any
) -> None:
    fake.openai.default = fake_servers.Reply(text="ok")
    searcher = EntrySearcher(labeled, config=gw.RetrievalConfig(gate="off"))
    pipeline = rag(GroundwireRetriever(searcher, Access(principal=ACME_HR)), fake)
    everyone = {entry.id for entry in labeled}
    for principal, visible in LABELED_VIEWS.items():
        out = ask(pipeline, "payroll approval", access={"principal": principal})
        assert {d.id for d in out["retriever"]["documents"]} == visible, principal
        assert not any(hidden in sent(fake) for hidden in everyone - visible), principal
