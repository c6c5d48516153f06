"""Retrieval channels: each ranks the eligible entries its own way, with its own scores.

* **lexical**: BM25 (BM25F for documents) of the query terms, the precomputed rows;
* **phrase**: entries whose id, title or a reviewed alias occurs as a phrase in the query;
  score = the exact boost, plus the alias boost (ties: BM25, then position);
* **dense**: cosine similarity of the query's embedding with each entry's vector.

Every channel takes the eligibility mask and applies it *before* its top-k: an
ineligible entry never appears in, nor takes a slot of, any channel's list.

Fusion (:func:`fuse`) makes one ranked list of several channels' lists, with a
per-channel breakdown:

* ``rrf`` (reciprocal rank fusion, Cormack et al. 2009): a hit's score is the sum over
  the channels that returned it of ``weight / (k + rank)``, rank counted from 1; only
  ranks matter, so channels with incomparable scores (BM25, cosine) combine safely.
* ``weighted`` (the default): the sum of ``weight x normalized score`` over the union of
  the channels' lists. Every hit of the union gets every channel's score (BM25 and
  cosine are computed for hits the channel did not return; a phrase channel scores 0
  for entries no phrase names), and each channel's scores are min-max normalized over
  the union (best 1, worst 0; all equal maps to 1). Alternatives: ``tmm`` (from the
  channel's lowest possible score), ``zscore`` and ``dbsf`` (Qdrant's distribution-based
  fusion: mean +- 3 sd to [0, 1]), both by the mean and deviation of the channel's own
  list, and ``list`` (min-max over the channel's own list, what it did not list 0: as
  Weaviate's relative score fusion); the phrase channel, a flag, is always scaled from 0.
  Min-max was chosen on CACM and the handbook over these and RRF
  (``benchmarks/bench_fusion.py``, docs/HYBRID.md).

Weights: the lexical channel ``1 - dense_weight``, the dense channel ``dense_weight``,
the phrase channel ``phrase_weight``. Ties break on position (entry id, code point).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.config import HybridSettings
from groundwire.embed.base import Matrix
from groundwire.index import _fusion
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import MaskArray
from groundwire.index.vectors import VectorIndex
from groundwire.model import ChannelScore

__all__ = [
    "CHANNELS",
    "ChannelList",
    "FusedHit",
    "Scorer",
    "channel_weights",
    "dense_channel",
    "dense_hits",
    "fuse",
    "lexical_channel",
    "phrase_channel",
]

#: The channels fusion knows, in breakdown order.
CHANNELS: tuple[str, ...] = ("lexical", "phrase", "dense")

Positions = npt.NDArray[np.int64]
Values = npt.NDArray[np.float64]
_NO_DOCS: Positions = np.empty(0, dtype=np.int64)
_NO_VALUES: Values = np.empty(0, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class ChannelList:
    """One channel's ranked list: internal positions and raw scores, best first.

    Given as sequences or arrays; held as int64 and float64 arrays.
    """

    name: str
    docs: Positions
    scores: Values

    def __post_init__(self) -> None:
        object.__setattr__(self, "docs", np.asarray(self.docs, dtype=np.int64).reshape(-1))
        object.__setattr__(self, "scores", np.asarray(self.scores, dtype=np.float64).reshape(-1))
        if self.docs.shape != self.scores.shape:
            raise ValueError(f"channel {self.name!r}: docs and scores differ in length")

    def __len__(self) -> int:
        return int(self.docs.shape[0])

    @classmethod
    def of(
        cls,
        name: str,
        docs: Sequence[int] | npt.NDArray[np.integer[Any]],
        scores: Sequence[float] | npt.NDArray[np.floating[Any]],
    ) -> ChannelList:
        """A list from any sequences or arrays of positions and scores."""
        return cls(name, np.asarray(docs, dtype=np.int64), np.asarray(scores, dtype=np.float64))


def _empty(name: str) -> ChannelList:
    return ChannelList(name, _NO_DOCS, _NO_VALUES)


def lexical_channel(
    kb: KnowledgeBase, lexical_ids: Sequence[int], mask: MaskArray | None, depth: int
) -> ChannelList:
    """The BM25 top ``depth`` of the query's term ids among eligible entries."""
    if not lexical_ids:
        return _empty("lexical")
    ranking = kb.rank(
        lexical_ids, (), lexical_k=depth, limit=depth, mask=mask, exact_boost=0, alias_boost=0
    )
    return ChannelList.of("lexical", ranking.docs, ranking.lexical)


