"""Recall: channels, fusion, evidence shaping, each dampening stage, freshness, currentness."""

from __future__ import annotations

import sqlite3
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memory_helpers import ACME, BARE, DAY, GLOBEX, T0, Clock, WordEmbedder

from groundwire import ConfigError, MemoryRecallConfig, QueryError
from groundwire.memory import MemoryAttribute, MemoryEntity, MemoryScope, MemoryStore
from groundwire.memory.graph import visible_sql
from groundwire.memory.shaping import has_freshness_words, percentile, split_facets


def recall(store: MemoryStore, query: str, cfg: MemoryRecallConfig = BARE, **kw: object):  # type: ignore[no-untyped-def]
    return store.recall(ACME, query, config=cfg, **kw)  # type: ignore[arg-type]


def test_content_scores_are_normalized_and_explained(store: MemoryStore) -> None:
    store.remember(ACME, "Zebras have black and white stripes.")
    store.remember(ACME, "Zebras live in Africa.")
    store.remember(ACME, "Penguins live in Antarctica.")
    result = recall(store, "zebra stripes")
    assert len(result.memories) == 2
    top, second = result.memories
    assert top.memory.content.startswith("Zebras have")
    assert top.channels["content"] == 1.0
    assert 0 < second.channels["content"] < 1.0
    assert top.explain == {
        "score": top.score,
        "rank": 1,
        "channels": {"content": 1.0},
        "stages": {"fused": 1.0},
        "note": None,
    }


def test_empty_queries_and_stop_words_only(store: MemoryStore) -> None:
    store.remember(ACME, "Something to find.")
    assert recall(store, "").memories == ()
    assert recall(store, "   ").memories == ()
    assert recall(store, "what is the").memories == ()  # only stop words


def test_query_bounds(store: MemoryStore) -> None:
    with pytest.raises(QueryError, match="over the limit"):
        store.recall(ACME, "x" * 9_000)
    with pytest.raises(ConfigError, match="limit"):
        store.recall(ACME, "x", limit=0)
    with pytest.raises(QueryError, match="since"):
        store.recall(ACME, "x", since="yesterday")  # type: ignore[arg-type]


@given(st.text(max_size=80))
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_query_text_is_safe(store: MemoryStore, query: str) -> None:
    """FTS5 query syntax in user text ("NEAR", quotes, *, -) is never interpreted."""
    store.remember(ACME, 'Quotes " and NEAR(a b) and * stars - minus: colons.')
    result = store.recall(ACME, query, touch=False)
    assert all(item.score > 0 for item in result.memories)


def test_hint_match_takes_the_max_never_the_sum(store: MemoryStore) -> None:
    both = store.remember(
        ACME, "Spotify premium renews monthly.", hints=["spotify premium renewal"]
    )
    content_only = store.remember(ACME, "Spotify premium renews monthly for the family plan.")
    result = recall(store, "spotify premium renewal")
    scores = {item.id: item for item in result.memories}
    item = scores[both.id]
    assert item.score == pytest.approx(max(item.channels["content"], item.channels["hint"]))
    assert item.score <= 1.0
    assert content_only.id in scores


def test_hint_only_matches_are_capped_below_direct_ones(store: MemoryStore) -> None:
    hinted = store.remember(ACME, "Uses Spotify.", hints=["which music streaming service"])
    direct = store.remember(ACME, "Music practice is on Tuesdays.")
    result = recall(store, "music streaming service")
    assert result.ids == (direct.id, hinted.id)
    hint_item = result.memories[1]
    assert hint_item.channels == {"hint": BARE.hint_only_cap}
    assert hint_item.score == BARE.hint_only_cap < result.memories[0].score


def test_hints_switch_off(store: MemoryStore) -> None:
    store.remember(ACME, "Uses Spotify.", hints=["music streaming service"])
    assert recall(store, "music streaming", replace(BARE, hints=False)).memories == ()
    assert len(recall(store, "music streaming").memories) == 1


