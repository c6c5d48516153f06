"""Run a dataset's judged queries through groundwire (or a peer) and score the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from groundwire.config import IndexSettings
from groundwire.eval.datasets import EvalDataset
from groundwire.eval.metrics import Run, evaluate_run
from groundwire.index.knowledge_base import KnowledgeBase

__all__ = ["EvalReport", "Progress", "evaluate", "report"]

#: Results retrieved per query: recall@100 and MAP@100 need a hundred.
RUN_DEPTH = 100

#: ``progress(stage, advance)``: stage is "index" (documents) or "query" (queries).
Progress = Callable[[str, int], None]


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

    def as_dict(self) -> dict[str, float | int]:
        """Exactly the reported keys, as ``groundwire eval --json`` prints them."""
        return {
            **{name: round(value, 6) for name, value in self.metrics.items()},
            "queries": self.queries,
            "documents": self.documents,
            "index_seconds": round(self.index_seconds, 4),
            "queries_per_second": round(self.queries_per_second, 1),
        }


def report(
    system: str,
    dataset: EvalDataset,
    build: Callable[[], object],
    search: Callable[[object, str], list[str]],
    progress: Progress | None = None,
) -> EvalReport:
    """Time ``build()`` once, then ``search(index, text)`` per judged query, and score."""
    started = time.perf_counter()
    index = build()
    index_seconds = time.perf_counter() - started
    run: dict[str, list[str]] = {}
    started = time.perf_counter()
    for qid, text in dataset.queries.items():
        run[qid] = search(index, text)
        if progress is not None:
            progress("query", 1)
    elapsed = time.perf_counter() - started
    return EvalReport(
        system=system,
        metrics=evaluate_run(run, dataset.qrels),
        queries=len(dataset.queries),
        documents=dataset.size,
        index_seconds=index_seconds,
        queries_per_second=len(run) / elapsed if elapsed > 0 else float("inf"),
        run=run,
    )


def evaluate(
    dataset: EvalDataset,
    settings: IndexSettings | None = None,
    *,
    progress: Progress | None = None,
) -> EvalReport:
    """Index the dataset with groundwire, run every judged query (top 100) and score it."""

    def index_progress(count: int) -> None:
        if progress is not None:
            progress("index", count)

    def build() -> KnowledgeBase:
        if dataset.documents:
            return KnowledgeBase.from_documents(
                dataset.documents, settings, progress=index_progress
            )
        return KnowledgeBase.from_sources(dataset.sources, settings)

    def search(kb: object, text: str) -> list[str]:
        assert isinstance(kb, KnowledgeBase)
        return [hit.id for hit in kb.search(text, RUN_DEPTH)]

    return report("groundwire", dataset, build, search, progress)
