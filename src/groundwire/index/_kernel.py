"""The optional C query kernel (``_kernel.c``), loaded with ctypes when it was compiled.

Sums a query's precomputed BM25 rows and selects the top k in one call, with results
identical to the numpy path (same additions in the same order, same tie-break), which
stays the fallback: :func:`available` is False when no library was built (no compiler at
install), it fails to load, or ``GROUNDWIRE_NO_KERNEL=1`` is set (checked once, on first use).

Rows are given as bounds ``lo[i]:hi[i]`` into ``docs``/``scores`` (the index's CSR arrays,
documents ascending within a row; int64 or int32 documents, float64 scores). The kernel
clamps the bounds into ``[0, len(docs)]`` and rejects a document outside ``[0, n_docs)``,
so bad input raises instead of touching memory it does not own. The addresses of
``docs``, ``scores`` and ``excluded`` are remembered per array object (weakly), so those
arrays must not be resized in place (numpy refuses while anything else references them).

An :class:`Index` (one per LexicalIndex, holding its arrays) also takes rows as term ids
(:func:`top_rows`, :func:`rows_score_of`: the kernel reads their bounds from ``indptr``)
or a query's words as codes (:func:`top_codes`, :func:`resolve`): a term id per word,
:data:`SKIP` for a stop word and :data:`UNKNOWN` for a word whose term is not indexed; the
kernel then also finds the indexed adjacent term pairs, exactly as
``LexicalIndex.query_ids`` does, so a query goes from words to results in one call.
These return Python lists (read straight from ctypes buffers, the cheapest conversion).

Thread-safe: scratch memory is per thread; the index arrays are only read, and the GIL is
released during the C call.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.index._kernel_abi import Library as _Library
from groundwire.index._kernel_abi import Query as _Query
from groundwire.index._native import NativeLibrary

__all__ = [
    "PRUNE_ALWAYS",
    "PRUNE_AUTO",
    "PRUNE_OFF",
    "SKIP",
    "UNKNOWN",
    "BadDocumentError",
    "Index",
    "available",
    "library",
    "resolve",
    "rows_score_of",
    "score_of",
    "score_topk",
    "top_codes",
    "top_rows",
    "unavailable_reason",
]

#: Query word codes (see :func:`top_codes`): a stop word, a word whose term is not indexed.
SKIP = -1
UNKNOWN = -2
#: Pruning of an :class:`Index`'s queries (GW_PRUNE_* in _kernel_pruned.h): never, where
#: it pays, or whenever the query qualifies (a few rows, k <= 1024).
PRUNE_OFF, PRUNE_AUTO, PRUNE_ALWAYS = 0, 1, 2
_BAD_DOC, _BAD_TERM, _NO_ROOM = -1, -2, -3  # GW_BAD_DOC, GW_BAD_TERM, GW_NO_ROOM
_CACHE_LIMIT = 64  # arrays whose pointers are remembered: a handful of live indexes and masks

_I64, _F64 = ctypes.c_int64, ctypes.c_double
_WIDTHS = {np.dtype(np.int64): 1, np.dtype(np.int32): 0}  # gw_query.wide per docs dtype
_FLOAT64 = np.dtype(np.float64)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Bounds = npt.NDArray[np.integer[Any]] | Sequence[int]
DocArray = npt.NDArray[np.int64] | npt.NDArray[np.int32]


# The file name must match LIBRARY in hatch_build.py (see there why it is not _kernel.<suffix>).
_native = NativeLibrary("_gwkernel", _Library)
_local = threading.local()


def _load() -> _Library | None:
    """The loaded library (loading it once, thread-safely); None when unavailable."""
    return _native.get()


def available() -> bool:
    """Whether the compiled kernel is loaded (loading it on first call)."""
    return _native.get() is not None


def library() -> _Library | None:
    """The loaded library's entry points (loading it on first call); None when unavailable."""
    return _native.get()


def unavailable_reason() -> str | None:
    """Why the kernel is unavailable (None when it is available)."""
    return _native.reason


def _address(array: npt.NDArray[Any]) -> int:
    return int(array.ctypes.data)


