"""How the default fusion is chosen: fitted on CACM and handbook-eval, reported elsewhere.

The protocol, fixed before any SciFact figure of the new candidates was computed:

- **Tuning sets:** CACM (BEIR layout, 52 judged queries) and ``examples/handbook`` with
  ``examples/handbook-eval`` (40). **Report-only sets:** SciFact (300) and
  ``examples/handbook-holdout`` (35): never used to choose anything.
- **Model:** all-MiniLM-L6-v2, vectors from the embedding cache
  (``~/.cache/groundwire/embeddings.sqlite``; a cold cache embeds SciFact for minutes).
- **Candidates:** weighted fusion with each normalization (``minmax`` over the union,
  ``tmm`` theoretical min-max, ``zscore`` and ``dbsf`` from each channel's own list;
  ``list``, min-max over each channel's own list, was added in a second round after the
  first round's report) and RRF (rank-based); dense weight 0.05 to 0.95 in steps of
  0.05; channel depth 50, 100 and 200. Ranking is the eval's own searcher
  (``search_channels``, top 100, phrase boosts on), as ``groundwire eval DATASET --mode
  hybrid`` runs.
- **Criterion:** the mean of the two tuning sets' nDCG@10 (each set counts once). Per
  candidate fusion the best (depth, weight); ties go to depth 100, then the weight
  nearest 0.5. The default changes only if a candidate beats the current one (weighted
  min-max, 0.5, depth 100) by at least 0.002 of that mean; otherwise it stays.
- **Report:** every tuning cell, then per fusion its chosen cell with the tuning scores
  and, only for those chosen cells, SciFact and the holdout. Those are the only
  SciFact figures that may be reported for a default.
- **Embedded text** is not a tuning dimension: one vector per document of ``title\ntext``
  (the model reads its first 256 tokens). Passages past that limit, max-pooled, are a
  separate experiment measured once on SciFact with the chosen fusion (docs/HYBRID.md).
- **Run:** ``.venv/bin/python benchmarks/bench_fusion.py [--data FOLDER]`` (about 10
  minutes on 2 busy cores once the vectors are cached).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from groundwire import CachedEmbedder, EmbeddingCache, HybridSettings, create_embedder
from groundwire.config import (
    DEFAULT_CHANNEL_DEPTH,
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION,
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_NORMALIZATION,
)
from groundwire.eval.datasets import EvalDataset, load_dataset
from groundwire.eval.hybrid import Prepared, prepare
from groundwire.eval.metrics import evaluate_run
from groundwire.retrieve.hybrid import search_channels

ROOT = Path(__file__).resolve().parents[1]
#: ../shared/datasets from the main checkout, ../../shared/datasets from a worktree.
DATA = next(
    (p for p in (ROOT.parent / "shared" / "datasets", ROOT.parents[1] / "shared" / "datasets")
     if p.is_dir()),
    ROOT.parent / "shared" / "datasets",
)  # fmt: skip
WEIGHTS = tuple(round(step * 0.05, 2) for step in range(1, 20))
DEPTHS = (50, 100, 200)
#: label → (fusion, normalization)
FUSIONS = {
    "weighted/minmax": ("weighted", "minmax"),
    "weighted/tmm": ("weighted", "tmm"),
    "weighted/zscore": ("weighted", "zscore"),
    "weighted/dbsf": ("weighted", "dbsf"),
    "weighted/list": ("weighted", "list"),
    "rrf": ("rrf", "minmax"),
}
TUNING = ("cacm", "handbook")
MARGIN = 0.002
Cell = tuple[str, int, float]  # fusion label, depth, dense weight


def ndcg(ready: Prepared, dataset: EvalDataset, hybrid: HybridSettings) -> float:
    """nDCG@10 of ``dataset``'s queries ranked as ``groundwire eval --mode hybrid`` does."""
    return evaluate_run(ranked(ready, dataset, hybrid), dataset.qrels)["ndcg@10"]


