"""Field-aware BM25 with scores precomputed at build time.

Building turns per-field term frequencies into one sparse row per term (document
ids ascending, float64 scores). A query gathers its rows, sums them with
``bincount`` and selects the top k with ``argpartition``, sorting only the winners.

Two scoring modes:

``fields`` (default for entries)
    The sum over fields of ``w_f · idf_f(t) · tf·(k1+1) / (tf + k1·(1−b+b·dl/avgdl_f))``
    with Lucene's per-field statistics: ``idf_f = ln(1 + (N_f − df_f + ½)/(df_f + ½))``,
    ``N_f`` the documents whose field ``f`` is non-empty and ``avgdl_f`` their mean length.
``bm25f``
    Robertson/Zaragoza BM25F: field frequencies are normalised and weighted first,
    ``tf̃ = Σ_f w_f·tf_f / (1−b+b·dl_f/avgdl_f)``, then saturated once:
    ``idf(t) · tf̃·(k1+1)/(tf̃+k1)`` with ``idf`` over all ``N`` documents.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from groundwire.config import IndexSettings
from groundwire.errors import KnowledgeIndexError

__all__ = ["LexicalIndex", "LexicalIndexBuilder", "QueryScores"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.integer[Any]]
MaskArray = npt.NDArray[np.bool_]

# Rarest query terms whose documents bound the k-th best score (see QueryScores.top).
_PROBES = 2
# Below this many documents a dense accumulator is always cheapest.
_DENSE_DOCS = 262_144


_NO_DOCS: IntArray = np.empty(0, dtype=np.int32)
_NO_SCORES: FloatArray = np.empty(0, dtype=np.float64)


class QueryScores:
    """One query's scores: ``dense`` (one per document) or sparse ascending ``docs``/``values``.

    Only documents with a positive score matched; BM25 here never scores a match at 0.
    ``probe`` holds the documents of the query's rarest term, used to bound top-k.
    """

    __slots__ = ("dense", "doc_count", "docs", "probes", "values")

    def __init__(
        self,
        doc_count: int,
        dense: FloatArray | None,
        docs: IntArray = _NO_DOCS,
        values: FloatArray = _NO_SCORES,
        probes: Sequence[IntArray] = (),
    ) -> None:
        self.doc_count = doc_count
        self.dense = dense
        self.docs = docs
        self.values = values
        self.probes = probes

    def score_of(self, doc: int) -> float:
        """Score of one document, 0.0 when it did not match."""
        if self.dense is not None:
            return float(self.dense[doc])
        at = int(np.searchsorted(self.docs, doc))
        if at < self.docs.shape[0] and int(self.docs[at]) == doc:
            return float(self.values[at])
        return 0.0

    def matched(self, mask: MaskArray | None = None) -> tuple[IntArray, FloatArray]:
        """Every matching document (ascending) and its score, optionally within ``mask``."""
        if self.dense is not None:
            hit = np.flatnonzero(self.dense > 0.0 if mask is None else (self.dense > 0.0) & mask)
            return hit.astype(np.int32), self.dense[hit]
        if mask is None:
            return self.docs, self.values
        keep = mask[self.docs]
        return self.docs[keep], self.values[keep]

    def top(
        self, k: int, mask: MaskArray | None = None, excluded: IntArray | None = None
    ) -> tuple[IntArray, FloatArray]:
        """The k best documents within ``mask``: score descending, ties by doc ascending.

        ``excluded`` (the positions ``mask`` rejects, if the caller has them) saves a pass.
        """
        if k <= 0:
            return _NO_DOCS, _NO_SCORES
        if self.dense is None:
            chosen, values = self.matched(mask)
        else:
            scores = self.dense
            if mask is not None:
                rejected = np.flatnonzero(~mask) if excluded is None else excluded
                if rejected.shape[0]:
                    scores = scores.copy()
                    scores[rejected] = 0.0
            # Any subset's k-th best score bounds the overall k-th best from below, so
            # only documents at or above it need sorting. The rarest terms' documents
            # usually score highest, which makes the bound tight.
            bound, probed = 0.0, 0
            for probe in self.probes:
                if probe.shape[0] >= k:
                    sample = scores[probe]
                    kth = float(np.partition(sample, sample.shape[0] - k)[sample.shape[0] - k])
                    bound, probed = max(bound, kth), probed + 1
                    if probed == _PROBES:
                        break
            chosen = np.flatnonzero(scores >= bound if bound > 0.0 else scores > 0.0)
            values = scores[chosen]
        if chosen.shape[0] > k:
            # Keep every tie at the k-th score so the doc-number tie-break decides.
            kth = float(np.partition(values, values.shape[0] - k)[values.shape[0] - k])
            keep = values >= kth
            chosen, values = chosen[keep], values[keep]
        order = np.lexsort((chosen, -values))[:k]
        return chosen[order].astype(np.int32), values[order]


class LexicalIndexBuilder:
    """Collects documents field by field; :meth:`build` freezes them into a LexicalIndex."""

    def __init__(self, fields: Sequence[str]) -> None:
        if not fields or len(set(fields)) != len(fields):
            raise KnowledgeIndexError(f"fields must be distinct and non-empty, got {fields!r}")
        self.fields = tuple(fields)
        self.vocabulary: dict[str, int] = {}
        self._docs = [array("i") for _ in self.fields]
        self._terms = [array("i") for _ in self.fields]
        self._lengths = [array("i") for _ in self.fields]
        self.doc_count = 0

    def add(self, field_terms: Sequence[Sequence[str]]) -> int:
        """Add one document given its terms per field (in ``fields`` order); returns its number."""
        if len(field_terms) != len(self.fields):
            raise KnowledgeIndexError(
                f"expected terms for {len(self.fields)} fields {self.fields}, "
                f"got {len(field_terms)}"
            )
        doc = self.doc_count
        vocab = self.vocabulary
        setdefault = vocab.setdefault
        for f, terms in enumerate(field_terms):
            ids = [setdefault(term, len(vocab)) for term in terms]
            self._terms[f].extend(ids)
            self._docs[f].extend([doc] * len(ids))
            self._lengths[f].append(len(ids))
        self.doc_count += 1
        return doc

    def build(self, settings: IndexSettings) -> LexicalIndex:
        """Compute statistics and precomputed scores; the builder may be discarded after."""
        weights = np.array(
            [settings.field_weights.get(name, 0.0) for name in self.fields], dtype=np.float64
        )
        n_docs, n_terms = self.doc_count, len(self.vocabulary)
        postings = [
            _field_postings(np.frombuffer(t, np.int32), np.frombuffer(d, np.int32), n_docs, n_terms)
            for t, d in zip(self._terms, self._docs, strict=True)
        ]
        lengths = np.array(
            [np.frombuffer(ln, np.int32) for ln in self._lengths], dtype=np.int32
        ).reshape(len(self.fields), n_docs)
        stats = _FieldStats.of(lengths)
        rows = _bm25f_rows if settings.scoring == "bm25f" else _fields_rows
        indptr, docs, scores = rows(postings, lengths, stats, weights, settings, n_terms)
        return LexicalIndex(
            fields=self.fields,
            weights=weights,
            k1=float(settings.k1),
            b=float(settings.b),
            scoring=settings.scoring,
            vocabulary=dict(self.vocabulary),
            indptr=indptr,
            docs=docs,
            scores=scores,
            field_postings=tuple(postings),
            lengths=lengths,
            stats=stats,
        )


@dataclass(frozen=True, slots=True)
class _Postings:
    """One field's postings: row ``t`` is ``docs/tf[indptr[t]:indptr[t+1]]``, docs ascending."""

    indptr: npt.NDArray[np.int64]
    docs: IntArray
    tf: IntArray

    def row(self, term: int) -> tuple[IntArray, IntArray]:
        lo, hi = int(self.indptr[term]), int(self.indptr[term + 1])
        return self.docs[lo:hi], self.tf[lo:hi]

    def df(self) -> npt.NDArray[np.int64]:
        return np.diff(self.indptr)