class _Rows:
    """The checked pointers of one (docs, scores) pair."""

    __slots__ = ("docs", "docs_ptr", "n_postings", "scores", "scores_ptr", "wide")

    def __init__(self, docs: DocArray, scores: FloatArray) -> None:
        wide = _WIDTHS.get(docs.dtype)
        if wide is None or scores.dtype != _FLOAT64:
            raise TypeError(
                "kernel rows need int64 or int32 docs and float64 scores (native byte order), "
                f"got {docs.dtype} and {scores.dtype}"
            )
        if docs.ndim != 1 or scores.shape != docs.shape:
            raise ValueError(f"docs {docs.shape} and scores {scores.shape} must be 1-D, equal")
        if not (docs.flags.c_contiguous and scores.flags.c_contiguous):
            raise ValueError("docs and scores must be C-contiguous")
        self.wide = wide
        self.n_postings = int(docs.shape[0])
        self.docs = weakref.ref(docs)  # weak: the cache must not keep a dropped index alive
        self.scores = weakref.ref(scores)
        self.docs_ptr = _address(docs)
        self.scores_ptr = _address(scores)


class Index:
    """One index's arrays for the entry points taking term ids or word codes, checked once.

    ``indptr`` holds ``n_terms + 1`` native int64 offsets (row ``t`` is
    ``docs/scores[indptr[t]:indptr[t + 1]]``); ``docs``, ``scores`` and ``n_docs`` are as for
    :func:`score_topk`. Term pairs: pair ``p`` is row ``n_single + p``; the pairs whose first
    term is ``a`` have their second terms in ``pair_seconds[pair_starts[a]:pair_starts[a +
    1]]`` (int32, ascending), ``pair_starts`` holding ``n_single + 1`` int64 offsets, or
    none when the index has no pairs. Raises TypeError or ValueError for arrays the kernel
    cannot read.

    Queries over rows given by id or by word codes are pruned (MaxScore over the rows'
    largest scores, ``_kernel_pruned.h``) where it pays (:data:`PRUNE_AUTO`), with results
    identical to the unpruned kernel's: :data:`PRUNE_OFF` never prunes and
    :data:`PRUNE_ALWAYS` prunes every query that qualifies (tests and measurements).

    It holds the arrays, so their addresses stay valid while it lives; a thread's scratch
    remembers it only by a token, so a dropped index is not kept alive.
    """

    __slots__ = (
        "arrays",
        "indptr_ptr",
        "n_docs",
        "n_pairs",
        "n_single",
        "n_terms",
        "pair_seconds_ptr",
        "pair_starts_ptr",
        "prune",
        "row_tops",
        "row_tops_ptr",
        "rows",
        "token",
    )

    def __init__(
        self,
        indptr: npt.NDArray[np.int64],
        docs: DocArray,
        scores: FloatArray,
        n_docs: int,
        n_single: int,
        pair_starts: npt.NDArray[np.int64],
        pair_seconds: npt.NDArray[np.int32],
        *,
        prune: int = PRUNE_AUTO,
    ) -> None:
        self.rows = _Rows(docs, scores)
        _check_vector("indptr", indptr, _INT64)
        if indptr.shape[0] < 1:
            raise ValueError("indptr needs at least one offset")
        n_terms = int(indptr.shape[0]) - 1
        if not 0 <= n_single <= n_terms or n_docs < 0:
            raise ValueError(f"need 0 <= n_single={n_single} <= {n_terms} and n_docs >= 0")
        self.pair_starts_ptr: int | None = None
        self.pair_seconds_ptr: int | None = None
        self.n_pairs = 0
        if pair_starts.shape[0]:
            _check_vector("pair_starts", pair_starts, _INT64)
            _check_vector("pair_seconds", pair_seconds, _INT32)
            if pair_starts.shape[0] != n_single + 1:
                raise ValueError(f"pair_starts needs {n_single + 1} offsets")
            self.pair_starts_ptr = _address(pair_starts)
            self.pair_seconds_ptr = _address(pair_seconds)
            self.n_pairs = int(pair_seconds.shape[0])
        self.arrays = (indptr, docs, scores, pair_starts, pair_seconds)
        self.indptr_ptr = _address(indptr)
        self.n_terms, self.n_single, self.n_docs = n_terms, n_single, n_docs
        # The tops of long rows, filled by the kernel as queries meet them (zeros from
        # calloc: pages are only committed where a remembered row lies).
        self.row_tops = np.zeros(n_terms, np.float32)
        self.row_tops_ptr = _address(self.row_tops)
        if prune not in (PRUNE_OFF, PRUNE_AUTO, PRUNE_ALWAYS):
            raise ValueError(f"prune must be PRUNE_OFF, PRUNE_AUTO or PRUNE_ALWAYS, got {prune!r}")
        self.prune = prune
        self.token = object()


_INT64, _INT32 = np.dtype("=i8"), np.dtype("=i4")