def ranked(ready: Prepared, dataset: EvalDataset, hybrid: HybridSettings) -> dict[str, list[str]]:
    """The top-100 run (ids) of every query of ``dataset`` under ``hybrid``."""
    queries = dataset.queries
    longest = max(len(text) for text in queries.values())
    run = {}
    for qid, text in queries.items():
        hits, _ = search_channels(
            ready.kb,
            text,
            100,
            hybrid,
            vectors=ready.vectors,
            query_vector=ready.queries[text],
            max_query_chars=max(DEFAULT_MAX_QUERY_CHARS, longest),
        )
        run[qid] = [ready.kb.entry(hit.doc).id for hit in hits]
    return run


def settings(cell: Cell) -> HybridSettings:
    """The hybrid settings of one grid cell."""
    label, depth, weight = cell
    fusion, normalization = FUSIONS[label]
    return HybridSettings(
        mode="hybrid",
        fusion=fusion,  # type: ignore[arg-type]
        normalization=normalization,  # type: ignore[arg-type]
        dense_weight=weight,
        channel_depth=depth,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA), help="folder holding cacm/ and scifact/")
    parser.add_argument(
        "--fusions", nargs="+", choices=sorted(FUSIONS), help="run only these (and the default)"
    )
    args = parser.parse_args()
    cache = EmbeddingCache(Path.home() / ".cache" / "groundwire" / "embeddings.sqlite")
    embedder = CachedEmbedder(create_embedder("all-MiniLM-L6-v2"), cache)
    handbook = ROOT / "examples" / "handbook"
    holdout = ROOT / "examples" / "handbook-holdout"
    loaders = {
        "cacm": lambda: load_dataset(Path(args.data) / "cacm"),
        "handbook": lambda: load_dataset(handbook),
        "holdout": lambda: load_dataset(
            handbook, queries=holdout / "queries.jsonl", qrels=holdout / "qrels.tsv"
        ),
        "scifact": lambda: load_dataset(Path(args.data) / "scifact"),
    }
    current: Cell = (
        f"{DEFAULT_FUSION}/{DEFAULT_NORMALIZATION}" if DEFAULT_FUSION == "weighted" else "rrf",
        DEFAULT_CHANNEL_DEPTH,
        DEFAULT_DENSE_WEIGHT,
    )
    labels = [label for label in FUSIONS if not args.fusions or label in args.fusions]
    cells = [(label, depth, w) for label in labels for depth in DEPTHS for w in WEIGHTS]
    if current not in cells:
        cells.append(current)
    scores: dict[tuple[str, Cell], float] = {}
    for name in TUNING:
        dataset = loaders[name]()
        ready = prepare(dataset, embedder)
        for cell in cells:
            scores[(name, cell)] = ndcg(ready, dataset, settings(cell))
            print(f"{name:<9} {cell[0]:<16} {cell[1]:>4} {cell[2]:4.2f} "
                  f"{scores[(name, cell)]:.4f}", flush=True)  # fmt: skip

    def tuning(cell: Cell) -> float:
        return statistics.fmean(scores[(name, cell)] for name in TUNING)

    chosen = {
        label: min(
            (cell for cell in cells if cell[0] == label),
            key=lambda c: (-tuning(c), c[1] != DEFAULT_CHANNEL_DEPTH, abs(c[2] - 0.5), c[2]),
        )
        for label in labels
    }
    best = max(chosen.values(), key=tuning)
    default = best if tuning(best) >= tuning(current) + MARGIN else current
    report = sorted({*chosen.values(), current})
    for name in ("holdout", "scifact"):  # report-only: the chosen cells, nothing else
        dataset = loaders[name]()
        ready = prepare(dataset, embedder)
        for cell in report:
            scores[(name, cell)] = ndcg(ready, dataset, settings(cell))
    print(f"\n{'fusion':<16} {'depth':>5} {'weight':>6} {'cacm':>7} {'handbook':>9} "
          f"{'mean':>7} {'holdout':>8} {'scifact':>8}")  # fmt: skip
    for cell in report:
        mark = " <- default" if cell == default else ""
        print(
            f"{cell[0]:<16} {cell[1]:>5} {cell[2]:>6.2f} {scores[('cacm', cell)]:>7.4f} "
            f"{scores[('handbook', cell)]:>9.4f} {tuning(cell):>7.4f} "
            f"{scores[('holdout', cell)]:>8.4f} {scores[('scifact', cell)]:>8.4f}{mark}"
        )


if __name__ == "__main__":
    main()