def test_graph_boost_is_additive_and_traversal_only_stays_below(store: MemoryStore) -> None:
    direct = store.remember(ACME, "Alice likes green tea.", entities=[MemoryEntity("Alice")])
    weak = store.remember(ACME, "Tea tastings happen on Mondays with much ceremony and snacks.")
    linked = store.remember(ACME, "Alice runs the Berlin office.", entities=[MemoryEntity("Alice")])
    result = recall(store, "alice tea")
    by_id = {item.id: item for item in result.memories}
    assert by_id[direct.id].channels["graph"] == BARE.graph_boost
    assert by_id[direct.id].stages["fused"] == pytest.approx(
        by_id[direct.id].channels["content"] + BARE.graph_boost
    )
    # "Alice runs the Berlin office." matches "alice" in text too; make one graph-only.
    assert linked.id in by_id
    only = store.remember(ACME, "Runs marathons.", entities=[MemoryEntity("Alice")])
    result = recall(store, "alice tea")
    items = {item.id: item for item in result.memories}
    anchored = [i.score for i in result.memories if i.id != only.id]
    assert items[only.id].channels == {"graph": BARE.graph_boost}
    assert items[only.id].score < min(anchored)
    assert result.ids[-1] == only.id
    assert weak.id in items
    assert recall(store, "alice tea", replace(BARE, graph=False)).ids.count(only.id) == 0


def test_vector_channel_fuses_with_text(tmp_path: Path, clock: Clock) -> None:
    embedder = WordEmbedder(synonyms=[("car", "automobile", "vehicle")])
    with MemoryStore(tmp_path / "m.db", embedder=embedder, clock=clock) as store:
        semantic = store.remember(ACME, "The automobile needs new tyres.")
        lexical = store.remember(ACME, "The car park closes at nine.")
        store.remember(ACME, "Bananas are yellow.")
        result = store.recall(ACME, "car", config=BARE)
        by_id = {item.id: item for item in result.memories}
        assert set(by_id) >= {semantic.id, lexical.id}
        assert "vector" in by_id[semantic.id].channels
        assert "content" not in by_id[semantic.id].channels
        text_weight = BARE.text_weight
        item = by_id[lexical.id]
        assert item.score == pytest.approx(
            text_weight * item.channels["content"]
            + (1 - text_weight) * item.channels.get("vector", 0)
        )
        assert store.recall(ACME, "car", config=replace(BARE, vectors=False)).ids == (lexical.id,)


def test_gravity_halves_semantic_results_without_query_words(tmp_path: Path, clock: Clock) -> None:
    embedder = WordEmbedder(synonyms=[("car", "automobile")])
    with MemoryStore(tmp_path / "m.db", embedder=embedder, clock=clock) as store:
        semantic = store.remember(ACME, "automobile")
        store.remember(ACME, "car")
        on = store.recall(ACME, "car", config=replace(BARE, gravity=True, text_weight=0.0))
        item = next(i for i in on.memories if i.id == semantic.id)
        assert item.stages["gravity"] == 0.5
        assert item.score == pytest.approx(item.stages["fused"] * 0.5)
        off = store.recall(ACME, "car", config=replace(BARE, text_weight=0.0))
        assert "gravity" not in next(i for i in off.memories if i.id == semantic.id).stages


def test_hub_dampening(store: MemoryStore) -> None:
    # "Acme" is mentioned by 12 memories, every other entity once: Acme is above P90.
    for i in range(11):
        store.remember(ACME, f"Acme note {i}", entities=[MemoryEntity("Acme")])
    hub_only = store.remember(ACME, "Acme roadmap review", entities=[MemoryEntity("Acme")])
    for i in range(10):
        store.remember(ACME, f"other {i}", entities=[MemoryEntity(f"Entity{i}")])
    mixed = store.remember(
        ACME, "Roadmap review with Dana", entities=[MemoryEntity("Acme"), MemoryEntity("Dana")]
    )
    result = recall(store, "roadmap review", replace(BARE, hub=True, graph=True))
    items = {i.id: i for i in result.memories}
    assert items[hub_only.id].stages["hub"] == 0.7
    assert "hub" not in items[mixed.id].stages
    off = recall(store, "roadmap review")
    assert all("hub" not in i.stages for i in off.memories)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.9) == 0.0
    assert percentile([1] * 9 + [12], 0.9) == 1.0
    assert percentile(list(range(1, 11)), 0.9) == 9.0


@pytest.mark.parametrize(
    ("content", "kind", "factor"),
    [
        ("Never deploy on Fridays without a second reviewer signing off.", "constraint", 1.2),
        ("We decided to move the whole billing stack to Postgres this year.", "decision", 1.2),
        ("The team offsite is planned for 2026-03-14 in the mountains.", "fact", 1.1),
        ("The team offsite is planned for March in the mountains this year.", "event", 1.1),
        ("The team offsite is planned for spring in the mountains this year.", "fact", None),
        ("Never deploy on Fridays.", "constraint", None),  # under 50 characters
        ("Offsite on 2026-03-14.", "fact", None),
        ("The offsite is booked for 2026-03-14 at the lodge by the lake.", "fact", 1.1),
        ("The follow-up on the well-known offsite plans is still pending.", "fact", None),
    ],
)
def test_resolution_boost(
    store: MemoryStore, content: str, kind: str, factor: float | None
) -> None:
    store.remember(ACME, content, type=kind)
    (item,) = recall(store, content, replace(BARE, resolution=True)).memories
    assert item.stages.get("resolution") == factor


