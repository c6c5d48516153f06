"""Incremental updates: after any sequence of adds, replaces and deletes, every search
equals a build from scratch over the same final entries (ids, order, scores, breakdowns)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundwire import (
    Document,
    IndexSettings,
    KnowledgeBase,
    KnowledgeIndexError,
    Scope,
    load_sources,
    normalize_and_validate,
)
from groundwire.config import DEFAULT_FIELD_WEIGHTS

ROOT = Path(__file__).resolve().parents[2]
HANDBOOK = ROOT / "examples" / "handbook"
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau", "rho", "kappa", "the"]
QUERIES = [
    "alpha beta",
    "gamma delta omega",
    "sigma",
    "tau rho kappa alpha",
    "beta the gamma",
    "omega omega delta",
    "nothing here",
]


def same(a: KnowledgeBase, b: KnowledgeBase, queries: list[str] = QUERIES, **kw: Any) -> None:
    """Every query answers identically, explanations included, and the lookups agree."""
    assert len(a) == len(b)
    assert [e.id for e in a] == [e.id for e in b]
    for query in queries:
        left, right = a.search(query, 50, **kw), b.search(query, 50, **kw)
        assert [(h.id, h.score) for h in left] == [(h.id, h.score) for h in right], query
        for x, y in zip(left, right, strict=True):
            assert dict(x.breakdown) == pytest.approx(dict(y.breakdown), abs=1e-9)
        assert a.search_ids(query, 50, **kw) == b.search_ids(query, 50, **kw)
    assert a.exact_index == b.exact_index
    assert a.alias_index == b.alias_index
    assert a.relation_index == b.relation_index


text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)
doc_ids = st.sampled_from([f"d{n:02d}" for n in range(24)])
ops = st.lists(
    st.tuples(st.sampled_from(["upsert", "delete", "save"]), doc_ids, text, text),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(start=st.dictionaries(doc_ids, st.tuples(text, text), max_size=12), steps=ops)
def test_random_updates_equal_a_build_from_scratch(
    start: dict[str, tuple[str, str]], steps: list[tuple[str, str, str, str]], tmp_path: Path
) -> None:
    content = dict(start)
    kb = KnowledgeBase.from_documents([Document(i, t, b) for i, (t, b) in content.items()])
    for n, (op, doc_id, title, body) in enumerate(steps):
        if op == "upsert":
            content[doc_id] = (title, body)
            kb = kb.update([Document(doc_id, title, body)])
        elif op == "delete" and doc_id in content:
            del content[doc_id]
            kb = kb.update(deletes=[doc_id])
        elif op == "save":  # updates continue on a loaded snapshot
            kb.save(tmp_path / f"s{n}")
            kb = KnowledgeBase.load(tmp_path / f"s{n}")
        scratch = KnowledgeBase.from_documents([Document(i, t, b) for i, (t, b) in content.items()])
        same(kb, scratch)


def test_updating_the_handbook_equals_building_it() -> None:
    entries = list(normalize_and_validate(load_sources(HANDBOOK)).entries)
    full = KnowledgeBase(entries, IndexSettings())
    half = KnowledgeBase(entries[::2], IndexSettings())
    grown = half.update(entries[1::2])
    queries = ["rotate an api key", "refund policy annual", "okta sso", "webhook retries"]
    same(grown, full, queries)
    same(grown, full, queries, scope=Scope(("slack",)), blocked_domains=("billing",))
    gone = [e.id for e in entries[:10]]
    same(full.update(deletes=gone), KnowledgeBase(entries[10:], IndexSettings()), queries)


def test_relations_follow_updates() -> None:
    a = {
        "id": "a",
        "title": "A",
        "summary": "s",
        "body": "b",
        "domain": "d",
        "integrations": [],
        "related": ["b"],
    }
    b = {"id": "b", "title": "B", "summary": "s", "body": "b", "domain": "d", "integrations": []}
    src = [{"id": "kb", "version": "1", "entries": [a]}]
    kb = KnowledgeBase.from_sources(src)
    assert kb.related("a") == ()
    entry_b = normalize_and_validate([{"id": "kb", "version": "1", "entries": [a, b]}])
    added = kb.update([e for e in entry_b.entries if e.id == "b"])
    assert added.related("a") == ("b",)
    assert added.update(deletes=["b"]).related("a") == ()


def test_term_pairs_and_new_words_update_exactly() -> None:
    weights = {**DEFAULT_FIELD_WEIGHTS, "bigrams": 0.5}
    docs = [Document(f"d{n}", "new words", f"zeta eta {n} theta iota") for n in range(6)]
    kb = KnowledgeBase.from_documents(docs[:3]).update(docs[3:])
    same(kb, KnowledgeBase.from_documents(docs), ["zeta eta", "theta iota 4", "eta theta"])
    entries = normalize_and_validate(
        [
            {
                "id": "k",
                "version": "1",
                "entries": [
                    {
                        "id": f"e{n}",
                        "title": f"t {n}",
                        "summary": "zeta eta",
                        "body": "x",
                        "domain": "d",
                    }
                    for n in range(5)
                ],
            }
        ]
    ).entries
    built = KnowledgeBase(entries, IndexSettings(field_weights=weights))
    grown = KnowledgeBase(entries[:2], IndexSettings(field_weights=weights)).update(entries[2:])
    same(grown, built, ["zeta eta theta", "title 3", "e4"])


def test_bad_updates_are_refused() -> None:
    kb = KnowledgeBase.from_documents([Document("a", "xylophone", "yodel")])
    with pytest.raises(KnowledgeIndexError, match="no such entries"):
        kb.update(deletes=["zz"])
    with pytest.raises(KnowledgeIndexError, match="both deleted and upserted"):
        kb.update([Document("a", "x", "z")], deletes=["a"])
    with pytest.raises(KnowledgeIndexError, match="same entry id twice"):
        kb.update([Document("b", "x", "z"), Document("b", "y", "z")])
    assert kb.search_ids("yodel", 5)[0] == ["a"]  # unchanged


def test_the_old_knowledge_base_keeps_answering() -> None:
    kb = KnowledgeBase.from_documents([Document("a", "alpha", "beta"), Document("b", "x", "y")])
    before = kb.search_ids("alpha beta", 5)
    kb.update([Document("c", "alpha alpha", "beta")], deletes=["a"])
    assert kb.search_ids("alpha beta", 5) == before


def test_a_cache_build_from_a_previous_snapshot_updates_it_exactly() -> None:
    from groundwire import SnapshotCache

    sources = load_sources(HANDBOOK)
    source = sources[0]
    half = dataclasses.replace(source, entries=source.entries[::2])
    first = SnapshotCache().get_or_build([half]).knowledge_base
    assert first is not None
    result = SnapshotCache().get_or_build(sources, previous=first)
    fresh = SnapshotCache().get_or_build(sources)
    assert result.knowledge_base is not None
    assert fresh.knowledge_base is not None
    same(result.knowledge_base, fresh.knowledge_base, ["rotate an api key", "refund", "sso"])
    assert result.knowledge_base.issues == fresh.knowledge_base.issues


def test_a_document_that_no_longer_chunks_loses_its_chunks_like_a_rebuild(tmp_path: Path) -> None:
    """A changed file that fails to chunk (here: too many chunks) is skipped with the
    reason and its old chunks are deleted, as a rebuild, a failed load or a failed fetch
    leave it out; stale text is never kept silently under a current snapshot."""
    from groundwire import ChunkingConfig, SourceError, chunks_to_documents, load_documents
    from groundwire.config import chunk_settings
    from groundwire.ingest.chunking import chunk_document

    config = ChunkingConfig(size=200, overlap=0, max_chunks=2)
    (tmp_path / "a.md").write_text("# Tides\n\nThe tides follow the moon.\n")
    (tmp_path / "b.md").write_text("# Comets\n\nComets have tails of dust.\n")

    def snapshot() -> tuple[list[Any], KnowledgeBase]:
        documents = list(load_documents([tmp_path]).documents)
        chunks = []
        for document in documents:
            try:
                chunks.extend(chunk_document(document, config))
            except SourceError:  # what ingest skips
                continue
        kb = KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())
        return documents, kb.with_section(KnowledgeBase.chunking_section(config))

    _, kb = snapshot()
    assert any(e.metadata["source_id"] == "b.md" for e in kb)
    (tmp_path / "b.md").write_text("# Comets\n\n" + "Comets have long tails of dust. " * 40)
    documents, rebuilt = snapshot()
    updated, changes = kb.update_documents(documents, config)
    [skipped] = changes.skipped
    assert skipped.path.endswith("b.md")
    assert "its chunks are deleted" in skipped.reason
    assert all(e.metadata["source_id"] != "b.md" for e in updated)
    assert [e.id for e in updated] == [e.id for e in rebuilt] == ["a.md#0"]
    same(updated, rebuilt, ["comets tails", "tides moon"])


def test_an_update_leaves_the_garbage_collector_as_it_found_it() -> None:
    import gc

    kb = KnowledgeBase.from_documents([Document("a", "alpha", "beta")])
    assert gc.isenabled()
    kb.update([Document("b", "gamma", "delta")])
    assert gc.isenabled()
    with pytest.raises(KnowledgeIndexError):
        kb.update(deletes=["missing"])
    assert gc.isenabled()
    gc.disable()
    try:
        kb.update(deletes=["a"])
        assert not gc.isenabled()  # a host that turned it off keeps it off
    finally:
        gc.enable()


MIXED = [*WORDS, "Ünïcode", "naïve", "x-ray", "it's", "42", "", "the the", "Alpha!"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    old=st.lists(st.tuples(st.sampled_from(MIXED), st.sampled_from(MIXED)), max_size=6),
    new=st.lists(st.tuples(st.sampled_from(MIXED), st.sampled_from(MIXED)), max_size=6),
)
def test_the_word_table_analyzes_an_update_as_the_builder_reads_it(
    old: list[tuple[str, str]], new: list[tuple[str, str]], tmp_path_factory: Any
) -> None:
    """The update's analysis with the compiled word table gives the term ids, documents
    and grown vocabulary of the builder's reader, over a build's dict vocabulary and a
    loaded snapshot's hashed one."""
    from groundwire.index import _bulk, grown
    from groundwire.index.builder import document_entries, text_readers
    from groundwire.text import Analyzer

    if not _bulk.available():
        pytest.skip("bulk-build kernel not compiled")
    docs = [{"id": f"o{n}", "title": t, "text": b} for n, (t, b) in enumerate(old)]
    built = KnowledgeBase.from_documents(docs)
    folder = tmp_path_factory.mktemp("vocabulary") / "kb"
    built.save(folder)
    loaded = KnowledgeBase.load(folder)
    added = document_entries(
        [{"id": f"n{n}", "title": t, "text": b} for n, (t, b) in enumerate(new)]
    )
    for kb in (built, loaded):
        settings_ = kb._parts.settings
        readers = text_readers(settings_)[3]
        analyzer = Analyzer(settings_.analyzer)
        vocabulary = kb._parts.lexical.vocabulary
        fast = grown.new_occurrences(added, readers, analyzer, vocabulary)
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(_bulk, "available", lambda: False)
            slow = grown.new_occurrences(added, readers, analyzer, vocabulary)
        for a, b in zip(fast[:2], slow[:2], strict=True):
            assert [x.tolist() for x in a] == [x.tolist() for x in b]
        assert list(fast[2].items()) == list(slow[2].items())


@settings(max_examples=200, deadline=None)
@given(
    old=st.sets(st.text("abé\u4e2d", min_size=1, max_size=4), max_size=12),
    new=st.sets(st.text("abcé", min_size=1, max_size=5), max_size=6),
    kept=st.integers(0, 2**12),
)
def test_an_updated_id_table_is_spliced_as_bytes(old: set[str], new: set[str], kept: int) -> None:
    """The id table an update splices (old ids' bytes copied run by run, new ones
    inserted) holds the final ids in code point order."""
    import numpy as np

    from groundwire.index.store.codecs import StringTable, encode_strings
    from groundwire.index.store.views import spliced_ids

    before = sorted(old)
    blob, offsets = encode_strings(before, "ids")
    table = StringTable(np.frombuffer(blob, np.uint8), offsets)
    keep = [i for n, i in enumerate(before) if kept >> n & 1]
    added = sorted(new - set(keep))
    final = sorted([*keep, *added])
    source = np.array(
        [before.index(i) if i in keep else -1 - added.index(i) for i in final], dtype=np.int64
    )
    spliced = spliced_ids(table, added, source)
    assert list(spliced) == final
    assert int(spliced.offsets[-1]) == len(spliced.blob)
