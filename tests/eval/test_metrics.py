"""Ranking metrics: hand-computed cases, then a per-query cross-check against ir-measures.

Every expected value below is worked out by hand in the comments (log2(2) = 1,
log2(3) = 1.5849625, log2(4) = 2, log2(5) = 2.3219281, log2(6) = 2.5849625) and
written twice: as the exact expression and as its decimal value.
"""

from __future__ import annotations

import math

import pytest
from tests.conftest import DATASETS, HANDBOOK, ROOT

from groundwire.eval import EvalDataset, evaluate, load_dataset
from groundwire.eval.metrics import (
    METRICS,
    average_precision,
    evaluate_run,
    ndcg,
    per_query,
    recall,
    reciprocal_rank,
)

LOG3, LOG5, LOG6 = math.log2(3), math.log2(5), math.log2(6)


# -- nDCG (trec_eval ndcg_cut: gain = grade, discount log2(rank + 1)) ----------------------
GRADED = {"d1": 3, "d2": 2, "d3": 0, "d4": 1}
GRADED_RUN = ["d3", "d1", "d5", "d4", "d2"]


def test_graded_ndcg_uses_grades_as_gains() -> None:
    # rank: 1 d3 (grade 0), 2 d1 (3), 3 d5 (unjudged, 0), 4 d4 (1), 5 d2 (2)
    # DCG@5  = 0/1 + 3/log2(3) + 0/2 + 1/log2(5) + 2/log2(6)
    #        = 0 + 1.8927893 + 0 + 0.4306766 + 0.7737056 = 3.0971715
    # IDCG@5 = grades 3, 2, 1 in order = 3/1 + 2/log2(3) + 1/log2(4)
    #        = 3 + 1.2618595 + 0.5 = 4.7618595
    # nDCG@5 = 3.0971715 / 4.7618595 = 0.6504122
    expected = (3 / LOG3 + 1 / LOG5 + 2 / LOG6) / (3 + 2 / LOG3 + 0.5)
    assert ndcg(GRADED_RUN, GRADED, 5) == pytest.approx(expected, abs=1e-12)
    assert ndcg(GRADED_RUN, GRADED, 5) == pytest.approx(0.6504122, abs=1e-7)
    # k = 10 sees the same five documents and the same ideal (only 3 relevant).
    assert ndcg(GRADED_RUN, GRADED, 10) == pytest.approx(expected, abs=1e-12)


def test_graded_ndcg_cut_off_cuts_the_ideal_too() -> None:
    # DCG@2  = 0/1 + 3/log2(3) = 1.8927893
    # IDCG@2 = 3/1 + 2/log2(3) = 4.2618595 (the grade-1 document falls past the cut)
    # nDCG@2 = 1.8927893 / 4.2618595 = 0.4441229
    expected = (3 / LOG3) / (3 + 2 / LOG3)
    assert ndcg(GRADED_RUN, GRADED, 2) == pytest.approx(expected, abs=1e-12)
    assert ndcg(GRADED_RUN, GRADED, 2) == pytest.approx(0.4441229, abs=1e-7)
    # nDCG@1: the first document has grade 0 → DCG@1 = 0.
    assert ndcg(GRADED_RUN, GRADED, 1) == 0.0


def test_ideal_ranking_scores_one() -> None:
    assert ndcg(["d1", "d2", "d4"], GRADED, 10) == pytest.approx(1.0)
    # Grade order matters: d2 (2) before d1 (3) is below the ideal.
    # DCG = 2/1 + 3/log2(3) + 1/2 = 4.3927893; IDCG = 4.7618595 → 0.9224945
    swapped = ndcg(["d2", "d1", "d4"], GRADED, 10)
    assert swapped == pytest.approx((2 + 3 / LOG3 + 0.5) / (3 + 2 / LOG3 + 0.5), abs=1e-12)
    assert swapped == pytest.approx(0.9224945, abs=1e-7)


def test_binary_ndcg() -> None:
    judged = {"a": 1, "b": 1}
    # a at 1, b at 3: DCG = 1/1 + 1/log2(4) = 1.5; IDCG = 1/1 + 1/log2(3) = 1.6309298
    # nDCG@10 = 1.5 / 1.6309298 = 0.9197208
    assert ndcg(["a", "x", "b"], judged, 10) == pytest.approx(1.5 / (1 + 1 / LOG3), abs=1e-12)
    assert ndcg(["a", "x", "b"], judged, 10) == pytest.approx(0.9197208, abs=1e-7)
    # Only b, at rank 2: DCG = 1/log2(3) = 0.6309298 → 0.6309298 / 1.6309298 = 0.3868528
    assert ndcg(["x", "b"], judged, 10) == pytest.approx(0.3868528, abs=1e-7)