def _check_vector(name: str, array: npt.NDArray[Any], dtype: np.dtype[Any]) -> None:
    if array.dtype != dtype or array.ndim != 1:
        raise TypeError(f"{name} must be a 1-D {dtype} array, got {array.dtype} {array.shape}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")


class _Mask:
    """The pointer of one exclusion mask."""

    __slots__ = ("mask", "ptr")

    def __init__(self, mask: npt.NDArray[Any]) -> None:
        if mask.dtype not in (np.bool_, np.uint8) or mask.ndim != 1:
            raise TypeError(f"excluded must be a 1-D bool array, got {mask.dtype} {mask.shape}")
        if not mask.flags.c_contiguous:
            raise ValueError("excluded must be C-contiguous")
        self.mask = weakref.ref(mask)
        self.ptr = _address(mask)


_rows_cache: dict[tuple[int, int], _Rows] = {}
_mask_cache: dict[int, _Mask] = {}


def _rows_of(docs: DocArray, scores: FloatArray) -> _Rows:
    rows = _rows_cache.get((id(docs), id(scores)))
    if rows is None or rows.docs() is not docs or rows.scores() is not scores:
        rows = _Rows(docs, scores)
        if len(_rows_cache) >= _CACHE_LIMIT:
            _rows_cache.clear()
        _rows_cache[id(docs), id(scores)] = rows
    return rows


def _mask_ptr(mask: npt.NDArray[Any], n_docs: int) -> int:
    entry = _mask_cache.get(id(mask))
    if entry is None or entry.mask() is not mask:
        entry = _Mask(mask)
        if len(_mask_cache) >= _CACHE_LIMIT:
            _mask_cache.clear()
        _mask_cache[id(mask)] = entry
    if mask.shape[0] < n_docs:
        raise ValueError(f"excluded has {mask.shape[0]} entries, expected {n_docs}")
    return entry.ptr


