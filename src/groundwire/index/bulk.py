"""A bulk build of the BM25 rows in batches within a memory budget (the compiled path).

Entries (in id order) are analyzed in batches of about ``memory_budget`` bytes of
analysis working memory (:data:`~groundwire.config.BUILD_BYTES_PER_CHAR` per character
of text): all of a batch's texts are split into words at once (``Analyzer.joined_words``),
the words are numbered by a C hash table (``_bulk.WordTable``, no Python object per
word), each distinct word is stemmed once for the whole build, and
``_bulk.doc_postings`` turns the batch's term ids
into compact postings in document order (a term id and a frequency byte per field; a
pair and one byte), which are all the batch keeps. Once every batch is in, the rows are
sorted out without comparing: documents are already ascending, so a stable counting
sort by term (``_bulk.bucket_scatter``) puts the single postings in (term, document)
order, and two passes (by second term, then by first) put the pair postings in
(first, second, document) order. Scores are computed once, by the merge kernel
(``merge.scores_of``).

Every array equals the numpy builder's (``lexical_builder.py``, the path without the
kernels) bit for bit, whatever the batches: term ids are assigned in order of first
appearance, document by document, as there (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from groundwire.config import BUILD_BATCH_ENTRIES, BUILD_BYTES_PER_CHAR, IndexSettings
from groundwire.index import _bulk, merge
from groundwire.index.lexical import FieldFrequencies, FieldStats, LexicalIndex
from groundwire.index.lexical_builder import assembled
from groundwire.model import KnowledgeEntry
from groundwire.text import Analyzer

__all__ = ["available", "bulk_lexical"]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]
Reader = Callable[[KnowledgeEntry], str]
_NO_IDS: I32 = np.empty(0, dtype=np.int32)


def available() -> bool:
    """Whether the bulk build can run (both compiled kernels loaded)."""
    return _bulk.available() and merge.available()


def bulk_lexical(
    entries: Sequence[KnowledgeEntry],
    settings: IndexSettings,
    analyzer: Analyzer,
    memory_budget: int,
    fields: tuple[list[str], str | None, list[str], list[Reader]],
    progress: Callable[[int], None] | None = None,
) -> LexicalIndex:
    """The LexicalIndex of ``entries`` (id order) for ``fields`` (``text_readers``)."""
    names, pair_field, pair_sources, readers = fields
    all_fields = (*names, pair_field) if pair_field else tuple(names)
    weights = LexicalIndex.weights_of(settings, all_fields)
    weighted = [bool(weights[f] > 0) for f in range(len(names))]
    sources = [name in pair_sources for name in names]
    vocabulary: dict[str, int] = {}
    table = _bulk.WordTable()
    batches: list[_bulk.DocPostings] = []
    for batch in _batches(entries, readers, memory_budget):
        buf, ends = analyzer.joined_words(batch)
        del batch
        ids, seg_len = _term_ids(buf, ends, table, vocabulary, analyzer)
        del buf, ends
        seg_len = seg_len.reshape(-1, len(names))
        with_pairs = pair_field is not None
        batches.append(
            _bulk.doc_postings(ids, seg_len, weighted, sources, with_pairs, len(vocabulary))
        )
        if progress is not None:
            progress(seg_len.shape[0])
    return _rows(batches, settings, all_fields, vocabulary, weighted, pair_field is not None)


def _batches(
    entries: Sequence[KnowledgeEntry], readers: Sequence[Reader], memory_budget: int
) -> Iterator[list[str]]:
    """Consecutive entries' texts (entry by entry, fields in order), about
    ``memory_budget`` bytes of analysis at a time (at least one entry, at most
    ``BUILD_BATCH_ENTRIES``, per batch)."""
    limit = max(memory_budget // BUILD_BYTES_PER_CHAR, 1)
    texts: list[str] = []
    chars = count = 0
    for entry in entries:
        for read in readers:
            text = read(entry)
            texts.append(text)
            chars += len(text)
        count += 1
        if chars >= limit or count == BUILD_BATCH_ENTRIES:
            yield texts
            texts, chars, count = [], 0, 0
    if texts or not entries:
        yield texts


def _term_ids(
    buf: bytes,
    ends: list[int],
    table: _bulk.WordTable,
    vocabulary: dict[str, int],
    analyzer: Analyzer,
) -> tuple[I32, I64]:
    """Each word's term id (-1: dropped) and the words per text: new words are stemmed in
    order of first appearance and given the next ids, as ``builder.term_ids_reader``
    gives them."""
    before = len(table)
    numbers, seg_words = table.numbers(buf, ends)
    new = table.words(before)
    setdefault = vocabulary.setdefault
    terms = [setdefault(t, len(vocabulary)) if t else -1 for t in analyzer.analyze_words(new)]
    table.set_terms(before, terms)
    return table.terms_of(numbers), seg_words


def _rows(
    batches: list[_bulk.DocPostings],
    settings: IndexSettings,
    fields: tuple[str, ...],
    vocabulary: dict[str, int],
    weighted: list[bool],
    has_pairs: bool,
) -> LexicalIndex:
    """Sort every batch's postings into rows, then score them (see the module docstring)."""
    n_text, n_single = len(weighted), len(vocabulary)
    lengths = np.concatenate([b.lengths for b in batches], axis=1)
    n_s = int(sum(b.terms.shape[0] for b in batches))
    n_p = int(sum(b.firsts.shape[0] for b in batches))
    docs = np.empty(n_s + n_p, dtype=np.int32)
    s_ovf, p_ovf = _overflow(batches, n_text)
    bounds, _, s_counts, s_watch = _bulk.bucket_scatter(
        [b.terms for b in batches],
        n_single,
        [[b.counts[f] for b in batches] for f in range(n_text) if weighted[f]],
        per_doc=[b.per_doc for b in batches],
        watch=s_ovf[0],
        docs_out=docs[:n_s],
    )
    counts = iter(s_counts)
    frequencies = []
    for f in range(n_text):
        column = next(counts) if weighted[f] else np.zeros(n_s, dtype=np.uint8)
        mine = s_ovf[1] == f
        frequencies.append(FieldFrequencies(0, column, *_sorted(s_watch[mine], s_ovf[2][mine])))
    del s_counts, counts
    for b in batches:  # the single postings are in the rows now
        b.terms, b.counts = _NO_IDS, []
    pair_starts = np.empty(0, dtype=np.int64)
    tables = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32))
    if has_pairs:
        tables, pair_starts, pair_freq = _pair_rows(batches, n_single, docs[n_s:], p_ovf, n_s)
        frequencies.append(pair_freq)
    batches.clear()
    n_pairs = int(pair_starts.shape[0])
    indptr = np.empty(n_single + n_pairs + 1, dtype=np.int64)
    indptr[: n_single + 1] = bounds
    indptr[n_single : n_single + n_pairs] = pair_starts + n_s
    indptr[-1] = n_s + n_p
    del bounds, pair_starts
    weights = LexicalIndex.weights_of(settings, fields)
    stats = FieldStats.of(lengths)
    scores = merge.scores_of(settings, weights, indptr, docs, frequencies, lengths, stats)
    return assembled(
        fields,
        settings,
        vocabulary,
        np.empty(0, dtype=np.int64),  # not needed with the tables
        indptr,
        docs,
        scores,
        frequencies,
        lengths,
        stats,
        pairs=tables,
    )


