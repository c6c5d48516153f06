"""Sweep relevance-gate settings on the tuning set only (``examples/handbook-tuning``).

Gate thresholds are chosen here, never on ``examples/handbook-eval`` or
``examples/handbook-holdout`` (those are held out; ``bench_precision.py`` reports them).
For each setting it prints, under the default scope (no integration enabled): context
precision and recall on the judged tuning questions, how many got a block, and the share
of the tuning set's off-topic questions naming an integration that got none.

``.venv/bin/python benchmarks/tune_gate.py idf_floor=0.3,0.5,1.0 min_terms=2,3`` sweeps
the product of the listed values (any ``RelevanceGate`` field); no argument: the defaults.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

import groundwire as gw
from groundwire.config import RelevanceGate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_precision import (
    HANDBOOK,
    TUNING,
    abstention,
    ground_all,
    judged_figures,
    read_qrels,
    read_queries,
)


def main(argv: Sequence[str]) -> None:
    kinds = {f.name: f.type for f in dataclasses.fields(RelevanceGate)}
    grid: dict[str, list[float | int]] = {}
    for arg in argv:
        name, _, values = arg.partition("=")
        if name not in kinds:
            raise SystemExit(f"unknown gate setting {name!r}; one of {sorted(kinds)}")
        cast = int if name.endswith("_terms") else float
        grid[name] = [cast(value) for value in values.split(",")]
    sources = gw.load_sources(HANDBOOK)
    queries, qrels = read_queries(TUNING / "queries.jsonl"), read_qrels(TUNING / "qrels.tsv")
    named = read_queries(TUNING / "off-topic-named.jsonl")
    print("setting  precision  recall  blocks  off-topic-named no block")
    for values in itertools.product(*grid.values()):
        changes = dict(zip(grid, values, strict=True))
        retrieval = gw.RetrievalConfig(relevance=RelevanceGate(**changes))  # type: ignore[arg-type]
        config = gw.GroundingConfig(sources=sources, retrieval=retrieval, timeout_ms=60_000)
        with gw.GroundingEngine(config) as engine:
            engine.ready()
            f = judged_figures(ground_all(engine, queries, gw.Scope()), qrels)
            off = abstention(ground_all(engine, named, gw.Scope()))
        label = " ".join(f"{k}={v}" for k, v in changes.items()) or "defaults"
        print(
            f"{label}  {f['precision']:.3f}  {f['recall']:.3f}  "
            f"{f['blocks']}/{f['questions']}  {off:.0%}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
