"""Ranking metrics with trec_eval's definitions.

A run maps each query id to its ranked document ids (best first); qrels map each
query id to ``{doc id: grade}`` where a grade > 0 means relevant. Gains are the
grades themselves (trec_eval's ``ndcg_cut``), discounts ``log2(rank + 1)``. A query
with no relevant document is not scored; a query with no results scores 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = [
    "average_precision",
    "evaluate_run",
    "ndcg",
    "recall",
    "reciprocal_rank",
]

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[str]]


def _relevant(judged: Mapping[str, int]) -> dict[str, int]:
    return {doc: grade for doc, grade in judged.items() if grade > 0}


def ndcg(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gains (the grade) and log2 discounts; 0 when nothing is relevant."""
    relevant = _relevant(judged)
    if not relevant:
        return 0.0
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(grade / math.log2(i + 2) for i, grade in enumerate(ideal))
    return dcg / idcg


def recall(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the first k results."""
    relevant = _relevant(judged)
    if not relevant:
        return 0.0
    return sum(1 for doc in ranking[:k] if doc in relevant) / len(relevant)


def reciprocal_rank(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant result within the first k, else 0."""
    relevant = _relevant(judged)
    for i, doc in enumerate(ranking[:k]):
        if doc in relevant:
            return 1.0 / (i + 1)
    return 0.0


def average_precision(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """AP cut at k, normalized by all relevant documents (trec_eval ``map_cut``)."""
    relevant = _relevant(judged)
    if not relevant:
        return 0.0
    found, total = 0, 0.0
    for i, doc in enumerate(ranking[:k]):
        if doc in relevant:
            found += 1
            total += found / (i + 1)
    return total / len(relevant)


def evaluate_run(run: Run, qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10, recall@100, MRR@10 and MAP@100 over queries with a relevant document."""
    scored = [qid for qid, judged in qrels.items() if _relevant(judged)]
    if not scored:
        return {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0, "map@100": 0.0}
    sums = {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0, "map@100": 0.0}
    for qid in scored:
        ranking, judged = run.get(qid, ()), qrels[qid]
        sums["ndcg@10"] += ndcg(ranking, judged, 10)
        sums["recall@100"] += recall(ranking, judged, 100)
        sums["mrr@10"] += reciprocal_rank(ranking, judged, 10)
        sums["map@100"] += average_precision(ranking, judged, 100)
    return {name: value / len(scored) for name, value in sums.items()}
