"""The relevance gate: how many of a turn's ranked candidates deserve the context.

A fixed count fills the context with whatever scored above zero. The gate instead reads
the evidence in the query and keeps the candidates it supports, possibly none:

1. **Informative terms.** The query's words minus query-side stop words (function words
   such as "how do I", "what is the", "can I": :func:`~groundwire.text.query_stopwords`),
   analyzed like the index. Each distinct term weighs its IDF in this snapshot (a word the
   snapshot has never seen weighs the most: it is what the question is about and nothing
   here matches it). Terms found in more than ``idf_floor`` of the documents (the product's
   own name, "workflow" in a workflow product) say nothing about which document fits and
   are dropped, unless nothing else is left. A query with no informative term at all
   ("and that?") is read together with its recent turns.
2. **Coverage.** A candidate's coverage is the IDF-weighted share of the informative terms
   it contains (in any indexed field). When the query names an integration by name
   (:mod:`groundwire.retrieve.mentions`), the name is scope, not evidence, for that
   integration's entries: every one of them is about it, so among them it says nothing
   about which fits, and their coverage is measured over the query's other terms. For any
   other entry the name stays one of the terms asked of it.
3. **Passing.** A candidate passes when it covers at least ``min_coverage`` of the query,
   or, for long messages, contains at least ``min_terms`` distinct informative terms while
   covering at least ``partial_coverage``: an off-topic question shares one or two words
   with a knowledge base by chance, rarely three. When the query names an integration by
   name, that partial pass is only open to entries about it (its own, or one holding its
   whole name): an entry that ignores what the question names must cover most of it.
4. **Relative cut.** Passing candidates scoring below ``score_ratio`` times the best
   passing score are cut: far weaker matches dilute the context.

The gate only removes candidates; it never adds or reorders one. It works on any ranked
list of snapshot positions (lexical today, fused channels later). Everything it needs is
read through the snapshot's BM25 reader (``KnowledgeBase.bm25``, which a delta index
answers without compacting); nothing is computed at build time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from groundwire.config import RelevanceGate
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import IntArray, MaskArray
from groundwire.retrieve.mentions import NamedScope
from groundwire.text import Analyzer, query_stopwords

__all__ = [
    "Gated",
    "QueryEvidence",
    "gate_candidates",
    "idf",
    "informative_terms",
    "measure_noise",
    "noise_level",
    "noise_table",
    "query_evidence",
    "term_rows",
]

_NO_DOCS: Final[IntArray] = np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class QueryEvidence:
    """The informative terms of one query on one snapshot, with their weights.

    ``terms`` and ``weights`` are parallel (distinct terms, query order); ``rows`` holds
    each term's matching documents (ascending snapshot positions; empty when unknown).
    ``given`` (empty, or parallel to ``terms``) holds, for a term that named an
    integration, the documents for which it is given rather than evidence (that
    integration's entries): it is neither matched nor asked of them. ``names`` holds, per
    integration named by name, the indexes of its name's terms.
    """

    terms: tuple[str, ...]
    weights: tuple[float, ...]
    rows: tuple[IntArray, ...]
    given: tuple[IntArray, ...] = ()
    names: tuple[tuple[int, ...], ...] = ()

    @property
    def total(self) -> float:
        """The summed weight of every informative term."""
        return math.fsum(self.weights)

    def matched(self, docs: IntArray) -> tuple[np.ndarray, np.ndarray]:
        """For each document: the matched weight and the number of matched terms."""
        weight = np.zeros(docs.shape[0], dtype=np.float64)
        count = np.zeros(docs.shape[0], dtype=np.int64)
        for n, (term_weight, row) in enumerate(zip(self.weights, self.rows, strict=True)):
            hit = _within(row, docs)
            if self.given:
                hit &= ~_within(self.given[n], docs)
            weight += np.where(hit, term_weight, 0.0)
            count += hit
        return weight, count

    def totals(self, docs: IntArray) -> np.ndarray:
        """For each document: the summed weight of the terms asked of it."""
        total = np.full(docs.shape[0], self.total, dtype=np.float64)
        for term_weight, row in zip(self.weights, self.given, strict=False):
            total -= np.where(_within(row, docs), term_weight, 0.0)
        return total

    def coverage(self, docs: IntArray) -> tuple[np.ndarray, np.ndarray]:
        """For each document: its coverage (matched share of the weight asked of it) and
        the number of matched terms."""
        weight, count = self.matched(docs)
        total = self.totals(docs)
        share = np.divide(weight, total, out=np.zeros_like(weight), where=total > 0)
        return share, count

    def about(self, docs: IntArray) -> np.ndarray:
        """For each document: whether it belongs to an integration the query named by name
        or holds every term of such a name (it is about what the question names)."""
        about = np.zeros(docs.shape[0], dtype=bool)
        for name in self.names:
            held = np.ones(docs.shape[0], dtype=bool)
            for n in name:
                about |= _within(self.given[n], docs)
                held &= _within(self.rows[n], docs)
            about |= held
        return about


def _within(row: IntArray, docs: IntArray) -> np.ndarray:
    """Which of ``docs`` the ascending ``row`` holds."""
    if row.shape[0] == 0:
        return np.zeros(docs.shape[0], dtype=bool)
    at = np.minimum(np.searchsorted(row, docs), row.shape[0] - 1)
    return np.asarray(row[at] == docs)


@dataclass(frozen=True, slots=True)
class Gated:
    """The gate's verdict on a ranked candidate list.

    ``kept`` are indexes into the candidate list (ascending: rank order is kept);
    ``coverage`` and ``matched_terms`` are parallel to the candidates; ``partial`` marks
    candidates that passed on ``min_terms`` alone (below ``min_coverage``).
    """

    kept: tuple[int, ...]
    coverage: tuple[float, ...]
    matched_terms: tuple[int, ...]
    partial: tuple[bool, ...]
    evidence: QueryEvidence


# Knowledge bases whose noise level is kept (each entry holds its knowledge base alive, so
# an identity check can never match a new object at a recycled address): a few snapshots.
_NOISE_CACHE_LIMIT = 8
_noise: dict[int, tuple[KnowledgeBase, float, float]] = {}


def noise_level(kb: KnowledgeBase, quantile: float) -> float:
    """What one coincidental word scores on this snapshot: the ``quantile`` of the best
    score each indexed term earns any document on its own. Computed once per snapshot
    (one vectorized pass over the term rows) and remembered."""
    cached = _noise.get(id(kb))
    if cached is not None and cached[0] is kb and cached[1] == quantile:
        return cached[2]
    level = measure_noise(kb, quantile)
    if len(_noise) >= _NOISE_CACHE_LIMIT:
        _noise.clear()
    _noise[id(kb)] = (kb, quantile, level)
    return level


def measure_noise(kb: KnowledgeBase, quantile: float) -> float:
    """:func:`noise_level` computed afresh, not remembered (for throwaway snapshots)."""
    best = kb.bm25.best_term_scores()
    level = 0.0
    if best.shape[0]:
        at = int(quantile * (best.shape[0] - 1))  # the lower of the two nearest ranks
        level = float(np.partition(best, at)[at])
    return level


def noise_table(kb: KnowledgeBase, steps: int = 100) -> list[float]:
    """:func:`measure_noise` at the quantiles ``i / steps`` for ``i`` in ``0..steps`` (what a
    store without the snapshot's term rows, such as Milvus, records to gate with)."""
    best = np.sort(kb.bm25.best_term_scores())
    if not best.shape[0]:
        return [0.0] * (steps + 1)
    return [float(best[int(i / steps * (best.shape[0] - 1))]) for i in range(steps + 1)]


def _idf(n_docs: int, df: int) -> float:
    """Lucene's BM25 idf, as the index scores with it."""
    return math.log1p((n_docs - df + 0.5) / (df + 0.5))


def _informative(kb: KnowledgeBase, text: str) -> list[str]:
    return informative_terms(kb.analyzer, text)


def informative_terms(analyzer: Analyzer, text: str) -> list[str]:
    """The distinct analyzed terms of ``text`` minus query-side stop words (step 1)."""
    stop = query_stopwords(analyzer)
    words = [word for word in analyzer.words(text) if word not in stop]
    return list(dict.fromkeys(analyzer.terms(words)))


def idf(n_docs: int, df: int) -> float:
    """Lucene's BM25 idf, as the index scores with it (the gate's term weight)."""
    return _idf(n_docs, df)


def term_rows(
    kb: KnowledgeBase, terms: Sequence[str], allowed: MaskArray | None = None
) -> list[IntArray]:
    """For each analyzed term, the documents holding it (ascending positions, only
    ``allowed`` ones when given; empty for a term the snapshot does not know)."""
    lexical = kb.bm25
    vocabulary = lexical.vocabulary
    rows: list[IntArray] = []
    for term in terms:
        tid = vocabulary.get(term)
        if tid is None:
            rows.append(_NO_DOCS)
            continue
        row = lexical.term_docs(tid)
        rows.append(row if allowed is None else row[allowed[row]])
    return rows


def query_evidence(
    kb: KnowledgeBase,
    query: str,
    settings: RelevanceGate,
    context: Sequence[str] = (),
    allowed: MaskArray | None = None,
    named: Sequence[NamedScope] = (),
) -> QueryEvidence:
    """The informative terms of ``query`` on ``kb`` (``context``: recent turns, used only
    when the query itself has no informative term).

    With ``allowed`` (the documents this request may see), document frequencies count
    only those: what the request may not see changes no weight. ``named``: the integrations
    the query named by name (:func:`groundwire.retrieve.mentions.named_scope`); among their
    entries their names are scope, not evidence. Ignored when the names are all the query's
    informative terms.
    """
    terms = _informative(kb, query)
    if not terms and context:
        terms = list(dict.fromkeys(t for text in context for t in _informative(kb, text)))
    mask = allowed if allowed is not None and not bool(allowed.all()) else None
    n_docs = kb.bm25.doc_count if mask is None else int(np.count_nonzero(mask))
    rows = term_rows(kb, terms, mask)
    found = [(term, int(row.shape[0]), row) for term, row in zip(terms, rows, strict=True)]
    floor = settings.idf_floor * n_docs
    informative = [item for item in found if item[1] <= floor] or found
    kept = [term for term, _, _ in informative]
    given: dict[str, IntArray] = {}
    names: list[tuple[int, ...]] = []
    for scope in named:
        present = tuple(kept.index(term) for term in scope.terms if term in kept)
        if present:
            names.append(present)
            for term in scope.terms:
                known = given.get(term)
                given[term] = scope.docs if known is None else np.union1d(known, scope.docs)
    if all(term in given for term in kept):
        given, names = {}, []  # nothing but names: the names are all the question holds
    return QueryEvidence(
        terms=tuple(kept),
        weights=tuple(_idf(n_docs, df) for _, df, _ in informative),
        rows=tuple(row for _, _, row in informative),
        given=tuple(given.get(term, _NO_DOCS) for term in kept) if given else (),
        names=tuple(names),
    )


def gate_candidates(
    evidence: QueryEvidence,
    docs: Sequence[int],
    scores: Sequence[float],
    settings: RelevanceGate,
    *,
    noise: float | Callable[[], float] = 0.0,
    lexical: Sequence[float] | None = None,
    phrase: Sequence[bool] | None = None,
    limit: int | None = None,
) -> Gated:
    """Which of the ranked candidates (snapshot positions ``docs``, best first, with their
    ``scores``) deserve the context; see the module docstring.

    ``lexical`` are the BM25 parts of the scores (default: the scores), compared with the
    snapshot's ``noise`` level (or a function computing it, called only when a candidate's
    verdict depends on it: a whole-index pass on a delta index); ``phrase`` marks
    exact/alias phrase hits. Only the first
    ``limit`` candidates can be kept (all are measured).
    """
    positions = np.asarray(docs, dtype=np.int64)
    size = positions.shape[0]
    coverage, count = evidence.coverage(positions)
    bm25 = np.asarray(scores if lexical is None else lexical, dtype=np.float64)
    hits = np.zeros(size, dtype=bool) if phrase is None else np.asarray(phrase, dtype=bool)
    full = coverage >= settings.min_coverage
    open_ = ~full & (coverage >= settings.partial_coverage)
    if evidence.names:  # an entry that ignores the named subject: full coverage only
        open_ &= evidence.about(positions)
    many = hits | (count >= settings.many_terms)
    terms = count >= settings.min_terms
    if callable(noise):  # only a candidate whose verdict the noise level decides needs it
        noise = noise() if bool((open_ & terms & ~many).any()) else math.inf
    partial = open_ & ((terms & (bm25 >= noise)) | many)
    head = size if limit is None else min(limit, size)
    passing = [n for n in range(head) if full[n] or partial[n]]
    if passing:
        best = max(float(scores[n]) for n in passing)
        passing = [n for n in passing if float(scores[n]) >= settings.score_ratio * best]
    return Gated(
        kept=tuple(passing),
        coverage=tuple(round(float(value), 6) for value in coverage),
        matched_terms=tuple(int(value) for value in count),
        partial=tuple(bool(value) for value in partial),
        evidence=evidence,
    )
