"""screen_texts: the relevance gate and a reranker over candidates another retriever found."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import groundwire as gw
from groundwire.config import MAX_SCREEN_CANDIDATES, MAX_SCREEN_CHARS

HANDBOOK = Path(__file__).resolve().parents[2] / "examples" / "handbook"

TEXTS = [
    "Rotate an API key: Settings, Developer, API keys, Rotate. The old secret works 24 hours.",
    "Webhook deliveries are retried with exponential backoff for three days.",
    "API keys can be scoped to read or write.",
    "Our office is closed on public holidays.",
    "",
]
ROTATE = "how do I rotate an api key"


def test_only_the_candidates_the_query_supports_are_kept_in_order() -> None:
    screened = gw.screen_texts(ROTATE, TEXTS)
    assert screened.order == (0, 2)
    assert screened.coverage[0] == 1.0
    assert screened.coverage[1] == screened.coverage[3] == 0.0
    assert screened.confidence == "high"
    assert screened.reason is None
    assert screened.scores == (screened.lexical[0], screened.lexical[2])  # no scores given
    assert screened.rerank is None
    assert screened.reranked == 0


def test_an_off_topic_question_keeps_nothing() -> None:
    screened = gw.screen_texts("what is the capital of peru", TEXTS)
    assert (screened.order, screened.reason, screened.confidence) == ((), "low-relevance", "none")
    assert gw.screen_texts(ROTATE, []).reason == "no-candidates"


def test_the_host_scores_are_kept_and_the_gate_can_be_off() -> None:
    scores = [0.91, 0.88, 0.87, 0.5, 0.1]
    kept = gw.screen_texts(ROTATE, TEXTS, scores=scores)
    assert kept.scores == (0.91, 0.87)
    every = gw.screen_texts(ROTATE, TEXTS, scores=scores, gate="off")
    assert every.order == (0, 1, 2, 3, 4)
    assert every.scores == tuple(scores)
    assert every.coverage == kept.coverage  # still measured


def test_a_reference_knowledge_base_supplies_the_term_weights() -> None:
    kb = gw.KnowledgeBase.from_sources(gw.load_sources(HANDBOOK))
    alone = gw.screen_texts(ROTATE, TEXTS)
    weighed = gw.screen_texts(ROTATE, TEXTS, reference=kb)
    assert weighed.order == alone.order == (0, 2)
    # "api" and "key" are common in the handbook, "rotate" rare: a candidate without
    # "rotate" covers less of the question than it does among these five alone
    assert weighed.coverage[2] < alone.coverage[2]
    with pytest.raises(gw.ConfigError, match="expected a KnowledgeBase"):
        gw.screen_texts(ROTATE, TEXTS, reference="kb")  # type: ignore[arg-type]


def test_a_reranker_reorders_the_kept_head() -> None:
    longest = gw.CallableReranker(lambda q, texts: [float(len(t)) for t in texts], "length")
    texts = [*TEXTS, "Rotate the API key from the CLI: relaybird keys rotate --id KEY."]
    plain = gw.screen_texts(ROTATE, texts)
    assert len(plain.order) == 3
    screened = gw.screen_texts(ROTATE, texts, reranker=longest, scores=[1, 1, 1, 1, 1, 2])
    assert set(screened.order) == set(plain.order)  # the reranker reorders, never adds
    assert screened.order != plain.order
    lengths = [len(texts[n]) for n in screened.order]
    assert lengths == sorted(lengths, reverse=True)
    assert screened.scores == tuple(float(n) for n in lengths)
    assert screened.reranked == 3
    assert screened.rerank is not None
    assert screened.rerank.status == "applied"
    head = gw.screen_texts(ROTATE, texts, reranker=longest, rerank_top_n=1)
    assert head.reranked == 1
    assert head.order == plain.order  # a head of one candidate: nothing moves


def test_a_failing_or_slow_reranker_keeps_the_order() -> None:
    def broken(query: str, texts: list[str]) -> list[float]:
        raise RuntimeError("model offline")

    plain = gw.screen_texts(ROTATE, TEXTS)
    failed = gw.screen_texts(ROTATE, TEXTS, reranker=gw.CallableReranker(broken))
    assert failed.order == plain.order
    assert failed.scores == plain.scores
    assert failed.reranked == 0
    assert failed.rerank is not None
    assert failed.rerank.status == "error"
    release = threading.Event()

    def slow(query: str, texts: list[str]) -> list[float]:
        release.wait(10)
        return [1.0] * len(texts)

    try:
        late = gw.screen_texts(
            ROTATE, TEXTS, reranker=gw.CallableReranker(slow), rerank_timeout_s=0.05
        )
    finally:
        release.set()
    assert late.order == plain.order
    assert late.rerank is not None
    assert late.rerank.status == "timeout"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"texts": "one text"}, gw.QueryError, "texts must be a list of strings"),
        ({"texts": ["ok", 3]}, gw.QueryError, r"texts\[1\] must be a string"),
        ({"texts": ["x"] * (MAX_SCREEN_CANDIDATES + 1)}, gw.QueryError, "at most 1000"),
        ({"texts": ["x" * (MAX_SCREEN_CHARS + 1)]}, gw.QueryError, "at most 1,000,000"),
        ({"scores": [1.0]}, gw.ConfigError, "scores has 1 values for 5 candidates"),
        ({"scores": [1, 2, 3, 4, float("nan")]}, gw.ConfigError, "finite numbers"),
        ({"ids": ["a"]}, gw.ConfigError, "ids has 1 values"),
        ({"gate": "strict"}, gw.ConfigError, "gate='strict' is invalid"),
        ({"relevance": 0.5}, gw.ConfigError, "expected a RelevanceGate"),
        ({"reranker": "yes"}, gw.ConfigError, "reranker="),
        ({"rerank_top_n": 0}, gw.ConfigError, "rerank_top_n=0"),
    ],
)
def test_bad_input_is_named(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    args: dict[str, object] = {"texts": TEXTS, **kwargs}
    with pytest.raises(error, match=match):
        gw.screen_texts(ROTATE, **args)  # type: ignore[arg-type]
    with pytest.raises(gw.QueryError, match="query must be a string"):
        gw.screen_texts(None, TEXTS)  # type: ignore[arg-type]


def test_a_long_query_is_cut_not_refused() -> None:
    query = "rotate api key " * 1000
    screened = gw.screen_texts(query, TEXTS, max_query_chars=200)
    assert screened.truncated_query
    assert len(screened.query) <= 200
    assert screened.order[0] == 0


WORDS = ["rotate", "api", "key", "webhook", "retry", "office", "holiday", "scope", "the", "a"]


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), max_size=12),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
)
def test_the_gate_only_removes_and_is_deterministic(texts: list[str], query: str) -> None:
    screened = gw.screen_texts(query, texts)
    assert list(screened.order) == sorted(screened.order)  # order kept
    assert len(set(screened.order)) == len(screened.order)
    assert all(screened.coverage[n] > 0 for n in screened.order)
    assert len(screened.coverage) == len(screened.lexical) == len(texts)
    assert gw.screen_texts(query, texts) == screened
