"""BM25 over a subset of the index: statistics recomputed as if only allowed documents existed.

Used when authorization or eligibility excludes documents, so that an excluded document
changes no score: document counts, per-field document counts and average lengths, and
each query term's document frequencies are recomputed without it, then the index's own
formula (``fields`` or ``bm25f``, bigrams included; see ``index/lexical.py``) is applied
to the postings. With every document allowed the result equals the precomputed rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from groundwire.index.lexical import (
    FieldStats,
    FloatArray,
    IntArray,
    MaskArray,
    idf,
    norm,
)
from groundwire.index.reading import LexicalReader

__all__ = ["restricted_noise", "restricted_scores"]


def _merge_parts(parts: list[tuple[IntArray, FloatArray]]) -> tuple[IntArray, FloatArray]:
    """Sum per-field (docs, values) of one term per document, in field order."""
    if len(parts) == 1:
        return parts[0]
    docs = np.concatenate([d for d, _ in parts])
    values = np.concatenate([v for _, v in parts])
    unique, inverse = np.unique(docs, return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=values, minlength=unique.shape[0])
    return unique, summed.astype(np.float64, copy=False)


def _term_row(
    index: LexicalReader,
    term: int,
    allowed: MaskArray,
    field_docs: IntArray,
    avg: FloatArray,
    n_docs: int,
) -> tuple[IntArray, FloatArray]:
    """One term's scores over allowed documents, with the given statistics."""
    k1, b = index.k1, index.b
    bm25f = index.scoring == "bm25f"
    parts: list[tuple[IntArray, FloatArray]] = []
    for f in range(len(index.fields)):
        weight = index.weights[f]
        if weight == 0.0:
            continue
        docs, tf = index.field_row(f, term)
        keep = allowed[docs]
        docs, tf = docs[keep], tf[keep]
        if docs.shape[0] == 0:
            continue
        # Same expressions, in the same order, as the build (lexical.py): equal to the bit
        # when nothing is excluded.
        norm = 1.0 - b + b * index.lengths[f][docs].astype(np.float64) / avg[f]
        if bm25f:
            parts.append((docs, weight * tf / norm))
        else:
            field_idf = idf(float(field_docs[f]), np.array([docs.shape[0]], np.float64))[0]
            tff = tf.astype(np.float64)
            parts.append((docs, weight * field_idf * tff * (k1 + 1) / (tff + k1 * norm)))
    if not parts:
        return np.empty(0, np.int32), np.empty(0, np.float64)
    docs, values = _merge_parts(parts)
    if bm25f:
        term_idf = idf(float(n_docs), np.array([docs.shape[0]], np.float64))[0]
        values = term_idf * values * (k1 + 1) / (values + k1)
    return docs, values


def restricted_scores(index: LexicalReader, terms: Sequence[str], allowed: MaskArray) -> FloatArray:
    """BM25 scores of ``terms`` as if only ``allowed`` documents had been indexed.

    One score per document (0.0 for excluded and unmatched ones). Statistics (documents,
    per-field document counts and average lengths, document frequencies) are recomputed
    over the allowed documents, then the index's scoring mode is applied to its
    postings. With every document allowed this equals the precomputed scores.
    """
    out = np.zeros(index.doc_count, dtype=np.float64)
    # The index resolves terms (and term pairs, however it encodes them) to row ids.
    term_ids = index.term_ids(terms)
    if not term_ids or not allowed.any():
        return out
    kept = index.lengths[:, allowed]
    field_docs = (kept > 0).sum(axis=1).astype(np.int64)
    totals = kept.sum(axis=1, dtype=np.int64)
    avg = np.divide(
        totals, field_docs, out=np.ones(len(totals), dtype=np.float64), where=field_docs > 0
    )
    n_docs = int(np.count_nonzero(allowed))
    for term, count in term_ids.items():
        docs, values = _term_row(index, term, allowed, field_docs, avg, n_docs)
        for _ in range(count):  # a repeated term counts once per occurrence, as precomputed
            out[docs] += values
    return out


def restricted_noise(index: LexicalReader, allowed: MaskArray, quantile: float) -> float:
    """The relevance gate's noise level (:func:`~groundwire.retrieve.gate.noise_level`: the
    ``quantile`` of the best score each indexed term earns one document) as if only
    ``allowed`` documents had been indexed, so what a request may not see moves no cut.

    One vectorized pass over every field's postings, as the build scores them.
    """
    n_terms = len(index.vocabulary)  # single terms only (term pairs follow them)
    stats = FieldStats.of(index.lengths[:, allowed])
    field_docs, avg = stats.doc_count, stats.avg_length
    k1, b, width = index.k1, index.b, max(index.doc_count, 1)
    rows, row_docs = index.single_term_postings()
    visible = allowed[row_docs]
    keys: list[IntArray] = []
    values: list[FloatArray] = []
    for f in range(len(index.fields)):
        weight = index.weights[f]
        if weight == 0.0:
            continue
        tf_all = index.single_term_frequencies(f)
        keep = visible & (tf_all > 0)
        term_of, docs, tf = rows[keep], row_docs[keep], tf_all[keep].astype(np.float64)
        if not docs.size:
            continue
        length_norm = norm(index.lengths[f][docs], avg[f], b)
        if index.scoring == "bm25f":
            values.append(weight * tf / length_norm)
        else:
            df = np.bincount(term_of, minlength=n_terms).astype(np.float64)
            values.append(
                weight
                * idf(float(field_docs[f]), df)[term_of]
                * tf
                * (k1 + 1)
                / (tf + k1 * length_norm)
            )
        keys.append(term_of * width + docs)
    if not keys or not np.concatenate(keys).size:
        return 0.0
    key = np.concatenate(keys)
    value = np.concatenate(values)
    order = np.argsort(key, kind="stable")
    key, value = key[order], value[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    pair_key, summed = key[starts], np.add.reduceat(value, starts)
    owner = pair_key // width
    if index.scoring == "bm25f":
        n_docs = int(np.count_nonzero(allowed))
        df = np.bincount(owner, minlength=n_terms).astype(np.float64)
        summed = idf(float(n_docs), df)[owner] * summed * (k1 + 1) / (summed + k1)
    term_starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    best = np.maximum.reduceat(summed, term_starts)
    at = int(quantile * (best.shape[0] - 1))  # the lower of the two nearest ranks
    return float(np.partition(best, at)[at])
