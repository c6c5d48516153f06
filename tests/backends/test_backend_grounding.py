"""Grounding turns over knowledge entries ranked by a search backend (``from_backend``).

The same turns run on the embedded engine (``from_snapshot``), on the embedded backend
and on Milvus Lite, and their outcomes are compared: the embedded backend must give the
embedded engine's outcome exactly; Milvus the same outcome shape everywhere and the same
selection where its BM25 statistics equal the snapshot's (every field filled: deviation 1
of docs/MILVUS.md does not arise). Authorization: the access suite's randomized scenarios
ground through Milvus with nothing leaked; a failing backend fails the turn open.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fake_servers
import pytest
from tests.conftest import load_by_path

import groundwire as gw
from groundwire.access.filters import admits

helpers = load_by_path("backend_helpers", Path(__file__).parent / "backend_helpers.py")
leaks = load_by_path("leak_scenarios", Path(__file__).parents[1] / "access" / "test_leaks.py")

HANDBOOK = Path(__file__).resolve().parents[2] / "examples" / "handbook"
EVAL = HANDBOOK.parent / "handbook-eval"
EMBEDDER = gw.HashingEmbedder(64)
#: A turn on Milvus Lite takes a few dozen calls; a shared CI machine needs room.
CONFIG = gw.GroundingConfig(timeout_ms=120_000)
#: The embedded engine as a backend turn behaves: scope as given (docs/MILVUS.md deviation 7).
STRICT = gw.RetrievalConfig(named_integrations=False)
REFERENCE = gw.GroundingConfig(timeout_ms=120_000, retrieval=STRICT)
SCOPES = (None, gw.Scope(["slack"]))


def _questions(limit: int) -> list[str]:
    """Handbook questions: answerable, off-topic and unanswerable ones, interleaved."""
    files = [EVAL / name for name in ("queries.jsonl", "off-topic.jsonl", "unanswerable.jsonl")]
    lists = [[json.loads(line)["text"] for line in f.read_text().splitlines()] for f in files]
    mixed = [q for group in zip(*lists, strict=False) for q in group]
    return mixed[:limit]


def signature(outcome: gw.GroundingOutcome) -> dict[str, Any]:
    """Everything a turn decides (durations left out)."""
    meta = dataclasses.replace(outcome.metadata, duration_ms=0.0)
    block = outcome.block
    retrieval = outcome.retrieval
    return {
        "metadata": meta,
        "block": None if block is None else (block.content, block.citations),
        "candidates": None
        if retrieval is None
        else [(c.entry, c.exact, c.alias, c.coverage) for c in retrieval.candidates],
        "expanded": None if retrieval is None else retrieval.expanded,
        "context": None if retrieval is None else retrieval.context,
    }


def decision(outcome: gw.GroundingOutcome) -> tuple[Any, ...]:
    """What a turn sends and reports: metadata (no duration) and the block."""
    block = outcome.block
    meta = dataclasses.replace(outcome.metadata, duration_ms=0.0)
    return meta, None if block is None else (block.content, block.citations)


def shape(outcome: gw.GroundingOutcome) -> tuple[Any, ...]:
    """The outcome's structure: which parts are present and their types."""
    retrieval = outcome.retrieval
    return (
        type(outcome.block),
        type(outcome.metadata),
        outcome.metadata.failure_reason is None,
        type(retrieval),
        None if retrieval is None else (type(retrieval.context), type(retrieval.candidates)),
        None if outcome.block is None else type(outcome.block.citations),
    )


@pytest.fixture(scope="module")
def handbook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    kb = gw.KnowledgeBase.from_sources(gw.load_sources(HANDBOOK))
    path = tmp_path_factory.mktemp("snapshot") / "handbook.snapshot"
    kb.save(path)
    with gw.GroundingEngine.from_snapshot(path, REFERENCE) as engine:
        yield kb, engine


# -- the embedded backend: exactly the embedded engine ---------------------------------------
TURNS = (
    {},
    {"recent_turns": [gw.Turn("user", "we use okta for single sign-on")]},
    {"blocked_domains": ["security"]},
    {"retrieval": gw.RetrievalConfig(gate="off")},
    {"retrieval": gw.RetrievalConfig(exact_boost=0.0, relation_limit=1, named_integrations=False)},
    {"context": gw.ContextConfig(max_tokens=120)},
)


