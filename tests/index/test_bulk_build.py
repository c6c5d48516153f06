"""The bulk build (``index/bulk.py``, ``_bulk.c``) against the numpy builder it replaces:
the same arrays, bit for bit, for every memory budget (batches of one entry up to one
batch), with overflowing frequencies, term pairs, fields of weight 0, non-ASCII text,
hyphens, possessives and numbers."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import Document, IndexSettings, KnowledgeBase, KnowledgeEntry
from groundwire.config import AnalyzerConfig, document_settings
from groundwire.errors import KnowledgeIndexError
from groundwire.index import _bulk, bulk
from groundwire.index.builder import build_parts, document_entries

from .test_merge_kernel import arrays, equal

pytestmark = pytest.mark.skipif(not bulk.available(), reason="bulk-build kernel not compiled")

SETTINGS = {
    "bm25f": document_settings(),
    "fields": dataclasses.replace(document_settings(), scoring="fields"),
    "no title": IndexSettings(field_weights={"title": 0.0, "body": 1.0, "bigrams": 0.5}),
    "no pairs": IndexSettings(field_weights={"title": 2.0, "body": 1.0}),
    "entries": IndexSettings(),
    "options": dataclasses.replace(
        document_settings(),
        analyzer=AnalyzerConfig(join_hyphenated=True, keep_numbers=False, stopwords="lucene"),
    ),
}
PIECES = ["alpha", "Beta", "the", "e-mail", "it's", "42", "naïve", "café", "中文字", "x_y", "ΣΑΣ"]
# A word repeated 300 times overflows its frequency byte (and its pair's).
text = st.lists(st.sampled_from([*PIECES, "alpha " * 300]), max_size=8).map(" ".join)
corpus = st.dictionaries(st.sampled_from([f"d{n:02d}" for n in range(12)]), st.tuples(text, text))


def build(docs: list[Document], chosen: IndexSettings, budget: int | None) -> dict[str, Any]:
    parts = build_parts(
        document_entries(docs), chosen, exact_ids=False, exact_titles=False, memory_budget=budget
    )
    return arrays(parts.lexical)


@settings(max_examples=40, deadline=None)
@given(
    docs=corpus,
    mode=st.sampled_from(sorted(SETTINGS)),
    budget=st.integers(1, 4000),
)
def test_bulk_builds_equal_the_numpy_builder_for_any_budget(
    docs: dict[str, tuple[str, str]], mode: str, budget: int
) -> None:
    chosen = SETTINGS[mode]
    documents = [Document(i, t, b) for i, (t, b) in docs.items()]
    batched = build(documents, chosen, budget)
    whole = build(documents, chosen, None)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(bulk, "available", lambda: False)
        reference = build(documents, chosen, None)
    equal(batched, reference)
    equal(whole, reference)
    # Term ids in order of first appearance, as the numpy builder assigns them.
    assert list(batched["vocabulary"]) == list(reference["vocabulary"])


def test_searches_equal_across_budgets() -> None:
    docs = [
        Document(f"d{n:03d}", f"t{n % 7} alpha", f"w{n % 13} w{n % 5} beta") for n in range(300)
    ]
    small = KnowledgeBase(document_entries(docs), document_settings(), memory_budget=64)
    large = KnowledgeBase.from_documents(docs)
    for query in ("alpha w3", "w4 beta t2", "w1 w1"):
        assert [(h.id, h.score) for h in small.search(query, k=10)] == [
            (h.id, h.score) for h in large.search(query, k=10)
        ]


@pytest.mark.parametrize("budget", [0, -5, 1.5, True, "1G"])
def test_a_bad_memory_budget_is_refused(budget: Any) -> None:
    with pytest.raises(KnowledgeIndexError, match="memory_budget"):
        build_parts([], IndexSettings(), memory_budget=budget)


def test_an_empty_corpus_builds() -> None:
    parts = build_parts([], document_settings())
    assert parts.lexical.docs.shape == (0,)
    assert parts.lexical.lengths.shape == (3, 0)


def test_the_word_table_grows_and_keeps_numbers() -> None:
    table = _bulk.WordTable()
    words = [f"w{n}" for n in range(70_000)] + ["x" * 300_000]
    buf = "".join(w + " " for w in words).encode()
    numbers, per_segment = table.numbers(buf, [len(buf)])
    assert numbers.tolist() == list(range(len(words)))
    assert per_segment.tolist() == [len(words)]
    again, _ = table.numbers(b"w5 x w69999 ", [3, 5, 12])
    assert again.tolist() == [5, len(words), 69_999]
    assert table.words(len(words) - 1) == ["x" * 300_000, "x"]


def test_inconsistent_kernel_input_is_refused() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        _bulk.WordTable().numbers(b"a b ", [1])  # "b" lies after the last segment
    with pytest.raises(ValueError, match="inconsistent"):
        _bulk.doc_postings(
            np.array([7], np.int32), np.ones((1, 1), np.int64), [True], [False], False, 3
        )
    with pytest.raises(ValueError, match="inconsistent"):
        _bulk.bucket_scatter([np.array([4], np.int32)], 2, [])


@settings(max_examples=15, deadline=None)
@given(
    texts=st.lists(st.tuples(text, text, text, text), min_size=1, max_size=8),
    budget=st.integers(1, 2000),
)
def test_curated_entries_build_the_same_with_every_field(
    texts: list[tuple[str, str, str, str]], budget: int
) -> None:
    entries = [
        KnowledgeEntry(
            id=f"e{n}",
            title=title,
            summary=summary,
            domain="d",
            integrations=(),
            body=body,
            aliases=(alias, title),
            keywords=(summary,),
        )
        for n, (title, summary, body, alias) in enumerate(texts)
    ]
    chosen = IndexSettings()
    batched = arrays(build_parts(entries, chosen, memory_budget=budget).lexical)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(bulk, "available", lambda: False)
        reference = arrays(build_parts(entries, chosen).lexical)
    equal(batched, reference)


def test_progress_counts_every_entry_batch_by_batch() -> None:
    docs = [Document(f"d{n:03d}", "title", f"body {n}") for n in range(50)]
    seen: list[int] = []
    KnowledgeBase(
        document_entries(docs), document_settings(), progress=seen.append, memory_budget=100
    )
    assert sum(seen) == 50
    assert len(seen) > 1