def phrase_channel(
    kb: KnowledgeBase,
    terms: Sequence[str],
    lexical_ids: Sequence[int],
    mask: MaskArray | None,
    exact_boost: float,
    alias_boost: float,
) -> ChannelList:
    """Eligible entries named by a query phrase: exact (id/title) and alias matches."""
    if exact_boost <= 0 and alias_boost <= 0:
        return _empty("phrase")
    exact, alias = kb.phrase_matches(terms)
    found = {
        doc: (exact_boost if doc in exact else 0.0) + (alias_boost if doc in alias else 0.0)
        for doc in exact | alias
        if mask is None or mask[doc]
    }
    found = {doc: score for doc, score in found.items() if score > 0}
    if not found:
        return _empty("phrase")
    bm25 = {doc: kb.bm25.score_of_ids(lexical_ids, doc) for doc in found}
    order = sorted(found, key=lambda doc: (-found[doc], -bm25[doc], doc))
    return ChannelList.of("phrase", order, [found[doc] for doc in order])


def dense_channel(
    vectors: VectorIndex, query: Matrix, mask: MaskArray | None, depth: int
) -> ChannelList:
    """The ``depth`` eligible entries most similar to the query vector."""
    docs, scores = vectors.search(query, depth, mask)
    return ChannelList.of("dense", docs, scores)


# --- fusion -----------------------------------------------------------------------------------
class _Fused:
    """Every channel's part for every union position (arrays), shared by the hits."""

    __slots__ = ("names", "parts")

    def __init__(self) -> None:
        self.names: list[str] = []
        # per channel: rank (0: not listed), raw score, normalized, contribution, shown
        self.parts: list[tuple[Positions, Values, Values, Values, MaskArray | None]] = []

    def add(
        self,
        name: str,
        ranks: Positions,
        raw: Values,
        norm: Values,
        contribution: Values,
        shown: MaskArray | None = None,
    ) -> None:
        """A channel's arrays; ``shown`` (default: listed, or a non-zero score) says which
        union positions name the channel in their breakdown."""
        self.names.append(name)
        self.parts.append((ranks, raw, norm, contribution, shown))

    def parts_of(self, at: int) -> dict[str, ChannelScore]:
        """The breakdown of union position ``at``."""
        out: dict[str, ChannelScore] = {}
        for name, (ranks, raw, norm, added, shown) in zip(self.names, self.parts, strict=True):
            rank, score = int(ranks[at]), float(raw[at])
            if (rank > 0 or score != 0.0) if shown is None else bool(shown[at]):
                out[name] = ChannelScore(rank, score, float(norm[at]), float(added[at]))
        return out


class FusedHit:
    """One fused result: internal position, fused score and each channel's part.

    ``channels`` is computed when first read (most hits of a list never are).
    """

    __slots__ = ("_at", "_channels", "_fused", "doc", "score")

    def __init__(
        self,
        doc: int,
        score: float,
        channels: Mapping[str, ChannelScore] | None = None,
        fused: _Fused | None = None,
        at: int = 0,
    ) -> None:
        self.doc, self.score = doc, score
        self._channels = channels
        self._fused, self._at = fused, at

    @property
    def channels(self) -> Mapping[str, ChannelScore]:
        """Each channel's rank, raw score, normalized score and contribution."""
        parts = self._channels
        if parts is None:
            parts = {} if self._fused is None else self._fused.parts_of(self._at)
            self._channels = parts
        return parts

    def with_score(self, score: float) -> FusedHit:
        """This hit with another score (a reranker's), its breakdown unchanged."""
        return FusedHit(self.doc, score, self.channels)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FusedHit):
            return NotImplemented
        mine = (self.doc, self.score, dict(self.channels))
        return mine == (other.doc, other.score, dict(other.channels))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FusedHit(doc={self.doc!r}, score={self.score!r}, channels={dict(self.channels)!r})"