@pytest.mark.parametrize("overrides", TURNS, ids=lambda o: ",".join(o) or "default")
def test_the_embedded_backend_grounds_exactly_as_the_engine(
    handbook: tuple[Any, Any], overrides: dict[str, Any]
) -> None:
    kb, reference = handbook
    with gw.GroundingEngine.from_backend(gw.EmbeddedBackend(kb), CONFIG) as engine:
        for question in _questions(30):
            for scope in SCOPES:
                want = reference.ground(question, scope=scope, **overrides)
                got = engine.ground(question, scope=scope, **overrides)
                assert signature(got) == signature(want), (question, scope)


def test_a_backend_turn_keeps_the_scope_when_the_question_names_an_integration(
    handbook: tuple[Any, Any],
) -> None:
    """Deviation 7: named integrations widen the scope on the embedded path only."""
    kb, reference = handbook
    question = "slack notifications stopped arriving in our channel"
    with gw.GroundingEngine.from_backend(gw.EmbeddedBackend(kb), CONFIG) as engine:
        got = engine.ground(question, scope=gw.Scope([]))
    want = reference.ground(question, scope=gw.Scope([]))
    assert got.metadata.named_integrations == ()
    assert signature(got) == signature(want)
    embedded = reference.ground(
        question, scope=gw.Scope([]), retrieval=gw.RetrievalConfig(named_integrations=True)
    )
    assert embedded.metadata.named_integrations == ("slack",)
    slack = {entry.id for entry in kb.entries if "slack" in entry.integrations}
    assert slack & set(embedded.metadata.selected_ids)
    assert not slack & set(got.metadata.selected_ids)


def test_a_backend_engine_reports_status_and_refuses_snapshot_swaps(
    handbook: tuple[Any, Any],
) -> None:
    kb, _ = handbook
    with gw.GroundingEngine.from_backend(gw.EmbeddedBackend(kb), CONFIG) as engine:
        assert engine.ready(0)
        status = engine.status()
        assert (status.ready, status.entry_count, status.last_error) == (True, len(kb), None)
        assert engine.knowledge_base is None
        assert isinstance(engine.backend, gw.EmbeddedBackend)
        with pytest.raises(gw.ConfigError, match="search backend"):
            engine.rebuild()
        with pytest.raises(gw.ConfigError, match="search backend"):
            engine.reload()
    with pytest.raises(gw.ConfigError, match="sources"):
        gw.GroundingEngine.from_backend(
            gw.EmbeddedBackend(kb), gw.GroundingConfig(sources=[gw.load_sources(HANDBOOK)[0]])
        )
    with pytest.raises(TypeError, match="SearchBackend"):
        gw.GroundingEngine.from_backend(kb)  # type: ignore[arg-type]


class _Failing(gw.EmbeddedBackend):
    """The embedded backend whose lexical channel fails the way an unreachable server does."""

    def lexical(self, query: str, flt: gw.Filter, k: int) -> list[gw.BackendHit]:
        raise gw.BackendError("Milvus search on collection 'kb' failed: connection refused")


def test_a_failing_backend_fails_the_turn_open(handbook: tuple[Any, Any]) -> None:
    kb, _ = handbook
    with gw.GroundingEngine.from_backend(_Failing(kb), CONFIG) as engine:
        outcome = engine.ground("how do I rotate an api key")
        assert outcome.block is None
        assert outcome.retrieval is None
        assert outcome.metadata.failure_reason == "backend-unavailable"
        assert "connection refused" in (engine.status().last_error or "")


# -- Milvus Lite ------------------------------------------------------------------------------
milvus = pytest.mark.skipif(not helpers.HAVE_MILVUS, reason=helpers.MILVUS_MISSING)


