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

Thread-safe: scratch memory is per thread; the index arrays are only read, and the GIL is
released during the C call.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

__all__ = ["available", "score_of", "score_topk", "unavailable_reason"]

# Must match LIBRARY in hatch_build.py (see there why it is not named _kernel.<suffix>).
_LIBRARY = "_gwkernel" + (
    ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"
)
_ABI_VERSION = 1  # GW_ABI_VERSION in _kernel.c
_CACHE_LIMIT = 64  # arrays whose pointers are remembered: a handful of live indexes and masks

_P, _I64, _F64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
_WIDTHS = {np.dtype(np.int64): 1, np.dtype(np.int32): 0}  # gw_query.wide per docs dtype
_FLOAT64 = np.dtype(np.float64)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Bounds = npt.NDArray[np.integer[Any]] | Sequence[int]
DocArray = npt.NDArray[np.int64] | npt.NDArray[np.int32]


class _Query(ctypes.Structure):
    """``gw_query`` in _kernel.c, field for field."""

    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("lo", _P),
        ("hi", _P),
        ("n_rows", _I64),
        ("docs", _P),
        ("wide", _I64),
        ("scores", _P),
        ("n_postings", _I64),
        ("n_docs", _I64),
        ("acc", _P),
        ("seen", _P),
        ("touched", _P),
        ("excluded", _P),
        ("k", _I64),
        ("out_docs", _P),
        ("out_scores", _P),
    ]


class _Library:
    """The loaded library's entry points."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        version = _function(lib, "gw_abi_version", [], _I64)()
        if version != _ABI_VERSION:
            raise OSError(f"ABI version {version}, expected {_ABI_VERSION}: reinstall groundwire")
        self.topk = _function(lib, "gw_query_topk", [_P], _I64)
        self.score_of = _function(lib, "gw_query_score_of", [_P, _I64], _F64)
        self.lib = lib


def _function(lib: ctypes.CDLL, name: str, args: list[Any], result: Any) -> Callable[..., Any]:
    function = getattr(lib, name)
    function.argtypes = args
    function.restype = result
    return function  # type: ignore[no-any-return]


_lock = threading.Lock()
_library: _Library | None = None
_reason: str | None = "not loaded yet"
_local = threading.local()


def _load() -> _Library | None:
    """Load the library once (thread-safe); None when unavailable, with ``_reason`` set."""
    global _library, _reason
    with _lock:
        if _reason != "not loaded yet":
            return _library
        path = Path(__file__).with_name(_LIBRARY)
        if os.environ.get("GROUNDWIRE_NO_KERNEL") == "1":
            _reason = "disabled by GROUNDWIRE_NO_KERNEL=1"
        elif not path.is_file():
            _reason = f"{path} was not built (no C compiler at install?)"
        else:
            try:
                library = _Library(ctypes.CDLL(str(path)))
            except (OSError, AttributeError) as exc:
                _reason = f"{path} could not be loaded: {exc}"
            else:
                _library, _reason = library, None
        return _library


def available() -> bool:
    """Whether the compiled kernel is loaded (loading it on first call)."""
    return (_library if _reason is None else _load()) is not None


def unavailable_reason() -> str | None:
    """Why the kernel is unavailable (None when it is available)."""
    available()
    return _reason


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
    """One thread's query struct and buffers: accumulators, row bounds, results.

    The struct keeps the buffers' addresses while their capacity suffices and the rows of
    the last call, so a call sets only what changed (a field costs ~0.1 µs, asking numpy
    for an address ~1.5 µs).
    """

    def __init__(self) -> None:
        self.query = _Query()
        self.query_ptr = ctypes.addressof(self.query)
        self.rows: _Rows | None = None
        self.n_docs = self.docs_cap = self.rows_cap = self.out_cap = -1
        self.grow_docs(0)
        self.grow_rows(16)
        self.grow_out(16)

    def use(self, rows: _Rows) -> None:
        q = self.query
        q.docs, q.wide, q.scores = rows.docs_ptr, rows.wide, rows.scores_ptr
        q.n_postings = rows.n_postings
        self.rows = rows

    def grow_docs(self, n_docs: int) -> None:
        self.acc = np.zeros(n_docs, np.float64)
        self.seen = np.zeros(n_docs, np.uint8)
        self.touched = np.empty(n_docs, np.int64)  # distinct documents <= n_docs
        q = self.query
        q.acc, q.seen, q.touched = _address(self.acc), _address(self.seen), _address(self.touched)
        self.docs_cap = n_docs

    def grow_rows(self, n_rows: int) -> None:
        # ctypes arrays take a list of ints fastest (~0.2 µs for 16), numpy views an array.
        self.lo_buffer, self.hi_buffer = (_I64 * n_rows)(), (_I64 * n_rows)()
        self.lo = np.frombuffer(memoryview(self.lo_buffer), np.int64)
        self.hi = np.frombuffer(memoryview(self.hi_buffer), np.int64)
        self.query.lo = ctypes.addressof(self.lo_buffer)
        self.query.hi = ctypes.addressof(self.hi_buffer)
        self.rows_cap = n_rows

    def grow_out(self, k: int) -> None:
        self.out_docs, self.out_scores = np.empty(k, np.int64), np.empty(k, np.float64)
        self.query.out_docs = _address(self.out_docs)
        self.query.out_scores = _address(self.out_scores)
        self.out_cap = k


def _scratch() -> _Scratch:
    scratch: _Scratch | None = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = _Scratch()
    return scratch


def _prepare(lo: Bounds, hi: Bounds, docs: DocArray, scores: FloatArray) -> _Scratch:
    """This thread's struct set up for the rows: bounds copied in (cheaper than pointers)."""
    if _reason is not None and _load() is None:
        raise RuntimeError(f"the groundwire C kernel is unavailable: {unavailable_reason()}")
    rows = _rows_of(docs, scores)
    scratch = _scratch()
    if scratch.rows is not rows:
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
    q = scratch.query
    if n_docs != scratch.n_docs:
        if n_docs < 0:
            raise ValueError(f"n_docs must be >= 0, got {n_docs}")
        if n_docs > scratch.docs_cap:
            scratch.grow_docs(n_docs)
        q.n_docs = scratch.n_docs = n_docs
    k = min(k, n_docs) if k > 0 else 0
    if k > scratch.out_cap:
        scratch.grow_out(max(k, 2 * scratch.out_cap))
    q.k = k
    q.excluded = None if excluded is None else _mask_ptr(excluded, n_docs)
    library = _library
    assert library is not None  # _prepare loaded it
    count: int = library.topk(scratch.query_ptr)
    if count < 0:
        raise ValueError(f"docs holds a document number outside [0, n_docs={n_docs})")
    return scratch.out_docs[:count].copy(), scratch.out_scores[:count].copy()


def score_of(lo: Bounds, hi: Bounds, docs: DocArray, scores: FloatArray, doc: int) -> float:
    """Score of ``doc`` over the summed rows (0.0 when absent), equal to the dense sum."""
    scratch = _prepare(lo, hi, docs, scores)
    library = _library
    assert library is not None
    value: float = library.score_of(scratch.query_ptr, doc)
    return value
