"""Hybrid search over any backend: channels from the backend, fusion client-side.

Each channel (lexical BM25, phrase, dense) comes from the backend under the filter; the
lists are fused by :func:`groundwire.retrieve.channels.fuse`, the embedded pipeline's own
fusion. Weighted fusion scores *every* hit of the union in every channel (the backend's
``lexical_scores``/``dense_scores``) before min-max normalizing over the union. Milvus's
rankers do not compute that: ``WeightedRanker`` normalizes each list alone (and in Milvus
Lite 2.5.1 reverses BM25's order), ``RRFRanker`` has no per-channel weights and cannot
rank a phrase channel. Hence client-side fusion, identical to the embedded one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from groundwire.backends.protocol import BackendHit, SearchBackend
from groundwire.config import HybridSettings
from groundwire.errors import ConfigError, QueryError
from groundwire.index.knowledge_base import check_k
from groundwire.model import ChannelScore, Filter
from groundwire.retrieve.channels import ChannelList, Positions, dense_hits, fuse

__all__ = ["BackendFused", "FusedHits", "fused_channels", "hybrid_search"]


def hybrid_search(
    backend: SearchBackend,
    query: str,
    vector: npt.NDArray[np.float32],
    flt: Filter,
    k: int,
    settings: HybridSettings,
) -> list[BackendHit]:
    """The ``k`` best eligible entries by fused channels; the explanation holds what each
    channel added (``lexical``, ``phrase``, ``dense``)."""
    check_k("k", k)
    if settings.mode != "hybrid":
        raise QueryError(f"hybrid_search needs mode='hybrid', got {settings.mode!r}")
    fused = fused_channels(backend, query, vector, flt, k, settings)
    return [
        BackendHit(hit.id, hit.score, {n: c.contribution for n, c in hit.channels.items()})
        for hit in fused.hits
    ]


@dataclass(frozen=True, slots=True)
class FusedHits:
    """Fused hits by id (best first), with their channel parts, and each list's size."""

    hits: list[BackendFused]
    sizes: dict[str, int]


@dataclass(frozen=True, slots=True)
class BackendFused:
    """One fused hit: id, fused score, each channel's part, the lexical list's hit."""

    id: str
    score: float
    channels: Mapping[str, ChannelScore]
    lexical: BackendHit | None
    phrase: BackendHit | None


def fused_channels(
    backend: SearchBackend,
    query: str,
    vector: npt.NDArray[np.float32],
    flt: Filter,
    k: int,
    settings: HybridSettings,
    *,
    lexical_query: str | None = None,
    boosts: tuple[float, float] | None = None,
    score_union: bool = True,
) -> FusedHits:
    """The channels of ``settings.mode`` (``dense``: the dense list alone; ``hybrid``:
    lexical, phrase, dense) from ``backend``, fused as the embedded pipeline fuses them.

    ``lexical_query`` (default ``query``) is what BM25 searches, e.g. the query plus its
    recent turns; ``boosts`` (exact, alias) re-score the phrase channel with a turn's own
    boosts instead of the backend's. ``score_union=False`` gives union hits the lexical
    list missed no BM25 score (0), as a grounding turn's fusion does (``search_channels``
    scores them).
    """
    if settings.mode == "hybrid" and settings.feedback_docs:
        raise ConfigError(
            "dense pseudo-relevance feedback is not applied over a search backend; use the "
            "embedded index or set HybridSettings(feedback_docs=0)"
        )
    depth = max(settings.channel_depth, k)
    dense = backend.dense(vector, flt, depth)
    if settings.mode == "dense":  # one channel: its cosine is the score
        only = ChannelList.of("dense", list(range(len(dense))), [h.score for h in dense])
        return FusedHits(
            [
                BackendFused(dense[hit.doc].id, hit.score, hit.channels, None, None)
                for hit in dense_hits(only)[:k]
            ],
            {"dense": len(dense)},
        )
    text = query if lexical_query is None else lexical_query
    lexical = backend.lexical(text, flt, depth)
    phrase = backend.phrase(query, flt)
    if boosts is not None:
        phrase = [_boosted(hit, *boosts) for hit in phrase]
        phrase = [hit for hit in phrase if hit.score > 0]
    ids = sorted({hit.id for hit in (*lexical, *phrase, *dense)})
    sizes = {"lexical": len(lexical), "phrase": len(phrase), "dense": len(dense)}
    if not ids:
        return FusedHits([], sizes)
    position = {entry_id: n for n, entry_id in enumerate(ids)}
    bm25 = {hit.id: hit.score for hit in lexical}
    missing = [hit.id for hit in phrase if hit.id not in bm25]
    if missing:
        bm25.update(backend.lexical_scores(text, flt, missing))
    # The phrase channel ranks by boost, then BM25, then id (as the embedded channel does).
    phrase = sorted(phrase, key=lambda hit: (-hit.score, -bm25.get(hit.id, 0.0), hit.id))

    def channel(name: str, hits: list[BackendHit]) -> ChannelList:
        return ChannelList.of(name, [position[h.id] for h in hits], [h.score for h in hits])

    def lexical_scorer(docs: Positions) -> list[float]:
        wanted = [ids[int(doc)] for doc in docs]
        found = backend.lexical_scores(text, flt, wanted)
        return [found.get(entry_id, 0.0) for entry_id in wanted]

    def dense_scorer(docs: Positions) -> list[float]:
        wanted = [ids[int(doc)] for doc in docs]
        found = backend.dense_scores(vector, flt, wanted)
        return [found.get(entry_id, 0.0) for entry_id in wanted]

    fused = fuse(
        [channel("lexical", lexical), channel("phrase", phrase), channel("dense", dense)],
        settings,
        k,
        {"lexical": lexical_scorer, "dense": dense_scorer}
        if score_union
        else {"dense": dense_scorer},
    )
    by_lexical = {hit.id: hit for hit in lexical}
    by_phrase = {hit.id: hit for hit in phrase}
    return FusedHits(
        [
            BackendFused(
                ids[hit.doc],
                hit.score,
                hit.channels,
                by_lexical.get(ids[hit.doc]),
                by_phrase.get(ids[hit.doc]),
            )
            for hit in fused
        ],
        sizes,
    )


def _boosted(hit: BackendHit, exact: float, alias: float) -> BackendHit:
    """A phrase hit scored with these boosts (a boost of 0 turns its kind off)."""
    parts = {
        name: boost
        for name, boost in (("exact", exact), ("alias", alias))
        if boost > 0 and name in hit.explanation
    }
    return BackendHit(hit.id, sum(parts.values()), parts)
