"""The immutable, precomputed BM25 index of one snapshot: the query-time reader.

Every term (and, with a pair field, every indexed pair of adjacent terms) has one score
row: its documents ascending with one precomputed score each (CSR ``indptr``/``docs``/
``scores``). A query gathers its rows, sums them (the C kernel, or ``bincount``) and
selects the top k, sorting only the winners. Each posting also keeps the term's
frequency in every field (:class:`FieldFrequencies`, one byte each), which explains a
score field by field and lets scores be recomputed for other statistics (a subset of
the documents, see ``retrieve/restricted.py``). ``lexical_builder.py`` builds the rows.

Two scoring modes:

``fields`` (default for entries)
    The sum over fields of ``w_f · idf_f(t) · tf·(k1+1) / (tf + k1·(1−b+b·dl/avgdl_f))``
    with Lucene's per-field statistics: ``idf_f = ln(1 + (N_f − df_f + ½)/(df_f + ½))``,
    ``N_f`` the documents whose field ``f`` is non-empty and ``avgdl_f`` their mean length.
``bm25f``
    Robertson/Zaragoza BM25F: field frequencies are normalised and weighted first,
    ``tf̃ = Σ_f w_f·tf_f / (1−b+b·dl_f/avgdl_f)``, then saturated once:
    ``idf(t) · tf̃·(k1+1)/(tf̃+k1)`` with ``idf`` over all ``N`` documents.

Rows: the ``V`` single terms first, then one row per pair (``V + p``). The pairs whose
first term is ``a`` have their second terms in ``pair_seconds[pair_starts[a]:pair_starts
[a + 1]]``, ascending, so pair ``p`` is found by bisection.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from groundwire.config import IndexSettings
from groundwire.errors import IndexFormatError
from groundwire.index import _kernel
from groundwire.index.query_scores import NO_DOCS, NO_SCORES, QueryScores

__all__ = [
    "SKIP",
    "UNKNOWN",
    "FieldFrequencies",
    "FieldStats",
    "LexicalIndex",
    "QueryScores",
    "idf",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.integer[Any]]
MaskArray = npt.NDArray[np.bool_]

#: Query word codes (see LexicalIndex.top_codes): besides a term id, a stop word (no row,
#: no place: its neighbours are adjacent) and a word whose term is not indexed (no row; it
#: breaks the pair of its neighbours).
SKIP = _kernel.SKIP
UNKNOWN = _kernel.UNKNOWN
# Below this many documents a dense accumulator is always cheapest.
_DENSE_DOCS = 262_144
#: A frequency byte of 255 means "255 or more": the exact value is in the overflow table.
TF_OVERFLOW = 255

_NO_DOCS: IntArray = NO_DOCS
_NO_SCORES: FloatArray = NO_SCORES
_NO_STARTS: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
_NO_SECONDS: npt.NDArray[np.int32] = np.empty(0, dtype=np.int32)


def _check_docs(docs: IntArray, n_docs: int) -> None:
    """Refuse document numbers outside ``[0, n_docs)`` before they index anything."""
    if docs.shape[0] and (int(docs.min()) < 0 or int(docs.max()) >= n_docs):
        raise _damaged()


def _damaged() -> IndexFormatError:
    return IndexFormatError(
        "the index holds a document number out of range: its snapshot was damaged "
        "(it was loaded without hashing); load it with verify='full' or rebuild it"
    )


@dataclass(frozen=True, slots=True)
class FieldFrequencies:
    """One field's term frequency at each posting of ``[start, start + len(counts))``.

    ``counts`` holds one byte per posting (0: the term is not in this field); a byte of
    :data:`TF_OVERFLOW` means the exact frequency is ``overflow_tf[i]`` where
    ``overflow_at[i]`` (ascending) is the posting. Postings outside the range have 0.
    """

    start: int
    counts: npt.NDArray[np.uint8]
    overflow_at: npt.NDArray[np.int64]
    overflow_tf: npt.NDArray[np.int64]

    def at(self, posting: int) -> int:
        """The frequency at one posting."""
        j = posting - self.start
        if not 0 <= j < self.counts.shape[0]:
            return 0
        value = int(self.counts[j])
        if value == TF_OVERFLOW:
            at = int(np.searchsorted(self.overflow_at, posting))
            if at < self.overflow_at.shape[0] and int(self.overflow_at[at]) == posting:
                return int(self.overflow_tf[at])
        return value

    def span(self, lo: int, hi: int) -> npt.NDArray[np.int64]:
        """The frequencies at postings ``lo..hi`` (int64, exact)."""
        out = np.zeros(max(hi - lo, 0), dtype=np.int64)
        a, b = max(lo, self.start), min(hi, self.start + self.counts.shape[0])
        if a < b:
            out[a - lo : b - lo] = self.counts[a - self.start : b - self.start]
            if self.overflow_at.shape[0]:
                left, right = np.searchsorted(self.overflow_at, [a, b])
                if right > left:
                    out[self.overflow_at[left:right] - lo] = self.overflow_tf[left:right]
        return out


@dataclass(frozen=True, slots=True)
class FieldStats:
    """Per-field document counts and average lengths (Lucene semantics)."""

    doc_count: npt.NDArray[np.int64]  # documents with a non-empty field, per field
    avg_length: FloatArray  # mean length over those documents, per field
    n_docs: int

    @classmethod
    def of(cls, lengths: IntArray) -> FieldStats:
        doc_count = (lengths > 0).sum(axis=1).astype(np.int64)
        totals = lengths.sum(axis=1, dtype=np.int64)
        avg = np.divide(
            totals, doc_count, out=np.ones(len(totals), dtype=np.float64), where=doc_count > 0
        )
        return cls(doc_count, avg, int(lengths.shape[1]))


def idf(doc_count: float | FloatArray, df: float | FloatArray) -> FloatArray:
    """Lucene's BM25 idf, always positive: ``ln(1 + (N − df + ½) / (df + ½))``."""
    return np.log1p((np.asarray(doc_count, dtype=np.float64) - df + 0.5) / (np.asarray(df) + 0.5))