def channel_weights(settings: HybridSettings) -> dict[str, float]:
    """Each channel's weight under ``settings``."""
    dense = float(settings.dense_weight)
    return {"lexical": 1.0 - dense, "dense": dense, "phrase": float(settings.phrase_weight)}


#: Scores a channel gives any positions (an int64 array; for fusion to complete the
#: union's scores), as a sequence or array of the same length.
Scorer = Callable[[Positions], Sequence[float] | Values]


#: The lowest score each channel can give (theoretical min-max): BM25 and phrase boosts
#: are never negative, a cosine is at least -1.
FLOORS: dict[str, float] = {"lexical": 0.0, "phrase": 0.0, "dense": -1.0}


def _normalized(values: Values, floor: float | None = None) -> Values:
    """Min-max (``floor`` None): best 1, worst 0, all equal 1. Theoretical min-max: from
    ``floor`` (0) to the best (1); all at the floor maps to 0."""
    high = float(values.max())
    low = float(values.min()) if floor is None else floor
    if high == low:
        return np.ones_like(values) if floor is None else np.zeros_like(values)
    return (values - low) / (high - low)


def _standardized(values: Values, listed: Values, method: str) -> Values:
    """``values`` scaled by the channel's own list ``listed``: ``zscore`` (x - mean) / sd;
    ``dbsf`` (x - (mean - 3 sd)) / 6 sd clipped to [0, 1]; ``list`` min-max over the list,
    clipped (what it did not list scores 0). A list without spread maps its score and
    above to 1, anything below to 0."""
    mean, deviation = float(listed.mean()), float(listed.std())
    if deviation == 0.0 or not np.isfinite(deviation):
        return (values >= mean).astype(np.float64)
    if method == "zscore":
        return (values - mean) / deviation
    if method == "list":
        low, high = float(listed.min()), float(listed.max())
        return np.clip((values - low) / (high - low), 0.0, 1.0)
    return np.clip((values - (mean - 3.0 * deviation)) / (6.0 * deviation), 0.0, 1.0)


def _channel_normalized(name: str, raw: Values, listed: Values, method: str) -> Values:
    """One channel's scores over the union under ``method`` (see the module docstring)."""
    if method == "minmax":
        return _normalized(raw)
    if method == "tmm" or name == "phrase":  # phrase boosts: a flag, scaled from 0
        return _normalized(raw, FLOORS.get(name, 0.0))
    return _standardized(raw, listed, method)


def _hits(fused: _Fused, union: Positions, totals: Values, limit: int | None) -> list[FusedHit]:
    order = np.lexsort((union, -totals))  # fused score descending, then position
    if limit is not None:
        order = order[:limit]
    docs, scores = union[order].tolist(), totals[order].tolist()
    return [
        FusedHit(doc, score, None, fused, at)
        for doc, score, at in zip(docs, scores, order.tolist(), strict=True)
    ]