@pytest.mark.parametrize(
    ("query", "fresh"),
    [
        ("what is the current plan", True),
        ("latest release", True),
        ("any recent incidents", True),
        ("what happened today", True),
        ("deploys this week", True),
        ("goals this month", True),
        ("what is the plan now", False),
        ("currency exchange", False),
        ("the plan", False),
    ],
)
def test_freshness_words(query: str, fresh: bool) -> None:
    assert has_freshness_words(query) is fresh


def test_freshness_lifts_recent_memories_only_when_asked(store: MemoryStore, clock: Clock) -> None:
    old = store.remember(ACME, "The release plan is version two.", created_at=T0 - 60 * DAY)
    new = store.remember(ACME, "The release plan is version three!", created_at=T0 - DAY)
    cfg = replace(BARE, freshness=True)
    plain = recall(store, "release plan version", cfg)
    assert not plain.freshness
    assert all("freshness" not in i.stages for i in plain.memories)
    fresh = recall(store, "latest release plan version", cfg)
    assert fresh.freshness
    assert fresh.ids[0] == new.id
    items = {i.id: i for i in fresh.memories}
    assert 1.0 < items[old.id].stages["freshness"] < items[new.id].stages["freshness"] <= 1.2
    bounded = recall(store, "latest release plan version", cfg, since=T0 - 90 * DAY)
    assert not bounded.freshness
    assert all("freshness" not in i.stages for i in bounded.memories)
    now_query = recall(store, "release plan version now", cfg)
    assert not now_query.freshness


def test_since_and_until_bound_creation_time(store: MemoryStore) -> None:
    old = store.remember(ACME, "Standup moved to 9am.", created_at=T0 - 10 * DAY)
    new = store.remember(ACME, "Standup moved to 10am.", created_at=T0 - DAY)
    assert recall(store, "standup", since=T0 - 2 * DAY).ids == (new.id,)
    assert recall(store, "standup", until=T0 - 2 * DAY).ids == (old.id,)


def test_currentness_prefers_the_new_fact_and_names_it(store: MemoryStore) -> None:
    def claim(value: str) -> list[MemoryAttribute]:
        return [MemoryAttribute("Alice", "employer", value, claim_key="current")]

    old = store.remember(ACME, "Alice works at Acme.", attributes=claim("Acme"))
    new = store.remember(ACME, "Alice now works at Globex.", attributes=claim("Globex"))
    cfg = replace(BARE, currentness=True)
    result = recall(store, "where does alice work acme globex", cfg)
    assert result.ids == (new.id, old.id)
    stale = result.memories[1]
    assert stale.stages["currentness"] == 0.5
    assert stale.note is not None
    assert "'Globex'" in stale.note
    assert new.id in stale.note
    assert result.memories[0].note is None
    history = recall(store, "acme", cfg)  # history stays answerable
    assert history.ids == (old.id,)


def test_currentness_never_reveals_a_hidden_replacement(store: MemoryStore) -> None:
    def claim(value: str) -> list[MemoryAttribute]:
        return [MemoryAttribute("Project", "codename", value, claim_key="c")]

    old = store.remember(ACME, "The project codename is Bluebird.", attributes=claim("Bluebird"))
    store.remember(
        ACME,
        "The project codename is Nightjar.",
        attributes=claim("Nightjar"),
        acl=["group:secret"],
    )
    result = recall(store, "project codename", replace(BARE, currentness=True))
    assert result.ids == (old.id,)
    note = result.memories[0].note
    assert note is not None
    assert "Nightjar" not in note
    assert "newer fact" in note


def test_importance_decays_with_days_since_access_unless_pinned(
    store: MemoryStore, clock: Clock
) -> None:
    a = store.remember(ACME, "Backups run nightly at two.", importance=0.8)
    b = store.remember(ACME, "Backups are kept for ninety days.", importance=0.8)
    store.pin(ACME, b.id)
    clock.now = T0 + 10 * DAY
    result = recall(store, "backups", replace(BARE, importance=True), touch=False)
    items = {i.id: i for i in result.memories}
    assert items[a.id].stages["importance_effective"] == pytest.approx(0.8 * 0.95**10)
    assert items[b.id].stages["importance_effective"] == pytest.approx(0.8)
    weight = BARE.importance_weight
    assert items[a.id].stages["importance"] == pytest.approx(
        1 - weight + weight * 0.8 * 0.95**10, abs=1e-6
    )
    assert result.ids[0] == b.id


