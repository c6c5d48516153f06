"""Ranking metrics with trec_eval's definitions.

A run maps each query id to its ranked document ids (best first; ties were already
broken by whoever ranked them); qrels map each query id to ``{doc id: grade}`` where
a grade > 0 means relevant. nDCG gains are the grades themselves (trec_eval's
``ndcg_cut``), discounts ``log2(rank + 1)``, and the ideal ranking is every relevant
document by grade. MAP and recall divide by all relevant documents, retrieved or
not (``map_cut``, ``recall``). A query with no relevant document is not scored; a
query with no results scores 0. A document repeated in a ranking counts only at its
first rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = [
    "METRICS",
    "average_precision",
    "evaluate_run",
    "ndcg",
    "per_query",
    "recall",
    "reciprocal_rank",
]

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[str]]

#: The reported metrics, in report order.
METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10", "map@100")


def _relevant(judged: Mapping[str, int]) -> dict[str, int]:
    return {doc: grade for doc, grade in judged.items() if grade > 0}


def _top(ranking: Sequence[str], k: int) -> list[str]:
    """The first ``k`` distinct documents of a ranking."""
    seen: dict[str, None] = {}
    for doc in ranking:
        if len(seen) == k:
            break
        seen.setdefault(doc)
    return list(seen)


def ndcg(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """nDCG@k with the grade as gain and ``log2(rank + 1)`` discounts; 0 with nothing relevant."""
    relevant = _relevant(judged)
    if not relevant:
        return 0.0
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(_top(ranking, k)))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(grade / math.log2(i + 2) for i, grade in enumerate(ideal))
    return dcg / idcg


def recall(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Share of all relevant documents found in the first k results."""
    relevant = _relevant(judged)
    if not relevant:
        return 0.0
    return sum(1 for doc in _top(ranking, k) if doc in relevant) / len(relevant)


def reciprocal_rank(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant result within the first k, else 0."""
    relevant = _relevant(judged)
    for i, doc in enumerate(_top(ranking, k)):
        if doc in relevant:
            return 1.0 / (i + 1)
    return 0.0


def average_precision(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """AP cut at k, normalized by all relevant documents (trec_eval ``map_cut``)."""
    relevant = _relevant(judged)
    if not relevant:
        return 0.0
    found, total = 0, 0.0
    for i, doc in enumerate(_top(ranking, k)):
        if doc in relevant:
            found += 1
            total += found / (i + 1)
    return total / len(relevant)


def per_query(run: Run, qrels: Qrels) -> dict[str, dict[str, float]]:
    """Every metric of :data:`METRICS` per query that has a relevant document.

    A judged query missing from the run scores 0 (trec_eval ``-c``).
    """
    scores: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        if not _relevant(judged):
            continue
        ranking = run.get(qid, ())
        scores[qid] = {
            "ndcg@10": ndcg(ranking, judged, 10),
            "recall@100": recall(ranking, judged, 100),
            "mrr@10": reciprocal_rank(ranking, judged, 10),
            "map@100": average_precision(ranking, judged, 100),
        }
    return scores


def evaluate_run(run: Run, qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10, recall@100, MRR@10 and MAP@100 over queries with a relevant document.

    All 0.0 when no query has one.
    """
    scores = per_query(run, qrels)
    if not scores:
        return dict.fromkeys(METRICS, 0.0)
    return {name: math.fsum(s[name] for s in scores.values()) / len(scores) for name in METRICS}
