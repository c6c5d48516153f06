"""Ranking quality (and speed) of groundwire vs bm25s, tantivy and rank-bm25, side by side.

Measures, in one process, on each dataset given (default: SciFact and CACM from
``../shared/datasets``, and the example handbook with ``examples/handbook-eval``):

* nDCG@10, recall@100, MRR@10 and MAP@100 (``groundwire.eval.metrics``, trec_eval
  definitions) over the judged queries, top 100 per query;
* index build seconds (one build) and queries/second (the median of ``--repeat``
  passes over the queries, one query at a time, analysis included, ids returned);
* the ratio of groundwire's nDCG@10 and q/s to each peer's.

Systems, all given the same text and, where they allow it, the same stop words as
groundwire's analyzer for the dataset (``groundwire.eval.runner.settings_for``):

* groundwire: ``groundwire eval``'s path (document defaults, or entry defaults for a
  knowledge base);
* bm25s: ``groundwire eval --compare``'s path (Lucene BM25, k1 1.5, b 0.75, Tokenizer
  ids, ``n_threads=0``), and the same with ``n_threads=1`` for the record;
* tantivy: one ``text`` field (title + text, as bm25s sees it) analysed with tantivy's
  simple tokenizer, remove_long(40), lowercase, groundwire's stop words and the English
  stemmer; BM25 k1 1.2, b 0.75 (fixed by tantivy);
* rank-bm25: ``BM25Okapi(k1=1.5, b=0.75)`` over bm25s-style tokens (``\\w\\w+``,
  lowercase, the same stop words, PyStemmer English). Pure Python: slow, timed anyway.

``--ablation`` instead prints nDCG@10 of groundwire settings variants (the rows of the
ablation table in docs/BENCHMARKS.md that public settings can express) on each
BEIR dataset.

Needs the ``bench`` extra (``pip install -e '.[bench]'``); a missing peer is skipped.
Run from the repository root: ``.venv/bin/python benchmarks/bench_quality.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import Stemmer

from groundwire import AnalyzerConfig, IndexSettings
from groundwire.config import document_settings
from groundwire.eval import EvalDataset, load_dataset
from groundwire.eval.metrics import METRICS, evaluate_run
from groundwire.eval.peers import bm25s_builder, peer_corpus
from groundwire.eval.runner import RUN_DEPTH, Searcher, groundwire_builder, settings_for
from groundwire.text.stopwords import resolve_stopwords

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = [
    REPO.parent / "shared" / "datasets" / "scifact",
    REPO.parent / "shared" / "datasets" / "cacm",
    REPO / "examples" / "handbook",
]
Builder = Callable[[], tuple[Searcher, int]]


@dataclasses.dataclass
class Row:
    """One system's measures on one dataset."""

    system: str
    metrics: dict[str, float]
    documents: int
    index_seconds: float
    qps: float


def measure(system: str, dataset: EvalDataset, build: Builder, repeat: int) -> Row:
    """Build once (timed), run every judged query ``repeat`` times; median q/s."""
    started = time.perf_counter()
    search, documents = build()
    index_seconds = time.perf_counter() - started
    queries = list(dataset.queries.items())
    run: dict[str, list[str]] = {}
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        run = {qid: search(text) for qid, text in queries}
        rates.append(len(queries) / (time.perf_counter() - started))
    return Row(
        system, evaluate_run(run, dataset.qrels), documents, index_seconds, statistics.median(rates)
    )


# -- peers beyond bm25s --------------------------------------------------------------------
_WORD = re.compile(r"(?u)\b\w\w+\b")
_QUERY_SYNTAX = re.compile(r"[^\w\s]+|_")


def _stopwords(dataset: EvalDataset) -> list[str]:
    config = settings_for(dataset).analyzer
    return sorted(resolve_stopwords(config.stopwords, config.language))