def filled_kb() -> gw.KnowledgeBase:
    """Entries with every lexical field filled (title, aliases, keywords, summary, body),
    integrations, domains and links: Milvus's statistics equal the snapshot's."""
    topics = {
        "webhooks": "webhook delivery retry backoff signature endpoint",
        "keys": "api key rotation secret token revoke scope",
        "sso": "okta saml single sign-on login identity provider",
        "billing": "invoice refund seat proration plan upgrade",
        "exports": "csv export report schedule download archive",
        "alerts": "alert threshold notification pager incident escalation",
    }
    entries: list[dict[str, Any]] = []
    for n, (topic, words) in enumerate(sorted(topics.items())):
        vocab = words.split()
        entries.extend(
            {
                "id": f"{topic}.{k}",
                "title": f"{vocab[k].title()} {vocab[k + 1]} guide",
                "aliases": [f"{vocab[k]} {vocab[k + 2]}"],
                "keywords": [vocab[k + 1], vocab[(k + 3) % len(vocab)]],
                "summary": f"How {vocab[k]} and {vocab[k + 2]} work for {topic}.",
                "body": " ".join(vocab[(k + i) % len(vocab)] for i in range(12)),
                "domain": ("ops", "billing", "security")[n % 3],
                "integrations": [["slack"], [], ["jira"], []][k],
                "related": [f"{topic}.{(k + 1) % 4}"],
            }
            for k in range(4)
        )
    return gw.KnowledgeBase.from_sources([{"id": "filled", "version": "v1", "entries": entries}])


FILLED_QUESTIONS = (
    "how does webhook retry backoff work",
    "rotate an api key",
    "okta saml login",
    "invoice refund for a seat",
    "schedule a csv export",
    "alert escalation to the pager",
    "nothing here matches zebras",
    "signature",
)


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from helpers.lite_server(tmp_path_factory)


@milvus
@pytest.mark.integration
@pytest.mark.parametrize("mode", ["lexical", "hybrid", "dense"])
def test_milvus_grounds_the_filled_corpus_as_the_embedded_engine(
    lite: Any, tmp_path: Path, mode: str
) -> None:
    kb = filled_kb()
    vectors = gw.VectorIndex.build(kb, EMBEDDER)
    path = tmp_path / "filled.snapshot"
    kb.save(path)
    vectors.save(f"{path}.vectors")
    config = dataclasses.replace(
        CONFIG,
        # Named integrations are embedded-only (docs/MILVUS.md deviation 7): an alias here
        # ("webhook retry") names slack, which the backend's turn cannot widen to.
        retrieval=gw.RetrievalConfig(
            hybrid=gw.HybridSettings(mode=mode),  # type: ignore[arg-type]
            named_integrations=False,
        ),
        embedder=None if mode == "lexical" else EMBEDDER,
    )
    backend = lite.export(kb, vectors)
    with (
        gw.GroundingEngine.from_snapshot(path, config) as reference,
        gw.GroundingEngine.from_backend(backend, config) as engine,
    ):
        for question in FILLED_QUESTIONS:
            for scope in SCOPES:
                want, got = (
                    reference.ground(question, scope=scope),
                    engine.ground(question, scope=scope),
                )
                assert shape(got) == shape(want), (question, scope)
                same = signature(got), signature(want)
                assert same[0]["metadata"].selected_ids == same[1]["metadata"].selected_ids
                for key in ("block", "expanded", "context"):
                    assert same[0][key] == same[1][key], (question, scope, key)
                meta_got, meta_want = (
                    dataclasses.replace(s["metadata"], channels=None) for s in same
                )
                assert meta_got == meta_want, (question, scope)
                # Float32 scores: coverage equal, fused scores within float32 rounding.
                assert [c[:3] for c in same[0]["candidates"] or []] == [
                    c[:3] for c in same[1]["candidates"] or []
                ]


