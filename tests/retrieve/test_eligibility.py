"""One eligibility per turn: before every top-k, re-checked after expansion, tenant pools."""

from __future__ import annotations

from typing import Any

import pytest

import groundwire as gw
from groundwire.access.filters import admits
from groundwire.retrieve.eligibility import tenant_pool, turn_eligibility, warm_tenant_pools

ACME = gw.Principal("acme", "alice", ["eng"])
CONFIG = gw.RetrievalConfig()
#: The fixed count (no relevance gate): what eligibility alone lets through.
UNGATED = gw.RetrievalConfig(gate="off")


def entry(entry_id: str, text: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": entry_id,
        "title": fields.pop("title", "Handbook page"),
        "summary": text,
        "domain": fields.pop("domain", "ops"),
        "integrations": fields.pop("integrations", []),
        **fields,
    }


def build(*entries: dict[str, Any]) -> gw.KnowledgeBase:
    return gw.KnowledgeBase.from_sources([{"id": "s", "version": "1", "entries": list(entries)}])


def turn(
    kb: gw.KnowledgeBase, query: str, principal: gw.Principal | None = ACME, **kw: Any
) -> gw.Selection:
    return gw.retrieve(kb, gw.RetrievalRequest(query, principal=principal), CONFIG, **kw)


def scored(selection: gw.Selection) -> list[tuple[str, float, dict[str, float]]]:
    return [(i.entry.id, i.score, dict(i.breakdown)) for i in selection.primary]


ACME_ENTRIES = [
    entry("acme.keys", "rotate signing keys every month", tenant="acme"),
    entry("acme.tokens", "revoke leaked tokens and rotate keys", tenant="acme"),
    entry("shared.faq", "keys rotate automatically on the free plan"),
]
BETA_ENTRIES = [
    entry(f"beta.{n}", f"rotate keys rotate keys rotate tokens batch {n}", tenant="beta")
    for n in range(40)
]


# -- statistics isolation, measured -------------------------------------------------------------
def test_another_tenants_entries_change_no_score_of_this_tenant() -> None:
    """The measurement of docs/ACCESS.md: scores of tenant A's turn before and after
    tenant B indexes 40 entries full of A's query words are identical, to the bit."""
    before = build(*ACME_ENTRIES)
    after = build(*ACME_ENTRIES, *BETA_ENTRIES)
    for query in ("rotate keys", "leaked tokens", "free plan keys", "acme.keys"):
        assert scored(turn(after, query)) == scored(turn(before, query)), query
    # the contrast: the unscoped index shares one pool, so there B's entries do move A's scores
    raw_before = {h.id: h.score for h in before.search("rotate keys")}
    raw_after = {h.id: h.score for h in after.search("rotate keys", k=50)}
    assert raw_after["acme.keys"] != raw_before["acme.keys"]


def test_the_engine_grounds_each_tenant_in_its_own_pool() -> None:
    sources = [{"id": "s", "version": "1", "entries": [*ACME_ENTRIES, *BETA_ENTRIES]}]
    alone = [{"id": "s", "version": "1", "entries": ACME_ENTRIES}]
    with (
        gw.GroundingEngine(gw.GroundingConfig(sources=sources)) as mixed,
        gw.GroundingEngine(gw.GroundingConfig(sources=alone)) as single,
    ):
        assert mixed.ready(30)
        assert single.ready(30)
        a = mixed.ground("rotate keys", principal=ACME)
        b = single.ground("rotate keys", principal=ACME)
    assert a.block is not None
    assert b.block is not None
    assert a.block.content == b.block.content
    assert a.retrieval is not None
    assert b.retrieval is not None
    assert scored_items(a.retrieval.primary) == scored_items(b.retrieval.primary)
    assert a.metadata.candidate_count == b.metadata.candidate_count


def scored_items(items: tuple[gw.ScoredEntry, ...]) -> list[tuple[str, float]]:
    return [(i.entry.id, i.score) for i in items]


