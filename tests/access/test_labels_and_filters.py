"""Principals, labels and the Filter: syntax, reference semantics, and the compiled mask."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import groundwire as gw
from groundwire.access.filters import LabelIndex, admits
from groundwire.access.labels import Labels, parse_acl, parse_tenant, read_labels
from groundwire.index.scoped import label_index


# -- principals ---------------------------------------------------------------------------------
def test_a_principal_holds_its_user_and_group_labels() -> None:
    principal = gw.Principal("acme", "alice@example.com", ["eng", "ops", "eng"])
    assert principal.groups == ("eng", "ops")
    assert principal.labels == {"user:alice@example.com", "group:eng", "group:ops"}


@pytest.mark.parametrize(
    ("tenant", "subject", "groups"),
    [
        ("", "alice", ()),
        ("acme", "", ()),
        ("ac me", "alice", ()),
        ("acme", "al\u200bice", ()),  # zero-width space: confusable ids are refused
        ("acme", "alice", ("",)),
        ("acme", "alice", ("a,b",)),
        ("acme", "alice", "eng"),  # a string is not a list of groups
        ("acme", "x" * 257, ()),
        ("acme", 'al"ice', ()),
        ("acme", "*", ()),
    ],
)
def test_malformed_principals_are_refused(tenant: Any, subject: Any, groups: Any) -> None:
    with pytest.raises(ValueError, match="Principal"):
        gw.Principal(tenant, subject, groups)


def test_ids_are_compared_exactly() -> None:
    flt = gw.Filter.of(gw.Principal("acme", "Alice"))
    assert "user:Alice" in flt.labels
    assert "user:alice" not in flt.labels


# -- label syntax -------------------------------------------------------------------------------
def test_acl_labels_are_sorted_and_deduplicated() -> None:
    assert parse_acl(["user:bob", "group:eng", "user:bob"]) == ("group:eng", "user:bob")
    assert parse_acl(None) == ()
    assert parse_tenant(None) is None
    assert parse_tenant("") is None
    assert parse_tenant("acme") == "acme"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("group:eng", "must be a list of labels"),
        (["eng"], "is not user:<subject> or group:<group>"),
        (["role:admin"], "is not user:<subject> or group:<group>"),
        (["group:"], "the group id must be"),
        (["user:a b"], "the user id must be"),
        ([1], "is not user:<subject> or group:<group>"),
        ([f"user:u{n}" for n in range(300)], "over the limit"),
    ],
)
def test_malformed_acls_say_how_to_fix_them(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_acl(value)


@pytest.mark.parametrize("value", [{"tenant": "a b"}, {"acl": "group:x"}, {"acl": ["nope"]}])
def test_malformed_labels_in_metadata_read_as_visible_to_nobody(value: dict[str, Any]) -> None:
    assert read_labels(value) is None
    entry = gw.KnowledgeEntry("x", "t", "s", "d", (), metadata=value)
    for principal in (None, gw.Principal("acme", "x")):
        assert not admits(gw.Filter.of(principal), entry)


def test_unlabeled_metadata_reads_as_open() -> None:
    assert read_labels({}) == Labels()
    assert read_labels({"tenant": "acme", "acl": ("group:eng",)}) == Labels("acme", ("group:eng",))


# -- the filter's meaning -----------------------------------------------------------------------
def _entry(n: int, **fields: Any) -> gw.KnowledgeEntry:
    metadata = fields.pop("metadata", {})
    return gw.KnowledgeEntry(
        id=f"e{n:03d}",
        title=fields.pop("title", "t"),
        summary="s",
        domain=fields.pop("domain", "d"),
        integrations=tuple(fields.pop("integrations", ())),
        status=fields.pop("status", "active"),
        metadata=metadata,
    )


def test_the_conjunction_in_order() -> None:
    alice = gw.Principal("acme", "alice", ["eng"])
    flt = gw.Filter.of(alice, gw.Scope(["Slack"]), ["Billing"], {"locale": "en"})
    ok = {"tenant": "acme", "acl": ("group:eng",), "locale": "en"}
    assert admits(flt, _entry(0, metadata=ok))
    assert admits(flt, _entry(0, metadata={"locale": "en"}))  # shared, open
    assert admits(flt, _entry(0, metadata={**ok, "locale": ["fr", "en"]}))  # any item of a list
    assert not admits(flt, _entry(0, metadata=ok, status="draft"))
    assert not admits(flt, _entry(0, metadata=ok, domain="billing"))
    assert admits(flt, _entry(0, metadata=ok, integrations=["slack"]))
    assert not admits(flt, _entry(0, metadata=ok, integrations=["github"]))
    assert not admits(flt, _entry(0, metadata={**ok, "tenant": "beta"}))
    assert not admits(flt, _entry(0, metadata={**ok, "acl": ("group:hr",)}))
    assert admits(flt, _entry(0, metadata={**ok, "acl": ("group:hr", "user:alice")}))
    assert not admits(flt, _entry(0, metadata={**ok, "locale": "fr"}))
    assert not admits(flt, _entry(0, metadata={"tenant": "acme", "acl": ("group:eng",)}))


def test_anonymous_sees_only_unlabeled_records() -> None:
    anonymous = gw.Filter.of()
    assert admits(anonymous, _entry(0))
    assert not admits(anonymous, _entry(0, metadata={"tenant": "acme"}))
    assert not admits(anonymous, _entry(0, metadata={"acl": ("group:eng",)}))


def test_filter_of_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="principal must be a Principal"):
        gw.Filter.of("alice")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a string"):
        gw.Filter.of(blocked_domains="billing")
    with pytest.raises(TypeError, match="where"):
        gw.Filter.of(where={"locale": 1})  # type: ignore[dict-item]


# -- the compiled mask agrees with the reference, everywhere -----------------------------------
TENANTS = st.sampled_from([None, "acme", "beta", "gamma"])
LABELS = st.sampled_from(["user:alice", "user:bob", "group:eng", "group:hr", "group:ops"])
METADATA = st.fixed_dictionaries(
    {},
    optional={
        "tenant": st.one_of(TENANTS, st.just("bad tenant")),
        "acl": st.one_of(st.lists(LABELS, max_size=3).map(tuple), st.just("group:eng")),
        "locale": st.sampled_from(["en", "fr", ["en", "es"]]),
    },
).map(lambda d: {k: v for k, v in d.items() if v is not None})
ENTRY = st.builds(
    lambda meta, status, domain, integrations: (meta, status, domain, integrations),
    METADATA,
    st.sampled_from(["active", "active", "draft"]),
    st.sampled_from(["Billing", "security"]),
    st.lists(st.sampled_from(["slack", "GitHub"]), max_size=2, unique=True),
)
PRINCIPAL = st.one_of(
    st.none(),
    st.builds(
        gw.Principal,
        st.sampled_from(["acme", "beta"]),
        st.sampled_from(["alice", "bob"]),
        st.lists(st.sampled_from(["eng", "hr"]), max_size=2),
    ),
)


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(ENTRY, min_size=1, max_size=12),
    principal=PRINCIPAL,
    scope=st.one_of(st.none(), st.lists(st.sampled_from(["slack", "github"])).map(gw.Scope)),
    blocked=st.lists(st.sampled_from(["billing", "SECURITY"]), max_size=1),
    where=st.one_of(st.none(), st.just({"locale": "en"})),
)
def test_the_compiled_mask_is_the_reference_semantics(
    entries: list[Any], principal: gw.Principal | None, scope: Any, blocked: list[str], where: Any
) -> None:
    records = [
        _entry(n, metadata=meta, status=status, domain=domain, integrations=integrations)
        for n, (meta, status, domain, integrations) in enumerate(entries)
    ]
    kb = gw.KnowledgeBase(records, gw.IndexSettings())
    flt = gw.Filter.of(principal, scope, blocked, where)
    mask = kb.eligibility(scope, blocked) & label_index(kb).mask(flt)
    assert mask.tolist() == [admits(flt, entry) for entry in kb]


def test_a_label_index_reports_its_tenants() -> None:
    index = LabelIndex([_entry(0, metadata={"tenant": "b"}), _entry(1, metadata={"tenant": "a"})])
    assert index.tenants == ("a", "b")
    assert index.has_labels
    assert not LabelIndex([_entry(0)]).has_labels
    assert index.tenant_mask(None).tolist() == [False, False]
    assert index.tenant_mask("a").tolist() == [False, True]