def test_access_is_counted_and_resets_decay(store: MemoryStore, clock: Clock) -> None:
    memory = store.remember(ACME, "The wifi password rotates monthly.")
    clock.now = T0 + 5 * DAY
    store.recall(ACME, "wifi password")
    again = store.get(ACME, memory.id)
    assert again is not None
    assert again.access_count == 1
    assert again.accessed_at == T0 + 5 * DAY
    store.recall(ACME, "wifi password", touch=False)
    assert store.get(ACME, memory.id).access_count == 1  # type: ignore[union-attr]


def test_facets_prefer_coverage_over_near_duplicates(store: MemoryStore) -> None:
    dup1 = store.remember(ACME, "Alice likes hiking in the alps every summer weekend.")
    dup2 = store.remember(ACME, "Alice likes hiking in the alps every summer weekend!!")
    other = store.remember(ACME, "Alice plays the cello.")
    cfg = replace(BARE, facets=True)
    result = recall(store, "alice hiking alps summer weekend and cello", cfg)
    items = {i.id: i for i in result.memories}
    assert (
        items[dup2.id].stages.get("facets") == cfg.near_duplicate_penalty
        or items[dup1.id].stages.get("facets") == cfg.near_duplicate_penalty
    )
    assert items[other.id].stages.get("facets") == pytest.approx(1 + cfg.facet_bonus)


def test_split_facets() -> None:
    assert split_facets("hiking and cello, or chess?") == ["hiking ", " cello", " chess"]


def test_every_stage_has_a_switch() -> None:
    cfg = MemoryRecallConfig()
    for name in (
        "hints",
        "vectors",
        "graph",
        "facets",
        "gravity",
        "hub",
        "resolution",
        "freshness",
        "currentness",
        "importance",
    ):
        assert getattr(cfg, name) is True
        assert getattr(replace(cfg, **{name: False}), name) is False
    with pytest.raises(ConfigError, match="gravity_penalty"):
        MemoryRecallConfig(gravity_penalty=1.5)
    with pytest.raises(ConfigError, match="resolution_boost"):
        MemoryRecallConfig(resolution_boost=0.5)


def test_order_is_deterministic_with_ties_on_id(store: MemoryStore) -> None:
    ids = [store.remember(ACME, f"identical words {tag}").id for tag in ("x1", "x2", "x3", "x4")]
    first = recall(store, "identical words").ids
    assert first == tuple(sorted(ids))
    assert all(recall(store, "identical words").ids == first for _ in range(3))


def test_limit(store: MemoryStore) -> None:
    store.remember_many(ACME, [{"content": f"note number {i}"} for i in range(30)])
    assert len(store.recall(ACME, "note", limit=7).memories) == 7
    assert len(store.recall(ACME, "note").memories) == 10


def test_sessions_record_rank_injection_and_text_hits(store: MemoryStore) -> None:
    a = store.remember(ACME, "Dana owns the billing service.", hints=["who owns billing"])
    b = store.remember(ACME, "Billing deploys on Wednesdays.")
    result = store.recall(ACME, "who owns billing", session_id="s1")
    assert result.tracked
    assert result.session_id == "s1"
    store.track(ACME, "s1", result, injected=[a.id])
    rows = {r["memory_id"]: r for r in store.session_memories(ACME, "s1")}
    assert rows[a.id]["rank"] == 1
    assert rows[a.id]["was_injected"] == 1
    assert rows[a.id]["fts_hit_count"] == 2
    assert rows[a.id]["recall_count"] == 2
    assert rows[b.id]["recall_count"] == 2
    assert rows[b.id]["was_injected"] == 1
    assert store.end_session(ACME, "s1")
    assert not store.end_session(ACME, "s1")
    other = MemoryScope("acme", "other-bot")
    assert store.session_memories(other, "s1") == []


def test_tracking_failure_never_fails_recall(store: MemoryStore, tmp_path: Path) -> None:
    store.remember(ACME, "Keep calm and recall.")
    blocker = MemoryStore(store.path)
    with blocker._write():  # another writer holds the lock for the whole recall
        result = store.recall(ACME, "recall", session_id="s2")
    blocker.close()
    assert len(result.memories) == 1
    assert not result.tracked


