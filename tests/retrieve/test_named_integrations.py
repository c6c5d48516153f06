"""Integrations a query names join that turn's relevance scope (gate on), and only that:
exact word runs, never across tenant, ACL, blocked domains or the host predicate; the
fixed count (``gate="off"``) keeps the scope as given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.retrieve.named import Build, Entry, ids, select

import groundwire as gw
from groundwire.retrieve.mentions import named_integrations

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "examples" / "handbook-eval"
ACME = gw.Principal("acme", "alice", ["eng"])
BETA = gw.Principal("beta", "bob", ["eng"])


@pytest.fixture
def kb(entry: Entry, build_kb: Build) -> gw.KnowledgeBase:
    return build_kb(
        entry("ops.status", body="status updates of synced issues"),
        entry(
            "jira.status", body="jira status transitions of synced issues", integrations=["jira"]
        ),
        entry(
            "teams.cards",
            body="microsoft teams cards not delivered",
            integrations=["microsoft-teams"],
        ),
        entry("slack.posts", body="slack bot not posting messages", integrations=["Slack"]),
    )


def test_an_integration_is_named_by_an_exact_run_of_words(kb: gw.KnowledgeBase) -> None:
    everyone = kb.eligibility(None)
    assert named_integrations(kb, "Jira's status does not update", everyone) == ("jira",)
    assert named_integrations(kb, "cards in Microsoft Teams", everyone) == ("microsoft-teams",)
    assert named_integrations(kb, "microsoft-teams cards", everyone) == ("microsoft-teams",)
    assert named_integrations(kb, "SLACK and jira", everyone) == ("jira", "slack")
    # Not a stem, a prefix, a part of the name or a longer word.
    for query in ("jiras", "teams cards", "slacker posts", "microsoft cards", "ji ra"):
        assert named_integrations(kb, query, everyone) == (), query
    assert named_integrations(kb, "jira", everyone, enabled={"jira"}) == ()
    assert named_integrations(kb, "", everyone) == ()


def test_a_named_integration_joins_the_turn_and_the_metadata_says_so(kb: gw.KnowledgeBase) -> None:
    plain = select(kb, "jira status transitions")
    assert plain.named_integrations == ("jira",)
    assert "jira.status" in ids(plain)
    strict = select(kb, "jira status transitions", named_integrations=False)
    assert strict.named_integrations == ()
    assert "jira.status" not in ids(strict)
    assert strict.scope_hint.integrations == ("jira",)  # the hint instead
    enabled = select(kb, "jira status transitions", gw.Scope(["jira"]))
    assert enabled.named_integrations == ()  # already in scope: nothing joined
    assert ids(enabled) == ids(plain)
    # Only the named integration joins; others stay out.
    assert ids(plain).isdisjoint({"teams.cards", "slack.posts"})


def test_the_fixed_count_keeps_the_scope_as_given(kb: gw.KnowledgeBase) -> None:
    fixed = select(kb, "jira status transitions of synced issues", gate="off")
    assert fixed.named_integrations == ()
    assert "jira.status" not in ids(fixed)
    assert not fixed.primary or all(not i.entry.integrations for i in fixed.primary)


def test_no_integration_scope_means_nothing_to_join(kb: gw.KnowledgeBase) -> None:
    request = gw.RetrievalRequest("jira status", scope=None)  # type: ignore[arg-type]
    selection = gw.retrieve(kb, request, gw.RetrievalConfig())
    assert selection.named_integrations == ()
    assert "jira.status" in ids(selection)


def test_naming_an_integration_never_crosses_authorization(entry: Entry, build_kb: Build) -> None:
    kb = build_kb(
        entry("ops.vault", body="vault secrets rotation"),
        entry(
            "sec.vault",
            body="vault secrets rotation policy",
            domain="secret",
            integrations=["vault"],
        ),
        entry("acme.okta", body="okta login loop fix", tenant="acme", integrations=["okta"]),
        entry(
            "acme.okta-hr",
            body="okta login loop payroll",
            tenant="acme",
            acl=["group:hr"],
            integrations=["okta"],
        ),
        entry(
            "beta.zendesk",
            body="zendesk duplicate tickets fix",
            tenant="beta",
            integrations=["zendesk"],
        ),
        entry("ops.denied", body="denied gitlab runner tokens", integrations=["gitlab"]),
        entry("ops.tickets", body="duplicate tickets runner tokens login loop"),
    )
    # Blocked domain: the only vault entry stays out and the name is not confirmed.
    blocked = select(kb, "vault secrets rotation policy", blocked=("secret",))
    assert blocked.named_integrations == ()
    assert "sec.vault" not in ids(blocked)
    assert blocked.scope_hint.count == 0
    # Another tenant's integration: not named, not selected, not hinted.
    other = select(kb, "zendesk duplicate tickets fix", principal=ACME)
    assert other.named_integrations == ()
    assert "beta.zendesk" not in ids(other) | {i.entry.id for i in other.candidates}
    own = select(kb, "zendesk duplicate tickets fix", principal=BETA)
    assert own.named_integrations == ("zendesk",)
    assert "beta.zendesk" in ids(own)
    # ACL: the integration joins for the entry alice may see, never the hidden one.
    acl = select(kb, "okta login loop payroll", principal=ACME)
    assert acl.named_integrations == ("okta",)
    assert "acme.okta" in ids(acl)
    assert "acme.okta-hr" not in ids(acl) | {i.entry.id for i in acl.candidates}
    # Anonymous: the tenant's okta entries are invisible, so okta is not named.
    assert select(kb, "okta login loop fix").named_integrations == ()
    # Host predicate: a denied record is not selected and its integration not confirmed.
    denied = select(kb, "gitlab runner tokens", allow=lambda e: e.id != "ops.denied")
    assert denied.named_integrations == ()
    assert "ops.denied" not in ids(denied)


def test_the_engine_reports_named_integrations(handbook_path: Path) -> None:
    config = gw.GroundingConfig(sources=gw.load_sources(handbook_path), timeout_ms=60_000)
    with gw.GroundingEngine(config) as engine:
        outcome = engine.ground("jira status doesn't update, activity says no transition available")
        strict = engine.ground("jira status doesn't update", scope=gw.Scope(["jira"]))
    assert outcome.block is not None
    assert outcome.metadata.named_integrations == ("jira",)
    assert any(
        i.startswith("integrations.jira") or "jira" in i for i in outcome.metadata.selected_ids
    )
    assert strict.metadata.named_integrations == ()


def test_every_judged_handbook_question_keeps_a_block_at_the_default_scope(
    handbook_path: Path,
) -> None:
    sources = gw.load_sources(handbook_path)
    judged: dict[str, set[str]] = {}
    for line in (EVAL / "qrels.tsv").read_text("utf-8").splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        if int(grade) > 0:
            judged.setdefault(qid, set()).add(doc)
    rows = [json.loads(line) for line in (EVAL / "queries.jsonl").read_text("utf-8").splitlines()]
    precision = []
    with gw.GroundingEngine(gw.GroundingConfig(sources=sources, timeout_ms=60_000)) as engine:
        for row in rows:
            outcome = engine.ground(row["text"])  # no integration enabled
            assert outcome.block is not None, row["text"]
            assert outcome.retrieval is not None
            assert outcome.retrieval.context is not None
            included = outcome.retrieval.context.included_ids
            precision.append(len(judged[row["_id"]].intersection(included)) / len(included))
    assert sum(precision) / len(precision) >= 0.5


NAMES = ["jira", "slack", "okta"]
WORDS = ["status", "sync", "login", "issues", "loop", "bot"]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    docs=st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS + NAMES), min_size=1, max_size=5),
            st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
            st.lists(
                st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(" ".join),
                max_size=2,
                unique=True,
            ),
        ),
        min_size=1,
        max_size=8,
    ),
    query=st.lists(st.sampled_from([*WORDS, *NAMES, "how", "do", "i"]), min_size=1, max_size=6),
    enabled=st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
)
def test_names_and_aliases_only_ever_narrow_the_widened_fixed_count(
    entry: Entry,
    build_kb: Build,
    docs: list[tuple[list[str], list[str], list[str]]],
    query: list[str],
    enabled: list[str],
) -> None:
    kb = build_kb(
        *(
            entry(f"e.{n}", body=" ".join(words), integrations=names, aliases=aliases)
            for n, (words, names, aliases) in enumerate(docs)
        )
    )
    text = " ".join(query)
    gated = select(kb, text, gw.Scope(enabled))
    named = set(gated.named_integrations)
    padded = f" {text} "
    declared = set(query) | {
        name
        for words, names, aliases in docs
        if names and any(f" {alias} " in padded for alias in aliases)
        for name in names
    }
    assert named <= declared - set(enabled)  # a name or an alias in the query, not enabled
    wider = gw.Scope(sorted({*enabled, *named}))
    fixed = select(kb, text, wider, gate="off")
    assert ids(gated) <= ids(fixed)  # the gate never returns what the fixed count would not
    for item in gated.primary:  # an entry outside the given scope came from a named one
        names = {n.casefold() for n in item.entry.integrations}
        assert not names or names & ({*enabled} | named)