def tantivy_builder(dataset: EvalDataset) -> Builder:
    """tantivy, one text field, groundwire's stop words, English stemmer, in memory."""
    import tantivy

    stop = _stopwords(dataset)

    def build() -> tuple[Searcher, int]:
        ids, texts = peer_corpus(dataset)
        analyzer = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.custom_stopword(stop))
            .filter(tantivy.Filter.stemmer("english"))
            .build()
        )
        schema = (
            tantivy.SchemaBuilder()
            .add_text_field("id", stored=True, tokenizer_name="raw")
            .add_text_field("text", tokenizer_name="en_groundwire_stop")
            .build()
        )
        index = tantivy.Index(schema)
        index.register_tokenizer("en_groundwire_stop", analyzer)
        writer = index.writer(256 * 2**20, 1)
        for doc_id, text in zip(ids, texts, strict=True):
            writer.add_document(tantivy.Document(id=doc_id, text=text))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        depth = min(RUN_DEPTH, len(ids))

        def search(text: str) -> list[str]:
            # Punctuation is query syntax to tantivy's parser; lowercase defuses AND/OR/NOT.
            clean = _QUERY_SYNTAX.sub(" ", text).lower()
            if not clean.strip():
                return []
            try:
                query = index.parse_query(clean, ["text"])
            except ValueError:
                return []
            hits = searcher.search(query, depth, count=False).hits
            return [searcher.doc(address)["id"][0] for _, address in hits]

        return search, len(ids)

    return build


def rank_bm25_builder(dataset: EvalDataset) -> Builder:
    """rank-bm25 BM25Okapi over bm25s-style tokens with groundwire's stop words."""
    import numpy as np
    from rank_bm25 import BM25Okapi

    stop = frozenset(_stopwords(dataset))
    stem = Stemmer.Stemmer("english").stemWords

    def tokens(text: str) -> list[str]:
        return list(stem([w for w in _WORD.findall(text.lower()) if w not in stop]))

    def build() -> tuple[Searcher, int]:
        ids, texts = peer_corpus(dataset)
        model = BM25Okapi([tokens(text) for text in texts], k1=1.5, b=0.75)
        depth = min(RUN_DEPTH, len(ids))

        def search(text: str) -> list[str]:
            terms = tokens(text)
            if not terms:
                return []
            scores = model.get_scores(terms)
            order = np.lexsort((np.arange(len(ids)), -scores))[:depth]
            return [ids[i] for i in order if scores[i] > 0]

        return search, len(ids)

    return build


# -- ablation ------------------------------------------------------------------------------
def ablation_settings() -> dict[str, IndexSettings]:
    """Settings variants public options can express (docs/BENCHMARKS.md ablation)."""
    lucene = AnalyzerConfig(stopwords="lucene")
    extended = AnalyzerConfig(stopwords="extended")
    final = document_settings()
    flat = {"title": 1.0, "body": 1.0}
    return {
        "per-field sum, title 1, body 1, Lucene stop": IndexSettings(flat, analyzer=lucene),
        "BM25F title 1 body 1, Lucene stop": IndexSettings(flat, scoring="bm25f", analyzer=lucene),
        "BM25F title 2, Lucene stop": IndexSettings(
            {"title": 2.0, "body": 1.0}, scoring="bm25f", analyzer=lucene
        ),
        "BM25F title 3, k1 2.0, Lucene stop": IndexSettings(
            {"title": 3.0, "body": 1.0}, k1=2.0, scoring="bm25f", analyzer=lucene
        ),
        "BM25F title 2, extended stop": IndexSettings(
            {"title": 2.0, "body": 1.0}, scoring="bm25f", analyzer=extended
        ),
        "final without pairs (title 3, extended)": IndexSettings(
            {"title": 3.0, "body": 1.0}, scoring="bm25f", analyzer=extended
        ),
        "final with Lucene stop": dataclasses.replace(final, analyzer=lucene),
        "final, possessives kept": dataclasses.replace(
            final, analyzer=AnalyzerConfig(stopwords="extended", strip_possessives=False)
        ),
        "final, hyphenated joined": dataclasses.replace(
            final, analyzer=AnalyzerConfig(stopwords="extended", join_hyphenated=True)
        ),
        "final, numbers dropped": dataclasses.replace(
            final, analyzer=AnalyzerConfig(stopwords="extended", keep_numbers=False)
        ),
        "final (document defaults)": final,
    }


