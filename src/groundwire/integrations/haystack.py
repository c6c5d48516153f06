"""groundwire as a Haystack component (haystack-ai 3.x): ``pip install 'groundwire[haystack]'``.

:class:`GroundwireRetriever` is a ``@component`` with ``run`` and ``run_async`` (so it runs
in a ``Pipeline`` and an ``AsyncPipeline``). Its outputs:

- ``documents`` (``list[Document]``): ``id`` is groundwire's, ``content`` the passage text,
  ``score`` groundwire's score, ``meta`` the citation tag, breakdown, source, span,
  version and confidence (:meth:`groundwire.integrations.Passage.metadata`);
- ``confidence`` (``str | None``): the entries' calibrated confidence;
- ``reason`` (``str | None``): why no document came back (``low-relevance``, ...).

Who asks is set at construction (``access=``) and may change per run through the
``access`` input (an :class:`~groundwire.integrations.Access`, or a mapping of the fields
to replace), e.g. ``pipeline.run({"retriever": {"query": q, "access": {"principal": bob}}})``.

The component holds an in-memory index, so it does not serialize to YAML (``to_dict``
raises ``SerializationError``): build pipelines that use it in code.
"""

from __future__ import annotations

from typing import Any

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
    from haystack import Document, component
    from haystack.core.errors import SerializationError
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingExtraError("haystack-ai", "haystack", "groundwire.integrations.haystack") from exc


__all__ = ["GroundwireRetriever", "to_documents"]


def to_documents(found: Passages) -> list[Document]:
    """Haystack documents for a search's passages, in order."""
    return [
        Document(id=p.id, content=p.text, meta=p.metadata(found.confidence), score=p.score)
        for p in found.passages
    ]


def _output(found: Passages) -> dict[str, Any]:
    return {
        "documents": to_documents(found),
        "confidence": found.confidence,
        "reason": found.reason,
    }


@component
class GroundwireRetriever:
    """Authorized, ranked, gated groundwire passages as Haystack ``Document`` s.

    ``searcher`` is any :class:`~groundwire.integrations.Searcher`; ``access`` says who
    asks; ``top_k`` caps the documents (None: groundwire's own bound; a run may lower or
    raise it up to that bound). No document means nothing the question supports (the
    relevance gate abstained; ``reason`` says so) or nothing the caller may see.
    """

    def __init__(
        self, searcher: Searcher, access: Access | None = None, top_k: int | None = None
    ) -> None:
        self.searcher = check_searcher(searcher)
        self.access = check_access(access)
        self.top_k = check_limit(top_k, "top_k")

    def to_dict(self) -> dict[str, Any]:
        """Refused: the component holds an in-memory index (build the pipeline in code)."""
        raise SerializationError(
            "GroundwireRetriever holds an in-memory groundwire index and cannot be "
            "serialized; build pipelines that use it in code"
        )

    def _request(
        self, access: Access | dict[str, Any] | None, top_k: int | None
    ) -> tuple[Access, int | None]:
        return self.access.updated(access), check_limit(top_k if top_k is not None else self.top_k)

    @component.output_types(documents=list[Document], confidence=str | None, reason=str | None)
    def run(
        self, query: str, access: Access | dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, Any]:
        """The documents for ``query`` that the access (the constructor's, changed by
        ``access``) may see: at most ``top_k``."""
        who, limit = self._request(access, top_k)
        return _output(self.searcher.search(query, who, limit))

    @component.output_types(documents=list[Document], confidence=str | None, reason=str | None)
    async def run_async(
        self, query: str, access: Access | dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, Any]:
        """Async :meth:`run`."""
        who, limit = self._request(access, top_k)
        return _output(await self.searcher.asearch(query, who, limit))
