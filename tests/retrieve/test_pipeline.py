"""The per-turn selection pipeline (stages A–J): eligibility, boosts, turns, order, expansion.

These are the seed's fixed-count semantics, so every selection here runs with
``gate="off"`` unless a test says otherwise; the relevance gate has its own tests
(``test_gate.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from groundwire import (
    KnowledgeBase,
    QueryError,
    RetrievalConfig,
    RetrievalRequest,
    Scope,
    Selection,
    Turn,
    retrieve,
)
from groundwire.retrieve import lexical_text

Entry = Callable[..., dict[str, Any]]
Build = Callable[..., KnowledgeBase]

FIELDS = ("title", "aliases", "keywords", "summary", "body")


def run(
    kb: KnowledgeBase,
    query: str,
    *,
    turns: tuple[Turn, ...] = (),
    scope: Scope | None = None,
    blocked: tuple[str, ...] = (),
    **config: Any,
) -> Selection:
    request = RetrievalRequest(query, turns, scope if scope is not None else Scope())
    config.setdefault("gate", "off")
    return retrieve(kb, request, RetrievalConfig(**config), blocked)


def ids(selection: Selection) -> list[str]:
    return [item.entry.id for item in selection.primary]


def expanded_ids(selection: Selection) -> list[str]:
    return [entry.id for entry in selection.expanded]


# -- D. eligibility before top-k -----------------------------------------------------------------


@pytest.mark.parametrize("status", ["draft", "deprecated", "archived"])
def test_inactive_entries_never_take_a_slot(entry: Entry, build_kb: Build, status: str) -> None:
    # Three inactive entries outrank the active one. BM25 only fetches 2 × candidate_limit,
    # so if eligibility were applied after top-k the active entry could not appear.
    kb = build_kb(
        *(entry(f"strong{n}", title="Zebra zebra", status=status) for n in range(3)),
        entry("weak", body="zebra filler text words"),
    )
    assert kb.explain("zebra", "strong0").score > kb.explain("zebra", "weak").score

    selection = run(kb, "zebra", candidate_limit=1, result_limit=1)

    assert ids(selection) == ["weak"]
    assert selection.candidate_count == 1


def test_only_active_entries_are_selected_among_many(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("s.active", summary="zebra"),
        entry("s.draft", summary="zebra zebra", status="draft"),
        entry("s.deprecated", summary="zebra zebra", status="deprecated"),
        entry("s.archived", summary="zebra zebra", status="archived"),
    )
    selection = run(kb, "zebra")
    assert ids(selection) == ["s.active"]
    assert selection.candidate_count == 1


def test_blocked_domain_is_excluded_case_insensitively_before_top_k(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("debug.one", domain="Internal-Debug", title="Zebra zebra"),
        entry("debug.two", domain="internal-debug", title="Zebra zebra"),
        entry("debug.three", domain="INTERNAL-DEBUG", title="Zebra zebra"),
        entry("public.weak", domain="public", body="zebra filler text words"),
    )
    assert kb.explain("zebra", "debug.one").score > kb.explain("zebra", "public.weak").score

    selection = run(kb, "zebra", blocked=("internal-DEBUG",), candidate_limit=1, result_limit=1)
    assert ids(selection) == ["public.weak"]

    unblocked = run(kb, "zebra", candidate_limit=1, result_limit=1)
    assert ids(unblocked) == ["debug.one"]


def test_other_domains_are_unaffected_by_the_blocklist(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("billing.one", domain="billing", summary="zebra"),
        entry("security.one", domain="security", summary="zebra"),
    )
    assert ids(run(kb, "zebra", blocked=("Billing",))) == ["security.one"]
    assert sorted(ids(run(kb, "zebra", blocked=("unknown",)))) == ["billing.one", "security.one"]


def test_integration_match_is_case_insensitive(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("slack.only", integrations=["Slack"], summary="zebra"))
    assert ids(run(kb, "zebra", scope=Scope(("sLaCk",)))) == ["slack.only"]
    assert ids(run(kb, "zebra", scope=Scope(("SLACK", "github")))) == ["slack.only"]
    assert ids(run(kb, "zebra", scope=Scope(("github",)))) == []


def test_entry_with_no_integrations_applies_everywhere(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("everywhere", integrations=[], summary="zebra"))
    for scope in (Scope(()), Scope(("slack",)), Scope(("github", "jira"))):
        assert ids(run(kb, "zebra", scope=scope)) == ["everywhere"]


def test_empty_enabled_list_excludes_integration_specific_entries(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("slack.one", integrations=["slack"], title="Zebra zebra"),
        entry("slack.two", integrations=["slack", "teams"], title="Zebra zebra"),
        entry("jira.one", integrations=["jira"], title="Zebra zebra"),
        entry("general", integrations=[], body="zebra filler text words"),
    )
    # Integration-specific entries outrank "general" but are excluded before top-k.
    assert kb.explain("zebra", "jira.one").score > kb.explain("zebra", "general").score
    selection = run(kb, "zebra", scope=Scope(()), candidate_limit=1, result_limit=1)
    assert ids(selection) == ["general"]

    with_teams = run(kb, "zebra", scope=Scope(("Teams",)))
    assert ids(with_teams) == ["slack.two", "general"]


def test_exact_and_alias_hits_on_ineligible_entries_are_ignored(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("old.refunds", title="Refund policy", aliases=["money back"], status="deprecated"),
        entry("hidden.refunds", title="Refund policy", aliases=["money back"], domain="hidden"),
        entry(
            "slack.refunds",
            title="Refund policy",
            aliases=["money back"],
            integrations=["slack"],
        ),
        entry("live.note", summary="refund filler"),
    )
    selection = run(kb, "refund policy money back", blocked=("HIDDEN",))

    assert ids(selection) == ["live.note"]
    assert not any(item.exact or item.alias for item in selection.primary)
    assert selection.confidence != "high"


# -- B/G. boosts ----------------------------------------------------------------------------------


def _boosts(item: Any, exact: float = 100.0, alias: float = 60.0) -> float:
    return (exact if item.exact else 0.0) + (alias if item.alias else 0.0)


def test_exact_boost_for_id_phrase_anywhere_in_query(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("billing.refunds", title="Money rules", summary="refund filler"),
        entry("other", summary="refund refund filler"),
    )
    selection = run(kb, "so how do billing refunds work today")
    top = selection.primary[0]

    assert top.entry.id == "billing.refunds"
    assert top.exact is True
    assert top.alias is False
    assert top.score == pytest.approx(top.lexical_score + 100.0)
    assert top.breakdown["exact"] == 100.0
    assert selection.confidence == "high"


def test_exact_boost_for_title_phrase_as_contiguous_ngram(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("t1", title="Zebra crossing rules", summary="filler"))

    hit = run(kb, "where are the zebra crossing rules for bikes").primary[0]
    assert hit.exact is True
    assert hit.score == pytest.approx(hit.lexical_score + 100.0)

    # The same words, not contiguous or in another order, are no phrase hit.
    for query in ("rules for zebra crossing", "zebra bike crossing rules", "zebra crossing"):
        item = run(kb, query).primary[0]
        assert item.exact is False, query
        assert item.score == pytest.approx(item.lexical_score), query


def test_alias_boost(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("billing.refund-policy", title="Refund policy", aliases=["money back"]))
    top = run(kb, "can I get my Money Back please").primary[0]

    assert top.alias is True
    assert top.exact is False
    assert top.score == pytest.approx(top.lexical_score + 60.0)
    assert top.breakdown["alias"] == 60.0


def test_boosts_are_configurable_and_add_up(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("quagga", title="Money back guarantee", aliases=["money back"]))
    query = "quagga money back please"

    default = run(kb, query).primary[0]
    assert (default.exact, default.alias) == (True, True)
    assert default.score == pytest.approx(default.lexical_score + 160.0)

    custom = run(kb, query, exact_boost=7.5, alias_boost=2.5).primary[0]
    assert custom.lexical_score == pytest.approx(default.lexical_score)
    assert custom.score == pytest.approx(custom.lexical_score + 10.0)
    assert custom.breakdown["exact"] == 7.5
    assert custom.breakdown["alias"] == 2.5


def test_score_is_lexical_plus_boosts_and_breakdown_sums_to_it(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("zebra", title="Zebra crossing", summary="zebra filler", aliases=["striped horse"]),
        entry("horse.care", title="Horse care", body="a striped horse needs water"),
        entry("plain", summary="crossing the road"),
    )
    selection = run(kb, "zebra crossing striped horse road")
    assert len(selection.primary) == 3
    for item in selection.primary:
        assert item.score == pytest.approx(item.lexical_score + _boosts(item))
        lexical = sum(item.breakdown[name] for name in FIELDS)
        assert lexical == pytest.approx(item.lexical_score)
        assert sum(item.breakdown.values()) == pytest.approx(item.score)


def test_exact_hit_with_zero_bm25_still_becomes_a_candidate(entry: Entry, build_kb: Build) -> None:
    # "quagga" only occurs as an id, which BM25 does not index; ten BM25 matches would
    # fill the lexical top-k (2 × candidate_limit = 4) on their own.
    kb = build_kb(
        entry("quagga", title="Striped horse", summary="extinct subspecies"),
        *(entry(f"z{n}", summary="zebra " * (n + 1)) for n in range(10)),
    )
    selection = run(kb, "zebra quagga", candidate_limit=2, result_limit=2)

    top = selection.primary[0]
    assert top.entry.id == "quagga"
    assert top.lexical_score == 0.0
    assert top.exact is True
    assert top.score == pytest.approx(100.0)
    assert selection.candidate_count == 2


# -- C. lexical query and recent turns ------------------------------------------------------------


@pytest.fixture
def turns_kb(entry: Entry, build_kb: Build) -> KnowledgeBase:
    return build_kb(
        entry("animals.giraffe", summary="giraffe facts"),
        entry("animals.zebra", summary="zebra facts"),
        entry("roads.crossing", title="Zebra crossing", summary="road rules"),
    )


def _candidates(selection: Selection) -> set[str]:
    return {item.entry.id for item in selection.primary}


def test_recent_turn_terms_join_the_lexical_query(turns_kb: KnowledgeBase) -> None:
    assert "animals.zebra" not in _candidates(run(turns_kb, "giraffe"))
    selection = run(turns_kb, "giraffe", turns=(Turn("user", "tell me about zebra"),))
    assert "animals.zebra" in _candidates(selection)


def test_only_the_most_recent_four_turns_count(turns_kb: KnowledgeBase) -> None:
    filler = [Turn("assistant" if n % 2 else "user", f"message {n}") for n in range(4)]
    oldest_of_five = (Turn("user", "zebra please"), *filler)
    assert "animals.zebra" not in _candidates(run(turns_kb, "giraffe", turns=oldest_of_five))

    oldest_of_four = (Turn("user", "zebra please"), *filler[1:])
    assert "animals.zebra" in _candidates(run(turns_kb, "giraffe", turns=oldest_of_four))


def test_recent_turns_limit_is_configurable(turns_kb: KnowledgeBase) -> None:
    turns = (Turn("user", "zebra please"), Turn("assistant", "ok"))
    assert "animals.zebra" in _candidates(run(turns_kb, "giraffe", turns=turns))
    assert "animals.zebra" not in _candidates(run(turns_kb, "giraffe", turns=turns, recent_turns=1))
    assert "animals.zebra" not in _candidates(run(turns_kb, "giraffe", turns=turns, recent_turns=0))


def test_each_turn_is_capped_at_400_characters(turns_kb: KnowledgeBase) -> None:
    beyond = "x" * 400 + " zebra"
    assert "animals.zebra" not in _candidates(
        run(turns_kb, "giraffe", turns=(Turn("user", beyond),))
    )
    within = "x" * 394 + " zebra"  # "zebra" ends exactly at character 400
    assert len(within) == 400
    assert "animals.zebra" in _candidates(run(turns_kb, "giraffe", turns=(Turn("user", within),)))


def test_turn_cap_applies_to_each_turn_and_is_configurable(turns_kb: KnowledgeBase) -> None:
    turns = (Turn("user", "zebra " + "y" * 500), Turn("user", "z" * 500 + " crossing"))
    found = _candidates(run(turns_kb, "giraffe", turns=turns))
    assert "animals.zebra" in found
    assert "roads.crossing" in found  # via "zebra" in its title, not via "crossing"

    capped = _candidates(run(turns_kb, "giraffe", turns=turns, turn_chars=3))
    assert capped == {"animals.giraffe"}


def test_lexical_text_is_query_plus_capped_latest_turns() -> None:
    config = RetrievalConfig(recent_turns=2, turn_chars=5)
    turns = [Turn("user", "first turn"), Turn("assistant", "second"), Turn("user", "third one")]
    assert lexical_text("query", turns, config) == "query\nsecon\nthird"


def test_phrase_lookup_uses_the_current_query_only(turns_kb: KnowledgeBase) -> None:
    # The title "Zebra crossing" appears verbatim in a turn: it counts lexically, not as
    # an exact phrase.
    turns = (Turn("user", "what about the zebra crossing"),)
    selection = run(turns_kb, "road rules", turns=turns)
    by_id = {item.entry.id: item for item in selection.primary}

    crossing = by_id["roads.crossing"]
    assert crossing.exact is False
    assert crossing.score == pytest.approx(crossing.lexical_score)
    assert crossing.breakdown["title"] > 0  # the turn's words did reach BM25
    assert selection.confidence != "high"

    in_query = run(turns_kb, "what about the zebra crossing")
    assert in_query.primary[0].entry.id == "roads.crossing"
    assert in_query.primary[0].exact is True


def test_alias_in_a_turn_is_not_an_alias_hit(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("refunds", title="Refund rules", aliases=["money back"]))
    selection = run(kb, "refund", turns=(Turn("user", "i want my money back"),))
    assert [(i.entry.id, i.alias) for i in selection.primary] == [("refunds", False)]


# -- G/H. order, caps and counts ------------------------------------------------------------------


def test_ties_break_on_id_by_code_point(entry: Entry, build_kb: Build) -> None:
    same = {"title": "Same title", "summary": "zebra filler"}
    kb = build_kb(
        entry("b", **same),
        entry("é", **same),
        entry("a", **same),
        entry("Z", **same),
        entry("A", **same),
        entry("z", **same),
        entry("winner", title="Zebra zebra", summary="zebra filler"),
    )
    selection = run(kb, "zebra")
    assert ids(selection) == ["winner", "A", "Z", "a", "b", "z", "é"]
    tied = [item.score for item in selection.primary[1:]]
    assert len(set(tied)) == 1
    assert selection.primary[0].score > tied[0]


def test_order_is_deterministic_across_identical_snapshots(entry: Entry, build_kb: Build) -> None:
    entries = [entry(f"e{n:02}", summary="zebra " * (n % 3 + 1)) for n in range(12)]
    first = ids(run(build_kb(*entries), "zebra"))
    second = ids(run(build_kb(*reversed(entries)), "zebra"))
    assert first == second
    assert first[:4] == ["e02", "e05", "e08", "e11"]


def test_candidate_limit_caps_and_result_limit_selects_primary(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(*(entry(f"e{n}", title="Zebra " * (n + 1)) for n in range(10)))
    full = run(kb, "zebra")
    assert full.candidate_count == 10
    assert len(full.primary) == 8  # default result_limit
    ranked = ids(full)

    capped = run(kb, "zebra", candidate_limit=4, result_limit=2)
    assert capped.candidate_count == 4
    assert ids(capped) == ranked[:2]

    same_limits = run(kb, "zebra", candidate_limit=3, result_limit=3)
    assert same_limits.candidate_count == 3
    assert ids(same_limits) == ranked[:3]


def test_candidate_count_counts_the_union_of_lexical_and_phrase_hits(
    entry: Entry, build_kb: Build
) -> None:
    kb = build_kb(
        entry("quagga", title="Striped horse"),
        entry("lex.one", summary="zebra"),
        entry("lex.two", summary="zebra"),
        entry("unrelated", summary="giraffe"),
    )
    selection = run(kb, "zebra quagga")
    assert selection.candidate_count == 3
    assert ids(selection) == ["quagga", "lex.one", "lex.two"]


# -- I. relationship expansion --------------------------------------------------------------------


def test_expansion_adds_related_then_parent(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("main", summary="zebra", related=["rel.b", "rel.a"], parent="par"),
        entry("rel.a"),
        entry("rel.b"),
        entry("par"),
    )
    selection = run(kb, "zebra")
    assert ids(selection) == ["main"]
    assert expanded_ids(selection) == ["rel.b", "rel.a", "par"]


def test_expansion_skips_primary_entries_and_duplicates(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("one", title="Zebra zebra", related=["two", "shared"], parent="shared"),
        entry("two", summary="zebra", related=["one", "shared", "own"]),
        entry("shared"),
        entry("own"),
    )
    selection = run(kb, "zebra")
    assert ids(selection) == ["one", "two"]
    assert expanded_ids(selection) == ["shared", "own"]


def test_expansion_reauthorizes_related_entries(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry(
            "main",
            summary="zebra",
            related=["r.draft", "r.blocked", "r.slack", "r.ok"],
            parent="p.archived",
        ),
        entry("r.draft", status="draft"),
        entry("r.blocked", domain="Secret"),
        entry("r.slack", integrations=["slack"]),
        entry("r.ok"),
        entry("p.archived", status="archived"),
    )
    assert expanded_ids(run(kb, "zebra", blocked=("secret",))) == ["r.ok"]
    assert expanded_ids(run(kb, "zebra", blocked=("secret",), scope=Scope(("SLACK",)))) == [
        "r.slack",
        "r.ok",
    ]


def test_expansion_ignores_missing_ids(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("main", summary="zebra", related=["nowhere", "real"], parent="ghost"),
        entry("real"),
    )
    assert [i.code for i in kb.issues] == ["related-missing", "parent-missing"]
    assert expanded_ids(run(kb, "zebra")) == ["real"]


def test_expansion_stops_at_relation_limit_across_primaries(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("p1", title="Zebra zebra zebra", related=["x1", "x2"]),
        entry("p2", title="Zebra zebra", related=["y1", "y2"], parent="y3"),
        entry("p3", summary="zebra", related=["z1"]),
        *(entry(name) for name in ("x1", "x2", "y1", "y2", "y3", "z1")),
    )
    assert ids(run(kb, "zebra")) == ["p1", "p2", "p3"]
    assert expanded_ids(run(kb, "zebra")) == ["x1", "x2", "y1", "y2"]  # default limit 4
    assert expanded_ids(run(kb, "zebra", relation_limit=3)) == ["x1", "x2", "y1"]
    assert expanded_ids(run(kb, "zebra", relation_limit=6)) == ["x1", "x2", "y1", "y2", "y3", "z1"]
    assert expanded_ids(run(kb, "zebra", relation_limit=0)) == []


def test_expansion_only_follows_primary_entries(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("first", title="Zebra zebra", related=["a.rel"]),
        entry("second", summary="zebra", related=["b.rel"]),
        entry("a.rel"),
        entry("b.rel"),
    )
    selection = run(kb, "zebra", candidate_limit=2, result_limit=1)
    assert ids(selection) == ["first"]
    assert selection.candidate_count == 2
    assert expanded_ids(selection) == ["a.rel"]


# -- J. confidence --------------------------------------------------------------------------------


def test_confidence_none_without_candidates(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("a.one", summary="zebra"))
    selection = run(kb, "giraffe")
    assert selection.primary == ()
    assert selection.candidate_count == 0
    assert selection.confidence == "none"


def test_confidence_high_for_exact_or_alias_on_top(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("billing.refunds", title="Refund rules", aliases=["money back"]))
    assert run(kb, "refund rules").confidence == "high"
    assert run(kb, "money back").confidence == "high"
    assert run(kb, "refund").confidence != "high"


def test_confidence_medium_for_two_lexical_fields(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("m", title="Zebra guide", summary="zebra filler"))
    top = run(kb, "zebra").primary[0]
    assert top.exact is False
    assert top.alias is False
    assert top.breakdown["title"] > 0
    assert top.breakdown["summary"] > 0
    assert run(kb, "zebra").confidence == "medium"


def test_confidence_medium_when_top_dominates_next(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("top", summary="zebra zebra zebra filler"),
        entry("next", body="zebra and many other long words that dilute the body a lot"),
    )
    selection = run(kb, "zebra")
    top, second = selection.primary
    assert top.entry.id == "top"
    assert [name for name in FIELDS if top.breakdown[name] > 0] == ["summary"]
    assert top.score >= 1.5 * second.score
    assert selection.confidence == "medium"


def test_confidence_low_for_single_field_without_dominance(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("l1", summary="zebra filler"), entry("l2", summary="zebra filler"))
    selection = run(kb, "zebra")
    top, second = selection.primary
    assert [name for name in FIELDS if top.breakdown[name] > 0] == ["summary"]
    assert top.score < 1.5 * second.score
    assert selection.confidence == "low"


def test_confidence_low_for_a_single_weak_candidate(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("only", body="zebra"), entry("other", summary="giraffe"))
    selection = run(kb, "zebra")
    assert ids(selection) == ["only"]
    assert selection.confidence == "low"


# -- query validation -----------------------------------------------------------------------------


def test_query_over_max_chars_is_cut_keeping_start_and_end(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(entry("a.one", summary="zebra"), entry("a.two", summary="giraffe"))
    within = run(kb, "zebra" + " " * 5, max_query_chars=10)
    assert ids(within) == ["a.one"]
    assert within.truncated_query is False
    pasted = "zebra " + "x " * 10_000 + "giraffe"  # a pasted log: what failed, then where
    cut = run(kb, pasted)
    assert cut.truncated_query is True
    assert 7_900 < len(cut.query) <= 8_000
    assert cut.query.startswith("zebra ")
    assert cut.query.endswith(" giraffe")
    assert set(ids(cut)) == {"a.one", "a.two"}  # both ends still reach the ranking
    with pytest.raises(QueryError, match="must be a string"):
        run(kb, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad_turn",
    ["zebra", {"role": "user", "text": "zebra"}, None, Turn("user", None)],  # type: ignore[arg-type]
)
def test_recent_turns_must_be_turns(entry: Entry, build_kb: Build, bad_turn: object) -> None:
    kb = build_kb(entry("a.one", summary="zebra"))
    request = RetrievalRequest("zebra", (Turn("user", "fine"), bad_turn))  # type: ignore[arg-type]
    with pytest.raises(QueryError, match=r"recent_turns\[1\]"):
        retrieve(kb, request, RetrievalConfig())
