"""The grounding engine: background build, status, fail-open turns, rebuilds and the cache."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from groundwire import (
    ContextConfig,
    GroundingConfig,
    GroundingEngine,
    GroundingMetadata,
    GroundingOutcome,
    IndexSettings,
    KnowledgeSource,
    RetrievalConfig,
    Scope,
    SnapshotCache,
    Turn,
    create_grounding_engine,
    load_sources,
)
from groundwire.index.cache import BuildResult

MakeEngine = Callable[..., GroundingEngine]
Factory = Callable[..., dict[str, Any]]

#: Safety net for waits on events a test sets itself; never reached when the test passes.
SAFETY_SECONDS = 30


class BlockingCache(SnapshotCache):
    """A private snapshot cache whose builds wait until the test sets ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def get_or_build(
        self,
        sources: Sequence[KnowledgeSource | Mapping[str, Any]],
        settings: IndexSettings | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        previous: Any = None,
    ) -> BuildResult:
        self.entered.set()
        self.release.wait(SAFETY_SECONDS)
        return super().get_or_build(sources, settings, progress=progress, previous=previous)


@pytest.fixture
def blocking_cache() -> BlockingCache:
    return BlockingCache()


def ground_ids(outcome: GroundingOutcome) -> tuple[str, ...]:
    return outcome.metadata.selected_ids


def assert_empty_failure(outcome: GroundingOutcome, reason: str) -> None:
    """A failure before retrieval: no block, no retrieval, empty metadata."""
    assert outcome.block is None
    assert outcome.retrieval is None
    assert dataclasses.replace(outcome.metadata, duration_ms=0.0) == GroundingMetadata(
        failure_reason=reason  # type: ignore[arg-type]
    )


# -- construction and readiness -------------------------------------------------------------------


def test_constructor_returns_before_the_build_completes(
    make_engine: MakeEngine, blocking_cache: BlockingCache, animals: dict[str, Any]
) -> None:
    engine = make_engine(GroundingConfig(sources=[animals], timeout_ms=20), cache=blocking_cache)
    assert blocking_cache.entered.wait(SAFETY_SECONDS)  # the build runs in the background

    assert engine.ready(timeout=0) is False
    status = engine.status()
    assert (status.enabled, status.ready, status.entry_count) == (True, False, 0)
    assert engine.knowledge_base is None

    # The build never finishes within this turn's budget: fail open, do not wait.
    assert_empty_failure(engine.ground("zebra"), "index-not-ready")

    blocking_cache.release.set()
    assert engine.ready() is True
    assert engine.status().ready is True
    assert engine.status().entry_count == 3
    outcome = engine.ground("zebra")
    assert outcome.block is not None
    assert ground_ids(outcome)[0] == "animals.zebra"


def test_aready_waits_for_the_build(
    make_engine: MakeEngine, blocking_cache: BlockingCache, animals: dict[str, Any]
) -> None:
    engine = make_engine(GroundingConfig(sources=[animals]), cache=blocking_cache)
    assert blocking_cache.entered.wait(SAFETY_SECONDS)
    assert asyncio.run(engine.aready(timeout=0)) is False
    blocking_cache.release.set()
    assert asyncio.run(engine.aready()) is True


def test_status_of_a_ready_engine_reports_warnings(
    make_engine: MakeEngine, entry_factory: Factory, source_factory: Factory
) -> None:
    source = source_factory(
        entry_factory("a.one", related=["a.missing"]), entry_factory("a.two", parent="a.gone")
    )
    engine = make_engine(GroundingConfig(sources=[source]))
    assert engine.ready() is True

    status = engine.status()
    assert status.enabled is True
    assert status.ready is True
    assert status.entry_count == 2
    assert status.last_error is None
    assert [(i.severity, i.code) for i in status.validation_issues] == [
        ("warning", "related-missing"),
        ("warning", "parent-missing"),
    ]


