"""Dense and hybrid evaluation runs, and fitting the fusion weight on judged queries.

:func:`evaluate_mode` indexes a dataset, embeds its documents (through a
:class:`~groundwire.embed.cache.CachedEmbedder`, so a second run embeds nothing) and
its queries *before* the timed passes, so queries/second measures ranking alone; the
embedding times are reported separately (``embed_seconds`` for documents,
``query_embed_ms`` per query).

:func:`fit_fusion` picks the dense weight that maximizes mean nDCG@10 over a grid, with
2-fold cross-validation: queries (sorted by id) alternate between two folds, each fold is
scored with the weight fitted on the other, and only those held-out scores are reported.
The weight fitted on all queries is returned too, to be used on *another* dataset.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from groundwire.config import (
    DEFAULT_MAX_QUERY_CHARS,
    HybridSettings,
    IndexSettings,
)
from groundwire.embed.base import Embedder, Matrix
from groundwire.eval.datasets import EvalDataset
from groundwire.eval.metrics import evaluate_run, per_query
from groundwire.eval.runner import (
    RUN_DEPTH,
    EvalReport,
    Progress,
    Searcher,
    report,
    settings_for,
)
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.vectors import VectorIndex
from groundwire.retrieve.hybrid import search_channels

__all__ = ["FIT_GRID", "FusionFit", "evaluate_mode", "fit_fusion", "prepare"]

#: Dense weights tried by :func:`fit_fusion`: 0 (lexical only) to 1 (dense only).
FIT_GRID: tuple[float, ...] = tuple(round(step * 0.05, 2) for step in range(21))


@dataclass(frozen=True, slots=True)
class Prepared:
    """A dataset indexed and embedded: knowledge base, vectors, query vectors, timings."""

    kb: KnowledgeBase
    vectors: VectorIndex
    queries: dict[str, Matrix]
    index_seconds: float
    embed_seconds: float
    query_embed_ms: float


def prepare(
    dataset: EvalDataset,
    embedder: Embedder,
    settings: IndexSettings | None = None,
    progress: Progress | None = None,
) -> Prepared:
    """Index ``dataset``, embed its documents and every query text."""
    chosen = settings if settings is not None else settings_for(dataset)
    started = time.perf_counter()
    if dataset.documents:
        kb = KnowledgeBase.from_documents(
            dataset.documents,
            chosen,
            progress=None if progress is None else (lambda count: progress("index", count)),
        )
    else:
        kb = KnowledgeBase.from_sources(dataset.sources, chosen)
    indexed = time.perf_counter()
    vectors = VectorIndex.build(kb, embedder)
    embedded = time.perf_counter()
    texts = list(dict.fromkeys(dataset.queries.values()))
    queries = {text: embedder.embed_query(text) for text in texts}
    per_query_ms = (time.perf_counter() - embedded) * 1000 / max(1, len(texts))
    return Prepared(kb, vectors, queries, indexed - started, embedded - indexed, per_query_ms)


def _searcher(prepared: Prepared, hybrid: HybridSettings, longest: int) -> Searcher:
    kb, vectors, queries = prepared.kb, prepared.vectors, prepared.queries
    limit = max(DEFAULT_MAX_QUERY_CHARS, longest)

    def search(text: str) -> list[str]:
        hits, _ = search_channels(
            kb,
            text,
            RUN_DEPTH,
            hybrid,
            vectors=vectors,
            query_vector=queries[text],
            max_query_chars=limit,
        )
        return [kb.entry(hit.doc).id for hit in hits]

    return search


def evaluate_mode(
    dataset: EvalDataset,
    embedder: Embedder,
    hybrid: HybridSettings,
    settings: IndexSettings | None = None,
    *,
    progress: Progress | None = None,
    prepared: Prepared | None = None,
) -> EvalReport:
    """Run every judged query in ``hybrid.mode`` (top 100) and score it (see module)."""
    ready = prepared if prepared is not None else prepare(dataset, embedder, settings, progress)
    longest = max((len(text) for text in dataset.queries.values()), default=0)

    def build() -> tuple[Searcher, int]:
        return _searcher(ready, hybrid, longest), len(ready.kb)

    result = report("groundwire", dataset, build, progress)
    details: dict[str, float | int | str] = {
        "mode": hybrid.mode,
        "model": embedder.model_id,
        "embed_seconds": round(ready.embed_seconds, 3),
        "query_embed_ms": round(ready.query_embed_ms, 3),
    }
    if hybrid.mode == "hybrid":
        details["fusion"] = hybrid.fusion
        details["dense_weight"] = hybrid.dense_weight
    return replace(result, index_seconds=ready.index_seconds, details=details)


@dataclass(frozen=True, slots=True)
class FusionFit:
    """The result of :func:`fit_fusion`.

    ``weight``: fitted on all queries (use it on another dataset). ``fold_weights``: the
    weight fitted on each fold's complement. ``held_out``: metrics of the run in which
    every query was ranked with the weight fitted on the other fold — the only score to
    report for this dataset.
    """

    fusion: str
    weight: float
    fold_weights: tuple[float, float]
    held_out: dict[str, float]
    grid: tuple[float, ...]


def _best(scores: Mapping[float, float]) -> float:
    """The weight with the highest score; ties: nearest the default 0.5, then smaller."""
    return min(scores, key=lambda w: (-scores[w], abs(w - 0.5), w))


def fit_fusion(
    dataset: EvalDataset,
    embedder: Embedder,
    hybrid: HybridSettings,
    settings: IndexSettings | None = None,
    *,
    grid: tuple[float, ...] = FIT_GRID,
    prepared: Prepared | None = None,
    progress: Callable[[int], None] | None = None,
) -> FusionFit:
    """Fit ``dense_weight`` for ``hybrid.fusion`` by 2-fold cross-validation (see module)."""
    ready = prepared if prepared is not None else prepare(dataset, embedder, settings)
    longest = max((len(text) for text in dataset.queries.values()), default=0)
    ids = sorted(dataset.queries)
    folds = (ids[0::2], ids[1::2])
    runs: dict[float, dict[str, list[str]]] = {}
    ndcg: dict[float, dict[str, float]] = {}
    for weight in grid:
        search = _searcher(ready, replace(hybrid, mode="hybrid", dense_weight=weight), longest)
        run = {qid: search(dataset.queries[qid]) for qid in ids}
        runs[weight] = run
        ndcg[weight] = {qid: m["ndcg@10"] for qid, m in per_query(run, dataset.qrels).items()}
        if progress is not None:
            progress(1)

    def fitted(qids: list[str]) -> float:
        return _best({w: statistics.fmean(ndcg[w].get(q, 0.0) for q in qids) for w in grid})

    fold_weights = (fitted(folds[1]), fitted(folds[0]))  # each fold: fitted on the other
    held_run = {qid: runs[fold_weights[n]][qid] for n, fold in enumerate(folds) for qid in fold}
    return FusionFit(
        hybrid.fusion, fitted(ids), fold_weights, evaluate_run(held_run, dataset.qrels), grid
    )