def test_within_a_tenant_acl_hidden_entries_share_the_statistics_pool() -> None:
    """The documented trade-off: hidden entries of one's own tenant take no slot, but count
    in its statistics; kb.reader(principal) is the fully isolated view."""
    hidden = [
        entry(f"acme.hr.{n}", "rotate keys rotate keys payroll", tenant="acme", acl=["group:hr"])
        for n in range(10)
    ]
    plain, with_hidden = build(*ACME_ENTRIES), build(*ACME_ENTRIES, *hidden)
    assert [i for i, _, _ in scored(turn(with_hidden, "rotate keys"))] == [
        i for i, _, _ in scored(turn(plain, "rotate keys"))
    ]
    assert scored(turn(with_hidden, "rotate keys")) != scored(turn(plain, "rotate keys"))
    reader = with_hidden.reader(ACME)
    isolated = gw.retrieve(
        reader.knowledge_base, gw.RetrievalRequest("rotate keys", principal=ACME), CONFIG
    )
    assert scored(isolated) == scored(turn(plain, "rotate keys"))


# -- before every top-k; once per turn ----------------------------------------------------------
def test_the_predicate_is_asked_once_per_eligible_entry_per_turn() -> None:
    kb = build(
        *ACME_ENTRIES,
        *BETA_ENTRIES[:3],
        entry("acme.draft", "rotate keys", tenant="acme", status="draft"),
    )
    asked: list[str] = []
    selection = turn(kb, "rotate keys", allow=lambda e: asked.append(e.id) or True)
    assert sorted(asked) == ["acme.keys", "acme.tokens", "shared.faq"]  # never beta's or drafts
    assert selection.authorization_errors == ()


def test_the_mask_at_every_channels_seam_is_the_filter() -> None:
    kb = build(
        *ACME_ENTRIES, *BETA_ENTRIES[:3], entry("acme.x", "x", tenant="acme", acl=["group:hr"])
    )
    flt = gw.Filter.of(ACME, gw.Scope(), ())
    eligible = turn_eligibility(kb, flt)
    assert eligible.mask.tolist() == [admits(flt, e) for e in kb]
    assert not eligible.mask.flags.writeable
    assert eligible.pool_positions is not None
    assert [e.id for e in eligible.pool] == [kb.entry(int(p)).id for p in eligible.pool_positions]
    assert eligible.pool_mask.tolist() == eligible.mask[eligible.pool_positions].tolist()


def test_phrase_boosts_never_reach_past_eligibility() -> None:
    kb = build(*ACME_ENTRIES, entry("beta.secret", "x", tenant="beta", title="Rotate signing keys"))
    ids = [item.entry.id for item in turn(kb, "beta.secret rotate signing keys").primary]
    assert "beta.secret" not in ids


# -- re-checked after expansion -----------------------------------------------------------------
def test_expansion_adds_only_entries_this_request_may_see() -> None:
    kb = build(
        entry(
            "acme.main",
            "rotate keys",
            tenant="acme",
            related=["beta.page", "acme.hr", "acme.draft", "acme.ok", "shared.page"],
            parent="beta.page",
        ),
        entry("beta.page", "beta page", tenant="beta"),
        entry("acme.hr", "hr page", tenant="acme", acl=["group:hr"]),
        entry("acme.draft", "draft page", tenant="acme", status="draft"),
        entry("acme.ok", "ok page", tenant="acme"),
        entry("shared.page", "shared page"),
    )
    selection = gw.retrieve(kb, gw.RetrievalRequest("rotate keys", principal=ACME), UNGATED)
    assert [e.id for e in selection.expanded] == ["acme.ok", "shared.page"]
    main = selection.primary[0].entry
    assert main.related == ("acme.ok", "shared.page")
    assert main.parent is None


def test_issue9_returned_entries_never_name_ids_the_request_may_not_see() -> None:
    """Fails before the fix: outcome.retrieval returned related/parent ids of drafts,
    blocked domains and out-of-scope entries."""
    entries = [
        entry(
            "guide.main",
            "rotate keys",
            related=["guide.draft", "billing.page", "slack.page", "guide.ok"],
            parent="billing.page",
        ),
        entry("guide.draft", "draft", status="draft"),
        entry("billing.page", "billing", domain="billing"),
        entry("slack.page", "slack only", integrations=["slack"]),
        entry("guide.ok", "ok", related=["guide.draft", "slack.page"]),
    ]
    config = gw.GroundingConfig(
        sources=[{"id": "s", "version": "1", "entries": entries}],
        blocked_domains=("billing",),
        retrieval=UNGATED,
    )
    with gw.GroundingEngine(config) as engine:
        assert engine.ready(30)
        outcome = engine.ground("rotate keys")
    assert outcome.retrieval is not None
    returned = [i.entry for i in outcome.retrieval.primary] + list(outcome.retrieval.expanded)
    by_id = {e.id: e for e in returned}
    assert set(by_id) == {"guide.main", "guide.ok"}
    assert by_id["guide.main"].related == ("guide.ok",)
    assert by_id["guide.main"].parent is None
    assert by_id["guide.ok"].related == ()
    slack = gw.retrieve(
        build(*entries), gw.RetrievalRequest("rotate keys", scope=gw.Scope(["slack"])), UNGATED
    )
    assert slack.primary[0].entry.related == ("billing.page", "slack.page", "guide.ok")