def _overflow(batches: list[_bulk.DocPostings], n_text: int) -> tuple[tuple[I64, I32, I64], ...]:
    """The overflowing frequencies of single and of pair postings, positions made global
    (indexes into all batches' single, resp. pair, postings), ascending."""
    single: list[tuple[I64, I32, I64]] = []
    pair: list[tuple[I64, I32, I64]] = []
    at_s = at_p = 0
    for b in batches:
        pos, field, tf = b.overflow
        is_pair = field == n_text
        single.append((pos[~is_pair] + at_s, field[~is_pair], tf[~is_pair]))
        pair.append((pos[is_pair] + at_p, field[is_pair], tf[is_pair]))
        at_s += b.terms.shape[0]
        at_p += b.firsts.shape[0]
    out = []
    for parts in (single, pair):
        pos = np.concatenate([p for p, _, _ in parts]) if parts else np.empty(0, np.int64)
        field = np.concatenate([f for _, f, _ in parts]) if parts else np.empty(0, np.int32)
        tf = np.concatenate([t for _, _, t in parts]) if parts else np.empty(0, np.int64)
        order = np.argsort(pos, kind="stable")
        out.append((pos[order], field[order], tf[order]))
    return out[0], out[1]


def _sorted(at: I64, tf: I64) -> tuple[I64, I64]:
    """Overflow positions ascending, with their frequencies."""
    order = np.argsort(at, kind="stable")
    return at[order].astype(np.int64), tf[order].astype(np.int64)


def _pair_rows(
    batches: list[_bulk.DocPostings],
    n_single: int,
    out_docs: I32,
    overflow: tuple[I64, I32, I64],
    start: int,
) -> tuple[tuple[I64, I32], I64, FieldFrequencies]:
    """The pair postings sorted by (first, second, document) into ``out_docs``: the
    ``pair_tables`` of the distinct pairs (``pair_starts``, ``pair_seconds``), where each
    pair's row starts (among the pair postings) and the pair field's frequencies
    (postings from ``start``)."""
    # Pass 1, by second term: the documents come out explicit.
    by_second, docs, (firsts, counts), watch = _bulk.bucket_scatter(
        [b.seconds for b in batches],
        n_single,
        [[b.firsts for b in batches], [b.pair_counts for b in batches]],
        per_doc=[b.pair_per_doc for b in batches],
        watch=overflow[0],
    )
    assert docs is not None
    batches.clear()
    seconds = np.repeat(np.arange(n_single, dtype=np.int32), np.diff(by_second))
    del by_second
    order = np.argsort(watch, kind="stable")
    watched, watched_tf = watch[order], overflow[2][order]
    # Pass 2, stably by first term: (first, second, document) order.
    by_first, _, (_, counts, seconds), placed = _bulk.bucket_scatter(
        [firsts], n_single, [[docs], [counts], [seconds]], watch=watched, out=[out_docs]
    )
    del docs, firsts
    n_p = int(seconds.shape[0])
    new_row = np.ones(n_p, dtype=bool)
    new_row[1:] = seconds[1:] != seconds[:-1]
    new_row[by_first[:-1][by_first[:-1] < n_p]] = True  # each first term's postings start a row
    starts = np.flatnonzero(new_row).astype(np.int64)
    del new_row
    # pair_tables: each first term's pairs start where its postings' rows start.
    if starts.shape[0]:
        first_rows = np.searchsorted(starts, by_first).astype(np.int64)
        tables = (first_rows, seconds[starts])
    else:
        tables = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32))
    at, tf = _sorted(placed + start, watched_tf)
    return tables, starts, FieldFrequencies(start, counts, at, tf)
