"""The LlamaIndex retriever and node postprocessor inside real query engines (llama-index-core).

The LLM is llama-index-core's ``MockLLM``, which answers with the prompt it was given:
the response is exactly what the model saw. The "any retriever" of the postprocessor is
LlamaIndex's own ``VectorStoreIndex`` retriever, over an embedding model that wraps
groundwire's deterministic hashing embedder (no model weights are needed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from tests.integrations.conftest import GUEST, LABELED_VIEWS, STAFF

import groundwire as gw
from groundwire.integrations import Access, EntrySearcher, EvidenceSearcher
from groundwire.integrations.llamaindex import GroundwireNodePostprocessor, GroundwireRetriever

Policy = Callable[[object, Any], bool]
ROTATE = "how do I rotate an api key"
OFF_TOPIC = "what is the capital of peru"


class HashingEmbedding(BaseEmbedding):
    """groundwire's hashing embedder as a LlamaIndex embedding model."""

    _embedder: gw.HashingEmbedder = PrivateAttr(default_factory=gw.HashingEmbedder)

    def _get_query_embedding(self, query: str) -> list[float]:
        return [float(x) for x in self._embedder.embed_query(query)]

    def _get_text_embedding(self, text: str) -> list[float]:
        return [float(x) for x in self._embedder.embed_documents([text])[0]]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


@pytest.fixture(scope="module")
def vector_retriever(handbook: gw.KnowledgeBase) -> Any:
    """A plain LlamaIndex vector retriever over the handbook's entries (not groundwire's)."""
    nodes = [
        TextNode(id_=e.id, text=f"{e.title}\n\n{e.summary}\n\n{e.body}")
        for e in handbook
        if e.status == "active"
    ]
    index = VectorStoreIndex(nodes, embed_model=HashingEmbedding())
    return index.as_retriever(similarity_top_k=10)


def engine(retriever: Any, *postprocessors: Any) -> RetrieverQueryEngine:
    return RetrieverQueryEngine.from_args(
        retriever, llm=MockLLM(), node_postprocessors=list(postprocessors)
    )


def test_a_query_engine_answers_from_groundwire_nodes_in_order(
    entries: EntrySearcher, entry_policy: Policy
) -> None:
    staff = Access(principal=STAFF, authorize=entry_policy)
    response = engine(GroundwireRetriever(entries, staff)).query(ROTATE)
    expected = entries.search(ROTATE, staff)
    nodes = response.source_nodes
    assert [n.node.node_id for n in nodes] == [p.id for p in expected.passages]
    assert [n.score for n in nodes] == [p.score for p in expected.passages]
    top = nodes[0].node
    assert isinstance(top, TextNode)
    assert top.metadata == expected.passages[0].metadata("high")
    assert top.metadata["citation"] == "[KB:security.api-key-rotation@2026-11-15]"
    assert top.get_content(metadata_mode=MetadataMode.NONE) == expected.passages[0].text
    # the LLM saw each node with its citation and title only: no diagnostics in the prompt
    prompt = str(response)
    positions = [prompt.index(n.node.metadata["citation"]) for n in nodes]
    assert positions == sorted(positions)
    assert "breakdown" not in prompt
    assert "coverage" not in prompt
    assert top.get_content(metadata_mode=MetadataMode.EMBED) == top.text


def test_a_denied_node_never_reaches_the_engine_or_the_llm(
    entries: EntrySearcher, entry_policy: Policy
) -> None:
    guest = GroundwireRetriever(entries, Access(principal=GUEST, authorize=entry_policy))
    response = engine(guest).query(ROTATE)
    assert response.source_nodes
    assert all(not n.node.node_id.startswith("security.") for n in response.source_nodes)
    assert "[KB:security." not in str(response)
    staff = guest.with_access({"principal": STAFF})
    assert staff.retrieve(ROTATE)[0].node.node_id == "security.api-key-rotation"
    assert guest.access.principal == GUEST  # with_access made a new retriever
    assert staff.searcher is guest.searcher


def test_async_retrieval_and_queries(entries: EntrySearcher, entry_policy: Policy) -> None:
    guest = GroundwireRetriever(entries, Access(principal=GUEST, authorize=entry_policy))

    async def run() -> tuple[list[NodeWithScore], Any]:
        nodes = await guest.aretrieve(ROTATE)
        return nodes, await engine(guest.with_access({"principal": STAFF})).aquery(ROTATE)

    nodes, response = asyncio.run(run())
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in guest.retrieve(ROTATE)]
    assert response.source_nodes[0].node.node_id == "security.api-key-rotation"


def test_document_nodes_carry_their_span(evidence: EvidenceSearcher, source_policy: Policy) -> None:
    question = "how are webhook deliveries retried?"
    retriever = GroundwireRetriever(
        evidence, Access(principal=GUEST, authorize=source_policy), top_k=2
    )
    nodes = retriever.retrieve(question)
    assert 0 < len(nodes) <= 2
    assert all(not n.node.metadata["source"].startswith("api/") for n in nodes)
    staff = retriever.with_access(Access(principal=STAFF, authorize=source_policy))
    top = staff.retrieve(question)[0].node
    assert isinstance(top, TextNode)
    assert top.metadata["source"] == "api/webhooks.md"
    assert [top.start_char_idx, top.end_char_idx] == top.metadata["span"]


