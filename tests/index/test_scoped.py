"""Scoped readers (kb.reader(principal)) and subsets: one principal's view and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

import groundwire as gw
from groundwire.index.scoped import subset

ACME_ALICE = gw.Principal("acme", "alice", ["eng"])
ACME_HR = gw.Principal("acme", "harriet", ["hr"])
BETA = gw.Principal("beta", "bob")


def entry(entry_id: str, text: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": entry_id,
        "title": fields.pop("title", f"Guide {entry_id}"),
        "summary": text,
        "domain": "ops",
        "integrations": [],
        **fields,
    }


ENTRIES = [
    entry("acme.rotate", "rotate signing keys monthly", tenant="acme",
          related=["acme.payroll", "beta.rotate", "shared.keys"], parent="beta.rotate"),
    entry("acme.payroll", "rotate payroll keys quarterly", tenant="acme", acl=["group:hr"]),
    entry("beta.rotate", "rotate beta tokens zebrafish", tenant="beta", aliases=["zebra rotation"]),
    entry("shared.keys", "how keys rotate in general", related=["acme.rotate"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def kb() -> gw.KnowledgeBase:
    return gw.KnowledgeBase.from_sources([{"id": "s", "version": "1", "entries": ENTRIES}])


def visible_ids(kb: gw.KnowledgeBase, principal: gw.Principal | None) -> set[str]:
    with kb.reader(principal) as reader:
        return {e.id for e in reader}


def test_each_principal_sees_its_tenant_its_acl_and_the_shared_entries(
    kb: gw.KnowledgeBase,
) -> None:
    assert visible_ids(kb, ACME_ALICE) == {"acme.rotate", "shared.keys"}
    assert visible_ids(kb, ACME_HR) == {"acme.rotate", "acme.payroll", "shared.keys"}
    assert visible_ids(kb, BETA) == {"beta.rotate", "shared.keys"}
    assert visible_ids(kb, None) == {"shared.keys"}


def test_a_reader_scores_exactly_as_a_knowledge_base_of_its_entries(kb: gw.KnowledgeBase) -> None:
    for principal in (ACME_ALICE, ACME_HR, BETA, None):
        reader = kb.reader(principal)
        alone = gw.KnowledgeBase(reader.entries, kb.settings)
        for query in ("rotate keys", "zebra rotation", "payroll", "acme.rotate", "beta.rotate"):
            mine = [(h.id, h.score, dict(h.breakdown)) for h in reader.search(query, 10)]
            reference = [(h.id, h.score, dict(h.breakdown)) for h in alone.search(query, 10)]
            assert mine == reference, (principal, query)


def test_invisible_ids_are_indistinguishable_from_unknown_ones(kb: gw.KnowledgeBase) -> None:
    reader = kb.reader(ACME_ALICE)
    with pytest.raises(gw.KnowledgeIndexError) as hidden:
        reader.explain("rotate", "beta.rotate")
    with pytest.raises(gw.KnowledgeIndexError) as unknown:
        reader.explain("rotate", "no.such")
    assert str(hidden.value).replace("beta.rotate", "X") == str(unknown.value).replace(
        "no.such", "X"
    )
    assert reader.get("beta.rotate") is None
    assert "beta.rotate" not in reader
    assert [h.id for h in reader.search("zebra zebrafish")] == []  # only beta has them


def test_links_name_only_visible_entries(kb: gw.KnowledgeBase) -> None:
    alice = kb.reader(ACME_ALICE)
    rotate = alice.get("acme.rotate")
    assert rotate is not None
    assert rotate.related == ("shared.keys",)
    assert rotate.parent is None  # beta.rotate is another tenant's
    assert alice.related("acme.rotate") == ("shared.keys",)
    hr = kb.reader(ACME_HR).get("acme.rotate")
    assert hr is not None
    assert hr.related == ("acme.payroll", "shared.keys")
    original = kb.get("acme.rotate")
    assert original is not None
    assert original.related == ("acme.payroll", "beta.rotate", "shared.keys")  # kb unchanged


def test_closing_a_reader_drops_only_that_reader(kb: gw.KnowledgeBase) -> None:
    first, second = kb.reader(ACME_ALICE), kb.reader(ACME_ALICE)
    first.close()
    assert first.closed
    with pytest.raises(gw.KnowledgeIndexError, match="closed"):
        first.search("rotate")
    with pytest.raises(gw.KnowledgeIndexError, match="closed"):
        len(first)
    assert [h.id for h in second.search("rotate")]  # the other reader is unaffected
    assert len(kb) == 4
    with kb.reader(BETA) as scoped:
        assert len(scoped) == 2
    assert scoped.closed


def test_an_unlabeled_knowledge_base_is_shared_not_copied() -> None:
    plain = gw.KnowledgeBase.from_sources(
        [{"id": "s", "version": "1", "entries": [entry("a", "alpha"), entry("b", "beta")]}]
    )
    assert plain.reader(None).knowledge_base is plain
    assert plain.reader(BETA).knowledge_base is plain


def test_the_host_authorizer_narrows_the_view_and_fails_closed(kb: gw.KnowledgeBase) -> None:
    def authorize(principal: gw.Principal | None, item: gw.KnowledgeEntry) -> Any:
        if item.id == "shared.keys":
            raise PermissionError("no")
        return True

    reader = kb.reader(ACME_HR, authorize=authorize)
    assert {e.id for e in reader} == {"acme.rotate", "acme.payroll"}
    assert reader.authorization_errors == ("authorize raised PermissionError for 1 entry; denied",)
    asked: list[str] = []
    kb.reader(ACME_ALICE, authorize=lambda p, e: asked.append(e.id) or True)
    assert sorted(asked) == ["acme.rotate", "shared.keys"]  # never about invisible entries


def test_where_narrows_by_metadata() -> None:
    kb = gw.KnowledgeBase.from_documents(
        [
            {"id": "en#0", "title": "t", "text": "rotate keys", "metadata": {"locale": "en"}},
            {"id": "fr#0", "title": "t", "text": "rotate keys", "metadata": {"locale": "fr"}},
        ]
    )
    assert [e.id for e in kb.reader(None, where={"locale": "fr"})] == ["fr#0"]
    with pytest.raises(gw.ConfigError, match="where"):
        kb.reader(None, where={"locale": 3})  # type: ignore[dict-item]


def test_a_reader_needs_a_verified_principal_object(kb: gw.KnowledgeBase) -> None:
    with pytest.raises(gw.ConfigError, match="Principal"):
        kb.reader("alice")  # type: ignore[arg-type]
    with pytest.raises(gw.ConfigError, match="authorize_timeout_ms"):
        kb.reader(None, authorize=lambda p, e: True, authorize_timeout_ms=0)


# -- subsets are built like their knowledge base ------------------------------------------------
@pytest.mark.parametrize(
    ("exact_ids", "exact_titles"), [(True, True), (True, False), (False, True), (False, False)]
)
def test_a_subset_keeps_the_phrase_keys_of_its_knowledge_base(
    exact_ids: bool, exact_titles: bool
) -> None:
    entries = [
        gw.KnowledgeEntry(f"doc.{n}", f"Title number {n}", "s", "d", (), body=f"body {n}")
        for n in range(6)
    ]
    kb = gw.KnowledgeBase(
        entries, gw.IndexSettings(), exact_ids=exact_ids, exact_titles=exact_titles
    )
    assert kb.phrase_keys == (exact_ids, exact_titles)
    keep = kb.eligibility().copy()
    keep[::2] = False
    part = subset(kb, keep)
    reference = gw.KnowledgeBase(
        [kb.entry(n) for n in range(6) if keep[n]],
        gw.IndexSettings(),
        exact_ids=exact_ids,
        exact_titles=exact_titles,
    )
    assert part.exact_index == reference.exact_index
    assert part.issues == ()


def test_documents_keep_their_no_phrase_keys_default() -> None:
    docs = gw.KnowledgeBase.from_documents(
        [{"id": f"d{n}", "title": f"Doc {n}", "text": "alpha beta"} for n in range(4)]
    )
    assert docs.phrase_keys == (False, False)
    keep = docs.eligibility().copy()
    keep[0] = False
    assert subset(docs, keep).exact_index == {}


# -- vectors of a view ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_a_views_vectors_are_the_snapshots_rows_unchanged(kb: gw.KnowledgeBase, dtype: str) -> None:
    embedder = gw.HashingEmbedder(32)
    vectors = gw.VectorIndex.build(kb, embedder, dtype=dtype)  # type: ignore[arg-type]
    reader = kb.reader(ACME_HR)
    part = reader.vectors_for(vectors)
    assert part.ids == tuple(e.id for e in reader)
    assert part.check_for(reader.knowledge_base) is part
    query = vectors.check_query(embedder.embed_query("rotate keys"))
    positions = [kb.position(e.id) for e in reader]
    assert part.scores(query).tolist() == vectors.scores(query, positions).tolist()
    assert reader.vectors_for(vectors) is part  # built once per (vectors, view)
    assert kb.reader(None).vectors_for(vectors).ids == ("shared.keys",)


def test_the_search_tool_ranks_a_principals_view_by_channels(kb: gw.KnowledgeBase) -> None:
    embedder = gw.HashingEmbedder(32)
    vectors = gw.VectorIndex.build(kb, embedder)
    tool = gw.search_knowledge_base_tool(
        kb, principal=ACME_ALICE, embedder=embedder, vectors=vectors
    )
    found = {
        r["id"] for r in tool.run({"query": "rotate keys payroll zebrafish", "k": 10})["results"]
    }
    assert found <= {"acme.rotate", "shared.keys"}
    assert found