# -- output --------------------------------------------------------------------------------
def environment() -> str:
    """Versions, CPU count and the git state of the source measured."""
    parts = [f"Python {platform.python_version()}"]
    for name in ("groundwire", "numpy", "bm25s", "tantivy", "rank-bm25", "PyStemmer"):
        try:
            parts.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{name} (not installed)")
    parts.append(f"nproc {os.cpu_count()}")

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--", "src")
    state = f"groundwire at {git('rev-parse', '--short=10', 'HEAD') or 'unknown commit'}"
    state += f", src/ modified: {len(dirty.splitlines())} file(s)" if dirty else ", src/ clean"
    return ", ".join(parts) + "\n" + state


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    return "\n".join(lines)


def _ratio(mine: float, theirs: float) -> str:
    return "-" if theirs <= 0 or not math.isfinite(mine / theirs) else f"{mine / theirs:.3f}x"


def compare(dataset: EvalDataset, repeat: int, skip: set[str]) -> None:
    """Every available system on one dataset, printed as one Markdown table."""
    builders: list[tuple[str, Callable[[], Builder]]] = [
        ("groundwire", lambda: groundwire_builder(dataset)),
        ("bm25s (n_threads=0)", lambda: bm25s_builder(dataset, threads=0)),
        ("bm25s (n_threads=1)", lambda: bm25s_builder(dataset, threads=1)),
        ("tantivy (1 field)", lambda: tantivy_builder(dataset)),
        ("rank-bm25 BM25Okapi", lambda: rank_bm25_builder(dataset)),
    ]
    rows: list[Row] = []
    for name, make in builders:
        if any(word in name for word in skip):
            continue
        try:
            build = make()
        except ImportError as exc:
            print(f"  skipped {name}: {exc}", file=sys.stderr)
            continue
        rows.append(measure(name, dataset, build, repeat))
        print(f"  measured {name}", file=sys.stderr)
    ours = rows[0]
    body = [
        [
            row.system,
            *(f"{row.metrics[name]:.4f}" for name in METRICS),
            f"{row.qps:,.0f}",
            f"{row.index_seconds:.2f}",
            _ratio(ours.metrics["ndcg@10"], row.metrics["ndcg@10"]),
            _ratio(ours.qps, row.qps),
        ]
        for row in rows
    ]
    print(
        f"\n{dataset.name}: {len(dataset.queries)} judged queries, {rows[0].documents} "
        f"documents (queries/second: median of {repeat} passes)\n"
    )
    print(
        table(
            [
                *("system", "nDCG@10", "R@100", "MRR@10", "MAP@100", "q/s", "index s"),
                *("gw/peer nDCG", "gw/peer q/s"),
            ],
            body,
        )
    )


def ablation(dataset: EvalDataset) -> None:
    """nDCG@10 (and recall@100) of each settings variant on one BEIR dataset."""
    rows = []
    for name, settings in ablation_settings().items():
        row = measure(name, dataset, groundwire_builder(dataset, settings), 1)
        rows.append([name, f"{row.metrics['ndcg@10']:.4f}", f"{row.metrics['recall@100']:.4f}"])
    print(f"\n{dataset.name} ablation\n")
    print(table(["settings", "nDCG@10", "R@100"], rows))


def main() -> None:
    """Parse arguments, load each dataset, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("datasets", nargs="*", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--repeat", type=int, default=5, help="query passes (median q/s)")
    parser.add_argument("--ablation", action="store_true", help="settings variants instead")
    parser.add_argument(
        "--skip", action="append", default=[], help="skip systems whose name contains this"
    )
    args = parser.parse_args()
    print(environment())
    for path in args.datasets:
        dataset = load_dataset(path)
        if args.ablation:
            if dataset.kind == "beir":
                ablation(dataset)
        else:
            compare(dataset, args.repeat, set(args.skip))


if __name__ == "__main__":
    main()
