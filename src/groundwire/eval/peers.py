"""Peers run in the same process on the same data: bm25s (``groundwire eval --compare``).

bm25s is configured as the reference lexical baseline: ``method="lucene"``, k1 1.5,
b 0.75, PyStemmer with groundwire's stemmer language, and groundwire's own stop word
set for the dataset (passed explicitly, so both systems drop exactly the same words).
Each document is one text, ``title + " " + text``; a knowledge base entry is
``title + " " + summary + " " + body`` (active entries only, the ones groundwire can
return). Queries take bm25s' fastest documented single-query path: its ``Tokenizer``
to ids with ``update_vocab=False``, then ``retrieve`` one query at a time with the
numpy top-k and ``n_threads=0`` (bm25s' default: run in the calling thread).
``n_threads=1`` is the same single worker behind a thread pool created per call,
measured 6-20x slower per query (docs/BENCHMARKS.md), so it would flatter
groundwire. bm25s is optional (``pip install 'groundwire[bench]'``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import Stemmer

from groundwire.config import AnalyzerConfig
from groundwire.errors import MissingExtraError, ValidationFailedError
from groundwire.eval.datasets import EvalDataset
from groundwire.eval.runner import RUN_DEPTH, EvalReport, Progress, Searcher, report, settings_for
from groundwire.ingest import normalize_and_validate
from groundwire.text.stopwords import resolve_stopwords

__all__ = [
    "BM25S_B",
    "BM25S_K1",
    "BM25S_METHOD",
    "BM25S_THREADS",
    "bm25s_builder",
    "evaluate_bm25s",
    "peer_corpus",
    "require_bm25s",
]

#: The Lucene BM25 variant, the one Elasticsearch and Pyserini report.
BM25S_METHOD = "lucene"
#: bm25s' own defaults, which are also groundwire's document defaults.
BM25S_K1 = 1.5
BM25S_B = 0.75
#: bm25s' sequential path (its default): one query at a time in the calling thread, as
#: groundwire answers it. ``1`` adds a thread pool per call and is several times slower.
BM25S_THREADS = 0


def require_bm25s() -> Any:
    """The ``bm25s`` module; raises :class:`MissingExtraError` when it is not installed."""
    try:
        import bm25s
    except ImportError as exc:
        raise MissingExtraError("bm25s", "bench", "groundwire eval --compare") from exc
    return bm25s


def peer_corpus(dataset: EvalDataset) -> tuple[list[str], list[str]]:
    """Document ids and the one text per document a single-field peer indexes."""
    if dataset.documents:
        return (
            [doc.id for doc in dataset.documents],
            [f"{doc.title} {doc.text}" for doc in dataset.documents],
        )
    checked = normalize_and_validate(dataset.sources)
    if not checked.ok:
        raise ValidationFailedError(checked.issues)
    active = [entry for entry in checked.entries if entry.status == "active"]
    return (
        [entry.id for entry in active],
        [f"{entry.title} {entry.summary} {entry.body}" for entry in active],
    )


def bm25s_builder(
    dataset: EvalDataset,
    analyzer: AnalyzerConfig | None = None,
    *,
    threads: int = BM25S_THREADS,
    progress: Progress | None = None,
) -> Callable[[], tuple[Searcher, int]]:
    """A ``build()`` for :func:`~groundwire.eval.runner.report`: bm25s, top-100 searcher.

    ``analyzer`` supplies the stop words and stemmer language (default: the analyzer
    groundwire uses for this dataset); ``threads`` is bm25s' ``n_threads``. Raises
    :class:`MissingExtraError` without bm25s.
    """
    bm25s = require_bm25s()
    config = analyzer if analyzer is not None else settings_for(dataset).analyzer
    stopwords = sorted(resolve_stopwords(config.stopwords, config.language))

    def build() -> tuple[Searcher, int]:
        ids, texts = peer_corpus(dataset)
        tokenizer = bm25s.tokenization.Tokenizer(
            stopwords=stopwords,
            stemmer=Stemmer.Stemmer(config.language) if config.stem else None,
        )
        corpus = tokenizer.tokenize(texts, return_as="tuple", show_progress=False)
        retriever = bm25s.BM25(method=BM25S_METHOD, k1=BM25S_K1, b=BM25S_B, backend="numpy")
        retriever.index(corpus, show_progress=False)
        if progress is not None:
            progress("index", len(ids))
        names = np.array(ids, dtype=object)
        depth = min(RUN_DEPTH, len(ids))
        tokenize, retrieve = tokenizer.tokenize, retriever.retrieve

        def search(text: str) -> list[str]:
            query = tokenize([text], update_vocab=False, return_as="ids", show_progress=False)
            found, scores = retrieve(
                query,
                k=depth,
                n_threads=threads,
                show_progress=False,
                backend_selection="numpy",
            )
            # A query with no known term scores every document 0: no match, no result.
            return names[found[0][scores[0] > 0]].tolist()  # type: ignore[no-any-return]

        return search, len(ids)

    return build


def evaluate_bm25s(
    dataset: EvalDataset,
    analyzer: AnalyzerConfig | None = None,
    *,
    progress: Progress | None = None,
) -> EvalReport:
    """Index the dataset with bm25s, run every judged query (top 100) and score it.

    ``analyzer`` supplies the stop words and stemmer language (default: the analyzer
    groundwire uses for this dataset). Raises :class:`MissingExtraError` without bm25s.
    """
    return report("bm25s", dataset, bm25s_builder(dataset, analyzer, progress=progress), progress)
