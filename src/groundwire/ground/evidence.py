"""Bounded, authorized evidence: cited excerpts of indexed document chunks for one question.

:func:`retrieve_evidence` composes the two layers that do the work:

1. **Select** (:func:`groundwire.retrieve.evidence.select_evidence`): validate, authorize
   every source before ranking, rank with BM25 over allowed chunks only, keep the best
   ``candidate_limit`` scoring at least ``min_score``, merge duplicate and overlapping
   chunks per source, cut long excerpts to a window around their best-matching region,
   and order them round-robin over sources.
2. **Pack** (:func:`groundwire.context.evidence.pack_evidence`): the longest prefix of
   that order holding at most ``limit`` excerpts whose whole rendered block
   (:func:`~groundwire.context.evidence.render_evidence`) the ``token_estimator`` counts
   at no more than ``max_total_tokens``.

The result is ``ready``, or ``insufficient`` with a reason, checked in this order:
``no-match`` (no allowed chunk matched), ``below-min-score``, ``low-relevance`` (the
relevance gate kept nothing), ``too-few-sources``
(fewer than ``min_sources`` distinct sources qualify), ``budget-exhausted`` (the
budget left no excerpt, or fewer than ``min_sources`` sources). An insufficient
result carries no excerpts and no block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from groundwire.config import (
    DEFAULT_AUTHORIZE_TIMEOUT_MS,
    DEFAULT_EVIDENCE_CANDIDATES,
    DEFAULT_EVIDENCE_LIMIT,
    DEFAULT_EVIDENCE_MAX_TOKENS,
    DEFAULT_MAX_EXCERPT_CHARS,
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_MIN_SCORE,
    DEFAULT_MIN_SOURCES,
    EvidenceSettings,
    HybridSettings,
    RelevanceGate,
    estimate_tokens,
)
from groundwire.context.evidence import BudgetReason, PackedEvidence, pack_evidence
from groundwire.embed.base import Embedder
from groundwire.i18n import DEFAULT_LOCALE
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.vectors import VectorIndex
from groundwire.model import Citation, Excerpt
from groundwire.retrieve.evidence import (
    Authorizer,
    EvidenceSelection,
    SelectionReason,
    check_knowledge_base,
    select_evidence,
)

__all__ = ["EVIDENCE_REASONS", "EvidenceReason", "EvidenceResult", "retrieve_evidence"]

EvidenceReason = Literal[SelectionReason, BudgetReason]
#: Every reason an evidence result can be insufficient, in the order they are checked.
EVIDENCE_REASONS: Final[tuple[str, ...]] = get_args(EvidenceReason)


@dataclass(frozen=True, slots=True)
class EvidenceResult:
    """The evidence for one question: status, excerpts, the rendered block and diagnostics.

    ``text`` is the rendered block and ``tokens`` its estimate (both empty/0 when
    insufficient). ``candidate_count`` counts allowed chunks that matched;
    ``candidates_truncated`` says more matched than ``candidate_limit`` considered;
    ``context_truncated`` that qualifying excerpts were left out by ``limit`` or the
    token budget. ``denied_sources`` counts sources the authorizer did not allow;
    ``authorization_errors`` lists its failures (raised, returned a non-bool, deadline
    passed) by kind and count, naming no source.
    """

    status: Literal["ready", "insufficient"]
    reason: EvidenceReason | None
    question: str
    excerpts: tuple[Excerpt, ...]
    text: str
    citations: tuple[Citation, ...]
    tokens: int
    candidate_count: int
    candidates_truncated: bool
    context_truncated: bool
    authorized_sources: int
    denied_sources: int
    authorization_errors: tuple[str, ...]
    settings: EvidenceSettings
    truncated_query: bool = False

    @property
    def ready(self) -> bool:
        """Whether the evidence is good enough to hand to a model."""
        return self.status == "ready"

    @property
    def truncated(self) -> bool:
        """Whether any candidate or qualifying excerpt was left out."""
        return self.candidates_truncated or self.context_truncated

    @property
    def source_ids(self) -> tuple[str, ...]:
        """Distinct sources of the excerpts, in first-appearance order."""
        return tuple(dict.fromkeys(excerpt.source_id for excerpt in self.excerpts))


def _result(selection: EvidenceSelection, packed: PackedEvidence | None) -> EvidenceResult:
    """The result of a selection and (when the selection qualified) its packing."""
    reason: EvidenceReason | None = selection.reason
    excerpts: tuple[Excerpt, ...] = ()
    text, tokens, context_truncated = "", 0, False
    if packed is not None:
        reason, excerpts = packed.reason, packed.excerpts
        text, tokens, context_truncated = packed.text, packed.tokens, packed.truncated
    return EvidenceResult(
        status="ready" if reason is None else "insufficient",
        reason=reason,
        question=selection.question,
        excerpts=excerpts,
        text=text,
        citations=tuple(excerpt.citation for excerpt in excerpts),
        tokens=tokens,
        candidate_count=selection.candidate_count,
        candidates_truncated=selection.candidates_truncated,
        context_truncated=context_truncated,
        authorized_sources=selection.authorized_sources,
        denied_sources=selection.denied_sources,
        authorization_errors=selection.authorization_errors,
        settings=selection.settings,
        truncated_query=selection.truncated_query,
    )


def retrieve_evidence(
    kb: KnowledgeBase,
    question: str,
    *,
    principal: object = None,
    authorize: Authorizer | None = None,
    limit: int = DEFAULT_EVIDENCE_LIMIT,
    max_excerpt_chars: int = DEFAULT_MAX_EXCERPT_CHARS,
    max_total_tokens: int = DEFAULT_EVIDENCE_MAX_TOKENS,
    min_score: float = DEFAULT_MIN_SCORE,
    min_sources: int = DEFAULT_MIN_SOURCES,
    candidate_limit: int = DEFAULT_EVIDENCE_CANDIDATES,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    token_estimator: Callable[[str], int] = estimate_tokens,
    hybrid: HybridSettings | None = None,
    vectors: VectorIndex | None = None,
    embedder: Embedder | None = None,
    gate: Literal["relevance", "off"] = "relevance",
    relevance: RelevanceGate | None = None,
    where: Mapping[str, str | Sequence[str]] | None = None,
    locale: str = DEFAULT_LOCALE,
    authorize_timeout_ms: int | None = DEFAULT_AUTHORIZE_TIMEOUT_MS,
) -> EvidenceResult:
    """Authorized, ranked, merged, diversified and token-bounded excerpts for ``question``.

    ``kb`` holds chunks (``KnowledgeBase.from_documents(chunks_to_documents(chunks))``).
    ``principal`` is a :class:`~groundwire.Principal` (chunks' tenant and ACL labels
    apply) or, with ``authorize(principal, source) -> bool`` (called once per visible
    source before ranking, ``authorize_timeout_ms`` bounding it), a host object.
    ``where`` keeps chunks whose metadata has one of the given values per key; ``locale``
    is the language of the block's own words. Bounds default to
    :class:`~groundwire.config.EvidenceSettings`. ``hybrid`` selects dense or hybrid
    ranking (with ``vectors`` of ``kb`` and the ``embedder`` that built them); the
    default is BM25. ``gate="off"`` turns the relevance gate off (``relevance`` sets its
    thresholds).
    Raises :class:`ConfigError` for a bad argument and :class:`QueryError` for a bad
    question (a too-long one is cut, never refused); finding nothing is a result
    (``insufficient``), not an error. The steps and their order rules are in this
    module's docstring.
    """
    check_knowledge_base(kb)  # a bad kb is reported before bad settings
    settings = EvidenceSettings(
        limit=limit,
        max_excerpt_chars=max_excerpt_chars,
        max_total_tokens=max_total_tokens,
        min_score=min_score,
        min_sources=min_sources,
        candidate_limit=candidate_limit,
        max_query_chars=max_query_chars,
        token_estimator=token_estimator,
        gate=gate,
        relevance=relevance if relevance is not None else RelevanceGate(),
        hybrid=hybrid if hybrid is not None else HybridSettings(),
        locale=locale,
        authorize_timeout_ms=authorize_timeout_ms,
    )
    selection = select_evidence(
        kb,
        question,
        settings,
        principal=principal,
        authorize=authorize,
        where=where,
        vectors=vectors,
        embedder=embedder,
    )
    if selection.reason is not None:
        return _result(selection, None)
    return _result(selection, pack_evidence(question, selection.excerpts, settings))
