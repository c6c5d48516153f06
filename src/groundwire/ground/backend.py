"""Document evidence from a search backend (Milvus): the backend finds, groundwire selects.

:func:`retrieve_evidence_from` is :func:`~groundwire.retrieve_evidence` over a backend:
the backend ranks every chunk the principal may see (its filter applied before top-k,
BM25 and phrase channels) and returns the best ``candidates``; those chunks, fetched
with their links cut to what the principal may see, become an in-memory snapshot on
which the usual evidence steps run (host authorizer, relevance gate, merging, excerpts,
token budget, citations). The result is an :class:`~groundwire.EvidenceResult`, the
embedded path's shape. Scores inside it are BM25 over the candidates (per-request
statistics, as the embedded path recomputes them over what a request may see), so they
differ from the embedded path's; which chunks can be chosen is the backend's top
``candidates`` (docs/MILVUS.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from groundwire.backends.protocol import SearchBackend, sort_hits
from groundwire.config import DEFAULT_EVIDENCE_CANDIDATES
from groundwire.errors import ConfigError
from groundwire.ground.evidence import EvidenceResult, retrieve_evidence
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.model import Document, Filter, Principal

__all__ = ["retrieve_evidence_from"]


def retrieve_evidence_from(
    backend: SearchBackend,
    question: str,
    *,
    principal: Principal | None = None,
    where: Mapping[str, str | Sequence[str]] | None = None,
    candidates: int = DEFAULT_EVIDENCE_CANDIDATES,
    **options: Any,
) -> EvidenceResult:
    """Evidence for ``question`` from the chunks ``backend`` holds (see the module).

    ``options`` are :func:`~groundwire.retrieve_evidence`'s (``authorize``, ``limit``,
    ``max_total_tokens``, ``gate``, ...); ``candidates`` bounds how many chunks the
    backend returns (its ``candidate_limit``).
    """
    if not isinstance(backend, SearchBackend):
        raise ConfigError(f"backend must be a SearchBackend, got {type(backend).__name__}")
    if principal is not None and not isinstance(principal, Principal):
        raise ConfigError("principal must be a verified groundwire.Principal for a backend")
    flt = Filter.of(principal, where=where)
    hits = sort_hits([*backend.lexical(question, flt, candidates), *backend.phrase(question, flt)])
    ids = list(dict.fromkeys(hit.id for hit in hits))[:candidates]
    docs = [
        Document(entry.id, entry.title, entry.body, dict(entry.metadata))
        for entry in backend.fetch(ids, flt)
    ]
    pool = KnowledgeBase.from_documents(docs, backend.settings)
    options.setdefault("candidate_limit", candidates)
    return retrieve_evidence(pool, question, principal=principal, where=where, **options)