def test_invalid_sources_keep_the_engine_not_ready(
    make_engine: MakeEngine, entry_factory: Factory, source_factory: Factory
) -> None:
    bad = entry_factory("a.bad", kind="poem")
    del bad["summary"]
    source = source_factory(entry_factory("a.good", summary="zebra"), bad)
    engine = make_engine(GroundingConfig(sources=[source]))

    assert engine.ready() is False
    status = engine.status()
    assert status.ready is False
    assert status.entry_count == 0
    assert status.last_error is not None
    assert "validation failed" in status.last_error
    errors = {(i.severity, i.code, i.entry_id) for i in status.validation_issues}
    assert errors == {("error", "summary-missing", "a.bad"), ("error", "kind-unsupported", "a.bad")}
    assert engine.knowledge_base is None
    # A partially valid source set is never installed: even the valid entry is not served.
    assert_empty_failure(engine.ground("zebra"), "index-not-ready")


class BrokenCache(SnapshotCache):
    """A cache whose build raises, as an index bug would."""

    def get_or_build(self, *args: Any, **kwargs: Any) -> BuildResult:
        raise RuntimeError("index builder exploded")


def test_build_exception_is_recorded_not_raised(
    make_engine: MakeEngine, animals: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="groundwire"):
        engine = make_engine(GroundingConfig(sources=[animals]), cache=BrokenCache())
        assert engine.ready() is False
    status = engine.status()
    assert status.ready is False
    assert status.entry_count == 0
    assert status.last_error == "RuntimeError: index builder exploded"
    assert status.validation_issues == ()
    assert any("build failed" in r.getMessage() for r in caplog.records)
    assert_empty_failure(engine.ground("zebra"), "index-not-ready")


def test_disabled_engine_skips_grounding(make_engine: MakeEngine, animals: dict[str, Any]) -> None:
    engine = make_engine(GroundingConfig(enabled=False, sources=[animals]))
    outcome = engine.ground("zebra")

    assert_empty_failure(outcome, "disabled")
    status = engine.status()
    assert status.enabled is False
    assert status.ready is False
    assert engine.ready(timeout=0) is False
    assert asyncio.run(engine.aground("zebra")).metadata.failure_reason == "disabled"


# -- create_grounding_engine ----------------------------------------------------------------------


def test_create_returns_none_when_not_configured_or_disabled(
    animals: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="groundwire"):
        assert create_grounding_engine(None) is None
        assert create_grounding_engine(GroundingConfig(enabled=False, sources=[animals])) is None
    assert caplog.records == []


def test_create_warns_and_returns_none_without_sources(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="groundwire"):
        assert create_grounding_engine(GroundingConfig(enabled=True, sources=[])) is None
    assert [(r.name, r.levelno) for r in caplog.records] == [("groundwire", logging.WARNING)]
    assert "no sources" in caplog.records[0].getMessage()


def test_create_returns_an_engine_for_sources_even_if_invalid(
    animals: dict[str, Any], entry_factory: Factory, source_factory: Factory
) -> None:
    engine = create_grounding_engine(GroundingConfig(sources=[animals]))
    assert isinstance(engine, GroundingEngine)
    try:
        assert engine.ready() is True
    finally:
        engine.close()

    invalid = source_factory(entry_factory("a.one", status="retired"))
    engine = create_grounding_engine(GroundingConfig(sources=[invalid]))
    assert isinstance(engine, GroundingEngine)
    try:
        assert engine.ready() is False
        assert [i.code for i in engine.status().validation_issues] == ["status-unsupported"]
    finally:
        engine.close()


# -- a grounded turn ------------------------------------------------------------------------------


