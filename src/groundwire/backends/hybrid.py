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

import numpy as np
import numpy.typing as npt

from groundwire.backends.protocol import BackendHit, SearchBackend
from groundwire.config import HybridSettings
from groundwire.errors import QueryError
from groundwire.index.knowledge_base import check_k
from groundwire.model import Filter
from groundwire.retrieve.channels import ChannelList, Positions, fuse

__all__ = ["hybrid_search"]


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
    depth = max(settings.channel_depth, k)
    lexical = backend.lexical(query, flt, depth)
    phrase = backend.phrase(query, flt)
    dense = backend.dense(vector, flt, depth)
    ids = sorted({hit.id for hit in (*lexical, *phrase, *dense)})
    if not ids:
        return []
    position = {entry_id: n for n, entry_id in enumerate(ids)}
    bm25 = {hit.id: hit.score for hit in lexical}
    missing = [hit.id for hit in phrase if hit.id not in bm25]
    if missing:
        bm25.update(backend.lexical_scores(query, flt, missing))
    # The phrase channel ranks by boost, then BM25, then id (as the embedded channel does).
    phrase = sorted(phrase, key=lambda hit: (-hit.score, -bm25.get(hit.id, 0.0), hit.id))

    def channel(name: str, hits: list[BackendHit]) -> ChannelList:
        return ChannelList.of(name, [position[h.id] for h in hits], [h.score for h in hits])

    def lexical_scorer(docs: Positions) -> list[float]:
        wanted = [ids[int(doc)] for doc in docs]
        found = backend.lexical_scores(query, flt, wanted)
        return [found.get(entry_id, 0.0) for entry_id in wanted]

    def dense_scorer(docs: Positions) -> list[float]:
        wanted = [ids[int(doc)] for doc in docs]
        found = backend.dense_scores(vector, flt, wanted)
        return [found.get(entry_id, 0.0) for entry_id in wanted]

    fused = fuse(
        [channel("lexical", lexical), channel("phrase", phrase), channel("dense", dense)],
        settings,
        k,
        {"lexical": lexical_scorer, "dense": dense_scorer},
    )
    return [
        BackendHit(ids[hit.doc], hit.score, {n: c.contribution for n, c in hit.channels.items()})
        for hit in fused
    ]