def fuse(
    lists: Sequence[ChannelList],
    settings: HybridSettings,
    limit: int | None = None,
    scorers: Mapping[str, Scorer] | None = None,
) -> list[FusedHit]:
    """The channels' lists fused as ``settings.fusion`` says, best first, up to ``limit``.

    For ``weighted`` fusion, ``scorers`` give a channel's score for union positions it
    did not return (rank 0 in the breakdown); without one such positions score 0. Each
    hit's breakdown is computed when it is first read.
    """
    weights = channel_weights(settings)
    lists = [channel for channel in lists if len(channel)]  # an empty channel adds nothing
    if not lists:
        return []
    native = _fuse_native(lists, settings, weights, limit, scorers or {})
    if native is not None:
        return native
    union = np.unique(np.concatenate([channel.docs for channel in lists]))
    totals = np.zeros(union.shape[0], dtype=np.float64)
    fused = _Fused()
    for channel in lists:
        weight = weights.get(channel.name, 1.0)
        at = np.searchsorted(union, channel.docs)
        ranks = np.zeros(union.shape[0], dtype=np.int64)
        ranks[at] = np.arange(1, len(channel) + 1)
        raw = np.zeros(union.shape[0], dtype=np.float64)
        raw[at] = channel.scores
        if settings.fusion == "rrf":
            added = np.zeros(union.shape[0], dtype=np.float64)
            added[at] = weight / (settings.rrf_k + ranks[at])
            fused.add(channel.name, ranks, raw, np.zeros_like(raw), added, ranks > 0)
        else:
            scorer = (scorers or {}).get(channel.name)
            missing = np.flatnonzero(ranks == 0)
            if scorer is not None and missing.shape[0]:
                raw[missing] = np.asarray(scorer(union[missing]), dtype=np.float64)
            norm = _channel_normalized(channel.name, raw, channel.scores, settings.normalization)
            added = weight * norm
            fused.add(channel.name, ranks, raw, norm, added)
        totals += added  # channels in list order, as a per-hit running sum would add them
    return _hits(fused, union, totals, limit)


def _kinds(lists: Sequence[ChannelList], settings: HybridSettings) -> list[int] | None:
    """Each channel's kind in the fusion kernel, or None when ``settings`` ask for a
    normalization it does not compute (z-score, dbsf, list, or a method it does not know)."""
    if settings.fusion == "rrf":
        return [_fusion.RRF] * len(lists)
    if settings.fusion != "weighted" or settings.normalization not in ("minmax", "tmm"):
        return None
    if settings.normalization == "minmax":
        return [_fusion.MINMAX] * len(lists)
    return [_fusion.FLOOR] * len(lists)


def _fuse_native(
    lists: Sequence[ChannelList],
    settings: HybridSettings,
    weights: Mapping[str, float],
    limit: int | None,
    scorers: Mapping[str, Scorer],
) -> list[FusedHit] | None:
    """:func:`fuse` by the fusion kernel (same scores bit for bit), or None when it is
    unavailable or does not compute ``settings``' normalization (numpy answers)."""
    kinds = _kinds(lists, settings)
    if kinds is None or not _fusion.available():
        return None

    def fill(c: int, docs: Positions) -> Sequence[float] | Values | None:
        scorer = scorers.get(lists[c].name)
        return None if scorer is None else scorer(docs)

    done = _fusion.fuse_lists(
        [channel.docs for channel in lists],
        [channel.scores for channel in lists],
        kinds,
        [weights.get(channel.name, 1.0) for channel in lists],
        [FLOORS.get(channel.name, 0.0) for channel in lists],
        int(settings.rrf_k),
        limit,
        fill,
    )
    if done is None:
        return None
    fused = _Fused()
    for c, channel in enumerate(lists):
        ranks = done.ranks[c]
        shown = ranks > 0 if settings.fusion == "rrf" else None
        fused.add(channel.name, ranks, done.raw[c], done.norm[c], done.added[c], shown)
    order = done.order
    docs, scores = done.union[order].tolist(), done.totals[order].tolist()
    return [
        FusedHit(doc, score, None, fused, at)
        for doc, score, at in zip(docs, scores, order.tolist(), strict=True)
    ]


def dense_hits(channel: ChannelList) -> list[FusedHit]:
    """The dense list alone as results: the cosine is the score (nothing to fuse)."""
    if not len(channel):
        return []
    fused = _Fused()
    ranks = np.arange(1, len(channel) + 1)
    scores = channel.scores
    fused.add("dense", ranks, scores, _normalized(scores), scores)
    return [
        FusedHit(doc, score, None, fused, at)
        for at, (doc, score) in enumerate(zip(channel.docs.tolist(), scores.tolist(), strict=True))
    ]
