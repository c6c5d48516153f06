"""The LangChain retriever inside real LCEL chains (langchain-core), sync and async.

The chat model is langchain-core's ``ParrotFakeChatModel``, which answers with the last
message it received: the answer is exactly the prompt the model saw, so the tests can
assert which documents reached the model, not only what the retriever returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableParallel, RunnablePassthrough
from pydantic import ValidationError
from tests.integrations.conftest import ACME_HR, GUEST, LABELED_VIEWS, STAFF

import groundwire as gw
from groundwire.integrations import Access, EntrySearcher, EvidenceSearcher
from groundwire.integrations.langchain import GroundwireRetriever

Policy = Callable[[object, Any], bool]
ROTATE = "how do I rotate an api key"
PROMPT = ChatPromptTemplate.from_messages(
    [("human", "Answer from the context and cite it.\n\n{context}\n\nQuestion: {question}")]
)


def cited(docs: list[Document]) -> str:
    return "\n\n".join(f"{d.metadata['citation']}\n{d.page_content}" for d in docs)


def rag_chain(retriever: GroundwireRetriever) -> Runnable[str, dict[str, Any]]:
    """question -> {docs, question, answer}: the usual LCEL RAG chain."""
    answer = (
        (lambda x: {"context": cited(x["docs"]), "question": x["question"]})
        | PROMPT
        | ParrotFakeChatModel()
        | StrOutputParser()
    )
    return RunnableParallel(docs=retriever, question=RunnablePassthrough()).assign(answer=answer)


def for_user(principal: gw.Principal | None) -> dict[str, Any]:
    return {"configurable": {"groundwire": {"principal": principal}}}


@pytest.fixture
def guarded(entries: EntrySearcher, entry_policy: Policy) -> GroundwireRetriever:
    """Entries for a guest unless a call says otherwise."""
    return GroundwireRetriever(
        searcher=entries, access=Access(principal=GUEST, authorize=entry_policy)
    )


def test_a_chain_hands_the_model_groundwire_documents_in_order(
    entries: EntrySearcher, entry_policy: Policy
) -> None:
    staff = Access(principal=STAFF, authorize=entry_policy)
    out = rag_chain(GroundwireRetriever(searcher=entries, access=staff)).invoke(ROTATE)
    expected = entries.search(ROTATE, staff)
    docs = out["docs"]
    assert [d.id for d in docs] == [p.id for p in expected.passages]
    assert [d.page_content for d in docs] == [p.text for p in expected.passages]
    assert [d.metadata for d in docs] == [p.metadata("high") for p in expected.passages]
    top = docs[0]
    assert top.id == "security.api-key-rotation"
    assert top.metadata["citation"] == "[KB:security.api-key-rotation@2026-11-15]"
    assert top.metadata["score"] == expected.passages[0].score
    assert top.metadata["breakdown"]["exact"] == 100.0
    assert top.metadata["confidence"] == "high"
    assert top.metadata["source"] == "relaybird-handbook"
    assert top.metadata["version"] == "2026-11-15"
    # the model saw every document, cited, in groundwire's order
    answer = out["answer"]
    positions = [answer.index(d.metadata["citation"]) for d in docs]
    assert positions == sorted(positions)
    assert answer.endswith(f"Question: {ROTATE}")


def test_a_denied_document_never_reaches_the_chain_or_the_model(
    guarded: GroundwireRetriever, handbook: gw.KnowledgeBase
) -> None:
    out = rag_chain(guarded).invoke(ROTATE)
    assert out["docs"]
    assert all(not d.id.startswith("security.") for d in out["docs"])
    security = [e for e in handbook if e.domain == "security"]
    assert not any(f"[KB:{e.id}@" in out["answer"] for e in security)
    assert "Settings → Developer → API keys" not in out["answer"]  # the rotation entry's body


def test_the_principal_changes_per_invoke_through_the_config(
    guarded: GroundwireRetriever,
) -> None:
    chain = rag_chain(guarded)
    staff = chain.invoke(ROTATE, config=for_user(STAFF))
    assert staff["docs"][0].id == "security.api-key-rotation"
    guest = chain.invoke(ROTATE)  # the constructor's principal again: nothing leaked across
    assert all(not d.id.startswith("security.") for d in guest["docs"])
    whole = Access(principal=STAFF, authorize=guarded.access.authorize)
    again = guarded.invoke(ROTATE, config={"configurable": {"groundwire": whole}})
    assert [d.id for d in again] == [d.id for d in staff["docs"]]
    assert guarded.access.principal == GUEST


def test_batches_and_async_calls_keep_each_principal(guarded: GroundwireRetriever) -> None:
    chain = rag_chain(guarded)
    batch = chain.batch([ROTATE, ROTATE], config=[for_user(STAFF), for_user(GUEST)])
    assert batch[0]["docs"][0].id == "security.api-key-rotation"
    assert all(not d.id.startswith("security.") for d in batch[1]["docs"])

    async def both() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(
                chain.ainvoke(ROTATE, config=for_user(GUEST)),
                chain.ainvoke(ROTATE, config=for_user(STAFF)),
            )
        )

    guest, staff = asyncio.run(both())
    assert all(not d.id.startswith("security.") for d in guest["docs"])
    assert [d.id for d in staff["docs"]] == [d.id for d in batch[0]["docs"]]
    assert staff["answer"] == batch[0]["answer"]
    abatch = asyncio.run(guarded.abatch([ROTATE], config=[for_user(STAFF)]))
    assert [d.id for d in abatch[0]] == [d.id for d in batch[0]["docs"]]


def test_document_excerpts_carry_their_span_and_denied_sources_never_appear(
    evidence: EvidenceSearcher, source_policy: Policy, docs_kb: gw.KnowledgeBase
) -> None:
    question = "how are webhook deliveries retried?"
    retriever = GroundwireRetriever(
        searcher=evidence, access=Access(principal=GUEST, authorize=source_policy)
    )
    staff = rag_chain(retriever).invoke(question, config=for_user(STAFF))
    top = staff["docs"][0]
    assert top.metadata["source"] == "api/webhooks.md"
    start, end = top.metadata["span"]
    source_text = next(
        d.text
        for d in gw.load_documents(
            [Path(__file__).resolve().parents[2] / "examples" / "docs"]
        ).documents
        if d.source_id == "api/webhooks.md"
    )
    assert source_text[start:end] == top.page_content
    assert top.metadata["citation"].startswith("[KB:api/webhooks.md#")
    guest = rag_chain(retriever).invoke(question)
    assert guest["docs"]
    assert all(not d.metadata["source"].startswith("api/") for d in guest["docs"])
    assert "[KB:api/" not in guest["answer"]


def test_an_abstaining_gate_is_an_empty_list(guarded: GroundwireRetriever) -> None:
    out = rag_chain(guarded).invoke("what is the capital of peru")
    assert out["docs"] == []
    assert "Question: what is the capital of peru" in out["answer"]


def test_k_caps_the_documents(entries: EntrySearcher) -> None:
    assert len(GroundwireRetriever(searcher=entries, k=2).invoke(ROTATE)) == 2
    with pytest.raises(ValidationError, match="k=-1 is invalid"):
        GroundwireRetriever(searcher=entries, k=-1)
    with pytest.raises(ValidationError):
        GroundwireRetriever(searcher="not a searcher")


def test_bad_per_call_access_fails_loudly(guarded: GroundwireRetriever) -> None:
    with pytest.raises(gw.ConfigError, match="unknown access field"):
        guarded.invoke(ROTATE, config={"configurable": {"groundwire": {"user": "staff"}}})
    other_key = GroundwireRetriever(
        searcher=guarded.searcher, access=guarded.access, config_key="kb_access"
    )
    docs = other_key.invoke(ROTATE, config={"configurable": {"kb_access": {"principal": STAFF}}})
    assert docs[0].id == "security.api-key-rotation"


def test_each_call_sees_exactly_its_principals_tenant_and_acl(labeled: gw.KnowledgeBase) -> None:
    searcher = EntrySearcher(labeled, config=gw.RetrievalConfig(gate="off"))
    chain = rag_chain(GroundwireRetriever(searcher=searcher, access=Access(principal=ACME_HR)))
    everyone = {entry.id for entry in labeled}
    question = "payroll approval"
    configs = [for_user(principal) for principal in LABELED_VIEWS]
    outs = chain.batch([question] * len(configs), config=configs)
    for (principal, visible), out in zip(LABELED_VIEWS.items(), outs, strict=True):
        assert {d.id for d in out["docs"]} == visible, principal
        assert not any(hidden in out["answer"] for hidden in everyone - visible), principal
    # {"principal": None} is an anonymous call, not the constructor's principal
    assert [d.id for d in chain.invoke(question, config=for_user(None))["docs"]] == ["open"]
    assert {d.id for d in chain.invoke(question)["docs"]} == LABELED_VIEWS[ACME_HR]
