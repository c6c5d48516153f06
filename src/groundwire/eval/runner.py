"""Run a dataset's judged queries through groundwire (or a peer) and score the run."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from groundwire.config import DEFAULT_MAX_QUERY_CHARS, IndexSettings, document_settings
from groundwire.eval.datasets import EvalDataset
from groundwire.eval.metrics import METRICS, Run, evaluate_run
from groundwire.index.knowledge_base import KnowledgeBase

__all__ = [
    "MAX_QUERY_PASSES",
    "MIN_QUERY_SECONDS",
    "RUN_DEPTH",
    "EvalReport",
    "Progress",
    "Searcher",
    "evaluate",
    "groundwire_builder",
    "ratios",
    "report",
    "settings_for",
]

#: Results retrieved per query: recall@100 and MAP@100 need a hundred.
RUN_DEPTH = 100

#: Timed passes over the queries repeat until this many seconds have gone by, and the
#: median pass rate is reported: one pass over a few dozen queries takes milliseconds,
#: too short to time on its own.
MIN_QUERY_SECONDS = 1.0
#: At most this many timed passes, however fast they are.
MAX_QUERY_PASSES = 25

#: ``progress(stage, advance)``: stage is "index" (documents) or "query" (queries).
Progress = Callable[[str, int], None]
#: Query text → ranked document ids, best first.
Searcher = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class EvalReport:
    """One system's scores and speed on one dataset."""

    system: str
    metrics: dict[str, float]
    queries: int
    documents: int
    index_seconds: float
    queries_per_second: float
    run: Run = field(repr=False, default_factory=dict)
    #: Extra reported values of dense and hybrid runs (mode, model, embedding times).
    details: dict[str, float | int | str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Exactly the reported keys, as ``groundwire eval --json`` prints them."""
        return {
            **{name: round(self.metrics[name], 6) for name in METRICS},
            "queries": self.queries,
            "documents": self.documents,
            "index_seconds": round(self.index_seconds, 4),
            "queries_per_second": round(self.queries_per_second, 1),
            **self.details,
        }


def report(
    system: str,
    dataset: EvalDataset,
    build: Callable[[], tuple[Searcher, int]],
    progress: Progress | None = None,
) -> EvalReport:
    """Time ``build()`` once, then its searcher on every judged query, one at a time; score.

    ``build`` returns the searcher and the number of documents it indexed. The first
    pass over the queries gives the run that is scored; passes repeat (the same queries,
    in the same order) until :data:`MIN_QUERY_SECONDS` have gone by, at most
    :data:`MAX_QUERY_PASSES`, and queries/second is the median pass rate. Query time
    includes analysing the query and returning the ids.
    """
    started = time.perf_counter()
    search, documents = build()
    index_seconds = time.perf_counter() - started
    queries = list(dataset.queries.items())
    run: dict[str, list[str]] = {}
    started = time.perf_counter()
    for qid, text in queries:
        run[qid] = search(text)
        if progress is not None:
            progress("query", 1)
    passes = [time.perf_counter() - started]
    while sum(passes) < MIN_QUERY_SECONDS and len(passes) < MAX_QUERY_PASSES and queries:
        started = time.perf_counter()
        for _, text in queries:
            search(text)
        passes.append(time.perf_counter() - started)
    elapsed = statistics.median(passes)
    return EvalReport(
        system=system,
        metrics=evaluate_run(run, dataset.qrels),
        queries=len(queries),
        documents=documents,
        index_seconds=index_seconds,
        queries_per_second=len(queries) / elapsed if elapsed > 0 else math.inf,
        run=run,
    )


def settings_for(dataset: EvalDataset) -> IndexSettings:
    """The settings groundwire indexes a dataset with by default.

    Plain documents get :func:`~groundwire.config.document_settings`; a knowledge
    base gets the entry defaults, exactly as ``groundwire search`` builds it.
    """
    return IndexSettings() if dataset.kind == "kb" else document_settings()


def groundwire_builder(
    dataset: EvalDataset,
    settings: IndexSettings | None = None,
    *,
    progress: Progress | None = None,
) -> Callable[[], tuple[Searcher, int]]:
    """A ``build()`` for :func:`report`: index the dataset, return a top-100 searcher.

    ``settings`` default to :func:`settings_for` the dataset. Entries of a knowledge
    base keep their exact/alias boosts, as in ``groundwire search``.
    """
    chosen = settings if settings is not None else settings_for(dataset)

    def index_progress(count: int) -> None:
        if progress is not None:
            progress("index", count)

    def build() -> tuple[Searcher, int]:
        if dataset.documents:
            kb = KnowledgeBase.from_documents(dataset.documents, chosen, progress=index_progress)
        else:
            kb = KnowledgeBase.from_sources(dataset.sources, chosen)
            index_progress(len(kb))
        # Only the order is scored: the ids-only search skips building explanations.
        search = kb.search_ids
        # Some collections use whole passages as queries: never refuse one for length.
        longest = max((len(text) for text in dataset.queries.values()), default=0)
        limit = max(DEFAULT_MAX_QUERY_CHARS, longest)

        def searcher(text: str) -> list[str]:
            return search(text, RUN_DEPTH, max_query_chars=limit)[0]

        return searcher, len(kb)

    return build


def evaluate(
    dataset: EvalDataset,
    settings: IndexSettings | None = None,
    *,
    progress: Progress | None = None,
) -> EvalReport:
    """Index the dataset with groundwire, run every judged query (top 100) and score it.

    ``settings`` default to :func:`settings_for` the dataset.
    """
    build = groundwire_builder(dataset, settings, progress=progress)
    return report("groundwire", dataset, build, progress)


def ratios(ours: EvalReport, peer: EvalReport) -> dict[str, float | None]:
    """``ours / peer`` for every metric and queries/second (None where the peer has 0)."""
    pairs = {name: (ours.metrics[name], peer.metrics[name]) for name in METRICS}
    pairs["queries_per_second"] = (ours.queries_per_second, peer.queries_per_second)
    return {
        name: round(mine / theirs, 4) if theirs > 0 and math.isfinite(mine / theirs) else None
        for name, (mine, theirs) in pairs.items()
    }
