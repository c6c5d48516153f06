"""Does dense pseudo-relevance feedback earn a default? Fitted on CACM and handbook-eval.

The protocol, fixed (committed) before any SciFact figure of these candidates was computed:

- **Stage:** ``groundwire.retrieve.feedback`` (hybrid mode): the first pass's top ``n``
  entries of a source list give a centroid; the query vector becomes ``q + beta x
  centroid`` (unit length), the dense channel is searched again and fused again.
- **Tuning sets:** CACM (64 judged queries) and ``examples/handbook-eval`` (40).
  **Report-only sets:** SciFact (300) and ``examples/handbook-holdout`` (35).
- **Candidates** (108 cells, plus the current default, feedback off): source ``fused``,
  ``dense`` or ``lexical``; ``n`` 3, 5, 10; ``beta`` 0.25, 0.5, 1, 2; dense weight 0.4,
  0.5, 0.6. Everything else as the defaults (weighted min-max fusion, depth 100, phrase
  boosts on, top 100 as ``groundwire eval DATASET --mode hybrid`` ranks).
- **Criterion:** the mean of the two tuning sets' nDCG@10. Per source the best cell
  (ties: smaller ``n``, smaller ``beta``, weight nearest 0.5). The default turns
  feedback on, with the best source's cell, only if that cell beats the current default
  (feedback off, weight 0.5) by at least 0.002 of the tuning mean; otherwise it stays off.
- **Report:** per source its chosen cell and the current default with CACM, handbook,
  the tuning mean, and, only for those cells, the holdout and SciFact.
- **Extra evidence (not used to choose):** 2-fold cross-validation on SciFact over the
  same 108 cells plus the no-feedback weights 0.05-0.95: queries sorted by id alternate
  between two folds, each fold is ranked with the cell best on the other, and only the
  held-out nDCG@10 is printed (with the same for the no-feedback weights alone).
- **Run:** ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_feedback.py [--data DIR]``
  (vectors from the embedding cache; ``--no-cv`` skips the SciFact cross-validation).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench_fusion import DATA, ROOT, ranked
from groundwire import CachedEmbedder, EmbeddingCache, HybridSettings, create_embedder
from groundwire.eval.datasets import EvalDataset, load_dataset
from groundwire.eval.hybrid import Prepared, prepare
from groundwire.eval.metrics import evaluate_run, per_query

SOURCES = ("fused", "dense", "lexical")
COUNTS = (3, 5, 10)
BETAS = (0.25, 0.5, 1.0, 2.0)
WEIGHTS = (0.4, 0.5, 0.6)
TUNING = ("cacm", "handbook")
MARGIN = 0.002
Cell = tuple[str, int, float, float]  # source ("off": no feedback), n, beta, dense weight
CURRENT: Cell = ("off", 0, 0.0, 0.5)


def settings(cell: Cell) -> HybridSettings:
    """The hybrid settings of one cell (defaults otherwise)."""
    source, count, beta, weight = cell
    base = HybridSettings(mode="hybrid", dense_weight=weight)
    if source == "off":
        return base
    return replace(base, feedback_docs=count, feedback_weight=beta, feedback_source=source)  # type: ignore[arg-type]


def runs(ready: Prepared, dataset: EvalDataset, cell: Cell) -> dict[str, list[str]]:
    """The top-100 run of every query of ``dataset`` under ``cell``."""
    return ranked(ready, dataset, settings(cell))


def loaders(data: Path) -> dict[str, Callable[[], EvalDataset]]:
    """The four datasets of the protocol."""
    handbook = ROOT / "examples" / "handbook"
    holdout = ROOT / "examples" / "handbook-holdout"
    return {
        "cacm": lambda: load_dataset(data / "cacm"),
        "handbook": lambda: load_dataset(handbook),
        "holdout": lambda: load_dataset(
            handbook, queries=holdout / "queries.jsonl", qrels=holdout / "qrels.tsv"
        ),
        "scifact": lambda: load_dataset(data / "scifact"),
    }


def cross_validated(per: dict[Cell, dict[str, float]], qrels_ids: list[str]) -> float:
    """Held-out nDCG@10 of 2-fold CV: each fold ranked by the cell best on the other."""
    folds = (qrels_ids[0::2], qrels_ids[1::2])

    def best(qids: list[str]) -> Cell:
        return min(per, key=lambda c: (-statistics.fmean(per[c][q] for q in qids), c))

    chosen = (best(folds[1]), best(folds[0]))
    held = [per[chosen[n]][q] for n, fold in enumerate(folds) for q in fold]
    print(f"  fold cells: {chosen[0]} / {chosen[1]}")
    return statistics.fmean(held)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA), help="folder holding cacm/ and scifact/")
    parser.add_argument("--no-cv", action="store_true", help="skip the SciFact 2-fold CV")
    args = parser.parse_args()
    cache = EmbeddingCache(Path.home() / ".cache" / "groundwire" / "embeddings.sqlite")
    embedder = CachedEmbedder(create_embedder("all-MiniLM-L6-v2"), cache)
    load = loaders(Path(args.data))
    cells: list[Cell] = [CURRENT] + [
        (s, n, b, w) for s in SOURCES for n in COUNTS for b in BETAS for w in WEIGHTS
    ]
    scores: dict[tuple[str, Cell], float] = {}
    for name in TUNING:
        dataset = load[name]()
        ready = prepare(dataset, embedder)
        for cell in cells:
            scores[(name, cell)] = evaluate_run(runs(ready, dataset, cell), dataset.qrels)[
                "ndcg@10"
            ]
            print(f"{name:<9} {cell!s:<28} {scores[(name, cell)]:.4f}", flush=True)

    def tuning(cell: Cell) -> float:
        return statistics.fmean(scores[(name, cell)] for name in TUNING)

    chosen = {
        source: min(
            (c for c in cells if c[0] == source),
            key=lambda c: (-tuning(c), c[1], c[2], abs(c[3] - 0.5), c[3]),
        )
        for source in SOURCES
    }
    best = max(chosen.values(), key=tuning)
    default = best if tuning(best) >= tuning(CURRENT) + MARGIN else CURRENT
    report = [CURRENT, *chosen.values()]
    for name in ("holdout", "scifact"):  # report-only: the chosen cells, nothing else
        dataset = load[name]()
        ready = prepare(dataset, embedder)
        for cell in report:
            scores[(name, cell)] = evaluate_run(runs(ready, dataset, cell), dataset.qrels)[
                "ndcg@10"
            ]
    print(f"\n{'cell (source, n, beta, weight)':<30} {'cacm':>7} {'handbook':>9} {'mean':>7} "
          f"{'holdout':>8} {'scifact':>8}")  # fmt: skip
    for cell in report:
        mark = " <- default" if cell == default else ""
        print(
            f"{cell!s:<30} {scores[('cacm', cell)]:>7.4f} {scores[('handbook', cell)]:>9.4f} "
            f"{tuning(cell):>7.4f} {scores[('holdout', cell)]:>8.4f} "
            f"{scores[('scifact', cell)]:>8.4f}{mark}"
        )
    if args.no_cv:
        return
    dataset = load["scifact"]()
    ready = prepare(dataset, embedder)
    plain: list[Cell] = [("off", 0, 0.0, round(s * 0.05, 2)) for s in range(1, 20)]
    per: dict[Cell, dict[str, float]] = {}
    for cell in [*plain, *cells[1:]]:
        measured = per_query(runs(ready, dataset, cell), dataset.qrels)
        per[cell] = {qid: m["ndcg@10"] for qid, m in measured.items()}
    ids = sorted(per[plain[0]])
    print("\nSciFact 2-fold CV, held-out folds only:")
    print(f"  no feedback (weight fitted): {cross_validated({c: per[c] for c in plain}, ids):.4f}")
    print(f"  feedback grid + no feedback: {cross_validated(per, ids):.4f}")


if __name__ == "__main__":
    main()
