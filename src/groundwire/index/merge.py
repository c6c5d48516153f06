"""The linear passes of an update in the C merge kernel (``_merge.c``): renumber, merge, score.

An update keeps every old posting whose document survives, in order, renumbers its
document and row (both maps ascending), merges in the new entries' postings, and scores
every posting again from the new statistics. :func:`merged_index` does the first part in
one pass over the old rows (:func:`_merge.merge_rows`) and :func:`scores_of` the second
(:func:`_merge.score_rows`), with the numpy builder's very expressions (idf and length
norms are computed by numpy per document frequency and per document, then combined per
posting with the same operations in the same order), so the result is bit for bit the one of
``lexical_builder.rows_of`` — the numpy path used when the kernel is not compiled, and
the reference the tests compare it with. Both cost ``O(postings)`` without a sort and
without numpy's per-posting temporaries (a full-width int64 key, a float64 norm, ... per
posting per field), which dominated the update before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from groundwire.config import PARALLEL_SCORING_POSTINGS, SCORING_THREADS, IndexSettings
from groundwire.index import _merge
from groundwire.index.lexical import (
    TF_OVERFLOW,
    FieldFrequencies,
    FieldStats,
    FloatArray,
    IntArray,
    LexicalIndex,
    idf,
    norm,
)

__all__ = [
    "available",
    "distinct",
    "doc_norms",
    "idf_tables",
    "merged_index",
    "scored",
    "scores_of",
]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]


def distinct(keys: npt.NDArray[np.int64]) -> I64:
    """The distinct values of ``keys``, ascending: ``np.unique`` by a sort (numpy 2.3's
    unique without counts takes a hash table, ~75x slower on an update's keys)."""
    ordered = np.sort(np.asarray(keys, dtype=np.int64))
    if ordered.shape[0] < 2:
        return ordered
    fresh = np.empty(ordered.shape[0], dtype=bool)
    fresh[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=fresh[1:])
    return ordered[fresh]


def available() -> bool:
    """Whether the compiled merge kernel can run (else the numpy path runs)."""
    return _merge.available()


def scores_of(
    settings: IndexSettings,
    weights: FloatArray,
    indptr: I64,
    docs: I32,
    frequencies: Sequence[FieldFrequencies],
    lengths: IntArray,
    stats: FieldStats,
) -> FloatArray:
    """Every posting's score, equal bit for bit to ``rows_of``'s numpy expressions.

    Work follows the postings, not the corpus, where they are fewer (a delta segment's
    after a delete): norms only of the documents holding a posting, idf tables only up
    to the longest row (the kernel refuses a frequency outside its table)."""
    at = None
    if docs.shape[0] < lengths.shape[1]:
        has = np.zeros(lengths.shape[1], dtype=bool)
        has[docs] = True
        at = np.flatnonzero(has)
    norms = doc_norms(settings, lengths, stats, at)
    size = int(np.diff(indptr).max(initial=0)) + 1
    return scored(settings, weights, indptr, docs, frequencies, norms, stats, size)


def doc_norms(
    settings: IndexSettings, lengths: IntArray, stats: FieldStats, at: I64 | None = None
) -> FloatArray:
    """Per document and field (one cache line per document): the length norm, or k1
    times it, exactly as the builder's ``k1 * field_norm``; with ``at``, only those
    documents' (the others' rows stay zero: pages never touched)."""
    b, k1 = float(settings.b), float(settings.k1)
    bm25f = settings.scoring == "bm25f"
    shape = (lengths.shape[1], lengths.shape[0])
    norms = np.empty(shape, dtype=np.float64) if at is None else np.zeros(shape, np.float64)
    for f in range(lengths.shape[0]):
        field = lengths[f] if at is None else np.asarray(lengths[f])[at]
        field_norm = norm(field, float(stats.avg_length[f]), b)
        if at is None:
            norms[:, f] = field_norm if bm25f else k1 * field_norm
        else:
            norms[at, f] = field_norm if bm25f else k1 * field_norm
    return norms


def scored(
    settings: IndexSettings,
    weights: FloatArray,
    indptr: I64,
    docs: I32,
    frequencies: Sequence[FieldFrequencies],
    norms: FloatArray,
    stats: FieldStats,
    size: int | None = None,
) -> FloatArray:
    """:func:`scores_of` with the per-document ``norms`` of :func:`doc_norms` given
    (idf tables of at most ``size`` frequencies: longer than any row);
    document frequencies are counted per row by the kernel, their idf looked up in
    :func:`idf_tables` (memory: one double per possible document frequency, not per row)."""
    bm25f = settings.scoring == "bm25f"
    counts = [(freq.start, freq.counts) for freq in frequencies]
    overflow = [(freq.overflow_at, freq.overflow_tf) for freq in frequencies]
    threads = SCORING_THREADS if docs.shape[0] >= PARALLEL_SCORING_POSTINGS else 1
    return _merge.score_rows(
        indptr,
        docs,
        counts,
        overflow,
        weights,
        norms,
        idf_tables(bm25f, stats, size),
        bm25f,
        float(settings.k1),
        threads,
    )


def idf_tables(bm25f: bool, stats: FieldStats, size: int | None = None) -> list[FloatArray]:
    """The idf of each document frequency ``0..N`` (at most ``size`` of them) with the
    builder's expression (``lexical.idf`` over an array, so each value is the one the
    builder computes for a row of that frequency): for bm25f one table over all ``N``
    documents, else one per field over its ``N_f`` non-empty documents (a row's postings
    holding a term in a field are documents where the field is non-empty)."""
    totals = [stats.n_docs] if bm25f else [int(n) for n in stats.doc_count]
    out = []
    for total in totals:
        length = total + 1 if size is None else min(size, total + 1)
        out.append(idf(float(total), np.arange(length, dtype=np.float64)))
    return out


def merged_index(
    old: LexicalIndex,
    settings: IndexSettings,
    vocabulary: Mapping[str, int],
    pair_keys: I64,
    row_map: I64,
    doc_map: I64,
    added: Sequence[tuple[I64, I64]],
    lengths: IntArray,
    *,
    has_pairs: bool,
) -> LexicalIndex:
    """``old`` with documents renumbered by ``doc_map`` (-1: gone) and rows by ``row_map``,
    merged with ``added`` (per field: distinct sorted keys ``row·N + doc`` in the new
    numbering and their frequencies), scored for ``lengths``. Fields of weight 0 take
    no postings, as in ``rows_of``."""
    fields = old.fields
    n_docs = int(lengths.shape[1])
    n_rows = len(vocabulary) + int(pair_keys.shape[0])
    weights = LexicalIndex.weights_of(settings, fields)
    scale = max(n_docs, 1)
    keys = [k if weights[f] > 0 else k[:0] for f, (k, _) in enumerate(added)]
    joined = distinct(np.concatenate(keys)) if keys else np.empty(0, np.int64)
    new_tf = []
    for f, (k, tf) in enumerate(added):
        column = np.zeros(joined.shape[0], dtype=np.int64)
        if weights[f] > 0 and k.shape[0]:
            column[np.searchsorted(joined, k)] = tf
        new_tf.append(column)
    indptr, docs, counts, moved, new_out = _merge.merge_rows(
        np.ascontiguousarray(old.indptr, dtype=np.int64),
        np.ascontiguousarray(old.docs, dtype=np.int32),
        row_map,
        doc_map.astype(np.int32),
        [(freq.start, np.ascontiguousarray(freq.counts)) for freq in old.frequencies],
        [np.ascontiguousarray(freq.overflow_at, dtype=np.int64) for freq in old.frequencies],
        joined // scale,
        (joined % scale).astype(np.int32),
        new_tf,
        n_rows,
    )
    single_end = int(indptr[len(vocabulary)])
    frequencies = []
    for f, freq in enumerate(old.frequencies):
        pair = has_pairs and f == len(fields) - 1
        start, stop = (single_end, docs.shape[0]) if pair else (0, single_end)
        kept = moved[f] >= 0
        big = new_tf[f] >= TF_OVERFLOW
        at = np.concatenate([moved[f][kept], new_out[big]])
        tf = np.concatenate([np.asarray(freq.overflow_tf, dtype=np.int64)[kept], new_tf[f][big]])
        order = np.argsort(at, kind="stable")
        frequencies.append(FieldFrequencies(start, counts[f][start:stop], at[order], tf[order]))
    stats = FieldStats.of(lengths)
    scores = scores_of(settings, weights, indptr, docs, frequencies, lengths, stats)
    from groundwire.index.lexical_builder import assembled  # which imports this module

    return assembled(
        fields, settings, vocabulary, pair_keys, indptr, docs, scores, frequencies, lengths, stats
    )
