"""Delta segments: an update that costs the change, with every score exact at query time.

A :class:`DeltaIndex` is a precomputed ``base`` segment (the rows of the last full build
or compaction, its scores computed for the statistics of that time), a tombstone map
over its documents (``base_to_now``: each base document's current position, ``-1``
when it was deleted or replaced) and a ``delta`` segment holding the postings of every
document added or replaced since: frequencies and lengths, in the current numbering
(positions in id order, as a build from scratch numbers them), keyed by the current
vocabulary (the base's term ids, then new terms). ``delta.lengths`` holds every current
document's field lengths, so ``delta.stats`` are the current statistics.

Every score depends on the document count, the average lengths and the document
frequencies, so a change anywhere changes every precomputed score. A query on a
``DeltaIndex`` therefore scores its rows from the stored frequencies: it gathers each
query row's live base postings (renumbered through the map) and the delta's postings of
the same term or pair, counts the current document frequencies from them, and scores
them with the builder's operations in the builder's order (the merge kernel's
``gw_score_rows``, GIL released, or the builder's numpy expressions), with the current
norms per document. The query's rows then go through the ordinary top-k path (the C
query kernel), so ids, order and scores equal those of a build from scratch bit for bit.

Cost: an update merges only the delta's postings (``update.py``); a query pays the
rescoring of its rows (every posting of its terms, not only the changed ones).
:meth:`DeltaIndex.compacted` merges both segments back into one precomputed index with
the update's exact passes (``update.merged_rows``); ``update_parts`` does it on its own
past ``config.DELTA_COMPACT_SHARE``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.config import DELTA_PASS_POSTINGS, IndexSettings
from groundwire.index import merge
from groundwire.index.delta_rows import RowScorer
from groundwire.index.lexical import (
    SKIP,
    TF_OVERFLOW,
    FieldFrequencies,
    FieldStats,
    FloatArray,
    IntArray,
    LexicalIndex,
    MaskArray,
    QueryScores,
    _check_docs,
)

__all__ = ["DeltaIndex", "empty_delta"]

I64 = npt.NDArray[np.int64]
_NO_KEYS: I64 = np.empty(0, dtype=np.int64)
_MINI_CACHE = 8  # query row sets kept (a search scores, then explains, the same rows)


def empty_delta(base: LexicalIndex, settings: IndexSettings) -> LexicalIndex:
    """A delta segment with no postings over ``base``'s documents and vocabulary."""
    from groundwire.index.lexical_builder import assembled, frequencies_of

    indptr = np.zeros(len(base.vocabulary) + 1, dtype=np.int64)
    empty = [frequencies_of(_NO_KEYS, _NO_KEYS, 0, 0) for _ in base.fields]
    return assembled(
        base.fields,
        settings,
        base.vocabulary,
        _NO_KEYS,
        indptr,
        np.empty(0, dtype=np.int32),
        np.empty(0, dtype=np.float64),
        empty,
        base.lengths,
        base.stats,
    )


class _Rows(Mapping[str, int]):
    """The vocabulary of a query's gathered rows: only its size matters (``R`` rows)."""

    def __init__(self, size: int) -> None:
        self._size = size

    def __getitem__(self, key: str) -> int:
        raise KeyError(key)

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return self._size


