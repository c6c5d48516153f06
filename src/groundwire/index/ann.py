"""An HNSW index (hnswlib, extra ``[ann]``) answering a :class:`VectorIndex`'s large searches.

hnswlib was picked by measurement against faiss-cpu's HNSW and usearch on the same
vectors (docs/HYBRID.md): the fastest build, with recall@10 on par with faiss and above
usearch at equal graph degree and beam.

Filtered searches keep their recall whatever share of the corpus a principal may see:

* when few vectors are visible (fewer than :data:`~groundwire.config.DEFAULT_ANN_THRESHOLD`,
  or less than :data:`~groundwire.config.ANN_EXACT_BELOW_SHARE` of all), the visible rows
  are scanned exactly — a graph walk that must skip most nodes loses recall and speed;
* otherwise the graph is searched unfiltered for ``k / share`` (twice over) neighbours,
  the invisible ones dropped, and if fewer than ``k`` remain the visible rows are
  scanned exactly after all. The mask is applied before the top-k either way.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from groundwire.config import (
    ANN_EXACT_BELOW_SHARE,
    DEFAULT_ANN_THRESHOLD,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
)
from groundwire.embed.base import Matrix
from groundwire.errors import MissingExtraError
from groundwire.index.vectors import MaskArray, VectorIndex

__all__ = ["HnswIndex"]


def _hnswlib() -> Any:
    try:
        import hnswlib
    except ImportError as exc:
        raise MissingExtraError("hnswlib", "ann", "the HNSW vector index") from exc
    return hnswlib


class HnswIndex:
    """An HNSW graph over a vector index's rows (inner product of unit vectors = cosine).

    Build with :meth:`build`, then ``vectors.with_ann(hnsw)``. Deterministic for a given
    input (fixed random seed, one build thread).
    """

    def __init__(self, vectors: VectorIndex, graph: Any, ef_search: int) -> None:
        self.vectors = vectors
        self._graph = graph
        self._ef_search = ef_search
        self._lock = threading.Lock()  # set_ef and knn_query share the graph's state

    @classmethod
    def build(
        cls,
        vectors: VectorIndex,
        *,
        m: int = HNSW_M,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        ef_search: int = HNSW_EF_SEARCH,
    ) -> HnswIndex:
        """Insert every vector (float32) into a new graph."""
        hnswlib = _hnswlib()
        n = len(vectors)
        graph = hnswlib.Index(space="ip", dim=vectors.dimensions)
        graph.init_index(
            max_elements=max(n, 1), M=m, ef_construction=ef_construction, random_seed=100
        )
        if n:
            graph.add_items(vectors.matrix(), np.arange(n), num_threads=1)
        return cls(vectors, graph, ef_search)

    def search(
        self, query: Matrix, k: int, allowed: MaskArray | None
    ) -> tuple[list[int], list[float]]:
        """Up to ``k`` (position, cosine) pairs among ``allowed``, best first (see module)."""
        n = len(self.vectors)
        visible = n if allowed is None else int(np.count_nonzero(allowed))
        if visible == 0:
            return [], []
        if allowed is not None and (
            visible <= DEFAULT_ANN_THRESHOLD or visible < ANN_EXACT_BELOW_SHARE * n
        ):
            return self.vectors.search(query, k, allowed, exact=True)
        share = visible / n
        wanted = min(n, math.ceil(2 * k / share) if allowed is not None else k)
        with self._lock:
            self._graph.set_ef(max(self._ef_search, wanted))
            labels, distances = self._graph.knn_query(query, k=wanted, num_threads=1)
        docs = labels[0].astype(np.int64)
        scores = 1.0 - distances[0].astype(np.float64)  # hnswlib's ip distance is 1 - dot
        if allowed is not None:
            keep = allowed[docs]
            docs, scores = docs[keep], scores[keep]
            if docs.shape[0] < min(k, visible):
                return self.vectors.search(query, k, allowed, exact=True)
        order = np.lexsort((docs, -scores))[:k]
        return docs[order].tolist(), scores[order].tolist()