@dataclass(frozen=True, slots=True)
class _FieldStats:
    """Per-field document counts and average lengths (Lucene semantics)."""

    doc_count: npt.NDArray[np.int64]  # documents with a non-empty field, per field
    avg_length: FloatArray  # mean length over those documents, per field
    n_docs: int

    @classmethod
    def of(cls, lengths: IntArray) -> _FieldStats:
        doc_count = (lengths > 0).sum(axis=1).astype(np.int64)
        totals = lengths.sum(axis=1, dtype=np.int64)
        avg = np.divide(
            totals, doc_count, out=np.ones(len(totals), dtype=np.float64), where=doc_count > 0
        )
        return cls(doc_count, avg, int(lengths.shape[1]))


def _field_postings(terms: IntArray, docs: IntArray, n_docs: int, n_terms: int) -> _Postings:
    """Group (term, doc) occurrences into CSR rows with term frequencies."""
    keys = terms.astype(np.int64) * max(n_docs, 1) + docs
    unique, tf = np.unique(keys, return_counts=True)
    term_of = unique // max(n_docs, 1)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(term_of, minlength=n_terms), out=indptr[1:])
    return _Postings(indptr, (unique % max(n_docs, 1)).astype(np.int32), tf.astype(np.int32))


def idf(doc_count: float | FloatArray, df: float | FloatArray) -> FloatArray:
    """Lucene's BM25 idf, always positive: ``ln(1 + (N − df + ½) / (df + ½))``."""
    return np.log1p((np.asarray(doc_count, dtype=np.float64) - df + 0.5) / (np.asarray(df) + 0.5))


