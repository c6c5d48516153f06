"""A delta index's query rows in the merge kernel: gathered, merged and scored in one pass.

:class:`RowScorer` (one per :class:`~groundwire.index.delta.DeltaIndex`) hands the
kernel's ``gw_delta_rows`` both segments (made once), the tombstone map, the per-document
norms and idf tables for the current statistics, and the spans of the query's rows; the
kernel renumbers each row's live base postings, merges them by document with the
delta's postings of the same row, counts the document frequencies and scores every
posting with ``gw_score_rows``' operations, so the scores are bit for bit those of a
build from scratch (the numpy path in ``delta.py`` is the reference; tested).

A row's scores depend on the index only, not on the query, so scored rows are kept in a
least-recently-used cache of at most :data:`~groundwire.config.DELTA_ROW_CACHE_POSTINGS`
postings (a row shorter than :data:`~groundwire.config.DELTA_ROW_CACHE_MIN` or larger
than a quarter of the budget is not kept): a frequent term is rescored once, not per
query. The idf tables grow by doubling to the largest row seen, so
their size follows the queries, not the corpus.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from groundwire.config import DELTA_ROW_CACHE_MIN, DELTA_ROW_CACHE_POSTINGS
from groundwire.index import _merge, merge
from groundwire.index.lexical import FieldFrequencies, FloatArray, LexicalIndex, _damaged

if TYPE_CHECKING:
    from groundwire.index.delta import DeltaIndex

__all__ = ["RowScorer"]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]
_NO_KEYS: I64 = np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class _Row:
    """One query row gathered and scored for the current statistics: its documents, their
    scores, each field's frequency bytes and overflowing frequencies (row positions)."""

    docs: I32
    scores: FloatArray
    counts: list[U8]
    overflow: list[tuple[I64, I64]]


class RowScorer:
    """The merge kernel's view of one delta index, and its cache of scored rows.

    Raises TypeError for segment arrays the kernel does not read (then the caller takes
    the numpy path). Thread-safe: the cache is read and written under a lock; racing
    threads scoring the same row compute equal rows."""

    def __init__(self, index: DeltaIndex) -> None:
        self._index = index
        self._base = _segment(index.base)
        self._delta = _segment(index.delta)
        self._base_to_now = np.ascontiguousarray(index.base_to_now, dtype=np.int32)
        self._bm25f = index.scoring == "bm25f"
        self._made: tuple[int, FloatArray, _merge.Scoring] | None = None  # see _scoring
        self._rows: OrderedDict[int, _Row] = OrderedDict()
        self._cached = 0  # postings in _rows
        self._lock = threading.Lock()

    @property
    def cached_postings(self) -> int:
        """Postings held by the row cache (at most DELTA_ROW_CACHE_POSTINGS)."""
        return self._cached

    def clear(self) -> None:
        """Forget every cached row (a benchmark's cold queries; memory back at once)."""
        with self._lock:
            self._rows.clear()
            self._cached = 0

    def gathered(
        self,
        distinct: Sequence[int],
        vocabulary: Mapping[str, int],
        spans: Callable[[Sequence[int]], I64],
        norms: FloatArray,
    ) -> LexicalIndex:
        """A small precomputed index of the query's distinct rows (row ``r`` is
        ``distinct[r]``), scored for the current statistics; ``spans`` gives the rows'
        postings in both segments (``DeltaIndex._row_spans``)."""
        from groundwire.index.lexical_builder import assembled  # which imports merge

        with self._lock:
            found = [self._rows.get(row) for row in distinct]
            for row, piece in zip(distinct, found, strict=True):
                if piece is not None:
                    self._rows.move_to_end(row)
        missing = [row for row, piece in zip(distinct, found, strict=True) if piece is None]
        fresh = self._score(missing, spans, norms) if missing else None
        if fresh is not None and len(missing) == len(distinct):  # all fresh: used as it is
            indptr, docs, counts, overflow, scores = fresh
            self._keep(missing, fresh)
        else:
            rows = iter(_split(fresh) if fresh is not None else [])
            if fresh is not None:
                self._keep(missing, fresh)
            pieces = [piece if piece is not None else next(rows) for piece in found]
            indptr, docs, scores, counts, overflow = _joined(pieces, len(self._index.fields))
        frequencies = [
            FieldFrequencies(0, c, at, tf) for c, (at, tf) in zip(counts, overflow, strict=True)
        ]
        index = self._index
        return assembled(
            index.fields,
            index.settings,
            vocabulary,
            _NO_KEYS,
            indptr,
            docs,
            scores,
            frequencies,
            index.lengths,
            index.stats,
        )

    def scored(self, where: I64, norms: FloatArray) -> tuple[I64, FloatArray]:
        """The rows of spans ``where`` (``DeltaIndex._row_spans``' layout) gathered and
        scored in one kernel call, not cached (a whole-index pass): their bounds and
        scores."""
        gathered = self._run(np.ascontiguousarray(where, dtype=np.int64), norms)
        return gathered[0], gathered[4]

    def _score(
        self, rows: Sequence[int], spans: Callable[[Sequence[int]], I64], norms: FloatArray
    ) -> _merge.Gathered:
        """One kernel call gathering and scoring ``rows``."""
        return self._run(spans(rows), norms)

    def _run(self, where: I64, norms: FloatArray) -> _merge.Gathered:
        sizes = where[1::4] - where[0::4] + where[3::4] - where[2::4]
        scoring = self._scoring(int(sizes.max(initial=0)), norms)  # a row's df <= its postings
        try:
            return _merge.delta_rows(
                self._base, self._base_to_now, self._delta, self._index.doc_count, where, scoring
            )
        except ValueError:
            raise _damaged() from None

    def _keep(self, rows: Sequence[int], fresh: _merge.Gathered) -> None:
        """Cache copies of the fresh rows worth keeping, dropping the least recently used
        past the budget."""
        bounds = fresh[0].tolist()
        keep = [
            (at, row)
            for at, row in enumerate(rows)
            if DELTA_ROW_CACHE_MIN <= bounds[at + 1] - bounds[at] <= DELTA_ROW_CACHE_POSTINGS // 4
        ]
        if not keep:
            return
        pieces = _split(fresh, [at for at, _ in keep], copy=True)
        with self._lock:
            for (_, row), piece in zip(keep, pieces, strict=True):
                if row in self._rows:
                    continue
                self._rows[row] = piece
                self._cached += int(piece.docs.shape[0])
            while self._cached > DELTA_ROW_CACHE_POSTINGS:
                self._cached -= int(self._rows.popitem(last=False)[1].docs.shape[0])

    def _scoring(self, largest: int, norms: FloatArray) -> _merge.Scoring:
        """The kernel's scoring arguments, with idf tables (``merge.idf_tables``) covering
        document frequencies up to ``largest`` (grown by doubling)."""
        made = self._made
        if made is None or made[0] <= largest or made[1] is not norms:
            size = max(largest + 1, 2 * (made[0] if made else 0), 64)
            index = self._index
            tables = merge.idf_tables(self._bm25f, index.stats, size)
            scoring = _merge.Scoring(index.weights, norms, tables, self._bm25f, index.k1)
            made = self._made = (tables[0].shape[0], norms, scoring)  # racing threads: equal
        return made[2]


