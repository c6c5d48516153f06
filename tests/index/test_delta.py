"""Delta segments (index/delta.py): after any sequence of adds, replaces and deletes kept
in a delta segment, compacted on the way or not, every query result equals a build from
scratch over the same final documents, to the bit."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.index.test_update import QUERIES, WORDS, same

from groundwire import Document, IndexFormatError, IndexSettings, KnowledgeBase
from groundwire.config import document_settings
from groundwire.index import delta_rows, merge
from groundwire.index.delta import DeltaIndex

FIELDS = dataclasses.replace(document_settings(), scoring="fields")
SETTINGS = {"bm25f": document_settings(), "fields": FIELDS}


def build(content: dict[str, tuple[str, str]], index: IndexSettings) -> KnowledgeBase:
    return KnowledgeBase.from_documents([Document(i, t, b) for i, (t, b) in content.items()], index)


def same_scores(a: KnowledgeBase, b: KnowledgeBase) -> None:
    """The lexical scores of every query, for every document, agree to the bit; on a
    delta index, its numpy path (no merge kernel) agrees too."""
    want = {}
    for query in QUERIES:
        terms = a.analyzer.tokens(query)
        left, right = a._lexical.score(terms), b.lexical.score(terms)
        want[query] = (right.matched()[0], right.matched()[1].view(np.uint64))
        assert np.array_equal(left.matched()[0], want[query][0])
        assert np.array_equal(left.matched()[1].view(np.uint64), want[query][1])
    lexical = a._lexical
    if not isinstance(lexical, DeltaIndex):
        return
    with pytest.MonkeyPatch.context() as patched:  # a twin that never saw the kernel
        patched.setattr(merge, "available", lambda: False)
        numpy = DeltaIndex(lexical.base, lexical.base_to_now, lexical.delta, lexical.settings)
        assert numpy._scorer() is None
        for query, (docs, bits) in want.items():
            ids = lexical.query_ids(a.analyzer.tokens(query))
            found = numpy.score_ids(ids)
            assert np.array_equal(found.matched()[0], docs)
            assert np.array_equal(found.matched()[1].view(np.uint64), bits)
            assert numpy.top(ids, 7) == lexical.top(ids, 7)


# A word repeated 300 times overflows its frequency byte (255 means "see overflow").
text = st.lists(st.sampled_from([*WORDS, "alpha " * 300]), max_size=10).map(" ".join)
doc_ids = st.sampled_from([f"d{n:02d}" for n in range(30)])
batch = st.tuples(
    st.lists(st.tuples(doc_ids, text, text), max_size=4),  # upserts (adds or replaces)
    st.lists(doc_ids, max_size=3),  # deletes
    st.sampled_from([False, False, None, True]),  # compact
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    start=st.dictionaries(doc_ids, st.tuples(text, text), max_size=16),
    steps=st.lists(batch, min_size=1, max_size=8),
    scoring=st.sampled_from(sorted(SETTINGS)),
)
def test_random_batches_equal_a_build_from_scratch(
    start: dict[str, tuple[str, str]],
    steps: list[tuple[list[tuple[str, str, str]], list[str], bool | None]],
    scoring: str,
) -> None:
    index = SETTINGS[scoring]
    content = dict(start)
    kb = build(content, index)
    for upserts, deletes, compact in steps:
        fresh = {i: (t, b) for i, t, b in upserts}
        gone = sorted({i for i in deletes if i in content and i not in fresh})
        for i in gone:
            del content[i]
        content.update(fresh)
        docs = [Document(i, t, b) for i, (t, b) in fresh.items()]
        kb = kb.update(docs, gone, compact=compact)
        if compact is False:
            assert isinstance(kb._lexical, DeltaIndex)
        if compact:
            assert kb.delta_share == 0.0
        scratch = build(content, index)
        same(kb, scratch)
        same_scores(kb, scratch)
    same(kb.compacted(), build(content, index))


def test_a_small_update_keeps_a_delta_and_a_large_one_compacts() -> None:
    content = {
        f"d{n:03d}": (f"alpha {WORDS[n % 9]}", f"beta {WORDS[n % 7]} gamma") for n in range(60)
    }
    kb = build(content, document_settings())
    small = kb.update([Document("d000", "omega", "sigma tau")], ["d001", "d002"])
    assert isinstance(small._lexical, DeltaIndex)
    assert small.delta_share == pytest.approx((3 + 1) / 58)  # tombstones + delta, of 58
    assert small._lexical.deleted == 3
    assert small._lexical.added == 1
    big = small.update([Document(f"n{n}", "kappa", "rho") for n in range(5)])
    assert big.delta_share == 0.0  # 3 + 6 of 63 documents passed DELTA_COMPACT_SHARE
    content.update({"d000": ("omega", "sigma tau")})
    del content["d001"], content["d002"]
    same(small, build(content, document_settings()))
    compacted = small.compacted()
    assert compacted.delta_share == 0.0
    assert compacted.compacted() is compacted
    same(compacted, small)


def test_pairs_and_new_words_across_segments() -> None:
    """A pair indexed only in the base, only in the delta, or in both; a new word."""
    content = {
        "a": ("alpha beta", "gamma delta"),
        "b": ("beta gamma", "alpha beta"),
        "c": ("x", "y"),
    }
    kb = build(content, document_settings())
    changes = {"d": ("alpha beta", "zeta eta"), "b": ("zeta eta", "gamma delta")}
    updated = kb.update([Document(i, t, b) for i, (t, b) in changes.items()], compact=False)
    content.update(changes)
    scratch = build(content, document_settings())
    for query in ("alpha beta", "zeta eta", "gamma delta", "beta gamma", "eta zeta alpha"):
        left, right = updated.search(query, 10), scratch.search(query, 10)
        assert [(h.id, h.score) for h in left] == [(h.id, h.score) for h in right], query
    same(updated, scratch)


def test_the_numpy_path_equals_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    content = {f"d{n:02d}": (WORDS[n % 10], " ".join(WORDS[: 1 + n % 9])) for n in range(40)}
    kb = build(content, document_settings())
    changes = [Document("d03", "sigma tau", "alpha alpha"), Document("z", "omega", "kappa rho")]
    kernel = kb.update(changes, ["d05"], compact=False)
    monkeypatch.setattr(merge, "available", lambda: False)
    numpy = kb.update(changes, ["d05"], compact=False)
    same(numpy, kernel)
    same_scores(numpy, kernel.compacted())


def test_a_saved_delta_loads_as_one_segment_with_the_same_results(tmp_path: Path) -> None:
    content = {f"d{n:02d}": (WORDS[n % 10], " ".join(WORDS[n % 5 :])) for n in range(40)}
    kb = build(content, document_settings())
    updated = kb.update([Document("new", "alpha", "omega omega")], ["d07"], compact=False)
    updated.save(tmp_path / "s")
    loaded = KnowledgeBase.load(tmp_path / "s")
    assert loaded.delta_share == 0.0
    same(loaded, updated)
    again = loaded.update([Document("d08", "tau", "rho")], compact=False)  # on a mapped base
    content.update({"new": ("alpha", "omega omega"), "d08": ("tau", "rho")})
    del content["d07"]
    same(again, build(content, document_settings()))


def test_a_damaged_base_document_number_is_refused(tmp_path: Path) -> None:
    content = {f"d{n:02d}": ("alpha", "beta gamma") for n in range(20)}
    kb = build(content, document_settings())
    delta = kb.update(deletes=["d03"], compact=False)._lexical
    assert isinstance(delta, DeltaIndex)
    docs = np.array(delta.base.docs)
    docs[0] = 10_000
    damaged = DeltaIndex(
        dataclasses.replace(delta.base, docs=docs), delta.base_to_now, delta.delta, delta.settings
    )
    with pytest.raises(IndexFormatError, match="out of range"):
        damaged.top(damaged.query_ids(["alpha"]), 5)


def test_threads_searching_one_delta_index_while_it_compacts() -> None:
    """Readers share one delta index (its query cache, its norms) while another thread
    compacts it: every answer equals a build from scratch."""
    content = {f"d{n:02d}": (WORDS[n % 10], " ".join(WORDS[n % 7 :])) for n in range(50)}
    kb = build(content, document_settings())
    changes = {"d01": ("omega kappa", "alpha beta"), "x": ("tau", "gamma delta gamma")}
    updated = kb.update([Document(i, t, b) for i, (t, b) in changes.items()], compact=False)
    content.update(changes)
    scratch = build(content, document_settings())
    want = {q: [(h.id, h.score) for h in scratch.search(q, 20)] for q in QUERIES}
    errors: list[BaseException] = []

    def reader(shift: int) -> None:
        try:
            for n in range(60):
                query = QUERIES[(n + shift) % len(QUERIES)]
                assert [(h.id, h.score) for h in updated.search(query, 20)] == want[query]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    threads.append(threading.Thread(target=lambda: updated.lexical))  # compacts once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    same(updated.compacted(), scratch)


def test_many_overflowing_frequencies_in_one_query_row() -> None:
    """More overflowing frequencies (a byte of 255) in a row than the kernel first makes
    room for: it retries with room for all, and the scores stay exact."""
    content = {f"d{n:03d}": ("alpha " * (250 + n), "beta " * (300 + n)) for n in range(90)}
    kb = build(content, FIELDS)
    changes = {f"n{n:03d}": ("alpha " * (260 + n), "beta gamma") for n in range(80)}
    updated = kb.update([Document(i, t, b) for i, (t, b) in changes.items()], compact=False)
    assert isinstance(updated._lexical, DeltaIndex)
    content.update(changes)
    scratch = build(content, FIELDS)
    for query in ("alpha", "beta", "alpha beta gamma"):
        left, right = updated.search(query, 200), scratch.search(query, 200)
        assert [(h.id, h.score) for h in left] == [(h.id, h.score) for h in right], query
    same_scores(updated, scratch)


def test_a_document_in_both_segments_is_refused() -> None:
    """The kernel refuses rows whose segments both hold a document (damaged input)."""
    content = {f"d{n:02d}": ("alpha", "beta gamma") for n in range(20)}
    kb = build(content, document_settings())
    delta = kb.update([Document("d03", "alpha", "beta")], compact=False)._lexical
    assert isinstance(delta, DeltaIndex)
    if not merge.available():
        pytest.skip("merge kernel not compiled")
    alive = np.arange(delta.base_to_now.shape[0], dtype=np.int32)  # d03 not tombstoned
    damaged = DeltaIndex(delta.base, alive, delta.delta, delta.settings)
    with pytest.raises(IndexFormatError, match="out of range"):
        damaged.top(damaged.query_ids(["alpha"]), 5)


def test_the_row_cache_stays_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scored rows are reused across queries (joined with rows scored fresh), never past
    DELTA_ROW_CACHE_POSTINGS, and the answers equal a build from scratch."""
    if not merge.available():
        pytest.skip("merge kernel not compiled")
    monkeypatch.setattr(delta_rows, "DELTA_ROW_CACHE_POSTINGS", 40)
    monkeypatch.setattr(delta_rows, "DELTA_ROW_CACHE_MIN", 1)
    content = {f"d{n:02d}": (WORDS[n % 10], " ".join(WORDS[n % 6 :])) for n in range(40)}
    kb = build(content, FIELDS)
    changes = {"d02": ("omega kappa", "alpha beta"), "x": ("tau", "gamma delta gamma")}
    updated = kb.update([Document(i, t, b) for i, (t, b) in changes.items()], compact=False)
    lexical = updated._lexical
    assert isinstance(lexical, DeltaIndex)
    content.update(changes)
    scratch = build(content, FIELDS)
    for _ in range(2):  # the second time, rows come from the cache
        for query in QUERIES:
            left, right = updated.search(query, 30), scratch.search(query, 30)
            assert [(h.id, h.score) for h in left] == [(h.id, h.score) for h in right], query
            scorer = lexical._scorer()
            assert scorer is not None
            assert 0 < scorer.cached_postings <= 40
            lexical._state["minis"].clear()  # query row sets: not what this test is about