def test_equal_grades_are_interchangeable() -> None:
    # Tied grades: a and b (both 2) in either order give the same DCG.
    judged = {"a": 2, "b": 2, "c": 1}
    assert ndcg(["a", "b", "c"], judged, 10) == ndcg(["b", "a", "c"], judged, 10) == 1.0
    # c first: DCG = 1/1 + 2/log2(3) + 2/log2(4) = 1 + 1.2618595 + 1 = 3.2618595
    # IDCG = 2/1 + 2/log2(3) + 1/log2(4) = 2 + 1.2618595 + 0.5 = 3.7618595
    # nDCG = 3.2618595 / 3.7618595 = 0.8670870
    value = ndcg(["c", "a", "b"], judged, 10)
    assert value == pytest.approx((1 + 2 / LOG3 + 1) / (2 + 2 / LOG3 + 0.5), abs=1e-12)
    assert value == pytest.approx(0.8670870, abs=1e-7)
    assert ndcg(["c", "b", "a"], judged, 10) == value


def test_negative_and_zero_grades_are_not_relevant() -> None:
    judged = {"a": -1, "b": 0, "c": 1}
    # Only c counts: at rank 3, DCG = 1/log2(4) = 0.5, IDCG = 1 → 0.5
    assert ndcg(["a", "b", "c"], judged, 10) == pytest.approx(0.5)
    assert reciprocal_rank(["a", "b", "c"], judged, 10) == pytest.approx(1 / 3)


def test_nothing_relevant_scores_zero_per_metric() -> None:
    judged = {"a": 0}
    for metric in (ndcg, recall, reciprocal_rank, average_precision):
        assert metric(["a"], judged, 10) == 0.0


def test_no_results_score_zero() -> None:
    judged = {"a": 1}
    for metric in (ndcg, recall, reciprocal_rank, average_precision):
        assert metric([], judged, 10) == 0.0


def test_a_repeated_document_counts_once_at_its_first_rank() -> None:
    judged = {"a": 1, "b": 1}
    # [x, x, a, b] collapses to [x, a, b]: a at rank 2, b at rank 3.
    # RR = 1/2; AP = (1/2 + 2/3) / 2 = 0.5833333; recall@2 = 1/2 (only x, a in the top 2)
    ranking = ["x", "x", "a", "a", "b"]
    assert reciprocal_rank(ranking, judged, 10) == pytest.approx(0.5)
    assert average_precision(ranking, judged, 10) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert recall(ranking, judged, 2) == pytest.approx(0.5)
    # DCG = 1/log2(3) + 1/log2(4) = 1.1309298; IDCG = 1.6309298 → 0.6934264
    assert ndcg(ranking, judged, 10) == pytest.approx((1 / LOG3 + 0.5) / (1 + 1 / LOG3))


# -- recall@100, MRR@10, MAP@100 ------------------------------------------------------------
def _ranking_with(relevant_at: dict[int, str], length: int) -> list[str]:
    """A ranking of ``length`` ids, with the given ids at the given 1-based ranks."""
    return [relevant_at.get(rank, f"n{rank}") for rank in range(1, length + 1)]


# Four relevant documents at ranks 1, 50, 100 and 101.
DEEP = _ranking_with({1: "r1", 50: "r2", 100: "r3", 101: "r4"}, 120)
DEEP_JUDGED = {"r1": 1, "r2": 1, "r3": 2, "r4": 1, "r5": 0}


def test_recall_at_100_divides_by_all_relevant() -> None:
    # Found within 100: r1, r2, r3 → 3 of the 4 relevant = 0.75
    assert recall(DEEP, DEEP_JUDGED, 100) == pytest.approx(0.75)
    # Within 101: all 4 → 1.0; within 49: only r1 → 0.25
    assert recall(DEEP, DEEP_JUDGED, 101) == pytest.approx(1.0)
    assert recall(DEEP, DEEP_JUDGED, 49) == pytest.approx(0.25)


def test_map_at_100_is_normalized_by_all_relevant_documents() -> None:
    # Precision at each relevant rank within 100: 1/1, 2/50, 3/100 (r4 at 101 is cut)
    # AP@100 = (1 + 0.04 + 0.03) / 4 relevant = 1.07 / 4 = 0.2675 (trec_eval map_cut_100)
    assert average_precision(DEEP, DEEP_JUDGED, 100) == pytest.approx(0.2675, abs=1e-12)
    # Uncut (k=120): + 4/101 → (1.07 + 0.0396040) / 4 = 0.2774010
    assert average_precision(DEEP, DEEP_JUDGED, 120) == pytest.approx(
        (1 + 2 / 50 + 3 / 100 + 4 / 101) / 4, abs=1e-12
    )
    # Relevant at 2 and 4 of 3 relevant: (1/2 + 2/4) / 3 = 0.3333333
    assert average_precision(["x", "a", "y", "b"], {"a": 1, "b": 1, "c": 1}, 100) == (
        pytest.approx(1 / 3)
    )