def _norm(lengths: IntArray, avg: float, b: float) -> FloatArray:
    return 1.0 - b + b * lengths.astype(np.float64) / avg


def _term_of_postings(indptr: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))


def _merge_rows(
    parts: Iterable[tuple[npt.NDArray[np.int64], IntArray, FloatArray]], n_docs: int, n_terms: int
) -> tuple[npt.NDArray[np.int64], IntArray, FloatArray]:
    """Sum (term, doc, value) triples from several fields into one CSR matrix."""
    collected = list(parts)
    if not collected:
        return np.zeros(n_terms + 1, np.int64), np.empty(0, np.int32), np.empty(0, np.float64)
    keys = np.concatenate([t * max(n_docs, 1) + d for t, d, _ in collected])
    values = np.concatenate([v for _, _, v in collected])
    unique, inverse = np.unique(keys, return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=values, minlength=len(unique)).astype(
        np.float64, copy=False
    )
    term_of = unique // max(n_docs, 1)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(term_of, minlength=n_terms), out=indptr[1:])
    return indptr, (unique % max(n_docs, 1)).astype(np.int32), summed


def _fields_rows(
    postings: Sequence[_Postings],
    lengths: IntArray,
    stats: _FieldStats,
    weights: FloatArray,
    settings: IndexSettings,
    n_terms: int,
) -> tuple[npt.NDArray[np.int64], IntArray, FloatArray]:
    k1, b = float(settings.k1), float(settings.b)

    def parts() -> Iterable[tuple[npt.NDArray[np.int64], IntArray, FloatArray]]:
        for f, post in enumerate(postings):
            if weights[f] == 0.0 or post.docs.size == 0:
                continue
            field_idf = idf(float(stats.doc_count[f]), post.df().astype(np.float64))
            term_of = _term_of_postings(post.indptr)
            tf = post.tf.astype(np.float64)
            norm = _norm(lengths[f][post.docs], float(stats.avg_length[f]), b)
            yield (
                term_of,
                post.docs,
                weights[f] * field_idf[term_of] * tf * (k1 + 1) / (tf + k1 * norm),
            )

    return _merge_rows(parts(), stats.n_docs, n_terms)


def _bm25f_rows(
    postings: Sequence[_Postings],
    lengths: IntArray,
    stats: _FieldStats,
    weights: FloatArray,
    settings: IndexSettings,
    n_terms: int,
) -> tuple[npt.NDArray[np.int64], IntArray, FloatArray]:
    k1, b = float(settings.k1), float(settings.b)

    def parts() -> Iterable[tuple[npt.NDArray[np.int64], IntArray, FloatArray]]:
        for f, post in enumerate(postings):
            if weights[f] == 0.0 or post.docs.size == 0:
                continue
            norm = _norm(lengths[f][post.docs], float(stats.avg_length[f]), b)
            yield _term_of_postings(post.indptr), post.docs, weights[f] * post.tf / norm

    indptr, docs, pseudo_tf = _merge_rows(parts(), stats.n_docs, n_terms)
    df = np.diff(indptr).astype(np.float64)
    term_of = _term_of_postings(indptr)
    scores = idf(float(stats.n_docs), df)[term_of] * pseudo_tf * (k1 + 1) / (pseudo_tf + k1)
    return indptr, docs, scores


