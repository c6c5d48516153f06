"""Candidates found elsewhere, judged like groundwire's own: the relevance gate and a reranker.

A host's own retriever (a vector store, a web search, another library's BM25) finds texts
groundwire never indexed. :func:`screen_texts` decides which of them deserve the context,
with the relevance gate of :mod:`groundwire.retrieve.gate`, and may rerank the rest:

1. **Index the candidates.** They become a throwaway snapshot (document settings, one
   document per candidate, in candidate order), so what each one holds, its BM25 score
   for the query and the snapshot's noise level are measured on them.
2. **Weigh the query's terms.** The informative terms and their IDF come from
   ``reference`` when given (a :class:`KnowledgeBase` of the corpus the candidates come
   from: its document frequencies say which words are rare), else from the candidates
   themselves: a term few of them hold weighs more, one that none holds weighs most
   (nothing offered answers it).
3. **Gate.** As for entries and chunks, with one difference: the relative cut compares
   the candidates' BM25 on the candidate set, so it means the same whatever scale the
   host's own scores use (cosine, BM25, a vendor's relevance). There are no phrase hits.
   The gate only removes; the order stays.
4. **Rerank** (optional): the first ``rerank_top_n`` kept candidates, within
   ``rerank_timeout_s``; on timeout or error the order stays and ``rerank`` says why.

Nothing is written anywhere and nothing is remembered between calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from groundwire.config import (
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_RERANK_TIMEOUT_S,
    DEFAULT_RERANK_TOP_N,
    MAX_SCREEN_CANDIDATES,
    MAX_SCREEN_CHARS,
    HybridSettings,
    RelevanceGate,
    document_settings,
)
from groundwire.errors import ConfigError, QueryError
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.model import Confidence, Document
from groundwire.retrieve.confidence import coverage_confidence
from groundwire.retrieve.gate import (
    QueryEvidence,
    gate_candidates,
    measure_noise,
    query_evidence,
    term_rows,
)
from groundwire.retrieve.pipeline import truncate_query
from groundwire.retrieve.rerank import RerankCandidate, Reranker, RerankReport, apply_reranker

__all__ = ["ScreenReason", "Screened", "screen_texts"]

ScreenReason = Literal["no-candidates", "low-relevance"]


@dataclass(frozen=True, slots=True)
class Screened:
    """The verdict on candidates from another retriever.

    ``order`` holds the indexes (into the candidates given) of those kept, in their final
    order; ``scores`` is parallel to it: the reranker's score for reranked candidates, else
    the score given for the candidate (its BM25 on the candidate set when none were given).
    ``coverage`` and ``lexical`` (BM25 on the candidate set) are per candidate, in input
    order. ``confidence`` is classified from the first kept candidate's coverage as for
    entries (``none`` when nothing is kept); ``reason`` says why nothing was kept.
    ``query`` is the query as used (cut to ``max_query_chars`` when ``truncated_query``);
    ``reranked`` how many of the first kept candidates carry the reranker's scores.
    """

    order: tuple[int, ...]
    scores: tuple[float, ...]
    coverage: tuple[float, ...]
    lexical: tuple[float, ...]
    confidence: Confidence
    reason: ScreenReason | None
    rerank: RerankReport | None
    query: str
    truncated_query: bool = False
    reranked: int = 0


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise QueryError(f"texts must be a list of strings, got {type(texts).__name__}")
    if len(texts) > MAX_SCREEN_CANDIDATES:
        raise QueryError(
            f"{len(texts)} candidates given; at most {MAX_SCREEN_CANDIDATES} can be screened "
            "at once: pass the retriever's top results, not the corpus"
        )
    total = 0
    for n, text in enumerate(texts):
        if not isinstance(text, str):
            raise QueryError(f"texts[{n}] must be a string, got {type(text).__name__}")
        total += len(text)
    if total > MAX_SCREEN_CHARS:
        raise QueryError(
            f"the candidates hold {total:,} characters; at most {MAX_SCREEN_CHARS:,} can be "
            "screened at once: pass fewer or shorter candidates"
        )
    return list(texts)


def _check_scores(scores: Sequence[float] | None, count: int) -> list[float] | None:
    if scores is None:
        return None
    values = list(scores)
    if len(values) != count:
        raise ConfigError(f"scores has {len(values)} values for {count} candidates; give one each")
    ok = all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )
    if not ok:
        raise ConfigError("scores must be finite numbers, one per candidate")
    return [float(v) for v in values]


def _evidence(
    candidates: KnowledgeBase, reference: KnowledgeBase | None, query: str, settings: RelevanceGate
) -> QueryEvidence:
    """The query's informative terms, weighed on ``reference`` (else on the candidates), with
    the candidates holding each one."""
    if reference is None:
        return query_evidence(candidates, query, settings)
    weighed = query_evidence(reference, query, settings)
    rows = tuple(term_rows(candidates, weighed.terms))
    return QueryEvidence(weighed.terms, weighed.weights, rows)


def screen_texts(
    query: str,
    texts: Sequence[str],
    *,
    scores: Sequence[float] | None = None,
    ids: Sequence[str] | None = None,
    gate: Literal["relevance", "off"] = "relevance",
    relevance: RelevanceGate | None = None,
    reranker: Reranker | None = None,
    rerank_top_n: int = DEFAULT_RERANK_TOP_N,
    rerank_timeout_s: float = DEFAULT_RERANK_TIMEOUT_S,
    reference: KnowledgeBase | None = None,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
) -> Screened:
    """Which of ``texts`` (another retriever's results, best first) the query supports,
    and in which order; see the module docstring for the steps.

    ``scores`` are the host's scores (kept on candidates that are not reranked, and what an
    :class:`~groundwire.EmbeddingReranker` blends with); ``ids`` name candidates in the
    rerank report. ``gate="off"`` keeps every candidate (coverage is still measured).
    Raises :class:`QueryError` for a bad query or candidates over the bounds and
    :class:`ConfigError` for a bad option; keeping nothing is a verdict, not an error.
    """
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    candidates = _check_texts(texts)
    given = _check_scores(scores, len(candidates))
    if gate not in ("relevance", "off"):
        raise ConfigError(f"gate={gate!r} is invalid: expected 'relevance' or 'off'")
    settings = RelevanceGate() if relevance is None else relevance
    if not isinstance(settings, RelevanceGate):
        raise ConfigError(f"relevance={relevance!r} is invalid: expected a RelevanceGate")
    if reference is not None and not isinstance(reference, KnowledgeBase):
        raise ConfigError(f"reference={reference!r} is invalid: expected a KnowledgeBase")
    # Validates the reranker and its bounds with the messages retrieval uses.
    HybridSettings(reranker=reranker, rerank_top_n=rerank_top_n, rerank_timeout_s=rerank_timeout_s)
    names = [str(n) for n in range(len(candidates))] if ids is None else [str(i) for i in ids]
    if len(names) != len(candidates):
        raise ConfigError(f"ids has {len(names)} values for {len(candidates)} candidates")
    query, cut = truncate_query(query, max_query_chars)
    if not candidates:
        return Screened((), (), (), (), "none", "no-candidates", None, query, cut)

    analyzer = reference.settings.analyzer if reference is not None else None
    index = KnowledgeBase.from_documents(
        [Document(f"{n:06d}", "", text) for n, text in enumerate(candidates)],
        document_settings(analyzer),
    )  # ids in candidate order, so position n is candidate n
    bm25 = index.bm25.score(index.analyzer.tokens(query))
    lexical = [bm25.score_of(n) for n in range(len(candidates))]
    verdict = gate_candidates(
        _evidence(index, reference, query, settings),
        range(len(candidates)),
        lexical,
        settings,
        noise=measure_noise(index, settings.noise_quantile),
    )
    kept = list(verdict.kept) if gate == "relevance" else list(range(len(candidates)))
    base = given if given is not None else lexical
    final = [base[n] for n in kept]
    report, reranked = None, 0
    if reranker is not None and kept:
        head = kept[:rerank_top_n]
        order, new, report = apply_reranker(
            reranker,
            query,
            [RerankCandidate(names[n], candidates[n], base[n]) for n in head],
            None,
            rerank_timeout_s,
        )
        if order is not None and new is not None:
            kept = [head[i] for i in order] + kept[len(head) :]
            final = [*new, *final[len(head) :]]
            reranked = len(head)
    coverage = verdict.coverage
    if not kept:
        confidence: Confidence = "none"
    else:
        confidence = coverage_confidence(coverage[kept[0]], False, settings)
    return Screened(
        order=tuple(kept),
        scores=tuple(final),
        coverage=coverage,
        lexical=tuple(lexical),
        confidence=confidence,
        reason=None if kept else "low-relevance",
        rerank=report,
        query=query,
        truncated_query=cut,
        reranked=reranked,
    )
