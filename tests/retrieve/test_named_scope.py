"""What a named integration does to the relevance gate: an entry's alias names its
integrations, a name is scope and not evidence among the named integration's entries, and
an entry that ignores the named subject passes only on full coverage."""

from __future__ import annotations

import numpy as np
import pytest
from tests.retrieve.named import Build, Entry, ids, select

import groundwire as gw
from groundwire.config import RelevanceGate
from groundwire.retrieve.gate import query_evidence
from groundwire.retrieve.mentions import mentions, named_scope

ACME = gw.Principal("acme", "alice", ["eng"])


@pytest.fixture
def kb(entry: Entry, build_kb: Build) -> gw.KnowledgeBase:
    return build_kb(
        entry(
            "teams.post",
            body="post alerts to a channel with adaptive cards",
            integrations=["microsoft-teams"],
            aliases=["ms teams"],
        ),
        entry(
            "teams.payroll",
            body="payroll cards for managers",
            integrations=["microsoft-teams"],
            aliases=["payroll cards"],
            tenant="acme",
            acl=["group:hr"],
        ),
        entry(
            "slack.bot",
            body="slack bot not posting, error channel_not_found",
            integrations=["slack"],
        ),
        entry("slack.alerts", body="slack alerts for failed runs", integrations=["slack"]),
        entry("ops.alerts", body="email alerts for failed runs of a workflow"),
        entry("ops.alerts-chat", body="email or slack alerts for failed runs of a workflow"),
        entry("ops.billing", body="invoices list the plan price per seat"),
    )


def test_an_alias_of_an_integration_entry_names_its_integrations(kb: gw.KnowledgeBase) -> None:
    everyone = kb.eligibility(None)
    named = mentions(kb, "can we post alerts into MS Teams channels", everyone)
    assert named.integrations == ("microsoft-teams",)
    assert named.by_name == ()  # an alias is not the name: its words stay evidence
    selection = select(kb, "can we post alerts into ms teams channels")
    assert selection.named_integrations == ("microsoft-teams",)
    assert "teams.post" in ids(selection)
    # A whole run of words, never a part of one.
    assert mentions(kb, "ms teamsters", everyone).integrations == ()
    assert select(kb, "post alerts to a channel").named_integrations == ()


def test_an_alias_names_nothing_to_whom_its_entry_is_hidden(kb: gw.KnowledgeBase) -> None:
    # alice (group eng) may not see the hr entry that declares "payroll cards".
    hidden = select(kb, "payroll cards for managers", principal=ACME)
    assert hidden.named_integrations == ()
    assert "teams.payroll" not in ids(hidden) | {i.entry.id for i in hidden.candidates}
    hr = gw.Principal("acme", "hana", ["hr"])
    shown = select(kb, "payroll cards for managers", principal=hr)
    assert shown.named_integrations == ("microsoft-teams",)
    assert "teams.payroll" in ids(shown)


def test_a_name_alone_makes_no_entry_relevant(kb: gw.KnowledgeBase) -> None:
    founded = select(kb, "who invented slack")
    assert founded.named_integrations == ("slack",)
    assert founded.primary == ()  # the slack entries were candidates, none is relevant
    assert {"slack.bot", "slack.alerts"} <= {item.entry.id for item in founded.candidates}
    # What the question asks of the named integration still decides.
    assert "slack.alerts" in {item.entry.id for item in select(kb, "slack alerts").primary}
    # A query that is nothing but the name keeps the name as its evidence.
    assert {item.entry.id for item in select(kb, "Slack").primary} >= {"slack.bot"}


def test_the_name_is_given_only_for_the_named_integrations_entries(kb: gw.KnowledgeBase) -> None:
    query = "slack alerts"
    everyone = kb.eligibility(None)
    scope = named_scope(kb, mentions(kb, query, everyone))
    evidence = query_evidence(kb, query, RelevanceGate(), named=scope)
    assert evidence.terms == ("slack", "alert")
    docs = np.asarray([kb.position(i) for i in ("slack.alerts", "ops.alerts", "ops.billing")])
    coverage, count = evidence.coverage(docs)
    assert coverage[0] == 1.0
    assert count[0] == 1
    assert 0.0 < coverage[1] < 0.5  # the name is still asked of an entry outside slack
    assert coverage[2] == 0.0
    plain = query_evidence(kb, query, RelevanceGate())
    assert plain.coverage(docs)[1][0] == 2  # without the rule both terms count


def test_an_entry_ignoring_the_named_subject_passes_only_on_full_coverage(
    kb: gw.KnowledgeBase,
) -> None:
    query = "slack alerts for failed runs of a workflow zorblax quuxified"
    strict = {item.entry.id for item in select(kb, query).primary}
    lenient = {item.entry.id for item in select(kb, query, named_integrations=False).primary}
    assert "ops.alerts" in lenient  # a partial pass: several terms, part of the weight
    assert "ops.alerts" not in strict  # ignores slack, which the question names
    assert "ops.alerts-chat" in strict  # holds the name: about the named subject


def test_the_fixed_count_ignores_names_and_aliases(kb: gw.KnowledgeBase) -> None:
    fixed = select(kb, "who invented slack", gate="off")
    assert fixed.named_integrations == ()
    assert all(not item.entry.integrations for item in fixed.primary)
    assert select(kb, "ms teams alerts", gate="off").named_integrations == ()
