"""The knowledge access guard: each rule of seed 004, its reason code and its message."""

from __future__ import annotations

import pytest

import groundwire as gw
from groundwire.access.guard import GUARD_REASONS

ACME = gw.Principal("acme", "alice")
RUN = gw.AccessContext(workflow="nightly-sync", principal=ACME)
guard = gw.KnowledgeAccessGuard()


def space(**fields: object) -> gw.KnowledgeSpace:
    return gw.KnowledgeSpace("support-faq", **fields)  # type: ignore[arg-type]


# (operation, space, context, guard) -> expected reason; one case per rule and its edges
CASES: dict[str, tuple[str, gw.KnowledgeSpace, gw.AccessContext, gw.KnowledgeAccessGuard]] = {
    "allowed": ("write", space(), RUN, guard),
    "tenant-mismatch": (
        "read",
        space(tenant="beta"),
        RUN,
        guard,
    ),
    "write-category-blocked": ("write", space(category="external"), RUN, guard),
    "space-not-writable": ("write", space(automation_writable=False), RUN, guard),
    "workflow-binding-required": ("search", space(), gw.AccessContext(principal=ACME), guard),
    "workflow-not-allowed": (
        "read",
        space(workflows=["weekly-digest"]),
        RUN,
        guard,
    ),
    "agent-binding-required": ("read", space(), RUN, gw.KnowledgeAccessGuard(require_agent=True)),
    "agent-not-allowed": (
        "read",
        space(agents=["triage-bot"]),
        gw.AccessContext(workflow="nightly-sync", agent="other-bot"),
        guard,
    ),
}


def test_every_reason_code_has_a_case() -> None:
    assert set(CASES) == set(GUARD_REASONS)


@pytest.mark.parametrize("reason", sorted(CASES))
def test_each_rule_decides_with_its_reason(reason: str) -> None:
    operation, target, context, checker = CASES[reason]
    decision = checker.check(operation, target, context)  # type: ignore[arg-type]
    assert decision.reason == reason
    assert decision.allowed is (reason == "allowed")
    assert decision.space == "support-faq"
    assert decision.operation == operation
    assert "support-faq" in decision.message


@pytest.mark.parametrize("reason", sorted(CASES))
@pytest.mark.parametrize("locale", ["en", "es", "fr", "es-MX", "fr_CA.UTF-8", "de"])
def test_each_decision_is_localized(reason: str, locale: str) -> None:
    operation, target, context, checker = CASES[reason]
    decision = checker.check(
        operation,
        target,
        gw.AccessContext(
            **{  # type: ignore[arg-type]
                "workflow": context.workflow,
                "agent": context.agent,
                "principal": context.principal,
                "locale": locale,
            }
        ),
    )
    english = checker.check(operation, target, context).message  # type: ignore[arg-type]
    if locale.startswith(("es", "fr")):
        assert decision.message != english
    else:  # no German catalog: English
        assert decision.message == english
    assert "{" not in decision.message  # every placeholder filled


def test_writes_to_ephemeral_spaces_are_blocked_by_default_and_configurable() -> None:
    ephemeral = space(category="ephemeral")
    assert guard.check_write(ephemeral, RUN).reason == "write-category-blocked"
    assert guard.check_read(ephemeral, RUN).allowed  # only writes
    assert guard.check_search(ephemeral, RUN).allowed
    lenient = gw.KnowledgeAccessGuard(blocked_write_categories=frozenset())
    assert lenient.check_write(ephemeral, RUN).allowed
    strict = gw.KnowledgeAccessGuard(blocked_write_categories={"canonical"})
    assert strict.check_write(space(), RUN).reason == "write-category-blocked"


def test_a_non_writable_space_blocks_only_writes() -> None:
    locked = space(automation_writable=False)
    assert guard.check_write(locked, RUN).reason == "space-not-writable"
    assert guard.check_read(locked, RUN).allowed


def test_the_workflow_binding_can_be_made_optional() -> None:
    relaxed = gw.KnowledgeAccessGuard(require_workflow=False)
    assert relaxed.check_read(space(), gw.AccessContext()).allowed


def test_an_allow_list_denies_a_missing_name_rather_than_waving_it_through() -> None:
    relaxed = gw.KnowledgeAccessGuard(require_workflow=False)
    listed = space(workflows=["nightly-sync"], agents=["triage-bot"])
    unnamed = relaxed.check_read(listed, gw.AccessContext())
    assert unnamed.reason == "workflow-not-allowed"
    assert "names none" in unnamed.message
    no_agent = relaxed.check_read(listed, gw.AccessContext(workflow="nightly-sync"))
    assert no_agent.reason == "agent-not-allowed"
    named = relaxed.check_read(
        listed, gw.AccessContext(workflow="nightly-sync", agent="triage-bot")
    )
    assert named.allowed
    empty = space(workflows=[])  # an empty list allows none
    assert guard.check_read(empty, RUN).reason == "workflow-not-allowed"


def test_the_agent_binding_is_optional_by_default() -> None:
    assert guard.check_read(space(), RUN).allowed


def test_a_tenant_bound_space_needs_a_principal_of_that_tenant() -> None:
    bound = space(tenant="acme")
    assert guard.check_read(bound, RUN).allowed
    anonymous = gw.AccessContext(workflow="nightly-sync")
    assert guard.check_read(bound, anonymous).reason == "tenant-mismatch"
    message = guard.check_read(space(tenant="beta"), RUN).message
    assert "beta" not in message  # the space's tenant is not revealed


def test_rules_apply_in_order() -> None:
    everything_wrong = space(tenant="beta", category="external", automation_writable=False)
    assert guard.check_write(everything_wrong, gw.AccessContext()).reason == "tenant-mismatch"
    assert guard.check_write(space(category="external", automation_writable=False), RUN).reason == (
        "write-category-blocked"
    )


def test_require_raises_the_localized_denial() -> None:
    decision = guard.check_write(
        space(category="external"), gw.AccessContext(workflow="w", locale="fr")
    )
    with pytest.raises(gw.AccessDeniedError, match="Refusé") as info:
        decision.require()
    assert info.value.reason == "write-category-blocked"
    assert guard.check_read(space(), RUN).require().allowed


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(gw.ConfigError, match="operation"):
        guard.check("delete", space(), RUN)  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="KnowledgeSpace"):
        guard.check("read", "support-faq", RUN)  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="key"):
        gw.KnowledgeSpace("")
    with pytest.raises(gw.ConfigError, match="workflows"):
        gw.KnowledgeSpace("s", workflows="nightly")  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="locale"):
        gw.AccessContext(locale="not a locale")
    with pytest.raises(gw.ConfigError, match="require_agent"):
        gw.KnowledgeAccessGuard(require_agent="yes")  # type: ignore[arg-type]
