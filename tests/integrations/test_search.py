"""The framework-free seam: Access, passages, and the embedded index's two searchers.

Every adapter is a thin conversion of what these return, so the properties that matter —
authorization before ranking, groundwire's exact order and scores, fail-closed callbacks,
refusing restrictions that would be ignored — are proven here once, on the real handbook
and the real example docs, against groundwire's own retrieval as the reference.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.access import test_leaks as leaks
from tests.integrations.conftest import (
    ACME_EVE,
    ACME_HR,
    GLOBEX_GUS,
    GUEST,
    LABELED_SOURCE,
    LABELED_VIEWS,
    STAFF,
)

import groundwire as gw
from groundwire.integrations import (
    ACCESS_FIELDS,
    Access,
    EntrySearcher,
    EvidenceSearcher,
    Passages,
    Searcher,
)

Policy = Callable[[object, Any], bool]

ROTATE = "how do I rotate an api key"
RETRIED = "how are webhook deliveries retried?"
OFF_TOPIC = "what is the capital of peru"


# --- Access --------------------------------------------------------------------------------------
def test_access_normalizes_scope_and_domains() -> None:
    access = Access(scope=["slack"], blocked_domains=["billing", "security"])
    assert access.scope == gw.Scope(("slack",))
    assert access.blocked_domains == ("billing", "security")
    assert Access(blocked_domains={"b", "a"}).blocked_domains == ("a", "b")
    assert ACCESS_FIELDS == ("principal", "authorize", "allow", "scope", "blocked_domains")


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"scope": "slack"}, "scope='slack' is invalid"),
        ({"blocked_domains": "security"}, "blocked_domains='security' is invalid"),
        ({"blocked_domains": [1]}, "blocked_domains"),
        ({"authorize": "yes"}, "authorize='yes' is invalid"),
        ({"allow": 3}, "allow=3 is invalid"),
    ],
)
def test_access_refuses_bad_fields(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(gw.ConfigError, match=match):
        Access(**changes)


def test_an_async_callback_is_refused_it_would_allow_everything() -> None:
    async def authorize(principal: object, item: object) -> bool:
        return False

    class Checker:
        async def __call__(self, entry: object) -> bool:
            return False

    with pytest.raises(gw.ConfigError, match="async function"):
        Access(principal=GUEST, authorize=authorize)
    with pytest.raises(gw.ConfigError, match="async function"):
        Access(allow=Checker())


def test_updated_replaces_only_the_named_fields(entry_policy: Policy) -> None:
    base = Access(principal=GUEST, authorize=entry_policy, blocked_domains=["billing"])
    changed = base.updated({"principal": STAFF, "scope": ["slack"]})
    assert changed.principal == STAFF
    assert changed.authorize is entry_policy
    assert changed.blocked_domains == ("billing",)
    assert changed.scope == gw.Scope(("slack",))
    assert base.updated(None) is base
    assert base.updated({}) is base
    whole = Access(principal=STAFF, authorize=entry_policy)
    assert base.updated(whole) is whole


def test_a_named_none_replaces_too_so_anonymous_never_inherits_a_principal() -> None:
    base = Access(principal=STAFF)
    anonymous = base.updated({"principal": None})
    assert anonymous.principal is None
    assert base.principal == STAFF


def test_the_principal_is_a_verified_groundwire_principal(entry_policy: Policy) -> None:
    for guessed in ("staff", {"tenant": "relaybird", "subject": "sam"}, 42):
        with pytest.raises(gw.ConfigError, match="expected a groundwire Principal"):
            Access(principal=guessed)  # type: ignore[arg-type]
        with pytest.raises(gw.ConfigError, match="expected a groundwire Principal"):
            Access().updated({"principal": guessed})
    assert Access(principal=GUEST, authorize=entry_policy).principal is GUEST


def test_updated_names_the_valid_fields_for_a_typo() -> None:
    with pytest.raises(gw.ConfigError, match=r"unknown access field\(s\) \['principle'\]"):
        Access().updated({"principle": "staff"})
    with pytest.raises(gw.ConfigError, match="a groundwire Access or a mapping"):
        Access().updated("staff")  # type: ignore[arg-type]


# --- entries -------------------------------------------------------------------------------------
def test_entries_are_exactly_the_grounding_selection(
    entries: EntrySearcher, handbook: gw.KnowledgeBase
) -> None:
    found = entries.search(ROTATE, Access())
    selection = gw.retrieve(handbook, gw.RetrievalRequest(ROTATE), gw.RetrievalConfig())
    primary = [p for p in found.passages if not p.expanded]
    assert [p.id for p in primary] == [item.entry.id for item in selection.primary]
    assert [p.score for p in primary] == [item.score for item in selection.primary]
    assert [p.coverage for p in primary] == [item.coverage for item in selection.primary]
    assert [p.id for p in found.passages if p.expanded] == [e.id for e in selection.expanded]
    assert found.passages[0].id == "security.api-key-rotation"
    assert found.confidence == selection.confidence == "high"
    assert found.reason is None
    assert found.candidate_count == selection.candidate_count


def test_entry_passages_say_which_integrations_the_query_named(entries: EntrySearcher) -> None:
    found = entries.search("slack bot not posting", Access())
    assert found.named_integrations == ("slack",)
    assert found.passages[0].id == "troubleshooting.slack-bot-not-posting"
    assert entries.search("slack bot not posting", Access(scope=["slack"])).named_integrations == ()


def test_an_entry_passage_carries_what_a_person_needs_to_trust_it(
    entries: EntrySearcher, handbook: gw.KnowledgeBase
) -> None:
    top = entries.search(ROTATE, Access()).passages[0]
    entry = handbook.get("security.api-key-rotation")
    assert entry is not None
    assert top.citation.tag == "[KB:security.api-key-rotation@2026-11-15]"
    assert top.text == f"{entry.title}\n\n{entry.summary}\n\n{entry.body}"
    assert top.source == "relaybird-handbook"
    assert top.version == "2026-11-15"
    assert top.span is None
    assert top.breakdown["exact"] == 100.0  # the title is named in the question
    assert sum(top.breakdown.values()) == pytest.approx(top.score)
    meta = top.metadata("high")
    assert meta["citation"] == top.citation.tag
    assert meta["confidence"] == "high"
    assert meta["domain"] == "security"
    assert meta["entry_kind"] == "procedure"
    assert json.loads(json.dumps(meta)) == meta  # JSON-ready as it is


def test_expanded_entries_have_no_score_and_can_be_left_out(handbook: gw.KnowledgeBase) -> None:
    found = EntrySearcher(handbook).search(ROTATE, Access())
    expanded = [p for p in found.passages if p.expanded]
    assert expanded
    assert all(p.score is None and not p.breakdown for p in expanded)
    alone = EntrySearcher(handbook, expand=False).search(ROTATE, Access())
    assert [p.id for p in alone.passages] == [p.id for p in found.passages if not p.expanded]


def test_a_denied_entry_never_appears_and_changes_nothing_else(
    entries: EntrySearcher, handbook: gw.KnowledgeBase, entry_policy: Policy
) -> None:
    guest = entries.search(ROTATE, Access(principal=GUEST, authorize=entry_policy))
    assert guest.passages
    assert all(not p.id.startswith("security.") for p in guest.passages)
    # every active security entry was judged once and denied (drafts are never eligible)
    assert guest.denied == sum(
        1 for e in handbook if e.domain == "security" and e.status == "active"
    )
    reference = gw.retrieve(
        handbook,
        gw.RetrievalRequest(ROTATE),
        gw.RetrievalConfig(),
        allow=lambda e: e.domain != "security",
    )
    assert [p.id for p in guest.passages if not p.expanded] == [
        i.entry.id for i in reference.primary
    ]
    staff = entries.search(ROTATE, Access(principal=STAFF, authorize=entry_policy))
    assert staff.passages[0].id == "security.api-key-rotation"
    assert staff.denied == 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_no_denied_entry_ever_appears(
    data: st.DataObject, entries: EntrySearcher, handbook: gw.KnowledgeBase
) -> None:
    ids = [entry.id for entry in handbook]
    denied = set(data.draw(st.lists(st.sampled_from(ids), max_size=40)))
    query = data.draw(st.sampled_from([e.title for e in handbook] + [ROTATE, "slack bot"]))
    found = entries.search(
        query, Access(principal=GUEST, authorize=lambda _, e: e.id not in denied, scope=["slack"])
    )
    assert not {p.id for p in found.passages} & denied
    reference = gw.retrieve(
        handbook,
        gw.RetrievalRequest(query, scope=gw.Scope(("slack",))),
        gw.RetrievalConfig(),
        allow=lambda e: e.id not in denied,
    )
    assert [(p.id, p.score) for p in found.passages if not p.expanded] == [
        (i.entry.id, i.score) for i in reference.primary
    ]
    assert [p.id for p in found.passages if p.expanded] == [e.id for e in reference.expanded]


def test_a_failing_authorizer_denies_and_says_so_without_naming_entries(
    entries: EntrySearcher, handbook: gw.KnowledgeBase
) -> None:
    def broken(principal: object, entry: gw.KnowledgeEntry) -> bool:
        if entry.domain == "security":
            raise KeyError(entry.id)
        return True

    found = entries.search(ROTATE, Access(principal=GUEST, authorize=broken))
    assert all(not p.id.startswith("security.") for p in found.passages)
    assert len(found.authorization_errors) == 1
    assert found.authorization_errors[0].startswith("authorize raised KeyError for ")
    assert "security." not in found.authorization_errors[0]

    sloppy = entries.search(ROTATE, Access(principal=GUEST, authorize=lambda p, e: 1))
    assert sloppy.passages == ()  # 1 is not True: every entry denied
    active = sum(1 for e in handbook if e.status == "active")
    assert sloppy.authorization_errors == (
        f"authorize returned int, not True or False for {active} entries; denied",
    )


def test_allow_and_authorize_both_apply(entries: EntrySearcher, entry_policy: Policy) -> None:
    found = entries.search(
        "api key",
        Access(principal=STAFF, authorize=entry_policy, allow=lambda e: e.kind != "procedure"),
    )
    assert found.passages
    assert all(p.details["entry_kind"] != "procedure" for p in found.passages)


def test_scope_and_blocked_domains_reach_retrieval(entries: EntrySearcher) -> None:
    plain = entries.search("bot stopped posting", Access())  # slack's entries, unnamed
    slack = entries.search("bot stopped posting", Access(scope=["slack"]))
    assert all(not p.details["integrations"] for p in plain.passages)
    assert any("slack" in p.details["integrations"] for p in slack.passages)
    named = entries.search("slack bot stopped posting", Access())
    assert [p.id for p in named.passages] == [p.id for p in slack.passages]
    blocked = entries.search(ROTATE, Access(blocked_domains=["security"]))
    assert all(p.details["domain"] != "security" for p in blocked.passages)


def test_an_authorizer_needs_the_principal_it_checks(
    entries: EntrySearcher, evidence: EvidenceSearcher, entry_policy: Policy
) -> None:
    for searcher in (entries, evidence):
        with pytest.raises(gw.ConfigError, match="authorize is given without a principal"):
            searcher.search(ROTATE, Access(authorize=entry_policy))
    # a principal alone is enough: its labels apply (the handbook has none: all visible)
    assert entries.search(ROTATE, Access(principal=GUEST)).passages[0].id == (
        "security.api-key-rotation"
    )


def test_nothing_found_is_a_reason_not_an_error(entries: EntrySearcher) -> None:
    off = entries.search(OFF_TOPIC, Access())
    assert (off.passages, off.reason, off.confidence) == ((), "low-relevance", "none")
    assert entries.search("zyxwv", Access()).reason == "no-match"
    assert entries.search("   ", Access()) == Passages("   ", reason="empty-query")
    with pytest.raises(gw.QueryError, match="query must be a string"):
        entries.search(3, Access())  # type: ignore[arg-type]


def test_limit_caps_the_passages(entries: EntrySearcher) -> None:
    full = entries.search(ROTATE, Access())
    two = entries.search(ROTATE, Access(), limit=2)
    assert two.passages == full.passages[:2]
    assert entries.search(ROTATE, Access(), limit=0).passages == ()
    for bad in (-1, 1.5, True):
        with pytest.raises(gw.ConfigError, match="limit="):
            entries.search(ROTATE, Access(), limit=bad)  # type: ignore[arg-type]


def test_asearch_is_search(
    entries: EntrySearcher,
    evidence: EvidenceSearcher,
    entry_policy: Policy,
    source_policy: Policy,
) -> None:
    access = Access(principal=GUEST, authorize=entry_policy)
    assert asyncio.run(entries.asearch(ROTATE, access)) == entries.search(ROTATE, access)
    docs = Access(principal=GUEST, authorize=source_policy)
    assert asyncio.run(evidence.asearch(RETRIED, docs)) == evidence.search(RETRIED, docs)


def test_both_searchers_are_searchers(entries: EntrySearcher, evidence: EvidenceSearcher) -> None:
    assert isinstance(entries, Searcher)
    assert isinstance(evidence, Searcher)
    assert not isinstance(object(), Searcher)


def test_a_searcher_refuses_a_wrong_source() -> None:
    with pytest.raises(gw.ConfigError, match="expected a KnowledgeBase or a GroundingEngine"):
        EntrySearcher("examples/handbook")  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="expected a RetrievalConfig"):
        EntrySearcher(gw.KnowledgeBase.from_documents([]), config={})  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="expected a KnowledgeBase of chunks"):
        EvidenceSearcher(None)  # type: ignore[arg-type]


# --- an engine as the source --------------------------------------------------------------------
def test_an_engine_lends_its_snapshot_settings_and_blocked_domains(handbook_path: Any) -> None:
    config = gw.GroundingConfig(
        sources=gw.load_sources(handbook_path),
        blocked_domains=["security"],
        retrieval=gw.RetrievalConfig(result_limit=2, relation_limit=0),
        timeout_ms=60_000,  # the searcher waits this long for the first build; CI may be loaded
    )
    with gw.GroundingEngine(config) as engine:
        searcher = EntrySearcher(engine)
        found = searcher.search("webhook deliveries failing", Access())
        assert found.passages
        assert len(found.passages) <= 2
        assert all(p.details["domain"] != "security" for p in found.passages)
        assert searcher.search(ROTATE, Access()).passages[0].id != "security.api-key-rotation"
        # a rebuild is picked up: the next search reads the new snapshot
        engine.rebuild(
            [
                {
                    "id": "kb",
                    "version": "v2",
                    "entries": [
                        {
                            "id": "ops.webhooks",
                            "title": "Webhook deliveries failing",
                            "summary": "Check the signing secret.",
                            "domain": "ops",
                            "integrations": [],
                        }
                    ],
                }
            ]
        )
        again = searcher.search("webhook deliveries failing", Access())
        assert [p.id for p in again.passages] == ["ops.webhooks"]
        assert again.passages[0].citation.tag == "[KB:ops.webhooks@v2]"


def test_an_engine_that_never_built_comes_back_not_ready() -> None:
    broken = gw.GroundingConfig(sources=[{"id": "kb", "version": "1", "entries": [{"id": "x"}]}])
    with gw.GroundingEngine(broken) as engine:
        found = EntrySearcher(engine, ready_timeout_s=5).search(ROTATE, Access())
    assert (found.passages, found.reason) == ((), "index-not-ready")


# --- documents -----------------------------------------------------------------------------------
def test_excerpts_are_exactly_retrieve_evidence(
    evidence: EvidenceSearcher, docs_kb: gw.KnowledgeBase
) -> None:
    found = evidence.search(RETRIED, Access())
    result = gw.retrieve_evidence(docs_kb, RETRIED)
    assert [p.id for p in found.passages] == [e.id for e in result.excerpts]
    assert [p.score for p in found.passages] == [e.score for e in result.excerpts]
    assert [p.text for p in found.passages] == [e.text for e in result.excerpts]
    assert found.passages[0].source == "api/webhooks.md"
    assert found.confidence is None
    top = found.passages[0]
    excerpt = result.excerpts[0]
    assert top.span == (excerpt.start, excerpt.end)
    assert top.citation == excerpt.citation
    assert top.version == excerpt.version
    assert top.details["chunk_ids"] == excerpt.chunk_ids
    # the breakdown explains each score exactly (nothing denied, lexical mode)
    for passage in found.passages:
        assert passage.breakdown
        assert sum(passage.breakdown.values()) == pytest.approx(passage.score)
    meta = top.metadata()
    assert meta["span"] == [excerpt.start, excerpt.end]
    assert json.loads(json.dumps(meta)) == meta


def test_a_denied_source_never_appears_and_scores_as_if_never_indexed(
    evidence: EvidenceSearcher, docs_kb: gw.KnowledgeBase, source_policy: Policy
) -> None:
    guest = evidence.search(RETRIED, Access(principal=GUEST, authorize=source_policy))
    assert guest.passages
    assert all(not p.source.startswith("api/") for p in guest.passages)
    assert guest.denied == 3
    assert all(not p.breakdown for p in guest.passages)  # statistics changed: not explained
    without = gw.KnowledgeBase.from_documents(
        [doc for doc in _documents(docs_kb) if not doc["metadata"]["path"].startswith("api/")],
        gw.chunk_settings(),
    )
    reference = gw.retrieve_evidence(without, RETRIED)
    assert [(p.id, p.score) for p in guest.passages] == [
        (e.id, pytest.approx(e.score)) for e in reference.excerpts
    ]


def _documents(kb: gw.KnowledgeBase) -> list[dict[str, Any]]:
    """The documents a chunk knowledge base was built from."""
    return [
        {"id": e.id, "title": e.title, "text": e.body, "metadata": dict(e.metadata)} for e in kb
    ]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_no_denied_source_ever_appears(
    data: st.DataObject, evidence: EvidenceSearcher, docs_kb: gw.KnowledgeBase
) -> None:
    paths = sorted({str(e.metadata["path"]) for e in docs_kb})
    denied = set(data.draw(st.lists(st.sampled_from(paths), max_size=len(paths))))
    query = data.draw(st.sampled_from([RETRIED, "rate limits", "install", "error codes", "client"]))
    found = evidence.search(
        query, Access(principal=GUEST, authorize=lambda _, source: source.path not in denied)
    )
    assert not {p.details["path"] for p in found.passages} & denied
    assert found.denied == len(denied)


def test_documents_refuse_entry_only_restrictions(evidence: EvidenceSearcher) -> None:
    for access in (
        Access(allow=lambda e: True),
        Access(scope=["slack"]),
        Access(blocked_domains=["security"]),
    ):
        with pytest.raises(gw.ConfigError, match="restrict knowledge entries, not documents"):
            evidence.search(RETRIED, access)


def test_document_settings_bound_the_result(docs_kb: gw.KnowledgeBase) -> None:
    bounded = EvidenceSearcher(docs_kb, gw.EvidenceSettings(limit=2, max_excerpt_chars=200))
    found = bounded.search(RETRIED, Access())
    assert len(found.passages) == 2
    assert all(len(p.text) <= 200 for p in found.passages)
    off = bounded.search("how do I rotate my car tires", Access())  # "rotate" matches
    assert (off.passages, off.reason) == ((), "low-relevance")
    assert bounded.search(OFF_TOPIC, Access()).reason == "no-match"
    with pytest.raises(gw.ConfigError, match="expected EvidenceSettings"):
        EvidenceSearcher(docs_kb, {"limit": 2})  # type: ignore[arg-type]


def test_explain_false_skips_the_breakdowns_only(
    handbook: gw.KnowledgeBase, docs_kb: gw.KnowledgeBase
) -> None:
    full = EntrySearcher(handbook).search(ROTATE, Access())
    quick = EntrySearcher(handbook, explain=False).search(ROTATE, Access())
    assert [(p.id, p.score) for p in quick.passages] == [(p.id, p.score) for p in full.passages]
    assert all(not p.breakdown for p in quick.passages)
    docs = EvidenceSearcher(docs_kb, explain=False).search(RETRIED, Access())
    assert docs.passages
    assert all(not p.breakdown for p in docs.passages)


# --- groundwire principals (tenant and ACL labels) ----------------------------------------------
def test_a_principal_brings_its_tenant_and_acl_labels(labeled: gw.KnowledgeBase) -> None:
    searcher = EntrySearcher(labeled, config=gw.RetrievalConfig(gate="off"))

    def seen(access: Access) -> set[str]:
        return {p.id for p in searcher.search("payroll approval", access).passages}

    for principal, visible in LABELED_VIEWS.items():
        assert seen(Access(principal=principal)) == visible, principal
    # authorize narrows what the labels admit, never widens it, and is asked only about those
    asked: list[str] = []

    def everything(principal: gw.Principal, entry: gw.KnowledgeEntry) -> bool:
        asked.append(entry.id)
        return True

    assert seen(Access(principal=ACME_EVE, authorize=everything)) == LABELED_VIEWS[ACME_EVE]
    assert sorted(asked) == sorted(LABELED_VIEWS[ACME_EVE])
    narrowed = Access(principal=ACME_HR, authorize=lambda p, e: e.id != "open")
    assert seen(narrowed) == {"acme-hr", "acme-all"}


def test_a_tenants_scores_come_from_its_own_pool(labeled: gw.KnowledgeBase) -> None:
    config = gw.RetrievalConfig(gate="off")
    found = EntrySearcher(labeled, config=config).search("payroll", Access(principal=GLOBEX_GUS))
    own = [e for e in LABELED_SOURCE["entries"] if e.get("tenant") in (None, "globex")]
    alone = gw.KnowledgeBase.from_sources([{**LABELED_SOURCE, "entries": own}])
    reference = EntrySearcher(alone, config=config).search("payroll", Access(principal=GLOBEX_GUS))
    assert [(p.id, p.score) for p in found.passages] == [
        (p.id, p.score) for p in reference.passages
    ]


def test_an_engines_own_authorizer_applies_to_its_searches() -> None:
    config = gw.GroundingConfig(
        sources=[LABELED_SOURCE],
        retrieval=gw.RetrievalConfig(gate="off"),
        authorize=lambda principal, entry: entry.id != "acme-all",
    )
    with gw.GroundingEngine(config) as engine:
        searcher = EntrySearcher(engine)
        found = searcher.search("payroll approval", Access(principal=ACME_HR))
        turn = engine.ground("payroll approval", principal=ACME_HR)
        anonymous = searcher.search("payroll approval", Access())
    assert {p.id for p in found.passages} == {"open", "acme-hr"}
    assert [p.id for p in found.passages] == list(turn.metadata.selected_ids)
    assert [p.id for p in anonymous.passages] == ["open"]


def test_each_callbacks_failures_are_reported_under_its_name(
    labeled: gw.KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    def allow(entry: gw.KnowledgeEntry) -> bool:
        if entry.id == "acme-all":
            raise LookupError("no record of acme-all")
        return True

    searcher = EntrySearcher(labeled, config=gw.RetrievalConfig(gate="off"))
    access = Access(
        principal=ACME_HR, allow=allow, authorize=lambda p, e: "no" if e.id == "open" else True
    )
    with caplog.at_level("WARNING", logger="groundwire.access"):
        found = searcher.search("payroll approval", access)
    assert [p.id for p in found.passages] == ["acme-hr"]
    assert found.denied == 2
    assert found.authorization_errors == (
        "allow raised LookupError for 1 entry; denied",
        "authorize returned str, not True or False for 1 entry; denied",
    )
    # the operator's log names the entries; the results never do
    assert "'acme-all'" in caplog.text
    assert "'open'" in caplog.text


def test_a_callback_past_its_deadline_denies_what_it_did_not_decide(
    labeled: gw.KnowledgeBase,
) -> None:
    release = threading.Event()

    def stuck(principal: gw.Principal, entry: gw.KnowledgeEntry) -> bool:
        release.wait(30)  # a directory lookup that hangs
        return True

    searcher = EntrySearcher(labeled, config=gw.RetrievalConfig(authorize_timeout_ms=50))
    try:
        found = searcher.search("payroll approval", Access(principal=ACME_HR, authorize=stuck))
    finally:
        release.set()
    assert found.passages == ()
    assert found.authorization_errors == (
        "allow did not finish within 50 ms; 3 entries not checked; denied",
    )


def test_documents_follow_their_chunks_labels() -> None:
    chunks = [
        c
        for path, text in (
            ("hr/payroll.md", "# Payroll\n\nPayroll runs are approved by the HR lead."),
            ("all/payroll.md", "# Payroll FAQ\n\nPayroll runs happen monthly, approved."),
        )
        for c in gw.chunk_text(text, path)
    ]
    policy = gw.AccessPolicy.from_mapping(
        {
            "rules": [
                {"paths": ["hr/**"], "tenant": "acme", "acl": ["group:hr"]},
                {"paths": ["**"], "tenant": "acme"},
            ]
        }
    )
    labeled_chunks, _ = gw.label_chunks(chunks, policy)
    kb = gw.KnowledgeBase.from_documents(gw.chunks_to_documents(labeled_chunks))
    searcher = EvidenceSearcher(kb, gw.EvidenceSettings(min_sources=1, gate="off"))

    def sources(principal: gw.Principal | None) -> set[str]:
        found = searcher.search("how are payroll runs approved", Access(principal=principal))
        return {p.source for p in found.passages}

    assert sources(ACME_HR) == {"hr/payroll.md", "all/payroll.md"}
    assert sources(ACME_EVE) == {"all/payroll.md"}
    assert sources(GLOBEX_GUS) == set()
    assert sources(None) == set()


# --- the access suite's leak scenarios, through the searchers -----------------------------------
@pytest.mark.parametrize("seed", range(0, 200, 4))  # 50 of tests/access/test_leaks.py's seeds
def test_searchers_reveal_nothing_the_principal_may_not_see(seed: int) -> None:
    """The same randomized tenants, ACLs, links and tempting queries as the core's leak
    suite: the searchers return exactly the core's selection and evidence, and nothing in
    their passages, metadata, reasons or errors names what the principal may not see."""
    s = leaks.scenario(seed)
    kb = gw.KnowledgeBase.from_sources([s.source])
    authorize = leaks.host_authorizer(seed) if s.principal is not None else None
    hybrid = seed % 8 == 4  # some seeds through the dense channel too
    settings = gw.HybridSettings(mode="hybrid") if hybrid else gw.HybridSettings()
    # The gate abstains on most of these tempting queries: off for most seeds, so that
    # passages come back (about 230 entries and 230 excerpts over the 50 seeds).
    gate: Literal["relevance", "off"] = "relevance" if seed % 8 == 0 else "off"
    config = gw.RetrievalConfig(
        candidate_limit=12, result_limit=5, relation_limit=6, hybrid=settings, gate=gate
    )
    vectors = gw.VectorIndex.build(kb, leaks.EMBEDDER) if hybrid else None
    searcher = EntrySearcher(kb, config=config, vectors=vectors, embedder=leaks.EMBEDDER)
    access = Access(
        principal=s.principal, authorize=authorize, scope=s.scope, blocked_domains=s.blocked
    )
    for query in s.queries:
        visible = leaks.named_visible(s, query)
        found = searcher.search(query, access)
        assert {p.id for p in found.passages} <= visible, f"seed {seed}"
        allow = None if authorize is None else (lambda e, a=authorize: a(s.principal, e))
        reference = gw.retrieve(
            kb,
            gw.RetrievalRequest(query, scope=s.scope, principal=s.principal),
            config,
            s.blocked,
            allow,
            vectors=vectors,
            embedder=leaks.EMBEDDER,
        )
        assert [(p.id, p.score, dict(p.breakdown)) for p in found.passages if not p.expanded] == [
            (i.entry.id, i.score, dict(i.breakdown)) for i in reference.primary
        ], f"seed {seed}"
        assert [p.id for p in found.passages if p.expanded] == [e.id for e in reference.expanded]
        leaks.assert_no_leak(s, _shown(found, query), visible, f"entry search {query!r}")
    docs = leaks.docs_kb(s)
    readable = leaks.label_visible(s)
    bounds: dict[str, Any] = {"limit": 10, "candidate_limit": 50, "gate": gate, "min_sources": 1}
    evidence = EvidenceSearcher(docs, gw.EvidenceSettings(**bounds))
    for query in s.queries:
        found = evidence.search(query, Access(principal=s.principal))
        assert {p.source for p in found.passages} <= readable, f"seed {seed}"
        expected = gw.retrieve_evidence(docs, query, principal=s.principal, **bounds)
        assert [(p.id, p.score) for p in found.passages] == [
            (e.id, e.score) for e in expected.excerpts
        ], f"seed {seed}"
        leaks.assert_no_leak(s, _shown(found, query), readable, f"document search {query!r}")


def _shown(found: Passages, query: str) -> str:
    """Everything a search hands an adapter, serialized (the echoed query left out)."""
    data = {
        "passages": [{**p.metadata(found.confidence), "text": p.text} for p in found.passages],
        "reason": found.reason,
        "errors": found.authorization_errors,
        "counts": [found.candidate_count, found.denied],
    }
    return leaks._scrub_query(json.dumps(data, ensure_ascii=False, default=str), query)
