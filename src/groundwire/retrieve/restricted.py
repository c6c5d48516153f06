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

from groundwire.index.lexical import FloatArray, IntArray, LexicalIndex, MaskArray, idf

__all__ = ["restricted_scores"]


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
    index: LexicalIndex,
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
    for f, post in enumerate(index.field_postings):
        weight = index.weights[f]
        if weight == 0.0:
            continue
        docs, tf = post.row(term)
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


def restricted_scores(index: LexicalIndex, terms: Sequence[str], allowed: MaskArray) -> FloatArray:
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