@milvus
@pytest.mark.integration
def test_milvus_grounds_the_handbook_in_the_embedded_engines_shape(
    lite: Any, handbook: tuple[Any, Any]
) -> None:
    """The handbook leaves aliases and keywords empty on many entries (deviation 1): every
    turn has the same shape and failure reason, and most the very same selection, metadata
    and block (candidate tails may reorder where scores moved)."""
    kb, reference = handbook
    turns = same = 0
    with gw.GroundingEngine.from_backend(lite.export(kb), CONFIG) as engine:
        for question in _questions(24):
            for scope in SCOPES:
                want, got = (
                    reference.ground(question, scope=scope),
                    engine.ground(question, scope=scope),
                )
                assert shape(got) == shape(want), (question, scope)
                assert got.metadata.failure_reason == want.metadata.failure_reason
                turns += 1
                same += decision(got) == decision(want)
    # Measured over the handbook's 110 questions x 2 scopes: 212 of 220 turns with the same
    # selection, expansion, confidence, candidate count, scope hint and block; the rest
    # differ in a gated tail entry or the out-of-scope count (deviation 1 moved scores).
    assert same >= 0.9 * turns, f"{same} of {turns} turns identical"


@milvus
@pytest.mark.integration
def test_milvus_grounding_through_the_client(lite: Any, handbook: tuple[Any, Any]) -> None:
    """Grounded generation (Client) with Milvus: the block reaches the model, as embedded."""
    kb, reference = handbook
    question = "how do I rotate an api key"
    with gw.GroundingEngine.from_backend(lite.export(kb), CONFIG) as engine:
        for grounding in (reference, engine):
            server = fake_servers.FakeLLMServer()
            try:
                server.openai.enqueue_text("Rotate it [KB:security.api-key-rotation].")
                provider = gw.OpenAIProvider(
                    "gpt-test", api_key="k", base_url=server.openai.base_url
                )
                client = gw.Client(provider, grounding=grounding)
                result = client.generate(question, use_knowledge_grounding=True)
                sent = server.openai.requests[0].json["messages"][0]["content"]
            finally:
                server.close()
            assert result.knowledge is not None
            assert "security.api-key-rotation" in result.knowledge.selected_ids
            assert reference.ground(question).block.content in sent  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Every leak scenario's entries in one collection (each principal faces the others)."""
    entries = [entry for seed in LEAK_SEEDS for entry in leaks.scenario(seed).entries]
    kb = gw.KnowledgeBase.from_sources([{"id": "kb", "version": "v1", "entries": entries}])
    for server in helpers.lite_server(tmp_path_factory):
        yield kb, server.export(kb, gw.VectorIndex.build(kb, EMBEDDER))


LEAK_SEEDS = range(0, 200, 10)


@milvus
@pytest.mark.integration
@pytest.mark.parametrize("seed", LEAK_SEEDS)
def test_grounding_on_milvus_reveals_nothing(scenarios: tuple[Any, Any], seed: int) -> None:
    kb, backend = scenarios
    s = leaks.scenario(seed)
    authorize = leaks.host_authorizer(seed)
    settings = leaks.hybrid_settings(seed)
    if settings.reranker is not None:  # not applied over a backend: fused channels only
        settings = gw.HybridSettings(mode="hybrid")
    config = gw.GroundingConfig(
        timeout_ms=120_000,
        blocked_domains=s.blocked,
        authorize=authorize,
        retrieval=gw.RetrievalConfig(hybrid=settings, relation_limit=6),
        embedder=EMBEDDER,
    )
    flt = gw.Filter.of(s.principal, s.scope, s.blocked)

    def allowed(entry: gw.KnowledgeEntry) -> bool:
        try:
            return authorize is None or authorize(s.principal, entry) is True
        except LookupError:  # the host check fails closed
            return False

    visible = {e.id for e in kb.entries if admits(flt, e) and allowed(e)}
    with gw.GroundingEngine.from_backend(backend, config) as engine:
        for query in s.queries:
            outcome = engine.ground(query, scope=s.scope, principal=s.principal)
            assert outcome.metadata.failure_reason not in ("error", "backend-unavailable")
            retrieval = outcome.retrieval
            assert retrieval is not None
            shown = [c.entry for c in retrieval.candidates] + list(retrieval.expanded)
            assert {e.id for e in shown} <= visible, f"seed {seed}"
            for entry in shown:  # links name only what the principal may see
                assert set(entry.related) | {entry.parent or entry.id} <= visible | {entry.id}
            text = leaks._scrub_query(leaks.outcome_text(outcome), query)
            leaks.assert_no_leak(s, text, visible, f"milvus ground {query!r}")