def _segment(index: LexicalIndex) -> _merge.Segment:
    """A segment's postings for the merge kernel (TypeError: arrays it does not read)."""
    if index.docs.dtype != np.int32:
        raise TypeError(f"the kernel reads int32 documents, not {index.docs.dtype}")
    return _merge.Segment(
        np.ascontiguousarray(index.docs),
        [(f.start, np.ascontiguousarray(f.counts, dtype=np.uint8)) for f in index.frequencies],
        [
            (
                np.ascontiguousarray(f.overflow_at, dtype=np.int64),
                np.ascontiguousarray(f.overflow_tf, dtype=np.int64),
            )
            for f in index.frequencies
        ],
    )


def _split(
    gathered: _merge.Gathered, which: Sequence[int] | None = None, *, copy: bool = False
) -> list[_Row]:
    """Rows ``which`` (default: all) of the kernel's output, as views or as copies (a
    cached row must not keep the other rows' memory alive)."""
    indptr, docs, counts, overflow, scores = gathered
    bounds = indptr.tolist()
    take = np.array if copy else np.asarray
    out = []
    for r in range(len(bounds) - 1) if which is None else which:
        lo, hi = bounds[r], bounds[r + 1]
        row_overflow = []
        for at, tf in overflow:
            if not at.shape[0]:
                row_overflow.append((_NO_KEYS, _NO_KEYS))
                continue
            a, b = np.searchsorted(at, [lo, hi]).tolist()
            row_overflow.append((at[a:b] - lo, take(tf[a:b])))
        row_counts = [take(c[lo:hi]) for c in counts]
        out.append(_Row(take(docs[lo:hi]), take(scores[lo:hi]), row_counts, row_overflow))
    return out


def _joined(
    pieces: Sequence[_Row], n_fields: int
) -> tuple[I64, I32, FloatArray, list[U8], list[tuple[I64, I64]]]:
    """Rows one after another (none or several): indptr, documents, scores, frequency
    bytes, overflow."""
    indptr = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([piece.docs.shape[0] for piece in pieces], out=indptr[1:])
    starts = indptr.tolist()
    empty = _Row(np.empty(0, np.int32), np.empty(0), [np.empty(0, np.uint8)] * n_fields, [])
    rows = list(pieces) or [empty]
    counts = [np.concatenate([p.counts[f] for p in rows]) for f in range(n_fields)]
    overflow = []
    for f in range(n_fields):
        shifted = [p.overflow[f][0] + lo for p, lo in zip(pieces, starts, strict=False)]
        tfs = [p.overflow[f][1] for p in pieces]
        overflow.append((np.concatenate([_NO_KEYS, *shifted]), np.concatenate([_NO_KEYS, *tfs])))
    docs = np.concatenate([p.docs for p in rows])
    return indptr, docs, np.concatenate([p.scores for p in rows]), counts, overflow