def test_mrr_at_10() -> None:
    judged = {"a": 1, "b": 2}
    assert reciprocal_rank(_ranking_with({3: "a", 5: "b"}, 20), judged, 10) == pytest.approx(1 / 3)
    assert reciprocal_rank(_ranking_with({10: "b"}, 20), judged, 10) == pytest.approx(0.1)
    # First relevant at rank 11: outside the cut → 0
    assert reciprocal_rank(_ranking_with({11: "a"}, 20), judged, 10) == 0.0
    assert reciprocal_rank(["b"], judged, 10) == 1.0


# -- the mean over queries ---------------------------------------------------------------
def test_evaluate_run_averages_over_queries_with_a_relevant_document() -> None:
    qrels = {
        "perfect": {"a": 1},
        "second": {"b": 1},
        "empty": {"c": 1},  # no results → 0 on every metric, still counted
        "unjudgeable": {"d": 0},  # nothing relevant → excluded from the mean
    }
    run = {"perfect": ["a", "x"], "second": ["x", "b"], "empty": [], "unjudgeable": ["d"]}
    # nDCG@10: 1, 1/log2(3) = 0.6309298, 0 → (1.6309298) / 3 = 0.5436433
    # recall@100: 1, 1, 0 → 0.6666667; MRR@10: 1, 1/2, 0 → 0.5; MAP@100: 1, 1/2, 0 → 0.5
    scores = evaluate_run(run, qrels)
    assert list(scores) == list(METRICS)
    assert scores["ndcg@10"] == pytest.approx((1 + 1 / LOG3) / 3, abs=1e-12)
    assert scores["ndcg@10"] == pytest.approx(0.5436433, abs=1e-7)
    assert scores["recall@100"] == pytest.approx(2 / 3)
    assert scores["mrr@10"] == pytest.approx(0.5)
    assert scores["map@100"] == pytest.approx(0.5)
    # A judged query missing from the run counts as no results.
    del run["empty"]
    assert evaluate_run(run, qrels) == scores
    assert set(per_query(run, qrels)) == {"perfect", "second", "empty"}


def test_evaluate_run_with_nothing_to_score_is_all_zero() -> None:
    assert evaluate_run({"q": ["a"]}, {"q": {"a": 0}}) == dict.fromkeys(METRICS, 0.0)
    assert evaluate_run({}, {}) == dict.fromkeys(METRICS, 0.0)


# -- cross-check against an independent implementation on real runs ----------------------
CACM = DATASETS / "cacm"
HANDBOOK_EVAL = ROOT / "examples" / "handbook-eval"


def _cross_check_with_ir_measures(dataset: EvalDataset) -> None:
    ir_measures = pytest.importorskip("ir_measures", reason="ir-measures is in the 'test' extra")
    result = evaluate(dataset)
    # Strictly decreasing scores from the rank, so the peer's own tie-breaking (score,
    # then doc id) cannot reorder groundwire's ranking.
    peer_run = {
        qid: {doc: float(len(ranking) - rank) for rank, doc in enumerate(ranking)}
        for qid, ranking in result.run.items()
        if ranking
    }
    measures = {
        "ndcg@10": ir_measures.nDCG @ 10,
        "recall@100": ir_measures.R @ 100,
        "mrr@10": ir_measures.RR @ 10,
        "map@100": ir_measures.AP @ 100,
    }
    names = {str(measure): name for name, measure in measures.items()}
    theirs: dict[str, dict[str, float]] = {}
    for metric in ir_measures.iter_calc(list(measures.values()), dataset.qrels, peer_run):
        theirs.setdefault(metric.query_id, {})[names[str(metric.measure)]] = metric.value
    ours = per_query(result.run, dataset.qrels)
    assert len(ours) == len(dataset.queries)
    assert set(theirs) == set(peer_run)
    for qid, values in ours.items():
        if qid not in theirs:  # no results: the peer skips the query, we score 0
            assert values == dict.fromkeys(METRICS, 0.0)
            continue
        for name in METRICS:
            assert values[name] == pytest.approx(theirs[qid][name], abs=1e-9), (qid, name)
    # And the means reported are the means of those per-query values.
    for name in METRICS:
        mean = math.fsum(values[name] for values in ours.values()) / len(ours)
        assert result.metrics[name] == pytest.approx(mean, abs=1e-12)


@pytest.mark.integration
def test_metrics_match_ir_measures_per_query_on_the_shipped_handbook_eval() -> None:
    dataset = load_dataset(
        HANDBOOK, queries=HANDBOOK_EVAL / "queries.jsonl", qrels=HANDBOOK_EVAL / "qrels.tsv"
    )
    assert len(dataset.queries) == 40
    _cross_check_with_ir_measures(dataset)


@pytest.mark.integration
def test_metrics_match_ir_measures_per_query_on_cacm() -> None:
    if not (CACM / "qrels" / "test.tsv").is_file():
        pytest.skip(f"the CACM dataset is not at {CACM} (shared/datasets/cacm)")
    dataset = load_dataset(CACM)
    assert len(dataset.queries) == 52
    _cross_check_with_ir_measures(dataset)
