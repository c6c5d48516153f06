"""The relevance gate: informative terms, coverage, the passing rules, abstention,
expansion from kept entries only, calibrated confidence, scope hints, and the fixed-count
switch (``gate="off"``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundwire import (
    GroundingConfig,
    GroundingEngine,
    KnowledgeBase,
    RetrievalConfig,
    RetrievalRequest,
    Scope,
    Selection,
    load_sources,
    retrieve,
)
from groundwire.config import RelevanceGate
from groundwire.errors import ConfigError
from groundwire.retrieve.gate import gate_candidates, noise_level, query_evidence
from groundwire.text import Analyzer, query_stopwords

Entry = Callable[..., dict[str, Any]]
Build = Callable[..., KnowledgeBase]
ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "examples" / "handbook-eval"
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def select(kb: KnowledgeBase, query: str, scope: Scope | None = None, **config: Any) -> Selection:
    request = RetrievalRequest(query, scope=scope if scope is not None else Scope())
    return retrieve(kb, request, RetrievalConfig(**config))


def primary_ids(selection: Selection) -> list[str]:
    return [item.entry.id for item in selection.primary]


def queries(name: str) -> list[str]:
    lines = (EVAL / name).read_text("utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


@pytest.fixture(scope="module")
def handbook() -> KnowledgeBase:
    return KnowledgeBase.from_sources(load_sources(ROOT / "examples" / "handbook"))


@pytest.fixture(scope="module")
def every_integration(handbook: KnowledgeBase) -> Scope:
    return Scope(tuple(sorted({name for entry in handbook for name in entry.integrations})))


# -- informative terms ------------------------------------------------------------------------


def test_question_framing_words_carry_no_information(handbook: KnowledgeBase) -> None:
    evidence = query_evidence(handbook, "how do I rotate an API key?", RelevanceGate())
    assert evidence.terms == ("rotat", "api", "key")
    assert all(weight > 0 for weight in evidence.weights)
    for framing in ("how do I", "what is the", "can I", "where can we"):
        assert query_evidence(handbook, framing, RelevanceGate()).terms == ()


def test_query_stopwords_are_the_extended_list_for_english_only() -> None:
    english = query_stopwords(Analyzer())
    assert {"how", "do", "i", "what", "can", "where"} <= english
    from groundwire.config import AnalyzerConfig

    assert query_stopwords(Analyzer(AnalyzerConfig(language="german"))) == frozenset()


def test_unknown_words_weigh_the_most_and_match_nothing(handbook: KnowledgeBase) -> None:
    evidence = query_evidence(handbook, "sourdough api", RelevanceGate())
    weights = dict(zip(evidence.terms, evidence.weights, strict=True))
    assert weights["sourdough"] > weights["api"]
    assert evidence.rows[evidence.terms.index("sourdough")].shape[0] == 0


def test_idf_floor_drops_terms_in_most_documents_unless_nothing_is_left(
    handbook: KnowledgeBase,
) -> None:
    floor = RelevanceGate(idf_floor=0.5)  # "workflow" is in two thirds of the entries
    assert "workflow" in query_evidence(handbook, "onboarding workflow", RelevanceGate()).terms
    assert query_evidence(handbook, "onboarding workflow", floor).terms == ("onboard",)
    assert query_evidence(handbook, "workflow", floor).terms == ("workflow",)


def test_a_query_without_informative_words_is_read_with_its_turns(
    handbook: KnowledgeBase,
) -> None:
    evidence = query_evidence(handbook, "and that?", RelevanceGate(), ["rotate api key"])
    assert evidence.terms == ("rotat", "api", "key")
    assert query_evidence(handbook, "okta", RelevanceGate(), ["rotate"]).terms == ("okta",)


# -- coverage and the passing rules -------------------------------------------------------------


def test_coverage_is_the_idf_weighted_share_of_matched_terms(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("a.both", body="zebra giraffe"),
        entry("a.zebra", body="zebra"),
        entry("a.none", body="okapi"),
    )
    evidence = query_evidence(kb, "zebra giraffe", RelevanceGate())
    docs = [kb.position(i) or 0 for i in ("a.both", "a.zebra", "a.none")]
    verdict = gate_candidates(evidence, docs, [3.0, 2.0, 1.0], RelevanceGate(score_ratio=0.0))
    both, zebra, none = verdict.coverage
    assert both == pytest.approx(1.0)
    weights = dict(zip(evidence.terms, evidence.weights, strict=True))
    assert zebra == pytest.approx(weights["zebra"] / sum(weights.values()), abs=1e-6)
    assert none == 0.0
    assert verdict.matched_terms == (2, 1, 0)
    # "zebra" is in two of three entries, so it weighs less than "giraffe": under half.
    assert zebra < 0.5
    assert verdict.kept == (0,)


def test_partial_coverage_needs_a_second_sign(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("a.one", body="alpha beta"), entry("a.two", body="gamma"))
    evidence = query_evidence(kb, "alpha beta gamma delta", RelevanceGate())
    doc = [kb.position("a.one") or 0]
    loose = RelevanceGate(score_ratio=0.0)
    # Two of four terms, one of them unknown (heavier): above partial, below min coverage.
    coverage = gate_candidates(evidence, doc, [1.0], loose).coverage[0]
    assert 0.25 < coverage < 0.5
    assert gate_candidates(evidence, doc, [1.0], loose, noise=10.0).kept == ()
    assert gate_candidates(evidence, doc, [20.0], loose, noise=10.0).kept == (0,)  # strong
    assert gate_candidates(evidence, doc, [1.0], loose, noise=10.0, phrase=[True]).kept == (0,)
    assert gate_candidates(
        evidence, doc, [1.0], RelevanceGate(many_terms=2, score_ratio=0.0), noise=10.0
    ).kept == (0,)
    # A phrase hit alone is not enough below partial_coverage.
    tight = RelevanceGate(partial_coverage=0.4, score_ratio=0.0)
    assert gate_candidates(evidence, doc, [1.0], tight, noise=10.0, phrase=[True]).kept == ()


def test_candidates_far_below_the_best_are_cut(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("a.one", body="zebra"), entry("a.two", body="zebra"))
    evidence = query_evidence(kb, "zebra", RelevanceGate())
    docs = [kb.position("a.one") or 0, kb.position("a.two") or 0]
    assert gate_candidates(evidence, docs, [10.0, 5.0], RelevanceGate()).kept == (0, 1)
    assert gate_candidates(evidence, docs, [10.0, 4.9], RelevanceGate()).kept == (0,)
    assert gate_candidates(evidence, docs, [10.0, 4.9], RelevanceGate(), limit=1).kept == (0,)


def test_noise_level_is_a_per_snapshot_quantile_of_single_term_scores(
    handbook: KnowledgeBase, entry: Entry, build_kb: Build
) -> None:
    level = noise_level(handbook, 0.9)
    assert level == noise_level(handbook, 0.9)  # remembered, deterministic
    assert 0 < noise_level(handbook, 0.5) <= level <= noise_level(handbook, 1.0)
    best = max(handbook.search(e.title, k=1)[0].score for e in list(handbook)[:3])
    assert level < best
    assert noise_level(build_kb(entry("a.one", body="zebra")), 0.9) > 0


def test_relevance_gate_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="min_coverage"):
        RelevanceGate(min_coverage=1.5)
    with pytest.raises(ConfigError, match="min_terms"):
        RelevanceGate(min_terms=0)
    with pytest.raises(ConfigError, match="high_coverage"):
        RelevanceGate(min_coverage=0.6, high_coverage=0.5)
    with pytest.raises(ConfigError, match="gate"):
        RetrievalConfig(gate="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="relevance"):
        RetrievalConfig(relevance={"min_coverage": 0.2})  # type: ignore[arg-type]


# -- the pipeline stage ---------------------------------------------------------------------------


def test_off_topic_questions_get_nothing_and_keep_their_candidates(
    handbook: KnowledgeBase,
) -> None:
    selection = select(handbook, "what is the capital of France")
    assert selection.primary == ()
    assert selection.expanded == ()
    assert selection.confidence == "none"
    assert selection.candidates  # "what" matched entries: they stay inspectable
    assert all(item.coverage == 0.0 for item in selection.candidates)


def test_the_gate_only_cuts_the_ranked_candidates(handbook: KnowledgeBase) -> None:
    gated = select(handbook, "how do i rotate an api key")
    fixed = select(handbook, "how do i rotate an api key", gate="off")
    assert [c.entry.id for c in gated.candidates] == [c.entry.id for c in fixed.candidates]
    assert [c.score for c in gated.candidates] == [c.score for c in fixed.candidates]
    assert primary_ids(gated)[0] == "security.api-key-rotation"
    assert len(gated.primary) < len(fixed.primary) == 8


def test_gate_off_is_the_fixed_count_selection(handbook: KnowledgeBase) -> None:
    fixed = select(handbook, "what is the capital of France", gate="off")
    assert primary_ids(fixed) == [c.entry.id for c in fixed.candidates[:8]]
    assert len(fixed.expanded) == 4
    assert fixed.confidence in {"low", "medium"}
    assert all(item.coverage is None for item in fixed.candidates)


def test_expansion_follows_only_kept_entries_and_needs_coverage(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("a.kept", title="Zebra stripes", body="zebra stripes", related=["a.linked"]),
        # Ranks second on a strong title match of the common word alone: the gate drops it.
        entry("a.weak", title="Zebra herd", body="zebra zebra", related=["a.from-weak"]),
        entry("a.linked", body="stripes and many other words of filler"),
        entry("a.from-weak", body="stripes and many more words of filler too"),
        *(entry(f"a.filler{n}", body="zebra") for n in range(4)),
    )
    fixed = select(kb, "zebra stripes", gate="off", result_limit=2)
    assert primary_ids(fixed) == ["a.kept", "a.weak"]
    assert [e.id for e in fixed.expanded] == ["a.linked", "a.from-weak"]
    gated = select(kb, "zebra stripes", result_limit=2)
    assert primary_ids(gated) == ["a.kept"]
    assert [e.id for e in gated.expanded] == ["a.linked"]  # the weak entry's link is gone


def test_a_linked_entry_without_the_query_is_not_expanded(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("a.kept", title="Zebra", body="zebra", related=["a.other"]),
        entry("a.other", body="okapi"),
    )
    assert select(kb, "zebra").expanded == ()
    assert [e.id for e in select(kb, "zebra", gate="off").expanded] == ["a.other"]


def test_confidence_classes(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("a.full", title="Zebra crossing", body="zebra crossing rules"),
        entry("a.part", body="giraffe necks"),
        entry("a.filler", body="okapi"),
    )
    assert select(kb, "zebra crossing").confidence == "high"  # exact title, full coverage
    assert select(kb, "rules for a zebra").confidence == "high"  # all of it, no phrase
    half = select(kb, "zebra giraffe", relevance=RelevanceGate(score_ratio=0.0))
    assert half.confidence == "medium"
    assert select(kb, "penguin").confidence == "none"


# -- the handbook: abstention, precision, recall (small enough to run in the suite) -------------


def test_handbook_off_topic_and_unanswerable_questions_abstain(
    handbook: KnowledgeBase, every_integration: Scope
) -> None:
    for scope in (Scope(), every_integration):
        off = [q for q in queries("off-topic.jsonl") if select(handbook, q, scope).primary]
        assert len(off) <= 0.1 * len(queries("off-topic.jsonl")), off
        product = [q for q in queries("unanswerable.jsonl") if select(handbook, q, scope).primary]
        assert len(product) <= 0.5 * len(queries("unanswerable.jsonl")), product


def test_every_judged_handbook_question_keeps_a_block(handbook_path: Path) -> None:
    sources = load_sources(handbook_path)
    kb = KnowledgeBase.from_sources(sources)
    scope = Scope(tuple(sorted({name for entry in kb for name in entry.integrations})))
    judged: dict[str, set[str]] = {}
    for line in (EVAL / "qrels.tsv").read_text("utf-8").splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        if int(grade) > 0:
            judged.setdefault(qid, set()).add(doc)
    texts = {
        row["_id"]: row["text"]
        for row in map(json.loads, (EVAL / "queries.jsonl").read_text("utf-8").splitlines())
    }
    with GroundingEngine(GroundingConfig(sources=sources, timeout_ms=60_000)) as engine:
        precision, recall = [], []
        for qid, relevant in judged.items():
            outcome = engine.ground(texts[qid], scope=scope)
            assert outcome.block is not None, texts[qid]
            assert outcome.retrieval is not None
            assert outcome.retrieval.context is not None
            included = outcome.retrieval.context.included_ids
            hits = len(relevant.intersection(included))
            precision.append(hits / len(included))
            recall.append(hits / len(relevant))
    assert sum(precision) / len(precision) >= 0.5
    assert sum(recall) / len(recall) >= 0.74


# -- scope hints ----------------------------------------------------------------------------------


def test_scope_hint_counts_and_names_integrations_that_would_include_entries(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("a.general", body="webhooks retries"),
        entry("slack.hooks", body="webhooks", integrations=["Slack"]),
        entry("teams.hooks", body="webhooks", integrations=["teams"]),
        entry("jira.other", body="issues", integrations=["jira"]),
    )
    selection = select(kb, "webhooks")
    assert selection.scope_hint.count == 2
    assert selection.scope_hint.integrations == ("slack", "teams")
    enabled = select(kb, "webhooks", Scope(["slack", "teams"]))
    assert enabled.scope_hint.count == 0
    assert {"slack.hooks", "teams.hooks"} <= set(primary_ids(enabled))


def test_scope_hint_never_reveals_blocked_domains_or_denied_entries(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("a.general", body="webhooks"),
        entry("secret.hooks", body="webhooks", domain="secret", integrations=["vault"]),
        entry("denied.hooks", body="webhooks", integrations=["denied"]),
    )
    request = RetrievalRequest("webhooks", scope=Scope())
    config = RetrievalConfig()
    allowed = retrieve(kb, request, config, ("secret",), lambda e: e.id != "denied.hooks")
    assert allowed.scope_hint.count == 0
    assert allowed.scope_hint.integrations == ()
    assert retrieve(kb, request, config).scope_hint.integrations == ("denied", "vault")


# -- the property: the gate never adds an entry -------------------------------------------------

WORDS = ["zebra", "giraffe", "okapi", "stripes", "necks", "savanna", "herd", "grass"]


@PROPERTY
@given(
    bodies=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=1, max_size=9
    ),
    links=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=8),
    query=st.lists(st.sampled_from([*WORDS, "how", "do", "i", "what", "unknown"]), max_size=6),
    result_limit=st.integers(1, 4),
    relation_limit=st.integers(0, 3),
)
def test_the_gate_never_returns_an_entry_the_fixed_count_would_not(
    bodies: list[list[str]],
    links: list[tuple[int, int]],
    query: list[str],
    result_limit: int,
    relation_limit: int,
) -> None:
    related: dict[int, list[str]] = {}
    for a, b in links:
        if a < len(bodies) and b < len(bodies) and a != b:
            related.setdefault(a, []).append(f"e.{b}")
    entries = [
        {
            "id": f"e.{n}",
            "title": "Filler",
            "summary": "filler",
            "domain": "e",
            "integrations": [],
            "body": " ".join(words),
            "related": related.get(n, []),
        }
        for n, words in enumerate(bodies)
    ]
    kb = KnowledgeBase.from_sources([{"id": "kb", "version": "v1", "entries": entries}])
    text = " ".join(query) or "zebra"
    limits = {"result_limit": result_limit, "relation_limit": relation_limit}
    gated = select(kb, text, **limits)
    fixed = select(kb, text, gate="off", **limits)
    kept = primary_ids(gated)
    assert kept == [i for i in primary_ids(fixed) if i in kept]  # a subset, in rank order
    everything = set(primary_ids(fixed)) | {e.id for e in fixed.expanded}
    assert set(kept) | {e.id for e in gated.expanded} <= everything
    assert len(gated.expanded) <= relation_limit
    sources = {item.entry.id for item in gated.primary}
    for linked in gated.expanded:
        assert linked.id not in sources
        assert any(linked.id in kb.related(i) for i in sources)
    if not gated.primary:
        assert gated.expanded == ()
        assert gated.confidence == "none"


# -- documents ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs_kb() -> KnowledgeBase:
    from groundwire import chunk_document, chunks_to_documents, load_documents
    from groundwire.config import ChunkingConfig, chunk_settings

    loaded = load_documents([ROOT / "examples" / "docs"])
    chunks = [c for d in loaded.documents for c in chunk_document(d, ChunkingConfig())]
    return KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())


def test_off_topic_questions_over_the_example_docs_get_no_evidence(
    docs_kb: KnowledgeBase,
) -> None:
    from groundwire import retrieve_evidence

    for question in queries("off-topic.jsonl"):
        result = retrieve_evidence(docs_kb, question)
        assert not result.ready, question
        assert result.reason in {"no-match", "low-relevance"}
    fixed = [retrieve_evidence(docs_kb, q, gate="off") for q in queries("off-topic.jsonl")]
    assert any(result.ready for result in fixed)  # without the gate some get evidence


@pytest.mark.parametrize(
    "question",
    [
        "what happens when I exceed the rate limit",
        "how are webhook deliveries retried",
        "verify_signature",
        "how do I paginate list results",
    ],
)
def test_the_document_gate_only_cuts(docs_kb: KnowledgeBase, question: str) -> None:
    from groundwire import retrieve_evidence

    gated = retrieve_evidence(docs_kb, question, limit=20, candidate_limit=64)
    fixed = retrieve_evidence(docs_kb, question, limit=20, candidate_limit=64, gate="off")
    assert gated.ready
    kept = {chunk for excerpt in gated.excerpts for chunk in excerpt.chunk_ids}
    every = {chunk for excerpt in fixed.excerpts for chunk in excerpt.chunk_ids}
    assert kept <= every
    assert gated.tokens <= fixed.tokens
