"""The knowledge snapshot: construction, ordering, search, boosts, eligibility, relations."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from groundwire import (
    Analyzer,
    Document,
    IndexSettings,
    KnowledgeBase,
    KnowledgeEntry,
    KnowledgeIndexError,
    KnowledgeSource,
    QueryError,
    Scope,
    ValidationFailedError,
    load_sources,
)
from groundwire.config import (
    DEFAULT_ALIAS_BOOST,
    DEFAULT_EXACT_BOOST,
    ENTRY_FIELDS,
    MAX_PHRASE_TOKENS,
    MAX_SEARCH_K,
)

EntryFactory = Callable[..., dict[str, Any]]
SourceFactory = Callable[..., dict[str, Any]]

TOLERANCE = 1e-9
BREAKDOWN_KEYS = [*ENTRY_FIELDS, "exact", "alias"]


@pytest.fixture(scope="module")
def handbook() -> KnowledgeBase:
    here = Path(__file__).resolve().parents[2] / "examples" / "handbook"
    return KnowledgeBase.from_sources(load_sources(here))


def kb_of(*entries: dict[str, Any], settings: IndexSettings | None = None) -> KnowledgeBase:
    return KnowledgeBase.from_sources(
        [{"id": "kb", "version": "v1", "entries": list(entries)}], settings
    )


def ids(hits: list[Any]) -> list[str]:
    return [hit.id for hit in hits]


def assert_breakdown_consistent(hit: Any) -> None:
    assert list(hit.breakdown) == BREAKDOWN_KEYS
    assert abs(sum(hit.breakdown.values()) - hit.score) <= TOLERANCE


# -- construction -------------------------------------------------------------------------------


def test_from_sources(entry_factory: EntryFactory, source_factory: SourceFactory) -> None:
    kb = KnowledgeBase.from_sources(
        [source_factory(entry_factory("billing.refunds"), entry_factory("account.login"))]
    )
    assert len(kb) == 2
    assert "billing.refunds" in kb
    assert "nope" not in kb
    assert [e.id for e in kb] == ["account.login", "billing.refunds"]
    entry = kb.get("billing.refunds")
    assert isinstance(entry, KnowledgeEntry)
    assert entry.version == "v1"
    assert kb.get("nope") is None
    assert kb.issues == ()
    assert isinstance(kb.analyzer, Analyzer)
    assert kb.settings == IndexSettings()


def test_from_sources_keeps_warnings(
    entry_factory: EntryFactory, source_factory: SourceFactory
) -> None:
    kb = KnowledgeBase.from_sources([source_factory(entry_factory("a.one", related=["a.none"]))])
    assert [issue.code for issue in kb.issues] == ["related-missing"]


def test_from_sources_rejects_invalid_sources(
    entry_factory: EntryFactory, source_factory: SourceFactory
) -> None:
    with pytest.raises(ValidationFailedError) as info:
        KnowledgeBase.from_sources(
            [source_factory(entry_factory("a.one", kind="essay"), entry_factory("a.two"))]
        )
    assert [issue.code for issue in info.value.issues] == ["kind-unsupported"]
    assert "kind-unsupported" in str(info.value)


def test_constructor_from_entries() -> None:
    entries = [
        KnowledgeEntry("b.two", "Second entry", "About two.", "b", ()),
        KnowledgeEntry("a.one", "First entry", "About one.", "a", ()),
    ]
    kb = KnowledgeBase(entries, IndexSettings())
    assert [e.id for e in kb.entries] == ["a.one", "b.two"]
    assert kb.position("a.one") == 0
    assert kb.entry(1).id == "b.two"
    assert ids(kb.search("second")) == ["b.two"]


def test_duplicate_ids_are_rejected() -> None:
    entries = [
        KnowledgeEntry("a.one", "First", "S.", "a", ()),
        KnowledgeEntry("a.one", "Again", "S.", "a", ()),
        KnowledgeEntry("b.two", "Other", "S.", "b", ()),
    ]
    with pytest.raises(KnowledgeIndexError, match=r"duplicate entry ids \['a.one'\]"):
        KnowledgeBase(entries, IndexSettings())


def test_duplicate_document_ids_are_rejected() -> None:
    with pytest.raises(KnowledgeIndexError, match="duplicate"):
        KnowledgeBase.from_documents(
            [Document("d1", "A", "x"), Document("d1", "B", "y")],
        )


def test_from_documents() -> None:
    kb = KnowledgeBase.from_documents(
        [
            Document("doc-2", "Deploying with Docker", "Build the image and push it.", {"n": 2}),
            {"id": "doc-1", "title": "Kubernetes basics", "text": "Pods and services."},
            {"_id": "doc-3", "text": "Untitled text about helm charts."},
        ]
    )
    assert [e.id for e in kb.entries] == ["doc-1", "doc-2", "doc-3"]
    assert kb.settings.field_weights == {"title": 3.0, "body": 1.0, "bigrams": 0.25}
    assert kb.settings.scoring == "bm25f"
    assert kb.settings.analyzer.stopwords == "extended"
    assert kb.get("doc-2").metadata == {"n": 2}  # type: ignore[union-attr]
    assert ids(kb.search("helm charts")) == ["doc-3"]
    hit = kb.search("docker image")[0]
    assert hit.id == "doc-2"
    assert list(hit.breakdown) == ["title", "body", "bigrams", "exact", "alias"]
    # "helm charts" is an adjacent pair in doc-3's body, so the bigram field contributes
    assert kb.search("helm charts")[0].breakdown["bigrams"] > 0
    assert abs(sum(hit.breakdown.values()) - hit.score) <= TOLERANCE


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"title": "no id", "text": "x"}, "has no id"),
        ({"id": "", "title": "t", "text": "x"}, "has no id"),
        ({"id": "d", "title": "t", "text": 5}, "must be strings"),
        ("just a string", "expected a Document"),
    ],
)
def test_from_documents_rejects_bad_documents(document: Any, message: str) -> None:
    with pytest.raises(KnowledgeIndexError, match=message):
        KnowledgeBase.from_documents([document])


def test_from_documents_has_no_exact_phrases_by_default() -> None:
    kb = KnowledgeBase.from_documents(
        [
            Document("release notes", "Deploy checklist", "Steps to follow."),
            Document("other", "Unrelated", "release notes are published monthly"),
        ]
    )
    assert kb.exact_index == {}
    assert kb.search("deploy checklist")[0].breakdown["exact"] == 0.0


def test_from_documents_indexes_titles_but_not_ids_as_phrases_when_asked() -> None:
    kb = KnowledgeBase.from_documents(
        [
            Document("release notes", "Deploy checklist", "Steps to follow."),
            Document("other", "Unrelated", "release notes are published monthly"),
        ],
        exact_titles=True,
    )
    assert set(kb.exact_index) == {"deploy checklist", "unrel"}
    assert "releas note" not in kb.exact_index
    title_hit = kb.search("deploy checklist")[0]
    assert title_hit.id == "release notes"
    assert title_hit.breakdown["exact"] == DEFAULT_EXACT_BOOST
    # the id is not an exact phrase: the document that mentions the words wins lexically
    id_hits = kb.search("release notes")
    assert ids(id_hits) == ["other"]
    assert id_hits[0].breakdown["exact"] == 0.0


def test_unknown_field_in_settings_is_rejected(entry_factory: EntryFactory) -> None:
    with pytest.raises(KnowledgeIndexError, match="unknown field"):
        kb_of(entry_factory("a.one"), settings=IndexSettings(field_weights={"headline": 1.0}))


# -- ordering -------------------------------------------------------------------------------------


def test_entries_held_in_code_point_order(entry_factory: EntryFactory) -> None:
    kb = kb_of(
        entry_factory("é", title="Accent", domain="x"),
        entry_factory("a", title="Lower", domain="x"),
        entry_factory("B", title="Upper", domain="x"),
        entry_factory("Z", title="Upper z", domain="x"),
    )
    assert [e.id for e in kb.entries] == ["B", "Z", "a", "é"]
    assert [kb.position(i) for i in ("B", "Z", "a", "é")] == [0, 1, 2, 3]
    assert kb.position("missing") is None


def test_ties_broken_by_id(entry_factory: EntryFactory) -> None:
    same = {"title": "Shared title", "summary": "Identical summary text.", "domain": "x"}
    kb = kb_of(
        entry_factory("b", **same),
        entry_factory("é", **same),
        entry_factory("a", **same),
        entry_factory("B", **same),
        entry_factory("zz", title="Other", summary="Nothing alike.", domain="x"),
    )
    hits = kb.search("identical summary")
    assert ids(hits) == ["B", "a", "b", "é"]
    assert len({hit.score for hit in hits}) == 1
    assert ids(kb.search("identical summary", k=2)) == ["B", "a"]
    # with an exact title hit the boosted scores still tie
    boosted = kb.search("shared title")
    assert ids(boosted) == ["B", "a", "b", "é"]
    assert {hit.breakdown["exact"] for hit in boosted} == {DEFAULT_EXACT_BOOST}


# -- boosts ---------------------------------------------------------------------------------------


@pytest.fixture
def billing_kb(entry_factory: EntryFactory) -> KnowledgeBase:
    return kb_of(
        entry_factory(
            "billing.refunds",
            title="Refund policy",
            summary="Annual plans are refundable within 14 days.",
            aliases=["money back"],
            keywords=["refund", "cancel"],
            body="Refunds go back to the original card.",
        ),
        entry_factory(
            "billing.invoices",
            title="Invoices",
            summary="Download invoices from the billing page; a refund shows as a credit note.",
            body="Each refund produces a credit note on the next invoice.",
        ),
        entry_factory(
            "account.close",
            title="Close your account",
            summary="Cancel the subscription first, then close the account.",
            aliases=["delete my account"],
        ),
    )


def test_exact_title_boost(billing_kb: KnowledgeBase) -> None:
    hits = billing_kb.search("what is the refund policy")
    top = hits[0]
    assert top.id == "billing.refunds"
    assert top.breakdown["exact"] == DEFAULT_EXACT_BOOST
    assert top.breakdown["alias"] == 0.0
    lexical = sum(top.breakdown[f] for f in ENTRY_FIELDS)
    assert lexical > 0
    assert abs(top.score - (lexical + DEFAULT_EXACT_BOOST)) <= TOLERANCE
    for hit in hits:
        assert_breakdown_consistent(hit)
    assert all(hit.breakdown["exact"] == 0.0 for hit in hits[1:])


def test_exact_id_boost(billing_kb: KnowledgeBase) -> None:
    # the id "account.close" is the phrase "account close"; its title ("Close your
    # account") is not in the query, so only the id can make this an exact hit
    assert billing_kb.exact_index["account close"] == ("account.close",)
    hit = billing_kb.search("account close")[0]
    assert hit.id == "account.close"
    assert hit.breakdown["exact"] == DEFAULT_EXACT_BOOST
    assert billing_kb.search("close account")[0].breakdown["exact"] == 0.0


def test_alias_boost(billing_kb: KnowledgeBase) -> None:
    hits = billing_kb.search("how do I get my money back")
    top = hits[0]
    assert top.id == "billing.refunds"
    assert top.breakdown["alias"] == DEFAULT_ALIAS_BOOST
    assert top.breakdown["exact"] == 0.0
    lexical = sum(top.breakdown[f] for f in ENTRY_FIELDS)
    assert abs(top.score - (lexical + DEFAULT_ALIAS_BOOST)) <= TOLERANCE
    assert_breakdown_consistent(top)


def test_exact_and_alias_boosts_add_up(entry_factory: EntryFactory) -> None:
    kb = kb_of(entry_factory("a.sso", title="Single sign-on", aliases=["sso login"]))
    hit = kb.search("single sign-on sso login")[0]
    assert (hit.breakdown["exact"], hit.breakdown["alias"]) == (100.0, 60.0)
    assert_breakdown_consistent(hit)


def test_custom_boost_values(billing_kb: KnowledgeBase) -> None:
    hit = billing_kb.search("refund policy money back", exact_boost=7.5, alias_boost=2.25)[0]
    assert (hit.breakdown["exact"], hit.breakdown["alias"]) == (7.5, 2.25)
    assert_breakdown_consistent(hit)


def test_zero_boosts_disable_the_channels(billing_kb: KnowledgeBase) -> None:
    query = "refund policy money back"
    boosted = {h.id: h for h in billing_kb.search(query)}
    plain = {h.id: h for h in billing_kb.search(query, exact_boost=0, alias_boost=0)}
    refund = plain["billing.refunds"]
    assert (refund.breakdown["exact"], refund.breakdown["alias"]) == (0.0, 0.0)
    expected = boosted["billing.refunds"].score - DEFAULT_EXACT_BOOST - DEFAULT_ALIAS_BOOST
    assert abs(refund.score - expected) <= TOLERANCE
    only_exact = billing_kb.search(query, alias_boost=0)[0]
    assert (only_exact.breakdown["exact"], only_exact.breakdown["alias"]) == (100.0, 0.0)
    only_alias = billing_kb.search(query, exact_boost=0)[0]
    assert (only_alias.breakdown["exact"], only_alias.breakdown["alias"]) == (0.0, 60.0)


@pytest.mark.parametrize("boost", [-1, float("inf"), float("nan"), "100"])
def test_invalid_boosts(billing_kb: KnowledgeBase, boost: Any) -> None:
    with pytest.raises(QueryError, match="exact_boost"):
        billing_kb.search("refund", exact_boost=boost)
    with pytest.raises(QueryError, match="alias_boost"):
        billing_kb.search("refund", alias_boost=boost)


@pytest.fixture
def outside_top_kb(entry_factory: EntryFactory) -> KnowledgeBase:
    # "gamma" is rare and heavy in a.lexical; "alpha beta" is a.exact's title but weak
    return kb_of(
        entry_factory(
            "a.lexical",
            title="Gamma gamma gamma",
            summary="Gamma and more gamma.",
            keywords=["gamma"],
        ),
        entry_factory(
            "a.exact",
            title="Alpha beta",
            summary="Short note.",
            body="Nothing about the other word.",
        ),
        *[
            entry_factory(f"b.filler{i}", title=f"Alpha filler {i}", summary="Alpha beta alpha.")
            for i in range(5)
        ],
    )


def test_phrase_hits_outside_the_lexical_top_are_included(
    outside_top_kb: KnowledgeBase,
) -> None:
    kb = outside_top_kb
    query = "gamma gamma alpha beta"
    terms = kb.analyzer.tokens(query)
    lexical = kb.lexical.score(terms)
    position = kb.position("a.exact")
    assert position is not None
    bm25 = lexical.score_of(position)
    lexical_top = [kb.entry(d).id for d in lexical.top(1)[0].tolist()]
    assert lexical_top == ["a.lexical"]  # the phrase hit is not in the lexical top 1
    hits = kb.search(query, k=2)
    assert ids(hits) == ["a.exact", "a.lexical"]
    exact_hit = hits[0]
    # its BM25 score is kept, not replaced by 0
    assert bm25 > 0
    assert abs(exact_hit.score - (bm25 + DEFAULT_EXACT_BOOST)) <= TOLERANCE
    assert abs(sum(exact_hit.breakdown[f] for f in ENTRY_FIELDS) - bm25) <= TOLERANCE
    # k=1: the boosted phrase hit takes the only place
    assert ids(kb.search(query, k=1)) == ["a.exact"]
    # without the exact channel the phrase hit is outside the top 1
    assert ids(kb.search(query, k=1, exact_boost=0)) == ["a.lexical"]


def test_phrase_hit_with_no_lexical_match_scores_only_the_boost(
    entry_factory: EntryFactory,
) -> None:
    kb = kb_of(
        entry_factory("a.one", title="Quiet title", summary="Words."),
        entry_factory("a.two", title="Other", summary="Mentions nothing else."),
    )
    # a title weight of 0 keeps the title out of BM25, but its phrase still matches
    weights = {"title": 0.0, "aliases": 5.0, "keywords": 3.0, "summary": 3.0, "body": 1.0}
    kb = KnowledgeBase(kb.entries, IndexSettings(field_weights=weights))
    hits = kb.search("quiet title")
    assert ids(hits) == ["a.one"]
    assert hits[0].score == DEFAULT_EXACT_BOOST
    assert_breakdown_consistent(hits[0])


def test_ngrams_up_to_the_longest_phrase(entry_factory: EntryFactory) -> None:
    words16 = [f"word{chr(97 + i)}" for i in range(MAX_PHRASE_TOKENS)]
    words17 = [f"term{chr(97 + i)}" for i in range(MAX_PHRASE_TOKENS + 1)]
    kb = kb_of(
        entry_factory("x.long", title=" ".join(words16), domain="x"),
        entry_factory("x.longer", title=" ".join(words17), domain="x"),
        entry_factory("x.short", title="Alpha beta gamma delta epsilon", domain="x"),
    )
    analyzer = kb.analyzer
    assert analyzer.phrase(" ".join(words16)) in kb.exact_index
    assert analyzer.phrase(" ".join(words17)) not in kb.exact_index
    # a 16-term title embedded in a longer query is found
    hit = kb.search("please " + " ".join(words16) + " thanks")[0]
    assert hit.id == "x.long"
    assert hit.breakdown["exact"] == DEFAULT_EXACT_BOOST
    # a 5-term title in the middle of a query
    hit = kb.search("say alpha beta gamma delta epsilon now")[0]
    assert (hit.id, hit.breakdown["exact"]) == ("x.short", DEFAULT_EXACT_BOOST)
    # a partial phrase is not an exact hit
    partial = kb.search("alpha beta gamma delta")[0]
    assert (partial.id, partial.breakdown["exact"]) == ("x.short", 0.0)
    # the too-long title is only matched lexically
    longer = kb.search(" ".join(words17))[0]
    assert (longer.id, longer.breakdown["exact"]) == ("x.longer", 0.0)


def test_phrase_matches_finds_every_phrase(billing_kb: KnowledgeBase) -> None:
    terms = billing_kb.analyzer.tokens("refund policy and money back or delete my account")
    exact, alias = billing_kb.phrase_matches(terms)
    assert {billing_kb.entry(d).id for d in exact} == {"billing.refunds"}
    assert {billing_kb.entry(d).id for d in alias} == {"billing.refunds", "account.close"}


# -- query validation -------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -1, MAX_SEARCH_K + 1, True, 1.5, "3", None])
def test_k_validation(billing_kb: KnowledgeBase, k: Any) -> None:
    with pytest.raises(QueryError, match="k="):
        billing_kb.search("refund", k=k)


def test_k_bounds_accepted(billing_kb: KnowledgeBase) -> None:
    assert len(billing_kb.search("refund", k=1)) == 1
    assert len(billing_kb.search("refund", k=MAX_SEARCH_K)) == 2


def test_query_too_long(billing_kb: KnowledgeBase) -> None:
    with pytest.raises(QueryError, match="over max_query_chars=8,000"):
        billing_kb.search("refund " * 2000)
    with pytest.raises(QueryError, match="over max_query_chars=10"):
        billing_kb.search("refund policy text", max_query_chars=10)
    assert billing_kb.search("refund", max_query_chars=6)


def test_query_must_be_a_string(billing_kb: KnowledgeBase) -> None:
    with pytest.raises(QueryError, match="must be a string"):
        billing_kb.search(b"refund")  # type: ignore[arg-type]


@pytest.mark.parametrize("query", ["", "   ", "the of and", "?!", "\n\t"])
def test_empty_or_stopword_query_returns_nothing(billing_kb: KnowledgeBase, query: str) -> None:
    assert billing_kb.search(query) == []


def test_no_match_returns_nothing(billing_kb: KnowledgeBase) -> None:
    assert billing_kb.search("kubernetes helm") == []


# -- eligibility ----------------------------------------------------------------------------------


@pytest.fixture
def scoped_kb(entry_factory: EntryFactory) -> KnowledgeBase:
    return kb_of(
        entry_factory("g.universal", title="Notifications overview", integrations=[]),
        entry_factory("g.slack", title="Slack notifications", integrations=["Slack"]),
        entry_factory("g.teams", title="Teams notifications", integrations=["microsoft-teams"]),
        entry_factory(
            "g.both", title="Chat notifications", integrations=["slack", "MICROSOFT-TEAMS"]
        ),
        entry_factory("g.draft", title="Draft notifications", status="draft"),
        entry_factory("g.deprecated", title="Old notifications", status="deprecated"),
        entry_factory("g.archived", title="Archived notifications", status="archived"),
        entry_factory("h.secret", title="Secret notifications", domain="Internal-Debug"),
    )


def test_inactive_entries_never_returned(scoped_kb: KnowledgeBase) -> None:
    found = ids(scoped_kb.search("notifications", k=50))
    assert not {"g.draft", "g.deprecated", "g.archived"} & set(found)
    # not even by their exact title
    assert "g.draft" not in ids(scoped_kb.search("draft notifications"))
    assert scoped_kb.search("archived") == []
    # but explain still scores them
    explained = scoped_kb.explain("draft notifications", "g.draft")
    assert explained.breakdown["exact"] == DEFAULT_EXACT_BOOST


def test_scope_none_does_not_filter_integrations(scoped_kb: KnowledgeBase) -> None:
    found = set(ids(scoped_kb.search("notifications", k=50)))
    assert found == {"g.universal", "g.slack", "g.teams", "g.both", "h.secret"}


def test_empty_scope_keeps_only_universal_entries(scoped_kb: KnowledgeBase) -> None:
    found = set(ids(scoped_kb.search("notifications", k=50, scope=Scope())))
    assert found == {"g.universal", "h.secret"}
    assert set(ids(scoped_kb.search("notifications", k=50, scope=Scope([])))) == found  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["Slack", "slack", "SLACK"])
def test_scope_with_an_integration_is_case_insensitive(scoped_kb: KnowledgeBase, name: str) -> None:
    found = set(ids(scoped_kb.search("notifications", k=50, scope=Scope([name]))))  # type: ignore[arg-type]
    assert found == {"g.universal", "g.slack", "g.both", "h.secret"}


def test_scope_with_several_or_unknown_integrations(scoped_kb: KnowledgeBase) -> None:
    both = Scope(("microsoft-teams", "slack"))
    assert set(ids(scoped_kb.search("notifications", k=50, scope=both))) == {
        "g.universal",
        "g.slack",
        "g.teams",
        "g.both",
        "h.secret",
    }
    unknown = Scope(("jira",))
    assert set(ids(scoped_kb.search("notifications", k=50, scope=unknown))) == {
        "g.universal",
        "h.secret",
    }


def test_scope_excludes_exact_hits_too(scoped_kb: KnowledgeBase) -> None:
    assert "g.slack" not in ids(scoped_kb.search("slack notifications", scope=Scope()))


@pytest.mark.parametrize("blocked", [["internal-debug"], ["INTERNAL-DEBUG"], ("Internal-Debug",)])
def test_blocked_domains_case_insensitive(scoped_kb: KnowledgeBase, blocked: Any) -> None:
    found = ids(scoped_kb.search("secret notifications", k=50, blocked_domains=blocked))
    assert "h.secret" not in found
    assert "g.universal" in found


def test_blocked_unknown_domain_changes_nothing(scoped_kb: KnowledgeBase) -> None:
    plain = ids(scoped_kb.search("notifications", k=50))
    assert ids(scoped_kb.search("notifications", k=50, blocked_domains=["nope"])) == plain


def test_allow_predicate(scoped_kb: KnowledgeBase) -> None:
    seen: list[str] = []

    def allow(entry: KnowledgeEntry) -> bool:
        seen.append(entry.id)
        return entry.id != "g.universal"

    found = ids(scoped_kb.search("notifications overview", k=50, allow=allow))
    assert "g.universal" not in found
    assert found
    # the predicate is only asked about entries that passed the other checks
    assert "g.draft" not in seen


def test_eligibility_mask(scoped_kb: KnowledgeBase) -> None:
    mask = scoped_kb.eligibility(Scope(("slack",)), ["internal-debug"])
    allowed = {scoped_kb.entry(d).id for d in range(len(scoped_kb)) if mask[d]}
    assert allowed == {"g.universal", "g.slack", "g.both"}
    assert scoped_kb.is_eligible("g.slack", mask)
    assert not scoped_kb.is_eligible("g.teams", mask)
    assert not scoped_kb.is_eligible("missing", mask)
    # repeated calls give the same answer (masks are cached)
    again = scoped_kb.eligibility(Scope(("SLACK",)), ["Internal-Debug"])
    assert again.tolist() == mask.tolist()


# -- relations ----------------------------------------------------------------------------------


def test_relation_index(entry_factory: EntryFactory) -> None:
    kb = kb_of(
        entry_factory(
            "a.child",
            related=["a.sibling", "a.missing", "a.child", "a.sibling", "a.parent"],
            parent="a.parent",
        ),
        entry_factory("a.parent"),
        entry_factory("a.sibling", parent="a.gone"),
        entry_factory("a.draft", status="draft", related=["a.parent"]),
        entry_factory("a.self", parent="a.self"),
    )
    relations = kb.relation_index
    # related first (deduplicated, missing and self dropped), then parent if not already there
    assert relations["a.child"] == ("a.sibling", "a.parent")
    assert relations["a.draft"] == ("a.parent",)
    assert "a.sibling" not in relations  # its parent does not exist
    assert "a.self" not in relations
    assert "a.parent" not in relations
    assert kb.related("a.child") == ("a.sibling", "a.parent")
    assert kb.related("a.parent") == ()
    assert kb.related("missing") == ()


def test_relation_parent_comes_after_related(entry_factory: EntryFactory) -> None:
    kb = kb_of(
        entry_factory("a.one", related=["a.three"], parent="a.two"),
        entry_factory("a.two"),
        entry_factory("a.three"),
    )
    assert kb.relation_index["a.one"] == ("a.three", "a.two")


# -- the handbook ---------------------------------------------------------------------------------


def test_handbook_exact_index(handbook: KnowledgeBase) -> None:
    exact = handbook.exact_index
    assert exact["refund polici"] == ("billing.refund-policy",)
    assert exact["bill refund polici"] == ("billing.refund-policy",)
    phrase = handbook.analyzer.phrase
    for entry in handbook.entries:
        assert entry.id in exact[phrase(entry.id)]
        assert entry.id in exact[phrase(entry.title)]
    # every indexed phrase belongs to some entry's id or title
    owners = {phrase(e.id) for e in handbook.entries} | {phrase(e.title) for e in handbook}
    assert set(exact) <= owners


def test_handbook_alias_index(handbook: KnowledgeBase) -> None:
    aliases = handbook.alias_index
    assert aliases["money back"] == ("billing.refund-policy",)
    assert aliases["get refund"] == ("billing.refund-policy",)
    assert aliases["slack alert"] == ("integrations.slack-notifications",)
    phrase = handbook.analyzer.phrase
    expected: dict[str, set[str]] = {}
    for entry in handbook.entries:
        for alias in entry.aliases:
            if phrase(alias):
                expected.setdefault(phrase(alias), set()).add(entry.id)
    assert {k: set(v) for k, v in aliases.items()} == expected


def test_handbook_relation_index(handbook: KnowledgeBase) -> None:
    relations = handbook.relation_index
    assert relations["account.change-login-email"] == (
        "security.sso",
        "security.scim-provisioning",
        "settings.email-notifications",
    )
    # the parent is also listed as related: it appears once, in its related position
    assert relations["api.webhook-retries"] == (
        "api.webhooks",
        "troubleshooting.webhook-401",
        "api.webhook-signature-verification",
    )
    for entry in handbook.entries:
        links = [*entry.related, *([entry.parent] if entry.parent else [])]
        kept = tuple(i for i in dict.fromkeys(links) if i in handbook and i != entry.id)
        assert relations.get(entry.id, ()) == kept


def test_handbook_search_and_explain(handbook: KnowledgeBase) -> None:
    hits = handbook.search("refund policy", k=5)
    assert hits[0].id == "billing.refund-policy"
    assert hits[0].breakdown["exact"] == DEFAULT_EXACT_BOOST
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        assert_breakdown_consistent(hit)
        explained = handbook.explain("refund policy", hit.id)
        assert explained.id == hit.id
        assert abs(explained.score - hit.score) <= TOLERANCE
        assert dict(explained.breakdown) == pytest.approx(dict(hit.breakdown), abs=TOLERANCE)


def test_handbook_alias_query(handbook: KnowledgeBase) -> None:
    hit = handbook.search("I want my money back")[0]
    assert hit.id == "billing.refund-policy"
    assert hit.breakdown["alias"] == DEFAULT_ALIAS_BOOST


def test_handbook_scope_and_status(handbook: KnowledgeBase) -> None:
    inactive = {e.id for e in handbook if e.status != "active"}
    assert inactive
    universal_only = handbook.search("slack", k=80, scope=Scope())
    assert not inactive & set(ids(universal_only))
    for hit in universal_only:
        assert handbook.get(hit.id).integrations == ()  # type: ignore[union-attr]
    with_slack = ids(handbook.search("slack", k=80, scope=Scope(("slack",))))
    assert "integrations.slack-notifications" in with_slack
    assert "integrations.slack-classic-app" not in with_slack  # deprecated


def test_explain_unknown_id(handbook: KnowledgeBase) -> None:
    with pytest.raises(KnowledgeIndexError, match="no entry with id 'nope'"):
        handbook.explain("refund", "nope")


def test_explain_of_an_unmatched_entry_is_zero(handbook: KnowledgeBase) -> None:
    hit = handbook.explain("refund policy", "glossary.run")
    assert hit.score == 0.0
    assert set(hit.breakdown.values()) == {0.0}
    assert list(hit.breakdown) == BREAKDOWN_KEYS


@pytest.mark.parametrize(
    ("scoring", "b"),
    [
        ("fields", 0.75),
        ("fields", 1.0),
        ("bm25f", 0.75),
        pytest.param(
            "bm25f",
            1.0,
        ),
    ],
)
def test_breakdown_sums_to_score_for_every_setting(scoring: str, b: float) -> None:
    here = Path(__file__).resolve().parents[2] / "examples" / "handbook"
    settings = IndexSettings(scoring=scoring, b=b)
    kb = KnowledgeBase.from_sources(load_sources(here), settings)
    for query in ("refund policy", "slack bot not posting", "rotate api keys", "money back"):
        for hit in kb.search(query, k=10):
            assert not any(math.isnan(v) for v in hit.breakdown.values()), (query, hit.id)
            assert_breakdown_consistent(hit)


def test_knowledge_entry_source_input_round_trip() -> None:
    entry = KnowledgeEntry("a.one", "Refund policy", "Summary.", "a", ())
    kb = KnowledgeBase.from_sources([KnowledgeSource("kb", "v9", (entry,))])
    assert kb.get("a.one").version == "v9"  # type: ignore[union-attr]
    assert kb.get("a.one").citation.tag == "[KB:a.one@v9]"  # type: ignore[union-attr]


def test_empty_knowledge_base_searches_to_nothing() -> None:
    kb = KnowledgeBase.from_sources([{"id": "kb", "version": "v1", "entries": []}])
    assert len(kb) == 0
    assert kb.search("refund policy") == []
    assert kb.exact_index == {}
    assert kb.relation_index == {}


# -- ids-only search and the two scoring paths ---------------------------------------------------


def test_search_ids_ranks_exactly_like_search(handbook_path: Any) -> None:
    from groundwire import load_sources

    kb = KnowledgeBase.from_sources(load_sources(handbook_path))
    for query in ("rotate api key", "slack bot not posting", "refund", "saml login loop"):
        for k in (1, 5, 50):
            hits = kb.search(query, k)
            ids, scores = kb.search_ids(query, k)
            assert ids == [hit.id for hit in hits]
            assert scores == [hit.score for hit in hits]
    assert kb.search_ids("the of and", 5) == ([], [])


def test_kernel_and_numpy_paths_agree_exactly(
    handbook_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groundwire import load_sources
    from groundwire.index import _kernel

    kb = KnowledgeBase.from_sources(load_sources(handbook_path))
    queries = ["rotate api key", "webhook 401 signature", "billing invoice seats proration"]
    with_kernel = [kb.search_ids(q, 20) for q in queries]
    monkeypatch.setattr(_kernel, "available", lambda: False)
    without = [kb.search_ids(q, 20) for q in queries]
    assert with_kernel == without  # same ids, bit-identical scores