class _Scratch:
    """One thread's query struct and buffers: accumulators, rows, codes, results.

    The struct keeps the buffers' addresses while their capacity suffices and the arrays of
    the last call (``source``: a ``_Rows``, or an ``Index``'s token), so a call sets only
    what changed (a field costs ~0.1 µs, asking numpy for an address ~1.5 µs). Row bounds,
    row ids, codes and results live in ctypes arrays: they take a list of ints fastest and
    their slices are lists; numpy views them where arrays are wanted.
    """

    def __init__(self) -> None:
        self.query = _Query()
        self.query_ptr = ctypes.addressof(self.query)
        self.source: object = None
        self.library: _Library  # set with source to an Index
        self.n_docs = self.docs_cap = self.rows_cap = self.out_cap = -1
        self.k = -1  # the k last asked for, while n_docs stays
        self.grow_docs(0)
        self.grow_rows(32)
        self.grow_out(16)

    def use(self, rows: _Rows) -> None:
        q = self.query
        q.docs, q.wide, q.scores = rows.docs_ptr, rows.wide, rows.scores_ptr
        q.n_postings = rows.n_postings
        self.source = rows

    def use_index(self, index: Index) -> None:
        self.use(index.rows)
        q = self.query
        q.indptr, q.n_terms = index.indptr_ptr, index.n_terms
        q.pair_starts, q.pair_seconds = index.pair_starts_ptr, index.pair_seconds_ptr
        q.n_single, q.n_pairs = index.n_single, index.n_pairs
        q.row_tops, q.prune = index.row_tops_ptr, index.prune
        self.set_docs(index.n_docs)
        self.source = index.token

    def set_docs(self, n_docs: int) -> None:
        if n_docs != self.n_docs:
            if n_docs < 0:
                raise ValueError(f"n_docs must be >= 0, got {n_docs}")
            if n_docs > self.docs_cap:
                self.grow_docs(n_docs)
            self.query.n_docs = self.n_docs = n_docs
            self.k = -1

    def set_k(self, k: int) -> None:
        self.k = k
        k = min(k, self.n_docs) if k > 0 else 0
        if k > self.out_cap:
            self.grow_out(max(k, 2 * self.out_cap))
        self.query.k = k

    def grow_docs(self, n_docs: int) -> None:
        self.acc = np.zeros(n_docs, np.float64)
        self.seen = np.zeros(n_docs, np.uint8)
        # Candidates (distinct documents, <= n_docs), then the dense scan's block list.
        self.touched = np.empty(n_docs + n_docs // 8 + 1, np.int64)
        q = self.query
        q.acc, q.seen, q.touched = _address(self.acc), _address(self.seen), _address(self.touched)
        self.docs_cap = n_docs

    def grow_rows(self, n_rows: int) -> None:
        # Bounds (lo/hi, also the kernel's scratch for rows given by id), row ids, codes.
        self.lo_buffer, self.hi_buffer = (_I64 * n_rows)(), (_I64 * n_rows)()
        self.rows_buffer, self.codes_buffer = (_I64 * n_rows)(), (_I64 * n_rows)()
        self.lo = np.frombuffer(memoryview(self.lo_buffer), np.int64)
        self.hi = np.frombuffer(memoryview(self.hi_buffer), np.int64)
        q = self.query
        q.lo = q.row_lo = ctypes.addressof(self.lo_buffer)
        q.hi = q.row_hi = ctypes.addressof(self.hi_buffer)
        q.rows = ctypes.addressof(self.rows_buffer)
        q.codes = ctypes.addressof(self.codes_buffer)
        q.capacity = self.rows_cap = n_rows

    def grow_out(self, k: int) -> None:
        self.docs_out, self.scores_out = (_I64 * k)(), (_F64 * k)()
        self.out_docs = np.frombuffer(memoryview(self.docs_out), np.int64)
        self.out_scores = np.frombuffer(memoryview(self.scores_out), np.float64)
        self.query.out_docs = ctypes.addressof(self.docs_out)
        self.query.out_scores = ctypes.addressof(self.scores_out)
        self.out_cap = k


def _scratch() -> _Scratch:
    try:
        scratch: _Scratch = _local.scratch
    except AttributeError:
        scratch = _local.scratch = _Scratch()
    return scratch


def _loaded() -> _Library:
    library = _native.get()
    if library is None:
        raise RuntimeError(f"the groundwire C kernel is unavailable: {unavailable_reason()}")
    return library


def _prepare(lo: Bounds, hi: Bounds, docs: DocArray, scores: FloatArray) -> _Scratch:
    """This thread's struct set up for the rows: bounds copied in (cheaper than pointers)."""
    _loaded()
    rows = _rows_of(docs, scores)
    scratch = _scratch()
    if scratch.source is not rows:
        scratch.use(rows)
    n = len(lo)
    if len(hi) != n:
        raise ValueError(f"lo has {n} row bounds but hi has {len(hi)}")
    if n > scratch.rows_cap:
        scratch.grow_rows(max(n, 2 * scratch.rows_cap))
    if isinstance(lo, list) and isinstance(hi, list):
        scratch.lo_buffer[:n] = lo
        scratch.hi_buffer[:n] = hi
    else:
        scratch.lo[:n] = lo
        scratch.hi[:n] = hi
    scratch.query.n_rows = n
    return scratch


def score_topk(
    lo: Bounds,
    hi: Bounds,
    docs: DocArray,
    scores: FloatArray,
    n_docs: int,
    k: int,
    excluded: npt.NDArray[np.bool_] | None = None,
) -> tuple[IntArray, FloatArray]:
    """The k best documents over the summed rows ``lo[i]:hi[i]``, as ``(docs, scores)``.

    Only positive sums count; documents with ``excluded[doc]`` set are skipped. Ordered by
    score descending, ties by document ascending; fewer than k when fewer matched. The
    sums equal ``np.bincount`` over the concatenated rows bit for bit. Bounds are clamped
    into ``[0, len(docs)]``. Raises ValueError when ``docs`` holds a document outside
    ``[0, n_docs)``, RuntimeError when the kernel is unavailable (see :func:`available`).
    """
    scratch = _prepare(lo, hi, docs, scores)
    scratch.set_docs(n_docs)
    if k != scratch.k:
        scratch.set_k(k)
    q = scratch.query
    q.excluded = None if excluded is None else _mask_ptr(excluded, n_docs)
    count = _loaded().topk(scratch.query_ptr)
    _check(count, n_docs)
    return scratch.out_docs[:count].copy(), scratch.out_scores[:count].copy()


def score_of(lo: Bounds, hi: Bounds, docs: DocArray, scores: FloatArray, doc: int) -> float:
    """Score of ``doc`` over the summed rows (0.0 when absent), equal to the dense sum."""
    scratch = _prepare(lo, hi, docs, scores)
    value: float = _loaded().score_of(scratch.query_ptr, doc)
    return value


class BadDocumentError(ValueError):
    """The rows hold a document number outside ``[0, n_docs)``: the arrays are damaged."""


def _check(status: int, n_docs: int) -> None:
    """Raise for a kernel call's negative status."""
    if status >= 0:
        return
    if status == _BAD_DOC:
        raise BadDocumentError(f"docs holds a document number outside [0, n_docs={n_docs})")
    if status == _BAD_TERM:
        raise ValueError("a term id or word code is outside the index's terms")
    raise RuntimeError(f"the kernel's row buffers are too small (status {status})")


def _indexed(index: Index) -> _Scratch:
    """This thread's struct set up for ``index`` (the library loaded)."""
    scratch = _scratch()
    if scratch.source is not index.token:
        scratch.library = _loaded()
        scratch.use_index(index)
    return scratch


def top_codes(
    index: Index, codes: Sequence[int], k: int, excluded: npt.NDArray[np.bool_] | None = None
) -> tuple[list[int], list[float]]:
    """The k best documents for a query's word codes (see the module docstring), as lists.

    The rows are the codes' terms and the indexed adjacent pairs among them, as
    :func:`resolve` finds them; the rest is :func:`score_topk` over those rows. Raises
    ValueError for a code at or above ``index.n_single`` or a bad document.
    """
    # The hot path of every search: each line here costs a measurable share of it.
    scratch = _indexed(index)
    n = len(codes)
    if 2 * n > scratch.rows_cap:
        scratch.grow_rows(max(2 * n, 2 * scratch.rows_cap))
    scratch.codes_buffer[:n] = codes if isinstance(codes, list) else list(codes)
    q = scratch.query
    q.n_codes = n
    if k != scratch.k:
        scratch.set_k(k)
    q.excluded = None if excluded is None else _mask_ptr(excluded, index.n_docs)
    count: int = scratch.library.codes_topk(scratch.query_ptr)
    if count < 0:
        _check(count, index.n_docs)
    return scratch.docs_out[:count], scratch.scores_out[:count]


def top_rows(
    index: Index, rows: Sequence[int], k: int, excluded: npt.NDArray[np.bool_] | None = None
) -> tuple[list[int], list[float]]:
    """:func:`score_topk` over rows given by term id (a repeated id counts each time), as
    lists. Raises ValueError for an id outside ``[0, index.n_terms)`` or a bad document."""
    library = _loaded()
    scratch = _set_rows(_indexed(index), rows)
    if k != scratch.k:
        scratch.set_k(k)
    scratch.query.excluded = None if excluded is None else _mask_ptr(excluded, index.n_docs)
    count: int = library.rows_topk(scratch.query_ptr)
    _check(count, index.n_docs)
    return scratch.docs_out[:count], scratch.scores_out[:count]


def rows_score_of(index: Index, rows: Sequence[int], doc: int) -> float:
    """:func:`score_of` over rows given by term id."""
    library = _loaded()
    scratch = _set_rows(_indexed(index), rows)
    value = ctypes.c_double()
    _check(library.rows_score_of(scratch.query_ptr, doc, ctypes.byref(value)), index.n_docs)
    return value.value


def rows_scores(index: Index, rows: Sequence[int], docs: npt.NDArray[np.int64]) -> FloatArray:
    """:func:`rows_score_of` of each of ``docs`` (int64, C-contiguous, each within the
    index), in one call when the library has it."""
    library = _loaded()
    out = np.empty(docs.shape[0], dtype=np.float64)
    if library.rows_scores is None:  # a library built before gw_query_rows_scores
        out[:] = [rows_score_of(index, rows, doc) for doc in docs.tolist()]
        return out
    scratch = _set_rows(_indexed(index), rows)
    status = library.rows_scores(scratch.query_ptr, _address(docs), docs.shape[0], _address(out))
    _check(status, index.n_docs)
    return out


def resolve(index: Index, codes: Sequence[int]) -> list[int]:
    """The rows of a query's word codes: the term of every code >= 0 in order, then every
    indexed pair of adjacent codes >= 0 (with :data:`SKIP` codes left out, an
    :data:`UNKNOWN` one breaking the pair) in order, as ``LexicalIndex.query_ids`` does."""
    library = _loaded()
    scratch = _indexed(index)
    n = len(codes)
    if 2 * n > scratch.rows_cap:
        scratch.grow_rows(max(2 * n, 2 * scratch.rows_cap))
    scratch.codes_buffer[:n] = codes if isinstance(codes, list) else list(codes)
    scratch.query.n_codes = n
    count: int = library.resolve(scratch.query_ptr)
    _check(count, index.n_docs)
    return scratch.rows_buffer[:count]


def _set_rows(scratch: _Scratch, rows: Sequence[int]) -> _Scratch:
    n = len(rows)
    if n > scratch.rows_cap:
        scratch.grow_rows(max(n, 2 * scratch.rows_cap))
    scratch.rows_buffer[:n] = rows if isinstance(rows, list) else list(rows)
    scratch.query.n_rows = n
    return scratch
