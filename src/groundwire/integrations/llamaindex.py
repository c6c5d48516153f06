"""groundwire in LlamaIndex (llama-index-core 0.14.x): ``pip install 'groundwire[llamaindex]'``.

- :class:`GroundwireRetriever` is a ``BaseRetriever`` (``retrieve`` and ``aretrieve``): it
  drops into ``RetrieverQueryEngine``, chat engines and agents, and returns
  ``NodeWithScore`` s whose ``TextNode`` carries groundwire's id, text, span
  (``start_char_idx``/``end_char_idx`` for document excerpts) and metadata (citation tag,
  score, breakdown, source, version, confidence). Only the citation tag and the title
  reach the LLM prompt and no metadata reaches an embedding, so the diagnostics cost no
  prompt tokens.
- :class:`GroundwireNodePostprocessor` applies groundwire's relevance gate (and optionally
  a reranker) to nodes from *any* retriever (a vector index, BM25, a router), through
  :func:`groundwire.screen_texts`.

LlamaIndex has no per-call configuration, so who asks is fixed per retriever:
:meth:`GroundwireRetriever.with_access` makes one for another principal (cheap: the
searcher and its index are shared); build one per request.
"""

from __future__ import annotations

from typing import Any, Literal

import groundwire as gw
from groundwire.errors import MissingExtraError
from groundwire.integrations.search import (
    Access,
    Passages,
    Searcher,
    check_access,
    check_limit,
    check_searcher,
)

try:
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingExtraError(
        "llama-index-core", "llamaindex", "groundwire.integrations.llamaindex"
    ) from exc

__all__ = ["GroundwireNodePostprocessor", "GroundwireRetriever", "to_nodes"]

#: Metadata an LLM prompt shows with each node: enough to cite it, nothing diagnostic.
PROMPT_METADATA = ("citation", "title")


def to_nodes(found: Passages) -> list[NodeWithScore]:
    """LlamaIndex nodes for a search's passages, in order."""
    nodes = []
    for passage in found.passages:
        metadata = passage.metadata(found.confidence)
        node = TextNode(
            id_=passage.id,
            text=passage.text,
            metadata=metadata,
            excluded_llm_metadata_keys=[key for key in metadata if key not in PROMPT_METADATA],
            excluded_embed_metadata_keys=list(metadata),
            start_char_idx=None if passage.span is None else passage.span[0],
            end_char_idx=None if passage.span is None else passage.span[1],
        )
        nodes.append(NodeWithScore(node=node, score=passage.score))
    return nodes


class GroundwireRetriever(BaseRetriever):
    """Authorized, ranked, gated groundwire passages as LlamaIndex nodes.

    ``searcher`` is any :class:`~groundwire.integrations.Searcher`; ``access`` says who
    asks; ``top_k`` caps the nodes (None: groundwire's own bound). No node means nothing
    the question supports (the relevance gate abstained) or nothing the caller may see.
    """

    def __init__(
        self,
        searcher: Searcher,
        access: Access | None = None,
        *,
        top_k: int | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.searcher = check_searcher(searcher)
        self.access = check_access(access)
        self.top_k = check_limit(top_k, "top_k")
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def with_access(self, changes: Access | dict[str, Any]) -> GroundwireRetriever:
        """A retriever for other access (an :class:`Access`, or a mapping of the fields to
        replace), sharing this one's searcher."""
        return GroundwireRetriever(
            self.searcher,
            self.access.updated(changes),
            top_k=self.top_k,
            callback_manager=self.callback_manager,
            verbose=self._verbose,
        )

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return to_nodes(self.searcher.search(query_bundle.query_str, self.access, self.top_k))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = await self.searcher.asearch(query_bundle.query_str, self.access, self.top_k)
        return to_nodes(found)


class GroundwireNodePostprocessor(BaseNodePostprocessor):
    """groundwire's relevance gate (and optionally a reranker) over nodes from any retriever.

    Keeps the nodes the query's evidence supports, in their order (possibly none), then
    lets ``reranker`` (a :class:`groundwire.Reranker`) reorder the first ``rerank_top_n``
    within ``rerank_timeout_s`` (on timeout or error the order stays), then keeps
    ``top_n``. Term weights come from ``reference`` (a :class:`groundwire.KnowledgeBase`
    of the same corpus) when given, else from the nodes themselves. A kept node keeps its
    score unless reranked. Nodes are never modified. See :func:`groundwire.screen_texts`.
    """

    gate: Literal["relevance", "off"] = Field(default="relevance")
    relevance: Any = Field(default=None, description="a groundwire.RelevanceGate")
    reranker: Any = Field(default=None, description="a groundwire.Reranker")
    rerank_top_n: int = Field(default=gw.HybridSettings().rerank_top_n)
    rerank_timeout_s: float = Field(default=gw.HybridSettings().rerank_timeout_s)
    reference: Any = Field(default=None, description="a groundwire.KnowledgeBase")
    top_n: int | None = Field(default=None)

    @classmethod
    def class_name(cls) -> str:
        """The name LlamaIndex serializes this class under."""
        return "GroundwireNodePostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise gw.QueryError("the groundwire postprocessor needs the query (a QueryBundle)")
        if not nodes:
            return []
        given = [node.score for node in nodes]
        screened = gw.screen_texts(
            query_bundle.query_str,
            [node.node.get_content(metadata_mode=MetadataMode.NONE) for node in nodes],
            scores=None if any(s is None for s in given) else [float(s or 0.0) for s in given],
            ids=[node.node.node_id for node in nodes],
            gate=self.gate,
            relevance=self.relevance,
            reranker=self.reranker,
            rerank_top_n=self.rerank_top_n,
            rerank_timeout_s=self.rerank_timeout_s,
            reference=self.reference,
        )
        kept = [
            NodeWithScore(
                node=nodes[n].node, score=score if rank < screened.reranked else nodes[n].score
            )
            for rank, (n, score) in enumerate(zip(screened.order, screened.scores, strict=True))
        ]
        top_n = check_limit(self.top_n, "top_n")
        return kept if top_n is None else kept[:top_n]