def norm(lengths: IntArray, avg: float | FloatArray, b: float) -> FloatArray:
    """BM25 length normalisation ``1 − b + b·dl/avgdl`` (the builder's exact expression)."""
    return 1.0 - b + b * lengths.astype(np.float64) / avg


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
    frequencies: tuple[FieldFrequencies, ...]  # one per field
    lengths: IntArray  # (fields, docs)
    stats: FieldStats
    pair_starts: npt.NDArray[np.int64] = field(default_factory=lambda: _NO_STARTS)
    pair_seconds: npt.NDArray[np.int32] = field(default_factory=lambda: _NO_SECONDS)
    _bounds: Sequence[int] = field(init=False, repr=False)
    _pair_starts: Sequence[int] = field(init=False, repr=False)
    _pair_seconds: Sequence[int] = field(init=False, repr=False)
    # The C kernel's view of the arrays, made on first use; False when it cannot read them.
    _native: _kernel.Index | Literal[False] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Row bounds as Python ints: slicing with them avoids a numpy round trip per term.
        # A read-only (memory-mapped) indptr is read through a memoryview instead, which
        # also yields Python ints: a list would cost O(terms) at load and copy pages that
        # processes sharing the mapping should share.
        indptr = self.indptr
        shared = not indptr.flags.writeable and indptr.dtype == np.dtype("=i8")
        bounds = np.ascontiguousarray(indptr).data.cast("B").cast("q")
        object.__setattr__(self, "_bounds", bounds if shared else indptr.tolist())
        starts = np.ascontiguousarray(self.pair_starts, dtype=np.int64)
        seconds = np.ascontiguousarray(self.pair_seconds, dtype=np.int32)
        object.__setattr__(self, "_pair_starts", starts.data.cast("B").cast("q"))
        object.__setattr__(self, "_pair_seconds", seconds.data.cast("B").cast("i"))
        object.__setattr__(self, "_native", None)

    @staticmethod
    def weights_of(settings: IndexSettings, fields: Sequence[str]) -> FloatArray:
        """The weight of each field, in field order (0 for a field the settings omit)."""
        return np.array([settings.field_weights.get(f, 0.0) for f in fields], np.float64)

    @property
    def pair_keys(self) -> npt.NDArray[np.int64]:
        """Every indexed pair as ``first * V + second`` (V single terms), ascending."""
        single = len(self.vocabulary)
        if not self.pair_starts.shape[0]:
            return np.empty(0, dtype=np.int64)
        firsts = np.repeat(np.arange(single, dtype=np.int64), np.diff(self.pair_starts))
        return firsts * single + self.pair_seconds

    @property
    def single_postings(self) -> int:
        """Postings of the single-term rows (the pair rows' postings follow them)."""
        return int(self.indptr[len(self.vocabulary)])

    @property
    def doc_count(self) -> int:
        """Number of documents indexed."""
        return self.stats.n_docs

    def _kernel_index(self) -> _kernel.Index | None:
        """The C kernel's view of this index, or None: no kernel, or arrays it cannot read
        (then the numpy path runs, with identical results)."""
        if not _kernel.available():
            return None
        native = self._native
        if native is None:
            try:
                native = _kernel.Index(
                    self.indptr,
                    cast(_kernel.DocArray, self.docs),
                    self.scores,
                    self.doc_count,
                    len(self.vocabulary),
                    self.pair_starts,
                    self.pair_seconds,
                )
            except (TypeError, ValueError):
                native = False
            object.__setattr__(self, "_native", native)  # a race makes an equal one
        return native or None

    def codes(self, terms: Iterable[str]) -> list[int]:
        """The word codes of analyzed query terms: each term's id, or UNKNOWN."""
        get = self.vocabulary.get
        return [get(term, UNKNOWN) for term in terms]

    def query_ids(self, terms: Sequence[str]) -> list[int]:
        """Term ids of analyzed query terms, one per occurrence, unknown terms dropped,
        followed by the ids of indexed adjacent pairs when the index has a pair field."""
        return self.ids_of_codes(self.codes(terms))

    def ids_of_codes(self, codes: Sequence[int]) -> list[int]:
        """The term ids of a query's word codes: each code's term (codes >= 0, in order),
        then every indexed pair of adjacent terms in order, where SKIP codes take no place
        and UNKNOWN codes break pairs. Raises ValueError for a code not below the number of
        single terms. The C kernel and :meth:`_python_ids` give the same ids."""
        native = self._kernel_index()
        if native is not None:
            return _kernel.resolve(native, codes)
        return self._python_ids(codes)

    def _python_ids(self, codes: Sequence[int]) -> list[int]:
        """:meth:`ids_of_codes` in Python (pairs found by bisection)."""
        single = len(self.vocabulary)
        ids = [code for code in codes if code >= 0]
        if ids and max(ids) >= single:
            raise ValueError(f"word code {max(ids)} is not below the {single} single terms")
        starts = self._pair_starts
        if starts and len(ids) > 1:
            seconds, first = self._pair_seconds, UNKNOWN
            for second in codes:
                if second == SKIP:  # a stop word: its neighbours are adjacent
                    continue
                if first >= 0 and second >= 0:
                    lo, hi = starts[first], starts[first + 1]
                    if lo < hi:
                        at = bisect_left(seconds, second, lo, hi)
                        if at < hi and seconds[at] == second:
                            ids.append(single + at)
                first = second
        return ids

    def term_ids(self, terms: Iterable[str]) -> Counter[int]:
        """Known term ids of query terms (pairs included), with multiplicities."""
        return Counter(self.query_ids(list(terms)))

    def score(self, terms: Sequence[str]) -> QueryScores:
        """Score every document for query terms (see :meth:`query_ids`, :meth:`score_ids`)."""
        return self.score_ids(self.query_ids(terms))

    def score_ids(self, ids: Sequence[int]) -> QueryScores:
        """Score every document for term ids (a repeated id counts once per occurrence)."""
        bounds = self._bounds
        rows = [(bounds[tid], bounds[tid + 1]) for tid in ids]
        n = self.doc_count
        if not rows:
            return QueryScores(n, None)
        docs, scores = self.docs, self.scores
        if len(rows) == 1:
            lo, hi = rows[0]
            _check_docs(docs[lo:hi], n)
            return QueryScores(n, None, docs[lo:hi], scores[lo:hi])
        doc_parts = [docs[lo:hi] for lo, hi in rows]
        all_docs = np.concatenate(doc_parts)
        _check_docs(all_docs, n)
        all_scores = np.concatenate([scores[lo:hi] for lo, hi in rows])
        if n <= _DENSE_DOCS or all_docs.shape[0] * 8 >= n:
            dense = cast(FloatArray, np.bincount(all_docs, weights=all_scores, minlength=n))
            probes = sorted(doc_parts, key=len)
            return QueryScores(n, dense, probes=probes)
        # Few postings over many documents: sum per distinct document, adding in the same
        # (row) order as bincount and the C kernel, so every path gives identical sums.
        unique, inverse = np.unique(all_docs, return_inverse=True)
        summed = np.bincount(inverse.ravel(), weights=all_scores, minlength=unique.shape[0])
        return QueryScores(n, None, unique, cast(FloatArray, summed))

    def top_codes(
        self, codes: Sequence[int], k: int, skip: MaskArray | None = None
    ) -> tuple[list[int], list[float]]:
        """:meth:`top` for a query's word codes (see :meth:`ids_of_codes`): with the C
        kernel, one call from words to results."""
        native = self._native or self._kernel_index()  # made on first use
        if native and _kernel.available():
            try:
                return _kernel.top_codes(native, codes, k, skip)
            except _kernel.BadDocumentError:
                raise _damaged() from None
        return self.top(self._python_ids(codes), k, skip)

    def top(
        self, ids: Sequence[int], k: int, skip: MaskArray | None = None
    ) -> tuple[list[int], list[float]]:
        """The k best documents for term ids, as lists: score descending, then document
        ascending. ``skip`` marks documents that must not be returned (True = skip). Uses
        the C kernel when it was compiled, else numpy; both give identical results."""
        native = self._kernel_index()
        if native is not None:
            try:
                return _kernel.top_rows(native, ids, k, skip)
            except _kernel.BadDocumentError:
                raise _damaged() from None
        docs, values = self._numpy_top(ids, k, skip)
        return docs.tolist(), values.tolist()

    def _numpy_top(
        self, ids: Sequence[int], k: int, skip: MaskArray | None
    ) -> tuple[IntArray, FloatArray]:
        if not ids or k <= 0:
            return _NO_DOCS, _NO_SCORES
        return self.score_ids(ids).top(k, None if skip is None else ~skip)

    def score_of_ids(self, ids: Sequence[int], doc: int) -> float:
        """The score of one document for term ids (0.0 when it does not match)."""
        if not ids:
            return 0.0
        native = self._kernel_index()
        if native is not None:
            return _kernel.rows_score_of(native, ids, doc)
        return self.score_ids(ids).score_of(doc)

    def scores_of_ids(self, ids: Sequence[int], docs: IntArray) -> FloatArray:
        """:meth:`score_of_ids` of each of ``docs`` (int64 positions): one kernel call, or
        one numpy pass over the query's rows (the same sums either way)."""
        positions = np.ascontiguousarray(docs, dtype=np.int64)
        if not ids or not positions.shape[0]:
            return np.zeros(positions.shape[0], dtype=np.float64)
        native = self._kernel_index()
        if native is not None:
            return _kernel.rows_scores(native, ids, positions)
        return self.score_ids(ids).scores_at(positions)

    def explain(self, terms: Iterable[str], doc: int) -> dict[str, float]:
        """Per-field contributions to ``doc``'s score for ``terms``; they sum to the score."""
        return self.explain_ids(self.query_ids(list(terms)), doc)

    def explain_ids(self, ids: Iterable[int], doc: int) -> dict[str, float]:
        """Per-field contributions to ``doc``'s score for term ids; they sum to the score."""
        query = Counter(ids)
        out = dict.fromkeys(self.fields, 0.0)
        stats, k1, b = self.stats, self.k1, self.b
        for term, count in query.items():
            lo, hi = int(self.indptr[term]), int(self.indptr[term + 1])
            row = self.docs[lo:hi]
            at = lo + int(np.searchsorted(row, doc))
            if at >= hi or int(self.docs[at]) != doc:
                continue
            tfs = np.array([f.at(at) for f in self.frequencies], np.float64)
            hit = tfs > 0
            # Only fields holding the term contribute; an empty field's norm may be 0.
            norms = np.where(hit, 1.0 - b + b * self.lengths[:, doc] / stats.avg_length, 1.0)
            if self.scoring == "bm25f":
                parts = np.where(hit, self.weights * tfs / norms, 0.0)
                pseudo = float(parts.sum())
                if pseudo <= 0.0:  # the term occurs only in weight-0 fields
                    continue
                row_idf = float(idf(float(stats.n_docs), float(hi - lo)))
                total = row_idf * pseudo * (k1 + 1) / (pseudo + k1)
                shares = parts / pseudo * total
            else:
                dfs = np.array([float(np.count_nonzero(f.span(lo, hi))) for f in self.frequencies])
                field_idf = idf(stats.doc_count.astype(np.float64), dfs)
                saturation = np.where(hit, tfs + k1 * norms, 1.0)
                shares = np.where(hit, self.weights * field_idf * tfs * (k1 + 1) / saturation, 0.0)
            for f, name in enumerate(self.fields):
                out[name] += float(shares[f]) * count
        return out

    def single_term_postings(self) -> tuple[npt.NDArray[np.int64], IntArray]:
        """Every posting of the single-term rows as its term and its document, in row
        order (IndexFormatError for a damaged document number); the pair rows follow."""
        n_terms = len(self.vocabulary)
        indptr = np.asarray(self.indptr[: n_terms + 1], dtype=np.int64)
        docs = np.asarray(self.docs[: int(indptr[-1])], dtype=np.int64)
        _check_docs(docs, self.doc_count)
        return np.repeat(np.arange(n_terms, dtype=np.int64), np.diff(indptr)), docs

    def single_term_frequencies(self, f: int) -> npt.NDArray[np.int64]:
        """Field ``f``'s frequency at each posting of :meth:`single_term_postings`."""
        return self.frequencies[f].span(0, self.single_postings)

    def term_docs(self, term: int) -> IntArray:
        """The documents (ascending) holding single term ``term`` in any field."""
        return self.docs[self._bounds[term] : self._bounds[term + 1]]

    def best_term_scores(self) -> FloatArray:
        """The best score each single term that any document holds earns on its own, in
        term order (the relevance gate's noise level is a quantile of them)."""
        indptr = np.asarray(self.indptr[: len(self.vocabulary) + 1], dtype=np.int64)
        starts = indptr[:-1][indptr[1:] > indptr[:-1]]
        if not starts.shape[0]:
            return np.empty(0, dtype=np.float64)
        return np.maximum.reduceat(np.asarray(self.scores[: int(indptr[-1])]), starts)

    def field_row(self, f: int, term: int) -> tuple[IntArray, npt.NDArray[np.int64]]:
        """Field ``f`` of row ``term``: the documents holding the term there and its
        frequency in each (IndexFormatError for a damaged document number)."""
        lo, hi = int(self.indptr[term]), int(self.indptr[term + 1])
        docs = self.docs[lo:hi]
        _check_docs(docs, self.doc_count)
        tf = self.frequencies[f].span(lo, hi)
        present = tf > 0
        if bool(present.all()):
            return docs, tf
        return docs[present], tf[present]