def test_an_abstaining_gate_gives_an_empty_response(entries: EntrySearcher) -> None:
    response = engine(GroundwireRetriever(entries)).query(OFF_TOPIC)
    assert response.source_nodes == []
    assert str(response) == "Empty Response"


def test_bad_arguments_are_named(entries: EntrySearcher) -> None:
    with pytest.raises(gw.ConfigError, match="expected a groundwire Searcher"):
        GroundwireRetriever("kb")  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="expected a groundwire Access"):
        GroundwireRetriever(entries, {"principal": "x"})  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="top_k=-2 is invalid"):
        GroundwireRetriever(entries, top_k=-2)


# --- the postprocessor over another retriever's nodes ---------------------------------------------
def test_the_gate_keeps_only_supported_nodes_of_a_vector_retriever(vector_retriever: Any) -> None:
    raw = vector_retriever.retrieve(ROTATE)
    assert len(raw) == 10
    gate = GroundwireNodePostprocessor()
    kept = gate.postprocess_nodes(raw, query_str=ROTATE)
    assert kept
    assert len(kept) < len(raw)
    order = [n.node.node_id for n in raw]
    ids = [n.node.node_id for n in kept]
    assert ids == [i for i in order if i in ids]  # the retriever's order is kept
    assert "security.api-key-rotation" in ids
    by_id = {n.node.node_id: n for n in raw}
    assert all(n.score == by_id[n.node.node_id].score for n in kept)  # scores untouched
    assert all(n.node is by_id[n.node.node_id].node for n in kept)  # nodes untouched
    texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in raw]
    screened = gw.screen_texts(ROTATE, texts, scores=[n.score or 0.0 for n in raw])
    assert ids == [order[i] for i in screened.order]


def test_the_postprocessor_in_a_query_engine(vector_retriever: Any, handbook: Any) -> None:
    assert len(vector_retriever.retrieve(OFF_TOPIC)) == 10  # a vector index always finds some
    gated = engine(vector_retriever, GroundwireNodePostprocessor()).query(OFF_TOPIC)
    assert gated.source_nodes == []
    assert str(gated) == "Empty Response"
    weighed = GroundwireNodePostprocessor(reference=handbook, top_n=2)
    response = engine(vector_retriever, weighed).query(ROTATE)
    assert 0 < len(response.source_nodes) <= 2
    assert response.source_nodes[0].node.node_id == "security.api-key-rotation"

    async def run() -> Any:
        return await engine(vector_retriever, GroundwireNodePostprocessor()).aquery(ROTATE)

    assert [n.node.node_id for n in asyncio.run(run()).source_nodes] == [
        n.node.node_id
        for n in GroundwireNodePostprocessor().postprocess_nodes(
            vector_retriever.retrieve(ROTATE), query_str=ROTATE
        )
    ]


def test_the_postprocessor_reranks_and_a_broken_reranker_changes_nothing(
    vector_retriever: Any,
) -> None:
    raw = vector_retriever.retrieve(ROTATE)
    gated = GroundwireNodePostprocessor().postprocess_nodes(raw, query_str=ROTATE)
    shortest = gw.CallableReranker(lambda q, texts: [-float(len(t)) for t in texts])
    reranked = GroundwireNodePostprocessor(reranker=shortest).postprocess_nodes(
        raw, query_str=ROTATE
    )
    assert {n.node.node_id for n in reranked} == {n.node.node_id for n in gated}
    lengths = [len(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in reranked]
    assert lengths == sorted(lengths)
    assert [n.score for n in reranked] == [-float(n) for n in lengths]

    def broken(query: str, texts: list[str]) -> list[float]:
        raise RuntimeError("reranker down")

    kept = GroundwireNodePostprocessor(reranker=gw.CallableReranker(broken)).postprocess_nodes(
        raw, query_str=ROTATE
    )
    assert [(n.node.node_id, n.score) for n in kept] == [(n.node.node_id, n.score) for n in gated]


def test_the_postprocessor_needs_the_query_and_takes_unscored_nodes() -> None:
    nodes = [
        NodeWithScore(node=TextNode(text="Rotate the API key in Settings.")),
        NodeWithScore(node=TextNode(text="Lunch is at noon.")),
    ]
    with pytest.raises(gw.QueryError, match="needs the query"):
        GroundwireNodePostprocessor().postprocess_nodes(nodes)
    kept = GroundwireNodePostprocessor().postprocess_nodes(nodes, QueryBundle("rotate api key"))
    assert [n.node.get_content() for n in kept] == ["Rotate the API key in Settings."]
    assert kept[0].score is None
    assert GroundwireNodePostprocessor().postprocess_nodes([], query_str="x") == []
    everything = GroundwireNodePostprocessor(gate="off").postprocess_nodes(nodes, query_str="x")
    assert len(everything) == 2


def test_each_retriever_sees_exactly_its_principals_tenant_and_acl(
    labeled: gw.KnowledgeBase,
) -> None:
    base = GroundwireRetriever(EntrySearcher(labeled, config=gw.RetrievalConfig(gate="off")))
    everyone = {entry.id for entry in labeled}
    for principal, visible in LABELED_VIEWS.items():
        response = engine(base.with_access({"principal": principal})).query("payroll approval")
        assert {n.node.node_id for n in response.source_nodes} == visible, principal
        assert not any(hidden in str(response) for hidden in everyone - visible), principal
