"""How the default fusion is chosen: fitted on CACM and the handbook, reported on SciFact.

- **Data:** CACM (BEIR layout) and ``examples/handbook`` with ``examples/handbook-eval``
  are the tuning sets; SciFact is held out and only reported.
- **Model:** all-MiniLM-L6-v2, vectors from the embedding cache
  (``~/.cache/groundwire/embeddings.sqlite``; a cold cache embeds SciFact for minutes).
- **Grid:** weighted fusion with min-max and with theoretical min-max normalization, dense
  weight 0 to 1 in steps of 0.05; RRF at 0.3-0.7. Ranking is the eval's own searcher
  (``search_channels``, top 100, phrase boosts on).
- **Criterion:** the mean of the tuning sets' nDCG@10 (each set counts once). Prints
  every cell, each fusion's best weight with its tuning score, and SciFact at that
  weight: the only SciFact figure that may be reported for a chosen default.
- **Run:** ``.venv/bin/python benchmarks/bench_fusion.py`` (~3 minutes once cached).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from groundwire import CachedEmbedder, EmbeddingCache, HybridSettings, create_embedder
from groundwire.config import DEFAULT_MAX_QUERY_CHARS
from groundwire.eval.datasets import load_dataset
from groundwire.eval.hybrid import FIT_GRID, Prepared, prepare
from groundwire.eval.metrics import evaluate_run
from groundwire.retrieve.hybrid import search_channels

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets"
FUSIONS = {
    "weighted/minmax": ("weighted", "minmax", FIT_GRID),
    "weighted/tmm": ("weighted", "tmm", FIT_GRID),
    "rrf": ("rrf", "minmax", (0.3, 0.4, 0.5, 0.6, 0.7)),
}


def ndcg(ready: Prepared, queries: dict[str, str], qrels: object, hybrid: HybridSettings) -> float:
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
    return evaluate_run(run, qrels)["ndcg@10"]  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA), help="folder holding cacm/ and scifact/")
    args = parser.parse_args()
    cache = EmbeddingCache(Path.home() / ".cache" / "groundwire" / "embeddings.sqlite")
    embedder = CachedEmbedder(create_embedder("all-MiniLM-L6-v2"), cache)
    sets = {
        "cacm": Path(args.data) / "cacm",
        "handbook": ROOT / "examples" / "handbook",
        "scifact": Path(args.data) / "scifact",
    }
    scores: dict[tuple[str, str, float], float] = {}
    for name, path in sets.items():
        dataset = load_dataset(path)
        ready = prepare(dataset, embedder)
        for label, (fusion, normalization, grid) in FUSIONS.items():
            for weight in grid:
                hybrid = HybridSettings(
                    mode="hybrid",
                    fusion=fusion,  # type: ignore[arg-type]
                    normalization=normalization,  # type: ignore[arg-type]
                    dense_weight=weight,
                )
                score = ndcg(ready, dataset.queries, dataset.qrels, hybrid)
                scores[(name, label, weight)] = score
                print(f"{name:<9} {label:<16} {weight:4.2f} {score:.4f}", flush=True)
    print(f"\n{'fusion':<16} {'weight':>6} {'cacm':>7} {'handbook':>9} {'mean':>7} {'scifact':>8}")
    for label, (_, _, grid) in FUSIONS.items():

        def tuning(weight: float, label: str = label) -> float:
            return statistics.fmean(scores[(n, label, weight)] for n in ("cacm", "handbook"))

        best = max(grid, key=lambda w: (tuning(w), -abs(w - 0.5)))
        print(
            f"{label:<16} {best:>6.2f} {scores[('cacm', label, best)]:>7.4f} "
            f"{scores[('handbook', label, best)]:>9.4f} {tuning(best):>7.4f} "
            f"{scores[('scifact', label, best)]:>8.4f}"
        )


if __name__ == "__main__":
    main()