# -- tenant pools -------------------------------------------------------------------------------
def test_tenant_pools_are_built_once_and_warmed_ahead() -> None:
    kb = build(*ACME_ENTRIES, *BETA_ENTRIES[:5])
    warm_tenant_pools(kb)
    acme, positions = tenant_pool(kb, "acme")
    assert tenant_pool(kb, "acme")[0] is acme
    assert {e.id for e in acme} == {"acme.keys", "acme.tokens", "shared.faq"}
    assert positions is not None
    anonymous, _ = tenant_pool(kb, None)
    assert {e.id for e in anonymous} == {"shared.faq"}
    unknown, _ = tenant_pool(kb, "gamma")  # a tenant with no entries sees the shared ones
    assert {e.id for e in unknown} == {"shared.faq"}
    plain = build(*ACME_ENTRIES[2:])
    assert tenant_pool(plain, "acme") == (plain, None)  # no tenant labels: the kb itself


@pytest.mark.parametrize("principal", [None, ACME, gw.Principal("beta", "b")])
def test_an_unlabeled_knowledge_base_grounds_as_before(principal: gw.Principal | None) -> None:
    kb = build(*ACME_ENTRIES[2:], entry("x.y", "rotate tokens"))
    baseline = gw.retrieve(kb, gw.RetrievalRequest("rotate keys"), CONFIG)
    assert scored(turn(kb, "rotate keys", principal)) == scored(baseline)


def test_pools_of_replaced_snapshots_are_let_go() -> None:
    from groundwire.config import TENANT_POOL_SNAPSHOTS
    from groundwire.retrieve import eligibility

    snapshots = [build(*ACME_ENTRIES, entry(f"v{n}", "version", tenant="acme")) for n in range(6)]
    for kb in snapshots:
        tenant_pool(kb, "acme")
    held = eligibility._pools.snapshots()
    assert len(held) <= TENANT_POOL_SNAPSHOTS
    assert snapshots[0] not in held
    assert snapshots[-1] in held


def test_the_evidence_gates_noise_level_ignores_what_the_request_may_not_see() -> None:
    from groundwire.index.scoped import subset
    from groundwire.retrieve.gate import noise_level
    from groundwire.retrieve.restricted import restricted_noise

    texts = {f"d{n}.md": f"rotate keys {'webhook ' * n} retries batch {n}" for n in range(9)}
    for settings in (gw.chunk_settings(), gw.IndexSettings()):
        chunks = [c for name, text in texts.items() for c in gw.chunk_text(text, name)]
        kb = gw.KnowledgeBase.from_documents(gw.chunks_to_documents(chunks), settings)
        allowed = kb.eligibility().copy()
        allowed[::3] = False
        alone = subset(kb, allowed)
        for quantile in (0.1, 0.5, 0.9):
            assert restricted_noise(kb.lexical, allowed, quantile) == pytest.approx(
                noise_level(alone, quantile), rel=1e-12
            )


def test_a_views_masks_are_reused_but_a_predicate_is_asked_every_turn() -> None:
    kb = build(*ACME_ENTRIES, *BETA_ENTRIES[:3])
    flt = gw.Filter.of(ACME, gw.Scope(), ())
    first, again = turn_eligibility(kb, flt), turn_eligibility(kb, flt)
    assert first is again  # no predicate: the masks depend on the filter alone
    asked: list[str] = []

    def allow(entry: gw.KnowledgeEntry) -> bool:
        asked.append(entry.id)
        return entry.id != "acme.tokens"

    one, two = turn_eligibility(kb, flt, allow), turn_eligibility(kb, flt, allow)
    assert one is not two
    assert len(asked) == 6  # three eligible entries, asked on each of the two turns
    assert not one.visible("acme.tokens")
    assert first.visible("acme.tokens")
