"""groundwire as a LangChain retriever (langchain-core 1.x): ``pip install groundwire[langchain]``.

:class:`GroundwireRetriever` is a ``BaseRetriever``: it runs in LCEL chains, agents and
LangGraph like any other, sync (``invoke``, ``batch``) and async (``ainvoke``, ``abatch``).
Each result is a ``Document`` whose ``id`` is groundwire's and whose ``metadata`` holds
the citation tag, score, breakdown, source, span, version and confidence
(:meth:`groundwire.integrations.Passage.metadata`).

Who asks is set at construction (``access=Access(principal=..., authorize=...)``) and may
be changed for one call through the ``RunnableConfig``::

    chain.invoke(question, config={"configurable": {"groundwire": {"principal": bob}}})

The value under ``configurable["groundwire"]`` (the key is ``config_key``) is an
:class:`~groundwire.integrations.Access` that replaces the retriever's, or a mapping
that replaces the fields it names. It is applied before ranking, like the constructor's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groundwire.errors import MissingExtraError
from groundwire.integrations.search import Access, Passages, Searcher, check_limit

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig, ensure_config
    from pydantic import ConfigDict, Field, field_validator
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingExtraError(
        "langchain-core", "langchain", "groundwire.integrations.langchain"
    ) from exc

__all__ = ["GroundwireRetriever", "to_documents"]

_ACCESS = "_groundwire_access"  # the keyword the per-call access travels under


def to_documents(found: Passages) -> list[Document]:
    """LangChain documents for a search's passages, in order."""
    return [
        Document(page_content=p.text, id=p.id, metadata=p.metadata(found.confidence))
        for p in found.passages
    ]


class GroundwireRetriever(BaseRetriever):
    """Authorized, ranked, gated groundwire passages as LangChain ``Document`` s.

    ``searcher`` is any :class:`~groundwire.integrations.Searcher` (an
    :class:`~groundwire.integrations.EntrySearcher` or
    :class:`~groundwire.integrations.EvidenceSearcher` over the embedded index); ``access``
    says who asks (overridable per call through ``configurable[config_key]``); ``k`` caps
    the documents returned (None: groundwire's own bound). An empty list means groundwire
    found nothing the question supports (the relevance gate abstained) or nothing the
    caller may see.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    searcher: Searcher
    access: Access = Field(default_factory=Access)
    k: int | None = None
    config_key: str = "groundwire"

    @field_validator("k")
    @classmethod
    def _check_k(cls, value: int | None) -> int | None:
        return check_limit(value, "k")

    def _access_for(self, config: RunnableConfig | None) -> Access:
        configurable = ensure_config(config).get("configurable") or {}
        changes = configurable.get(self.config_key) if isinstance(configurable, Mapping) else None
        return self.access.updated(changes)

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """The documents for ``input`` (the query), for the access of ``config``."""
        kwargs[_ACCESS] = self._access_for(config)
        return super().invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`invoke`."""
        kwargs[_ACCESS] = self._access_for(config)
        return await super().ainvoke(input, config, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        access = kwargs.get(_ACCESS, self.access)
        return to_documents(self.searcher.search(query, access, self.k))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        access = kwargs.get(_ACCESS, self.access)
        return to_documents(await self.searcher.asearch(query, access, self.k))