def test_ground_returns_block_metadata_and_retrieval(
    make_engine: MakeEngine, handbook_sources: list[KnowledgeSource]
) -> None:
    engine = make_engine(GroundingConfig(sources=handbook_sources))
    assert engine.ready()
    outcome = engine.ground("What is the refund policy?")

    retrieval = outcome.retrieval
    assert retrieval is not None
    assert retrieval.context is not None
    block = outcome.block
    assert block is not None
    assert block.kind == "knowledge"
    assert block.trusted is True
    assert block.content == retrieval.context.text
    assert block.content.startswith("<knowledge_context>")
    assert block.content.endswith("</knowledge_context>")
    assert "[KB:billing.refund-policy@2026-11-15]" in block.content
    assert block.citations == retrieval.context.citations
    assert block.citations[0].tag == "[KB:billing.refund-policy@2026-11-15]"
    assert block.metadata == {"confidence": "high"}

    meta = outcome.metadata
    assert meta.failure_reason is None
    assert meta.confidence == "high" == retrieval.confidence
    assert meta.selected_ids[0] == "billing.refund-policy"
    assert meta.selected_ids == retrieval.selected_ids
    assert len(meta.selected_ids) <= 8
    assert meta.expanded_ids == retrieval.expanded_ids
    assert len(meta.expanded_ids) <= 4
    assert set(meta.expanded_ids).isdisjoint(meta.selected_ids)
    assert meta.candidate_count == retrieval.candidate_count >= len(meta.selected_ids)
    assert meta.context_tokens == retrieval.context.tokens
    assert 0 < meta.context_tokens <= 4000
    assert meta.truncated == retrieval.context.truncated
    assert meta.duration_ms == retrieval.duration_ms >= 0.0


def test_duration_comes_from_the_injected_clock(
    make_engine: MakeEngine, animals: dict[str, Any]
) -> None:
    engine = make_engine(GroundingConfig(sources=[animals]), clock=lambda: 42.0)
    assert engine.ready()
    assert engine.ground("zebra").metadata.duration_ms == 0.0
    assert engine.ground("").metadata.duration_ms == 0.0


@pytest.mark.parametrize("query", ["", "   ", "\n\t "])
def test_empty_query(make_engine: MakeEngine, animals: dict[str, Any], query: str) -> None:
    engine = make_engine(GroundingConfig(sources=[animals]))
    assert engine.ready()
    assert_empty_failure(engine.ground(query), "empty-query")


def test_no_match(make_engine: MakeEngine, animals: dict[str, Any]) -> None:
    engine = make_engine(GroundingConfig(sources=[animals]))
    assert engine.ready()
    outcome = engine.ground("xylophone quantum")

    assert outcome.block is None
    assert outcome.metadata.failure_reason == "no-match"
    assert outcome.metadata.selected_ids == ()
    assert outcome.metadata.confidence == "none"
    assert outcome.metadata.candidate_count == 0
    assert outcome.retrieval is not None
    assert outcome.retrieval.primary == ()


def test_budget_exhausted(make_engine: MakeEngine, animals: dict[str, Any]) -> None:
    config = GroundingConfig(sources=[animals], context=ContextConfig(max_tokens=5))
    engine = make_engine(config)
    assert engine.ready()
    outcome = engine.ground("zebra")

    assert outcome.block is None
    meta = outcome.metadata
    assert meta.failure_reason == "budget-exhausted"
    assert meta.selected_ids[0] == "animals.zebra"
    assert meta.confidence == "high"
    assert meta.context_tokens == 0
    assert meta.truncated is True
    assert outcome.retrieval is not None
    assert outcome.retrieval.context is not None
    assert outcome.retrieval.context.dropped_ids[0] == "animals.zebra"


def test_timeout_fails_open(make_engine: MakeEngine, animals: dict[str, Any]) -> None:
    entered, gate = threading.Event(), threading.Event()

    def blocking_estimator(text: str) -> int:
        entered.set()
        gate.wait(SAFETY_SECONDS)
        return 1

    config = GroundingConfig(
        sources=[animals],
        context=ContextConfig(token_estimator=blocking_estimator),
        timeout_ms=30,
    )
    engine = make_engine(config)
    assert engine.ready()  # the build is done: the turn itself runs out of time
    try:
        outcome = engine.ground("zebra")
        assert entered.is_set()
        assert_empty_failure(outcome, "timeout")
    finally:
        gate.set()


