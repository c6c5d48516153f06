"""Dense pseudo-relevance feedback: the query vector moved toward the first pass's head.

A hybrid retrieval with ``feedback_docs`` > 0 ranks twice. The first pass fuses the
channels as usual; the top ``feedback_docs`` entries of ``feedback_source`` (the fused
list, or the dense or lexical channel's own list) give a centroid of their vectors, and
the query vector becomes ``q + feedback_weight x centroid``, unit length again (Rocchio
with alpha 1; Rocchio 1971, for dense retrievers Li et al. 2022). The dense channel is
searched again with that vector and fused again with the same lexical and phrase lists.

Only eligible entries are fed back: every first-pass list was cut from the eligible
entries (the mask applies before each channel's top-k), and the second dense search
takes the same mask. The centroid sums the entries' vectors in list order in float64,
so the same inputs give the same vector.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from groundwire.config import HybridSettings
from groundwire.embed.base import Matrix
from groundwire.index.vectors import VectorIndex
from groundwire.retrieve.channels import ChannelList, FusedHit

__all__ = ["feedback_entries", "feedback_vector"]


def feedback_entries(
    settings: HybridSettings, fused: Sequence[FusedHit], lists: Sequence[ChannelList]
) -> list[int]:
    """The positions whose vectors feed back: the first ``feedback_docs`` of the source."""
    count = settings.feedback_docs
    if settings.feedback_source == "fused":
        return [hit.doc for hit in fused[:count]]
    source = next((c for c in lists if c.name == settings.feedback_source), None)
    return [] if source is None else source.docs[:count].tolist()


def feedback_vector(
    vectors: VectorIndex, query: Matrix, docs: Sequence[int], weight: float
) -> Matrix | None:
    """``query + weight x`` the centroid of the vectors at ``docs``, unit length.

    None when there is nothing to move by (no entries, weight 0, a zero or non-finite
    result): the first pass then stands.
    """
    if not docs or weight == 0:
        return None
    rows = np.stack([vectors.vector(doc) for doc in docs]).astype(np.float64)
    moved = np.asarray(query, dtype=np.float64) + float(weight) * rows.mean(axis=0)
    norm = float(np.linalg.norm(moved))
    if norm == 0.0 or not np.isfinite(norm):
        return None
    return np.asarray(moved / norm, dtype=np.float32)
