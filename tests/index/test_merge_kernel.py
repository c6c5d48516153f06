"""The C merge kernel (``_merge.c``) against the numpy path it replaces: the same arrays,
bit for bit, for builds and updates, in both scoring modes, with overflowing frequencies,
term pairs, fields of weight 0 and deleted documents."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import Document, IndexSettings, KnowledgeBase
from groundwire.config import document_settings
from groundwire.index import _merge, merge
from groundwire.index.lexical import LexicalIndex

pytestmark = pytest.mark.skipif(not _merge.available(), reason="merge kernel not compiled")

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau", "the"]
SETTINGS = {
    "bm25f": document_settings(),
    "fields": dataclasses.replace(document_settings(), scoring="fields"),
    "no title": IndexSettings(field_weights={"title": 0.0, "body": 1.0, "bigrams": 0.5}),
}


def arrays(lex: LexicalIndex) -> dict[str, Any]:
    out: dict[str, Any] = {
        "indptr": np.asarray(lex.indptr),
        "docs": np.asarray(lex.docs),
        "scores": np.asarray(lex.scores).view(np.uint64),  # bits, not values
        "lengths": np.asarray(lex.lengths),
        "pairs": (np.asarray(lex.pair_starts), np.asarray(lex.pair_seconds)),
        "vocabulary": dict(lex.vocabulary),
    }
    for f, freq in enumerate(lex.frequencies):
        out[f"f{f}"] = (freq.start, freq.counts.tobytes(), freq.overflow_at, freq.overflow_tf)
    return out


def equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        left, right = a[key], b[key]
        if isinstance(left, tuple):
            assert len(left) == len(right), key
            for x, y in zip(left, right, strict=True):
                assert np.array_equal(np.asarray(x), np.asarray(y)), key
        elif isinstance(left, dict):
            assert left == right, key
        else:
            assert left.dtype == right.dtype, key
            assert np.array_equal(left, right), key


def both(monkeypatch: pytest.MonkeyPatch, make: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``make()``'s lexical arrays with the kernel, then with the numpy path."""
    native = arrays(make()._parts.lexical)
    with monkeypatch.context() as patched:
        patched.setattr(merge, "available", lambda: False)
        reference = arrays(make()._parts.lexical)
    return native, reference


# A word repeated 300 times overflows its frequency byte (255 means "see overflow").
body = st.lists(st.sampled_from([*WORDS, "alpha " * 300]), max_size=10).map(" ".join)
corpus = st.dictionaries(st.sampled_from([f"d{n:02d}" for n in range(20)]), st.tuples(body, body))


@settings(max_examples=25, deadline=None)
@given(
    start=corpus,
    upserts=corpus,
    deletes=st.sets(st.sampled_from([f"d{n:02d}" for n in range(20)])),
    mode=st.sampled_from(sorted(SETTINGS)),
)
def test_builds_and_updates_equal_the_numpy_path_bit_for_bit(
    start: dict[str, tuple[str, str]],
    upserts: dict[str, tuple[str, str]],
    deletes: set[str],
    mode: str,
) -> None:
    chosen = SETTINGS[mode]
    docs = [Document(i, t, b) for i, (t, b) in start.items()]
    gone = sorted((deletes & set(start)) - set(upserts))
    added = [Document(i, t, b) for i, (t, b) in upserts.items()]
    with pytest.MonkeyPatch.context() as monkeypatch:
        equal(*both(monkeypatch, lambda: KnowledgeBase.from_documents(docs, chosen)))
        base = KnowledgeBase.from_documents(docs, chosen)
        equal(*both(monkeypatch, lambda: base.update(added, gone, compact=True)))
        equal(*both(monkeypatch, lambda: base.update([], gone, compact=True)))
        # A delta segment compacted (update.compact): the same passes over both segments.
        kept = KnowledgeBase.from_documents(docs[::2], chosen)
        equal(*both(monkeypatch, lambda: kept.update(added, [], compact=False).compacted()))


def test_damaged_rows_are_refused() -> None:
    indptr = np.array([0, 2], dtype=np.int64)
    docs = np.array([0, 5], dtype=np.int32)  # document 5 of 2
    counts = [(0, np.ones(2, dtype=np.uint8))]
    none = np.empty(0, dtype=np.int64)
    with pytest.raises(ValueError, match="damaged"):
        _merge.merge_rows(
            indptr,
            docs,
            np.zeros(1, np.int64),
            np.array([0, 1], np.int32),
            counts,
            [none],
            none,
            np.empty(0, np.int32),
            [none],
            1,
        )
    with pytest.raises(ValueError, match="out of range"):
        _merge.score_rows(
            indptr,
            docs,
            counts,
            [(none, none)],
            np.ones(1),
            np.ones((2, 1)),
            [np.ones(3)],
            True,
            1.2,
        )


@pytest.mark.parametrize("bm25f", [True, False])
def test_a_document_frequency_outside_the_idf_table_is_refused(bm25f: bool) -> None:
    indptr = np.array([0, 2], dtype=np.int64)
    docs = np.array([0, 1], dtype=np.int32)
    counts = [(0, np.ones(2, dtype=np.uint8))]
    none = np.empty(0, dtype=np.int64)
    args = (indptr, docs, counts, [(none, none)], np.ones(1), np.ones((2, 1)))
    assert _merge.score_rows(*args, [np.ones(3)], bm25f, 1.2).shape == (2,)
    with pytest.raises(ValueError, match="out of range"):
        _merge.score_rows(*args, [np.ones(2)], bm25f, 1.2)  # df 2 needs 3 entries


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_scoring_in_threads_equals_one_thread(threads: int) -> None:
    words = [f"w{n % 37} w{n % 11} alpha" for n in range(200)]
    kb = KnowledgeBase.from_documents(
        [Document(f"d{n:03d}", w, w * 3) for n, w in enumerate(words)]
    )
    lex = kb._parts.lexical
    n_docs = lex.lengths.shape[1]
    counts = [(f.start, f.counts) for f in lex.frequencies]
    overflow = [(f.overflow_at, f.overflow_tf) for f in lex.frequencies]
    norms = np.linspace(0.5, 2.0, n_docs * len(counts)).reshape(n_docs, len(counts))
    idf = [np.linspace(0.1, 3.0, n_docs + 1)]  # per document frequency
    args = (lex.indptr, lex.docs, counts, overflow, lex.weights, norms, idf, True, 1.2)
    one = _merge.score_rows(*args, threads=1)
    assert np.array_equal(_merge.score_rows(*args, threads=threads), one)
    assert np.array_equal(one, lex.scores) is False  # other statistics: other scores