def test_currentness_names_the_current_claim_after_a_long_chain(store: MemoryStore) -> None:
    first = None
    for version in range(40):
        memory = store.remember(
            ACME,
            f"The release train is version {version}.",
            attributes=[MemoryAttribute("Release", "train", f"v{version}", claim_key="current")],
        )
        first = first or memory
    assert first is not None
    result = store.recall(
        ACME, "release train version", config=replace(BARE, currentness=True), limit=50
    )
    stale = next(item for item in result.memories if item.id == first.id)
    assert stale.note is not None
    assert "is now 'v39'" in stale.note
    assert result.memories[0].memory.content == "The release train is version 39."


# -- the content channel's top-k: the whole-index fast path must equal a scope-first ranking --
def _reference_content(store: MemoryStore, scope: MemoryScope, query: str, k: int) -> list[str]:
    """The scope's top ``k`` content matches by (score desc, id), the scope check on every
    match: what the content channel must return whichever way it gets there."""
    terms = list(dict.fromkeys(store.analyzer.tokens(query)))
    if not terms:
        return []
    match = " OR ".join('"' + t + '"' for t in terms)
    condition, params = visible_sql(scope)
    with sqlite3.connect(store.path) as conn:
        rows = conn.execute(
            "SELECT m.id FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid"
            f" WHERE memories_fts MATCH ? AND {condition}"
            " ORDER BY -bm25(memories_fts) DESC, m.id LIMIT ?",
            (match, *params, k),
        ).fetchall()
    return [row[0] for row in rows]


def _content_ids(store: MemoryStore, scope: MemoryScope, query: str, k: int) -> list[str]:
    cfg = replace(BARE, candidates=k, limit=50, hints=False, graph=False)
    result = store.recall(scope, query, config=cfg, touch=False)
    return sorted(item.id for item in result.memories if "content" in item.channels)


def test_other_scopes_better_matches_never_take_the_slots(store: MemoryStore) -> None:
    """The scope's best two lead, then more than 2k matches of others: its k still fill up
    from its own weaker matches."""
    store.remember_many(GLOBEX, [{"content": f"apple apple apple {i}"} for i in range(30)])
    store.remember_many(
        ACME, [{"content": f"apple apple {i}", "acl": ["user:bob"]} for i in range(30)]
    )
    mine = [store.remember(ACME, f"apple apple apple apple {i}").id for i in range(2)]
    mine += [store.remember(ACME, f"apple pie recipe number {i}").id for i in range(8)]
    assert _content_ids(store, ACME, "apple", 5) == sorted(
        _reference_content(store, ACME, "apple", 5)
    )
    assert set(_content_ids(store, ACME, "apple", 5)) <= set(mine)
    bob = MemoryScope("acme", "support-bot", subject="bob")
    assert _content_ids(store, bob, "apple", 5) == sorted(
        _reference_content(store, bob, "apple", 5)
    )


def test_ties_at_the_edge_of_the_top_k_break_on_id(store: MemoryStore) -> None:
    """More tied matches than the fast path fetches: the k chosen are the lowest ids."""
    ids = [store.remember(ACME, f"identical words {i:02d}").id for i in range(30)]
    assert _content_ids(store, ACME, "identical words", 5) == sorted(ids)[:5]


@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["acme", "globex"]),
            st.sampled_from([(), ("user:bob",), ("group:eng",)]),
            st.lists(
                st.sampled_from(["red", "green", "blue", "fox", "owl"]), min_size=1, max_size=5
            ),
        ),
        min_size=1,
        max_size=40,
    ),
    query=st.sampled_from(["red", "green fox", "blue owl red", "fox fox", "owl"]),
    k=st.integers(1, 6),
    viewer=st.sampled_from([None, "bob"]),
)
@settings(max_examples=40, deadline=None)
def test_content_top_k_matches_a_scope_first_ranking(
    rows: list[tuple[str, tuple[str, ...], list[str]]], query: str, k: int, viewer: str | None
) -> None:
    with tempfile.TemporaryDirectory() as folder, MemoryStore(Path(folder) / "m.db") as store:
        for i, (tenant, acl, words) in enumerate(rows):
            scope = MemoryScope(tenant, "support-bot")
            store.remember(scope, " ".join(words) + f" n{i}", acl=acl)
        scope = MemoryScope(
            "acme", "support-bot", subject=viewer, groups=("eng",) if viewer else ()
        )
        expected = sorted(_reference_content(store, scope, query, k))
        assert _content_ids(store, scope, query, k) == expected
