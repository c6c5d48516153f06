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
  the union (best 1, worst 0; all equal maps to 1). Chosen on CACM and the handbook,
  where it beat RRF and list-only normalization (docs/HYBRID.md).

Weights: the lexical channel ``1 - dense_weight``, the dense channel ``dense_weight``,
the phrase channel ``phrase_weight``. Ties break on position (entry id, code point).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from groundwire.config import HybridSettings
from groundwire.embed.base import Matrix
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
    "fuse",
    "lexical_channel",
    "phrase_channel",
]

#: The channels fusion knows, in breakdown order.
CHANNELS: tuple[str, ...] = ("lexical", "phrase", "dense")


@dataclass(frozen=True, slots=True)
class ChannelList:
    """One channel's ranked list: internal positions and raw scores, best first."""

    name: str
    docs: tuple[int, ...]
    scores: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.docs)


def lexical_channel(
    kb: KnowledgeBase, lexical_ids: Sequence[int], mask: MaskArray | None, depth: int
) -> ChannelList:
    """The BM25 top ``depth`` of the query's term ids among eligible entries."""
    if not lexical_ids:
        return ChannelList("lexical", (), ())
    ranking = kb.rank(
        lexical_ids, (), lexical_k=depth, limit=depth, mask=mask, exact_boost=0, alias_boost=0
    )
    return ChannelList("lexical", tuple(ranking.docs), tuple(ranking.lexical))


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
        return ChannelList("phrase", (), ())
    exact, alias = kb.phrase_matches(terms)
    found = {
        doc: (exact_boost if doc in exact else 0.0) + (alias_boost if doc in alias else 0.0)
        for doc in exact | alias
        if mask is None or mask[doc]
    }
    found = {doc: score for doc, score in found.items() if score > 0}
    if not found:
        return ChannelList("phrase", (), ())
    bm25 = {doc: kb.lexical.score_of_ids(lexical_ids, doc) for doc in found}
    order = sorted(found, key=lambda doc: (-found[doc], -bm25[doc], doc))
    return ChannelList("phrase", tuple(order), tuple(found[doc] for doc in order))


def dense_channel(
    vectors: VectorIndex, query: Matrix, mask: MaskArray | None, depth: int
) -> ChannelList:
    """The ``depth`` eligible entries most similar to the query vector."""
    docs, scores = vectors.search(query, depth, mask)
    return ChannelList("dense", tuple(docs), tuple(scores))


# --- fusion -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FusedHit:
    """One fused result: internal position, fused score and each channel's part."""

    doc: int
    score: float
    channels: Mapping[str, ChannelScore]


def channel_weights(settings: HybridSettings) -> dict[str, float]:
    """Each channel's weight under ``settings``."""
    dense = float(settings.dense_weight)
    return {"lexical": 1.0 - dense, "dense": dense, "phrase": float(settings.phrase_weight)}


#: Scores a channel gives any positions (for fusion to complete the union's scores).
Scorer = Callable[[list[int]], list[float]]


def _normalized(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    high, low = max(scores), min(scores)
    if high == low:
        return [1.0] * len(scores)
    return [(score - low) / (high - low) for score in scores]


def fuse(
    lists: Sequence[ChannelList],
    settings: HybridSettings,
    limit: int | None = None,
    scorers: Mapping[str, Scorer] | None = None,
) -> list[FusedHit]:
    """The channels' lists fused as ``settings.fusion`` says, best first, up to ``limit``.

    For ``weighted`` fusion, ``scorers`` give a channel's score for union positions it
    did not return (rank 0 in the breakdown); without one such positions score 0.
    """
    weights = channel_weights(settings)
    lists = [channel for channel in lists if channel.docs]  # an empty channel adds nothing
    parts: dict[int, dict[str, ChannelScore]] = {}
    totals: dict[int, float] = {}
    if settings.fusion == "rrf":
        for channel in lists:
            weight = weights.get(channel.name, 1.0)
            for rank, (doc, score) in enumerate(zip(channel.docs, channel.scores, strict=True), 1):
                added = weight / (settings.rrf_k + rank)
                parts.setdefault(doc, {})[channel.name] = ChannelScore(rank, score, 0.0, added)
                totals[doc] = totals.get(doc, 0.0) + added
    else:
        union = sorted({doc for channel in lists for doc in channel.docs})
        for channel in lists:
            weight = weights.get(channel.name, 1.0)
            ranks = {doc: rank for rank, doc in enumerate(channel.docs, 1)}
            known = dict(zip(channel.docs, channel.scores, strict=True))
            missing = [doc for doc in union if doc not in known]
            scorer = (scorers or {}).get(channel.name)
            filled = scorer(missing) if scorer is not None and missing else [0.0] * len(missing)
            known.update(zip(missing, filled, strict=True))
            values = [known[doc] for doc in union]
            for doc, score, norm in zip(union, values, _normalized(values), strict=True):
                added = weight * norm
                if doc in ranks or score != 0.0:
                    entry = ChannelScore(ranks.get(doc, 0), score, norm, added)
                    parts.setdefault(doc, {})[channel.name] = entry
                totals[doc] = totals.get(doc, 0.0) + added
    order = sorted(totals, key=lambda doc: (-totals[doc], doc))
    if limit is not None:
        order = order[:limit]
    return [FusedHit(doc, totals[doc], parts.get(doc, {})) for doc in order]
