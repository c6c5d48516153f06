"""One query's scores over a snapshot's documents, and their top k.

:class:`QueryScores` is what :meth:`LexicalIndex.score <groundwire.index.lexical.
LexicalIndex.score>` returns: a dense array (one score per document) or sparse ascending
documents with their scores; ``top`` selects the best k, ties broken by position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["NO_DOCS", "NO_SCORES", "QueryScores"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.integer[Any]]
MaskArray = npt.NDArray[np.bool_]

# Rarest query terms whose documents bound the k-th best score (see QueryScores.top).
_PROBES = 2
NO_DOCS: IntArray = np.empty(0, dtype=np.int32)
NO_SCORES: FloatArray = np.empty(0, dtype=np.float64)
_NO_DOCS, _NO_SCORES = NO_DOCS, NO_SCORES


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

    def scores_at(self, docs: IntArray) -> FloatArray:
        """Scores of positions ``docs`` (int64), 0.0 where they did not match."""
        if self.dense is not None:
            return np.asarray(self.dense[docs], dtype=np.float64)
        found = np.zeros(docs.shape[0], dtype=np.float64)
        if self.docs.shape[0]:
            at = np.minimum(np.searchsorted(self.docs, docs), self.docs.shape[0] - 1)
            hit = self.docs[at] == docs
            found[hit] = self.values[at[hit]]
        return found

    def matched(self, mask: MaskArray | None = None) -> tuple[IntArray, FloatArray]:
        """Every matching document (ascending) and its score, optionally within ``mask``."""
        if self.dense is not None:
            hit = np.flatnonzero(self.dense > 0.0 if mask is None else (self.dense > 0.0) & mask)
            return hit.astype(np.int32), self.dense[hit]
        if mask is None:
            return self.docs, self.values
        keep = mask[self.docs]
        return self.docs[keep], self.values[keep]

    def top(self, k: int, mask: MaskArray | None = None) -> tuple[IntArray, FloatArray]:
        """The k best documents within ``mask``: score descending, ties by doc ascending."""
        if k <= 0:
            return _NO_DOCS, _NO_SCORES
        if self.dense is None:
            chosen, values = self.matched(mask)
        else:
            scores = self.dense if mask is None else np.where(mask, self.dense, 0.0)
            # Any subset's k-th best score bounds the overall k-th best from below, so
            # only documents at or above it need sorting. The rarest terms' documents
            # usually score highest, which makes the bound tight.
            bound, probed = 0.0, 0
            for probe in self.probes:
                size = probe.shape[0]
                if size >= k:
                    kth = float(np.partition(scores[probe], size - k)[size - k])
                    bound, probed = max(bound, kth), probed + 1
                    if probed == _PROBES:
                        break
            chosen = np.flatnonzero(scores >= bound) if bound > 0.0 else np.flatnonzero(scores)
            values = scores[chosen]
        count = values.shape[0]
        if count > 4 * k:
            # Keep every tie at the k-th score so the doc-number tie-break decides.
            kth = float(np.partition(values, count - k)[count - k])
            keep = values >= kth
            chosen, values = chosen[keep], values[keep]
        # chosen ascends by document, so a stable sort on score breaks ties by document.
        order = np.argsort(-values, kind="stable")[:k]
        return chosen[order], values[order]