@dataclass(frozen=True, slots=True, eq=False)
class LexicalIndex:
    """The immutable, precomputed BM25 index of one snapshot (see the module docstring)."""

    fields: tuple[str, ...]
    weights: FloatArray
    k1: float
    b: float
    scoring: str
    vocabulary: Mapping[str, int]
    indptr: npt.NDArray[np.int64]
    docs: IntArray
    scores: FloatArray
    field_postings: tuple[_Postings, ...]
    lengths: IntArray  # (fields, docs)
    stats: _FieldStats
    _bounds: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Row bounds as Python ints: slicing with them avoids a numpy round trip per term.
        object.__setattr__(self, "_bounds", self.indptr.tolist())

    @property
    def doc_count(self) -> int:
        """Number of documents indexed."""
        return self.stats.n_docs

    def term_ids(self, terms: Iterable[str]) -> Counter[int]:
        """Known term ids of a query with their multiplicities (unknown terms dropped)."""
        get = self.vocabulary.get
        return Counter(tid for tid in map(get, terms) if tid is not None)

    def score(self, terms: Sequence[str]) -> QueryScores:
        """Score every document for ``terms`` (a repeated term counts once per occurrence)."""
        get = self.vocabulary.get
        bounds = self._bounds
        rows = [(bounds[tid], bounds[tid + 1]) for tid in map(get, terms) if tid is not None]
        n = self.doc_count
        if not rows:
            return QueryScores(n, None)
        docs, scores = self.docs, self.scores
        if len(rows) == 1:
            lo, hi = rows[0]
            return QueryScores(n, None, docs[lo:hi], scores[lo:hi])
        doc_parts = [docs[lo:hi] for lo, hi in rows]
        all_docs = np.concatenate(doc_parts)
        all_scores = np.concatenate([scores[lo:hi] for lo, hi in rows])
        if n <= _DENSE_DOCS or all_docs.shape[0] * 8 >= n:
            dense = cast(FloatArray, np.bincount(all_docs, weights=all_scores, minlength=n))
            probes = sorted(doc_parts, key=len)
            return QueryScores(n, dense, probes=probes)
        order = np.argsort(all_docs, kind="stable")
        sorted_docs = all_docs[order]
        starts = np.flatnonzero(np.r_[True, sorted_docs[1:] != sorted_docs[:-1]])
        return QueryScores(n, None, sorted_docs[starts], np.add.reduceat(all_scores[order], starts))

    def explain(self, terms: Iterable[str], doc: int) -> dict[str, float]:
        """Per-field contributions to ``doc``'s score for ``terms``; they sum to the score."""
        query = self.term_ids(terms)
        out = dict.fromkeys(self.fields, 0.0)
        stats, k1, b = self.stats, self.k1, self.b
        for term, count in query.items():
            tfs = np.array([_tf(post, term, doc) for post in self.field_postings], np.float64)
            if not tfs.any():
                continue
            hit = tfs > 0
            # Only fields holding the term contribute; an empty field's norm may be 0.
            norms = np.where(hit, 1.0 - b + b * self.lengths[:, doc] / stats.avg_length, 1.0)
            if self.scoring == "bm25f":
                parts = np.where(hit, self.weights * tfs / norms, 0.0)
                pseudo = float(parts.sum())
                if pseudo <= 0.0:  # the term occurs only in weight-0 fields
                    continue
                row_df = float(self.indptr[term + 1] - self.indptr[term])
                total = float(idf(float(stats.n_docs), row_df)) * pseudo * (k1 + 1) / (pseudo + k1)
                shares = parts / pseudo * total
            else:
                dfs = np.array(
                    [float(p.indptr[term + 1] - p.indptr[term]) for p in self.field_postings]
                )
                field_idf = idf(stats.doc_count.astype(np.float64), dfs)
                saturation = np.where(hit, tfs + k1 * norms, 1.0)
                shares = np.where(hit, self.weights * field_idf * tfs * (k1 + 1) / saturation, 0.0)
            for f, name in enumerate(self.fields):
                out[name] += float(shares[f]) * count
        return out


def _tf(post: _Postings, term: int, doc: int) -> int:
    docs, tf = post.row(term)
    at = int(np.searchsorted(docs, doc))
    return int(tf[at]) if at < docs.shape[0] and int(docs[at]) == doc else 0
