"""Reranking: a second look at the fused top N, bounded in time, never breaking a turn.

A :class:`Reranker` scores candidates (only eligible ones ever reach it) and returns
one score per candidate. :func:`apply_reranker` runs it on the top ``top_n`` fused
results in a worker thread: if it raises, returns a wrong number of scores or
non-finite ones, or takes longer than ``timeout_s``, the fused order is kept and the
report says why (a timed-out reranker is left to finish in its thread; its answer is
ignored). Reranked candidates are ordered by their new score (ties: fused order) and
stay ahead of the rest, which keep their fused order.

Rerankers: :class:`NoopReranker`; :class:`EmbeddingReranker`, seed 002's blend of
``0.7 x`` the candidate's min-max normalized fused score and ``0.3 x`` the cosine of its
vector (from the vector index when attached, else embedded, cache it with
:class:`~groundwire.embed.cache.CachedEmbedder`) with the query's; and
:class:`CallableReranker` for any ``fn(query, texts) -> scores`` — a cross-encoder, for
example. No cross-encoder model installs offline here, so none is bundled: wrap one with
``CallableReranker(lambda q, texts: model.predict([(q, t) for t in texts]))``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from groundwire.config import RERANK_COSINE_WEIGHT, RERANK_ORIGINAL_WEIGHT
from groundwire.embed.base import Embedder, Matrix, check_embedder
from groundwire.errors import ConfigError

__all__ = [
    "CallableReranker",
    "EmbeddingReranker",
    "NoopReranker",
    "RerankCandidate",
    "RerankReport",
    "Reranker",
    "apply_reranker",
]

RerankStatus = Literal["applied", "timeout", "error"]


@dataclass(frozen=True, slots=True)
class RerankCandidate:
    """One candidate a reranker sees: id, text, fused score, its vector and that vector's
    model (when a vector index is attached)."""

    id: str
    text: str
    score: float
    vector: Matrix | None = None
    model_id: str | None = None


@dataclass(frozen=True, slots=True)
class RerankReport:
    """What reranking did: ``status``, the ``reason`` when the fused order was kept."""

    reranker: str
    status: RerankStatus
    candidates: int
    duration_ms: float
    reason: str | None = None


@runtime_checkable
class Reranker(Protocol):
    """Scores fused candidates; higher is better. ``name`` appears in reports."""

    @property
    def name(self) -> str:
        """A short name for reports."""
        ...

    def rerank(
        self, query: str, candidates: Sequence[RerankCandidate], query_vector: Matrix | None
    ) -> Sequence[float]:
        """One score per candidate, in candidate order."""
        ...


class NoopReranker:
    """Keeps the fused order (returns the fused scores)."""

    name = "noop"

    def rerank(
        self, query: str, candidates: Sequence[RerankCandidate], query_vector: Matrix | None
    ) -> Sequence[float]:
        """The fused scores, unchanged."""
        return [candidate.score for candidate in candidates]


class EmbeddingReranker:
    """``original_weight x`` normalized fused score ``+ cosine_weight x`` cosine (seed 002).

    Candidate vectors come from the vector index when it is attached and was made by
    the same model; otherwise candidates and query are embedded with ``embedder``.
    """

    name = "embedding"

    def __init__(
        self,
        embedder: Embedder,
        *,
        original_weight: float = RERANK_ORIGINAL_WEIGHT,
        cosine_weight: float = RERANK_COSINE_WEIGHT,
    ) -> None:
        self.embedder = check_embedder(embedder)
        for option, value in (
            ("original_weight", original_weight),
            ("cosine_weight", cosine_weight),
        ):
            if not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ConfigError(f"{option}={value!r} is invalid: expected a number >= 0")
        self.original_weight = float(original_weight)
        self.cosine_weight = float(cosine_weight)

    def rerank(
        self, query: str, candidates: Sequence[RerankCandidate], query_vector: Matrix | None
    ) -> Sequence[float]:
        """Blend each candidate's normalized fused score with its cosine to the query."""
        if not candidates:
            return []
        model_id = self.embedder.model_id
        have = all(c.vector is not None and c.model_id == model_id for c in candidates)
        if have and query_vector is not None:
            vectors = np.stack([c.vector for c in candidates if c.vector is not None])
            query_vec = query_vector
        else:
            vectors = self.embedder.embed_documents([c.text for c in candidates])
            query_vec = self.embedder.embed_query(query)
        cosines = vectors @ query_vec
        fused = [c.score for c in candidates]
        high, low = max(fused), min(fused)
        span = high - low
        return [
            self.original_weight * ((score - low) / span if span > 0 else 1.0)
            + self.cosine_weight * float(cosine)
            for score, cosine in zip(fused, cosines.tolist(), strict=True)
        ]


class CallableReranker:
    """Any ``fn(query, texts) -> scores`` as a reranker (a cross-encoder, an API, ...)."""

    def __init__(self, fn: Callable[[str, list[str]], Sequence[float]], name: str = "callable"):
        if not callable(fn):
            raise ConfigError(f"fn={fn!r} is invalid: expected fn(query, texts) -> scores")
        self.fn = fn
        self.name = name

    def rerank(
        self, query: str, candidates: Sequence[RerankCandidate], query_vector: Matrix | None
    ) -> Sequence[float]:
        """``fn(query, [candidate texts])``."""
        return self.fn(query, [candidate.text for candidate in candidates])


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="groundwire-rerank")
        return _pool


def apply_reranker(
    reranker: Reranker,
    query: str,
    candidates: Sequence[RerankCandidate],
    query_vector: Matrix | None,
    timeout_s: float,
) -> tuple[list[int] | None, list[float] | None, RerankReport]:
    """Run ``reranker`` on ``candidates`` within ``timeout_s``.

    Returns the new order (indexes into ``candidates``) and scores, or ``None, None``
    when the fused order stays, with the report saying why.
    """
    name = str(getattr(reranker, "name", type(reranker).__name__))
    started = time.perf_counter()

    def report(status: RerankStatus, reason: str | None = None) -> RerankReport:
        took = (time.perf_counter() - started) * 1000
        return RerankReport(name, status, len(candidates), round(took, 3), reason)

    if not candidates:
        return [], [], report("applied")
    future: Future[Sequence[float]] = _executor().submit(
        reranker.rerank, query, candidates, query_vector
    )
    try:
        raw = future.result(timeout=timeout_s)
    except FutureTimeout:
        future.cancel()
        return None, None, report("timeout", f"reranker took longer than {timeout_s:g} s")
    except Exception as exc:  # a broken reranker never breaks the turn
        detail = " ".join(str(exc).split())[:200]
        return None, None, report("error", f"reranker raised {type(exc).__name__}: {detail}")
    try:
        scores = [float(value) for value in raw]
    except (TypeError, ValueError):
        return None, None, report("error", "reranker returned non-numeric scores")
    if len(scores) != len(candidates):
        reason = f"reranker returned {len(scores)} scores for {len(candidates)} candidates"
        return None, None, report("error", reason)
    if not all(math.isfinite(score) for score in scores):
        return None, None, report("error", "reranker returned NaN or infinite scores")
    order = sorted(range(len(candidates)), key=lambda n: (-scores[n], n))
    return order, [scores[n] for n in order], report("applied")