@dataclass(frozen=True, slots=True, eq=False)
class DeltaIndex:
    """A base segment, its tombstones and a delta segment (see the module docstring)."""

    base: LexicalIndex
    base_to_now: npt.NDArray[np.int32]
    delta: LexicalIndex
    settings: IndexSettings
    _state: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_state",
            {
                "minis": {},
                "lock": threading.Lock(),
                "best_lock": threading.Lock(),
                "cache_lock": threading.Lock(),
            },
        )

    # What a LexicalIndex reader shows.
    @property
    def fields(self) -> tuple[str, ...]:
        return self.base.fields

    @property
    def weights(self) -> FloatArray:
        return self.base.weights

    @property
    def k1(self) -> float:
        return self.base.k1

    @property
    def b(self) -> float:
        return self.base.b

    @property
    def scoring(self) -> str:
        return self.base.scoring

    @property
    def vocabulary(self) -> Mapping[str, int]:
        return self.delta.vocabulary

    @property
    def lengths(self) -> IntArray:
        return self.delta.lengths

    @property
    def stats(self) -> FieldStats:
        return self.delta.stats

    @property
    def doc_count(self) -> int:
        return self.delta.doc_count

    @property
    def deleted(self) -> int:
        """Base documents deleted or replaced since the base was built."""
        return int(np.count_nonzero(self.base_to_now < 0))

    @property
    def added(self) -> int:
        """Documents held by the delta segment (added or replaced)."""
        return self.doc_count - (int(self.base_to_now.shape[0]) - self.deleted)

    @property
    def share(self) -> float:
        """Tombstones plus delta documents, as a share of the documents now."""
        return (self.deleted + self.added) / max(self.doc_count, 1)

    def compacted(self) -> LexicalIndex:
        """One precomputed index equal to a build from scratch (made once, then kept)."""
        state = self._state
        with state["lock"]:
            if "compacted" not in state:
                from groundwire.index.update import compact  # which imports this module

                state["compacted"] = compact(self)
            done: LexicalIndex = state["compacted"]
            return done

    # Query ids: single terms by id, then pairs (base pairs first, then delta-only ones).
    def codes(self, terms: Iterable[str]) -> list[int]:
        """The word codes of analyzed query terms (see LexicalIndex.codes)."""
        return self.delta.codes(terms)

    def ids_of_codes(self, codes: Sequence[int]) -> list[int]:
        """The row ids of word codes, as LexicalIndex.ids_of_codes orders them: each
        known term, then each adjacent pair indexed in either segment."""
        single = len(self.vocabulary)
        ids = [code for code in codes if code >= 0]
        if ids and max(ids) >= single:
            raise ValueError(f"word code {max(ids)} is not below the {single} single terms")
        if len(ids) > 1:
            first = -1
            for second in codes:
                if second == SKIP:
                    continue
                if first >= 0 and second >= 0:
                    pair = self._pair_id(first, second)
                    if pair is not None:
                        ids.append(pair)
                first = second
        return ids

    def _pair_id(self, first: int, second: int) -> int | None:
        base_single = len(self.base.vocabulary)
        single = len(self.vocabulary)
        if first < base_single and second < base_single:
            at = _pair_at(self.base, first, second)
            if at is not None:
                return single + at
        at = _pair_at(self.delta, first, second)
        return None if at is None else single + int(self.base.pair_seconds.shape[0]) + at

    def query_ids(self, terms: Sequence[str]) -> list[int]:
        return self.ids_of_codes(self.codes(terms))

    def term_ids(self, terms: Iterable[str]) -> Counter[int]:
        return Counter(self.query_ids(list(terms)))

    # Queries: the rows gathered and scored for the current statistics, then the
    # ordinary top-k path over them.
    def score(self, terms: Sequence[str]) -> QueryScores:
        return self.score_ids(self.query_ids(terms))

    def score_ids(self, ids: Sequence[int]) -> QueryScores:
        mini, rows = self._mini(ids)
        return mini.score_ids(rows)

    def top_codes(
        self, codes: Sequence[int], k: int, skip: MaskArray | None = None
    ) -> tuple[list[int], list[float]]:
        return self.top(self.ids_of_codes(codes), k, skip)

    def top(
        self, ids: Sequence[int], k: int, skip: MaskArray | None = None
    ) -> tuple[list[int], list[float]]:
        mini, rows = self._mini(ids)
        return mini.top(rows, k, skip)

    def score_of_ids(self, ids: Sequence[int], doc: int) -> float:
        mini, rows = self._mini(ids)
        return mini.score_of_ids(rows, doc)

    def explain(self, terms: Iterable[str], doc: int) -> dict[str, float]:
        return self.explain_ids(self.query_ids(list(terms)), doc)

    def explain_ids(self, ids: Iterable[int], doc: int) -> dict[str, float]:
        mini, rows = self._mini(list(ids))
        return mini.explain_ids(rows, doc)

    def scores_of_ids(self, ids: Sequence[int], docs: IntArray) -> FloatArray:
        mini, rows = self._mini(ids)
        return mini.scores_of_ids(rows, docs)

    def field_row(self, f: int, term: int) -> tuple[IntArray, I64]:
        mini, rows = self._mini([term])
        return mini.field_row(f, rows[0])

    # Whole-index reads (the relevance gate's statistics), from the segments: none of
    # them compacts (see index/reading.py).
    def term_docs(self, term: int) -> IntArray:
        """The documents (ascending) holding single term ``term``: its live base
        postings renumbered, merged with its delta postings (nothing scored)."""
        if not 0 <= term < len(self.vocabulary):
            raise ValueError(f"term {term} is not below the {len(self.vocabulary)} single terms")
        base_row, delta_row = self._segment_rows(term)
        parts = []
        if base_row >= 0:
            bounds = self.base._bounds
            old = self.base.docs[bounds[base_row] : bounds[base_row + 1]]
            _check_docs(old, int(self.base_to_now.shape[0]))
            now = self.base_to_now[old]
            parts.append(now[now >= 0])
        bounds = self.delta._bounds
        new = np.asarray(self.delta.docs[bounds[delta_row] : bounds[delta_row + 1]], np.int32)
        _check_docs(new, self.doc_count)
        parts.append(new)
        return np.sort(np.concatenate(parts))

    def single_term_postings(self) -> tuple[I64, IntArray]:
        """Every live single-term posting as its term and its (current) document: the
        base's first, then the delta's."""
        base_single, single = len(self.base.vocabulary), len(self.vocabulary)
        bounds, now, live = self._base_live()
        rows = np.repeat(np.arange(base_single, dtype=np.int64), np.diff(bounds))[live]
        delta_bounds = np.asarray(self.delta.indptr[: single + 1], dtype=np.int64)
        new = np.asarray(self.delta.docs[: int(delta_bounds[-1])], dtype=np.int64)
        _check_docs(new, self.doc_count)
        delta_rows = np.repeat(np.arange(single, dtype=np.int64), np.diff(delta_bounds))
        docs = np.concatenate([now[live].astype(np.int64), new])
        return np.concatenate([rows, delta_rows]), docs

    def single_term_frequencies(self, f: int) -> I64:
        """Field ``f``'s frequency at each posting of :meth:`single_term_postings`."""
        _, _, live = self._base_live()
        base = self.base.frequencies[f].span(0, self.base.single_postings)[live]
        return np.concatenate([base, self.delta.frequencies[f].span(0, self.delta.single_postings)])

    def _base_live(self) -> tuple[I64, npt.NDArray[np.int32], MaskArray]:
        """The base's single-term row bounds, each posting's current document and
        whether it is live."""
        bounds = np.asarray(self.base.indptr[: len(self.base.vocabulary) + 1], dtype=np.int64)
        old = self.base.docs[: int(bounds[-1])]
        _check_docs(old, int(self.base_to_now.shape[0]))
        now = self.base_to_now[old]
        return bounds, now, now >= 0

    def best_term_scores(self) -> FloatArray:
        """The best score each single term that any document holds earns on its own, in
        term order, as a compaction's rows would give them (bit for bit): one pass over
        every row, scored for the current statistics in bounded chunks and not cached
        row by row; computed once (threads asking meanwhile wait for it)."""
        state = self._state
        with state["best_lock"]:
            best: FloatArray | None = state.get("best")
            if best is None:
                best = state["best"] = self._best_term_scores()
            return best

    def _best_term_scores(self) -> FloatArray:
        single, base_single = len(self.vocabulary), len(self.base.vocabulary)
        spans = np.zeros((single, 4), dtype=np.int64)
        base_bounds = np.asarray(self.base.indptr[: base_single + 1], dtype=np.int64)
        delta_bounds = np.asarray(self.delta.indptr[: single + 1], dtype=np.int64)
        spans[:base_single, 0], spans[:base_single, 1] = base_bounds[:-1], base_bounds[1:]
        spans[:, 2], spans[:, 3] = delta_bounds[:-1], delta_bounds[1:]
        ends = np.cumsum(spans[:, 1] - spans[:, 0] + spans[:, 3] - spans[:, 2])
        out, lo = [], 0
        while lo < single:  # rows whose postings fit DELTA_PASS_POSTINGS (at least one)
            done = int(ends[lo - 1]) if lo else 0
            hi = max(int(np.searchsorted(ends, done + DELTA_PASS_POSTINGS, side="right")), lo + 1)
            out.append(self._row_maxima(range(lo, hi), spans[lo:hi]))
            lo = hi
        return np.concatenate([np.empty(0, dtype=np.float64), *out])

    def _row_maxima(self, rows: range, spans: I64) -> FloatArray:
        """The best score of each non-empty row of ``rows`` (``spans``: their spans)."""
        scorer = self._scorer()
        if scorer is not None:
            indptr, scores = scorer.scored(spans.ravel(), self._norms())
        else:  # the builder's numpy path
            mini = self._gathered(tuple(rows))
            indptr, scores = np.asarray(mini.indptr, dtype=np.int64), mini.scores
        starts = indptr[:-1][indptr[1:] > indptr[:-1]]
        if not starts.shape[0]:
            return np.empty(0, dtype=np.float64)
        return np.maximum.reduceat(np.asarray(scores[: int(indptr[-1])]), starts)

    def _mini(self, ids: Sequence[int]) -> tuple[LexicalIndex, list[int]]:
        """A small precomputed index of the query's distinct rows, scored for the current
        statistics, and each id's row in it."""
        distinct = tuple(dict.fromkeys(ids))
        state = self._state
        minis: dict[tuple[int, ...], LexicalIndex] = state["minis"]
        mini = minis.get(distinct)
        if mini is None:
            mini = self._gathered(distinct)  # outside the lock: racing threads agree
            with state["cache_lock"]:
                if len(minis) >= _MINI_CACHE:
                    minis.pop(next(iter(minis)), None)
                minis[distinct] = mini
        slot = {row: r for r, row in enumerate(distinct)}
        return mini, [slot[i] for i in ids]

    def _gathered(self, distinct: Sequence[int]) -> LexicalIndex:
        from groundwire.index.lexical_builder import rows_of

        vocabulary = _Rows(len(distinct))
        scorer = self._scorer()
        if scorer is None:  # the builder's numpy path over the gathered postings
            rows, docs, tfs = self._postings(distinct)
            scale = max(self.doc_count, 1)
            postings = []
            for tf in tfs:
                pick = tf > 0
                postings.append((rows[pick] * scale + docs[pick], tf[pick]))
            return rows_of(
                self.fields,
                self.settings,
                vocabulary,
                _NO_KEYS,
                postings,
                self.lengths,
                has_pairs=False,
            )
        return scorer.gathered(distinct, vocabulary, self._row_spans, self._norms())

    def _scorer(self) -> RowScorer | None:
        """The merge kernel's scorer of this index's query rows (made once); None without
        the kernel or for arrays it does not read (then the numpy path runs)."""
        state = self._state
        if "scorer" not in state:
            made = None
            if merge.available():
                try:
                    made = RowScorer(self)
                except TypeError:
                    made = None
            state["scorer"] = made  # racing threads make equal ones
        scorer: RowScorer | None = state["scorer"]
        return scorer

    def _row_spans(self, distinct: Sequence[int]) -> I64:
        """Per query row: its base postings ``lo, hi`` and its delta postings ``lo, hi``."""
        base, delta = self.base._bounds, self.delta._bounds
        out: list[int] = []
        for row in distinct:
            b, d = self._segment_rows(row)
            out += (base[b], base[b + 1]) if b >= 0 else (0, 0)
            out += (delta[d], delta[d + 1]) if d >= 0 else (0, 0)
        return np.array(out, dtype=np.int64)

    def _norms(self) -> FloatArray:
        state = self._state
        norms = state.get("norms")
        if norms is None:
            norms = state["norms"] = merge.doc_norms(self.settings, self.lengths, self.stats)
        return norms

    def _segment_rows(self, row: int) -> tuple[int, int]:
        """A query row's row in the base and in the delta (-1: none there)."""
        single, base_single = len(self.vocabulary), len(self.base.vocabulary)
        base_pairs = int(self.base.pair_seconds.shape[0])
        if row < single:
            return (row if row < base_single else -1), row
        if row < single + base_pairs:
            p = row - single
            first = int(np.searchsorted(self.base.pair_starts, p, side="right")) - 1
            at = _pair_at(self.delta, first, int(self.base.pair_seconds[p]))
            return base_single + p, -1 if at is None else single + at
        return -1, row - base_pairs

    def _postings(self, distinct: Sequence[int]) -> tuple[I64, I64, list[I64]]:
        """The live postings of the query's rows now, ordered by row then document: each
        one's row (index into ``distinct``), document and frequency per field."""
        located = [self._segment_rows(row) for row in distinct]
        base_at, base_rows = _spans(self.base.indptr, [b for b, _ in located])
        old = self.base.docs[base_at]
        _check_docs(old, int(self.base_to_now.shape[0]))
        now = self.base_to_now[old]
        live = now >= 0
        base_at, base_rows, now = base_at[live], base_rows[live], now[live].astype(np.int64)
        delta_at, delta_rows = _spans(self.delta.indptr, [d for _, d in located])
        new = np.asarray(self.delta.docs[delta_at], dtype=np.int64)
        _check_docs(new, self.doc_count)
        rows = np.concatenate([base_rows, delta_rows])
        docs = np.concatenate([now, new])
        # Two runs ascending by (row, document), distinct: a stable sort merges them.
        order = np.argsort(rows * max(self.doc_count, 1) + docs, kind="stable")
        tfs = [
            np.concatenate([_tf_at(b, base_at), _tf_at(d, delta_at)])[order]
            for b, d in zip(self.base.frequencies, self.delta.frequencies, strict=True)
        ]
        return rows[order], docs[order], tfs