class EstimatorBrokeError(Exception):
    pass


def test_unexpected_error_fails_open(
    make_engine: MakeEngine, animals: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    def broken_estimator(text: str) -> int:
        raise EstimatorBrokeError("tokenizer unavailable")

    config = GroundingConfig(
        sources=[animals], context=ContextConfig(token_estimator=broken_estimator)
    )
    engine = make_engine(config)
    assert engine.ready()
    with caplog.at_level(logging.ERROR, logger="groundwire"):
        outcome = engine.ground("zebra")
    assert_empty_failure(outcome, "error")
    assert any(r.exc_info and r.exc_info[0] is EstimatorBrokeError for r in caplog.records)

    async_outcome = asyncio.run(engine.aground("zebra"))
    assert async_outcome.metadata.failure_reason == "error"


def test_internal_timeout_error_is_an_error_not_a_turn_timeout(
    make_engine: MakeEngine, animals: dict[str, Any]
) -> None:
    def estimator(text: str) -> int:
        raise TimeoutError("remote tokenizer timed out")

    config = GroundingConfig(
        sources=[animals], context=ContextConfig(token_estimator=estimator), timeout_ms=60_000
    )
    engine = make_engine(config)
    assert engine.ready()
    assert engine.ground("zebra").metadata.failure_reason == "error"


@pytest.mark.parametrize(
    ("query", "turns", "scope", "reason"),
    [
        ("zebra", [42], None, "error"),
        ("zebra", ["just a string"], None, "error"),
        ("zebra", None, "slack", "error"),
        ("zebra", None, {"enabled_integrations": "slack"}, "error"),
        ("zebra", None, 17, "error"),
        (b"zebra", None, None, "empty-query"),  # not a string: no query
        (None, None, None, "empty-query"),
    ],
)
def test_bad_input_never_raises(
    make_engine: MakeEngine,
    animals: dict[str, Any],
    query: Any,
    turns: Any,
    scope: Any,
    reason: str,
) -> None:
    engine = make_engine(GroundingConfig(sources=[animals]))
    assert engine.ready()
    outcome = engine.ground(query, turns, scope)
    assert outcome.block is None
    assert outcome.metadata.failure_reason == reason
    assert asyncio.run(engine.aground(query, turns, scope)).metadata.failure_reason == reason


# -- turns and scope ------------------------------------------------------------------------------


@pytest.fixture
def animal_engine(make_engine: MakeEngine, animals: dict[str, Any]) -> GroundingEngine:
    # a generous turn timeout: a loaded CI machine can exceed the 800 ms default
    engine = make_engine(GroundingConfig(sources=[animals], timeout_ms=60_000))
    assert engine.ready()
    return engine


@pytest.fixture
def fixed_count_engine(make_engine: MakeEngine, animals: dict[str, Any]) -> GroundingEngine:
    """The seed's fixed-count selection (no relevance gate)."""
    engine = make_engine(
        GroundingConfig(sources=[animals], retrieval=RetrievalConfig(gate="off"), timeout_ms=60_000)
    )
    assert engine.ready()
    return engine


def test_a_query_over_the_limit_is_cut_not_failed(animal_engine: GroundingEngine) -> None:
    pasted = "zebra " + "and then " * 2_000 + "giraffe"  # both ends survive the cut
    outcome = animal_engine.ground(pasted)
    assert outcome.block is not None
    assert set(ground_ids(outcome)) == {"animals.zebra", "animals.giraffe"}
    assert outcome.metadata.truncated_query is True
    assert outcome.retrieval is not None
    assert 7_900 < len(outcome.retrieval.query) <= RetrievalConfig().max_query_chars
    assert animal_engine.ground("zebra").metadata.truncated_query is False


def test_turns_widen_the_ranking_but_the_query_decides_relevance(
    animal_engine: GroundingEngine,
) -> None:
    # "stripes" from an earlier turn ranks the zebra, but the question is about necks.
    outcome = animal_engine.ground("long necks", [Turn("user", "what about stripes?")])
    assert ground_ids(outcome) == ("animals.giraffe",)
    assert outcome.retrieval is not None
    assert "animals.zebra" in {item.entry.id for item in outcome.retrieval.candidates}
    # A follow-up without informative words of its own is read with its turns.
    follow_up = animal_engine.ground("and what about that?", [Turn("user", "zebra stripes")])
    assert ground_ids(follow_up) == ("animals.zebra",)


def test_recent_turns_as_turns_and_mappings(fixed_count_engine: GroundingEngine) -> None:
    animal_engine = fixed_count_engine
    assert ground_ids(animal_engine.ground("long necks")) == ("animals.giraffe",)

    as_turns = animal_engine.ground("long necks", [Turn("user", "what about stripes?")])
    as_mappings = animal_engine.ground(
        "long necks", [{"role": "user", "content": "what about stripes?"}]
    )
    for outcome in (as_turns, as_mappings):
        assert set(ground_ids(outcome)) == {"animals.giraffe", "animals.zebra"}
        assert outcome.metadata.confidence != "high"  # turns never produce phrase hits
    assert as_turns.metadata == dataclasses.replace(
        as_mappings.metadata, duration_ms=as_turns.metadata.duration_ms
    )


def test_engine_uses_only_the_last_four_turns(fixed_count_engine: GroundingEngine) -> None:
    animal_engine = fixed_count_engine
    filler = [{"role": "assistant", "content": f"reply {n}"} for n in range(4)]
    fifth = animal_engine.ground("long necks", [Turn("user", "stripes"), *filler])
    assert ground_ids(fifth) == ("animals.giraffe",)

    fourth = animal_engine.ground("long necks", [Turn("user", "stripes"), *filler[1:]])
    assert "animals.zebra" in ground_ids(fourth)


def test_scope_as_scope_and_as_mapping(animal_engine: GroundingEngine) -> None:
    assert animal_engine.ground("okapi").metadata.failure_reason == "no-match"
    assert animal_engine.ground("okapi", scope={"enabled_integrations": []}).block is None

    for scope in (Scope(("Slack",)), {"enabled_integrations": ["SLACK"]}):
        outcome = animal_engine.ground("okapi", scope=scope)
        assert ground_ids(outcome) == ("slack.okapi",)
        assert outcome.block is not None
        assert "[KB:slack.okapi@v1]" in outcome.block.content


def test_blocked_domains_apply_to_turns(make_engine: MakeEngine, animals: dict[str, Any]) -> None:
    engine = make_engine(GroundingConfig(sources=[animals], blocked_domains=("ANIMALS",)))
    assert engine.ready()
    assert engine.ground("zebra").metadata.failure_reason == "no-match"
    assert ground_ids(engine.ground("okapi", scope=Scope(("slack",)))) == ("slack.okapi",)


def test_aground_matches_ground(animal_engine: GroundingEngine) -> None:
    args = ("zebra", [{"role": "user", "content": "necks"}], {"enabled_integrations": ["slack"]})
    sync = animal_engine.ground(*args)
    async_ = asyncio.run(animal_engine.aground(*args))

    assert async_.block == sync.block
    assert async_.block is not None
    assert dataclasses.replace(async_.metadata, duration_ms=0.0) == dataclasses.replace(
        sync.metadata, duration_ms=0.0
    )
    assert async_.retrieval is not None
    assert sync.retrieval is not None
    assert async_.retrieval.selected_ids == sync.retrieval.selected_ids
    assert async_.retrieval.expanded_ids == sync.retrieval.expanded_ids

    empty = asyncio.run(animal_engine.aground(" "))
    assert empty.metadata.failure_reason == "empty-query"


# -- rebuild --------------------------------------------------------------------------------------


def test_rebuild_swaps_in_new_sources(
    make_engine: MakeEngine,
    animals: dict[str, Any],
    entry_factory: Factory,
    source_factory: Factory,
) -> None:
    engine = make_engine(GroundingConfig(sources=[animals]))
    assert engine.ready()
    assert engine.ground("tapir").metadata.failure_reason == "no-match"
    before = engine.knowledge_base

    bigger = dict(
        animals,
        version="v2",
        entries=[*animals["entries"], entry_factory("animals.tapir", title="Tapir")],
    )
    status = engine.rebuild([bigger])

    assert status.ready is True
    assert status.entry_count == 4
    assert status.last_error is None
    assert engine.status() == status
    assert engine.knowledge_base is not before
    outcome = engine.ground("tapir")
    assert ground_ids(outcome) == ("animals.tapir",)
    assert outcome.block is not None
    assert "[KB:animals.tapir@v2]" in outcome.block.content

    # Without arguments the configured sources are rebuilt.
    assert engine.rebuild().entry_count == 3
    assert engine.ground("tapir").metadata.failure_reason == "no-match"


def test_rebuild_with_invalid_sources_keeps_serving_the_previous_snapshot(
    make_engine: MakeEngine,
    animals: dict[str, Any],
    entry_factory: Factory,
    source_factory: Factory,
) -> None:
    engine = make_engine(GroundingConfig(sources=[animals]))
    assert engine.ready()
    before = engine.knowledge_base

    broken = source_factory(entry_factory("animals.tapir", title="Tapir", integrations="all"))
    status = engine.rebuild([broken])

    assert status.ready is True
    assert status.entry_count == 3
    assert status.last_error is not None
    assert [(i.severity, i.code) for i in status.validation_issues] == [
        ("error", "integrations-invalid")
    ]
    assert engine.knowledge_base is before
    assert ground_ids(engine.ground("zebra"))[0] == "animals.zebra"
    assert engine.ground("tapir").metadata.failure_reason == "no-match"

    # A later valid rebuild clears the error.
    fixed = engine.rebuild([animals])
    assert fixed.last_error is None
    assert fixed.validation_issues == ()


def test_rebuild_fixes_an_engine_that_never_became_ready(
    make_engine: MakeEngine,
    animals: dict[str, Any],
    entry_factory: Factory,
    source_factory: Factory,
) -> None:
    bad = entry_factory("a.bad")
    del bad["domain"]
    engine = make_engine(GroundingConfig(sources=[source_factory(bad)]))
    assert engine.ready() is False
    assert engine.ground("zebra").metadata.failure_reason == "index-not-ready"

    status = engine.rebuild([animals])
    assert status.ready is True
    assert status.last_error is None
    assert engine.ground("zebra").block is not None


def test_concurrent_turns_during_rebuilds_see_one_whole_snapshot(
    make_engine: MakeEngine, entry_factory: Factory, source_factory: Factory
) -> None:
    old = source_factory(
        *(entry_factory(f"old.{n}", summary="zebra " * (n + 1)) for n in range(6)), version="v1"
    )
    new = source_factory(
        *(entry_factory(f"new.{n}", summary="zebra " * (n + 1)) for n in range(6)), version="v2"
    )
    old_ids = {f"old.{n}" for n in range(6)}
    new_ids = {f"new.{n}" for n in range(6)}
    engine = make_engine(GroundingConfig(sources=[old], timeout_ms=60_000), cache=SnapshotCache())
    assert engine.ready()

    calls_per_worker = 25
    started = threading.Barrier(7)
    outcomes: list[GroundingOutcome] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            started.wait(SAFETY_SECONDS)
            for _ in range(calls_per_worker):
                outcome = engine.ground("zebra")
                with lock:
                    outcomes.append(outcome)
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    started.wait(SAFETY_SECONDS)
    rebuilds = 0
    try:
        # Keep swapping snapshots for as long as any turn is still running.
        while any(thread.is_alive() for thread in threads):
            status = engine.rebuild([new if rebuilds % 2 == 0 else old])
            rebuilds += 1
            assert status.ready is True
            assert status.last_error is None
    finally:
        for thread in threads:
            thread.join(SAFETY_SECONDS)

    assert failures == []
    assert rebuilds > 0
    assert len(outcomes) == 6 * calls_per_worker
    for outcome in outcomes:
        assert outcome.metadata.failure_reason is None
        assert outcome.block is not None
        selected = set(outcome.metadata.selected_ids) | set(outcome.metadata.expanded_ids)
        cited = {c.id for c in outcome.block.citations}
        assert selected
        assert selected <= old_ids or selected <= new_ids
        assert cited <= old_ids or cited <= new_ids
        assert (selected <= old_ids) == (cited <= old_ids)
        versions = {c.version for c in outcome.block.citations}
        assert versions == ({"v1"} if selected <= old_ids else {"v2"})


# -- process-level cache --------------------------------------------------------------------------


def test_identical_sources_share_one_snapshot(
    make_engine: MakeEngine, entry_factory: Factory, source_factory: Factory
) -> None:
    def sources(summary: str) -> list[dict[str, Any]]:
        # Fresh objects every time: equality of content, not identity, decides sharing.
        return [source_factory(entry_factory("cache.shared", summary=summary), version="cache-1")]

    first = make_engine(GroundingConfig(sources=sources("Shared summary for the cache test.")))
    second = make_engine(GroundingConfig(sources=sources("Shared summary for the cache test.")))
    changed = make_engine(GroundingConfig(sources=sources("A different summary, same id.")))
    for engine in (first, second, changed):
        assert engine.ready()

    assert first.knowledge_base is not None
    assert first.knowledge_base is second.knowledge_base
    assert changed.knowledge_base is not first.knowledge_base
    assert changed.knowledge_base is not None
    assert changed.knowledge_base.get("cache.shared").summary == "A different summary, same id."  # type: ignore[union-attr]


def test_changed_metadata_is_not_served_from_a_stale_snapshot(
    make_engine: MakeEngine, entry_factory: Factory, source_factory: Factory
) -> None:
    def sources(owner: str) -> list[dict[str, Any]]:
        entry = entry_factory("cache.meta", metadata={"owner": owner})
        return [source_factory(entry, version="cache-meta-1")]

    first = make_engine(GroundingConfig(sources=sources("alice")))
    second = make_engine(GroundingConfig(sources=sources("bob")))
    assert first.ready()
    assert second.ready()
    assert second.knowledge_base is not None
    assert second.knowledge_base.get("cache.meta").metadata == {"owner": "bob"}  # type: ignore[union-attr]


def test_different_retrieval_settings_do_not_share_a_snapshot(
    make_engine: MakeEngine, animals: dict[str, Any]
) -> None:
    default = make_engine(GroundingConfig(sources=[animals]))
    weighted = make_engine(
        GroundingConfig(sources=[animals], retrieval=RetrievalConfig(field_weights={"body": 2.0}))
    )
    assert default.ready()
    assert weighted.ready()
    assert default.knowledge_base is not weighted.knowledge_base


def test_invalid_sources_log_one_warning_per_build_naming_errors_and_validate(
    make_engine: MakeEngine,
    entry_factory: Callable[..., dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "source.yaml").write_text('id: kb\nversion: "1"\n', encoding="utf-8")
    for n in range(5):  # five entries without integrations: five blocking errors
        (folder / f"e{n}.md").write_text(
            f"---\nid: e.n{n}\ntitle: T{n}\nsummary: S{n}.\ndomain: e\n---\nBody.\n",
            encoding="utf-8",
        )
    sources = load_sources(folder)
    with caplog.at_level(logging.WARNING, logger="groundwire"):
        engine = make_engine(GroundingConfig(sources=sources))
        assert engine.ready() is False
        outcome = engine.ground("body")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per build, not once per turn
    message = warnings[0].getMessage()
    assert "5 validation error(s)" in message
    assert "integrations-missing" in message
    assert "(and 2 more)" in message
    assert f"groundwire validate {folder}" in message
    assert outcome.metadata.failure_reason == "index-not-ready"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="groundwire"):
        engine.rebuild()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