def _spans(indptr: npt.NDArray[np.int64], rows: Sequence[int]) -> tuple[I64, I64]:
    """The postings of ``rows`` (-1: none) in order, and the index of each one's row."""
    picked = np.array(rows, dtype=np.int64)
    present = picked >= 0
    if not present.any():  # none here (the segment may have no rows at all)
        return _NO_KEYS, _NO_KEYS
    lo = np.where(present, np.asarray(indptr)[np.maximum(picked, 0)], 0)
    hi = np.where(present, np.asarray(indptr)[np.maximum(picked, 0) + 1], 0)
    sizes = hi - lo
    owner = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
    firsts = np.cumsum(sizes) - sizes
    at = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(lo - firsts, sizes)
    return at, owner


def _tf_at(freq: FieldFrequencies, at: I64) -> I64:
    """A field's exact frequency at postings ``at`` (0 outside the field's range)."""
    out = np.zeros(at.shape[0], dtype=np.int64)
    j = at - freq.start
    inside = (j >= 0) & (j < freq.counts.shape[0])
    out[inside] = freq.counts[j[inside]]
    big = np.flatnonzero(out == TF_OVERFLOW)
    if big.shape[0] and freq.overflow_at.shape[0]:  # none: damaged, left at 255
        where = np.searchsorted(freq.overflow_at, at[big])
        where = np.minimum(where, freq.overflow_at.shape[0] - 1)
        found = freq.overflow_at[where] == at[big]
        out[big[found]] = freq.overflow_tf[where[found]]
    return out


def _pair_at(index: LexicalIndex, first: int, second: int) -> int | None:
    """The pair number of ``(first, second)`` in ``index``'s pair tables, or None."""
    starts = index.pair_starts
    if not starts.shape[0] or first + 1 >= starts.shape[0]:
        return None
    lo, hi = int(starts[first]), int(starts[first + 1])
    if lo == hi:
        return None
    at = lo + int(np.searchsorted(index.pair_seconds[lo:hi], second))
    if at < hi and int(index.pair_seconds[at]) == second:
        return at
    return None
