"""ctypes binding of the optional merge kernel (``_merge.c``, built by ``hatch_build.py``).

:func:`merge_rows` and :func:`score_rows` are the linear passes of an update (and of a
batched build): renumber and merge postings, score every posting (counting each row's
document frequencies on the way). :func:`delta_rows` gathers, merges and scores a delta
index's query rows in one pass. Without the compiled library (no C compiler at
install, ``GROUNDWIRE_NO_KERNEL=1``) :func:`available` is False and ``index/merge.py``
uses its numpy path, whose results are identical (tested).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from groundwire.index._native import NativeLibrary

__all__ = ["Bytes", "Scoring", "Segment", "available", "delta_rows", "merge_rows", "score_rows"]

_ABI_VERSION = 3  # GW_MERGE_ABI in _merge.c
_P, _I64, _F64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]
_OVERFLOW_GUESS = 64  # overflowing frequencies per field room is first made for (then all)


class _Bytes(ctypes.Structure):
    """``gw_bytes`` in _merge.c."""

    _fields_: ClassVar[list[tuple[str, Any]]] = [("counts", _P), ("start", _I64), ("len", _I64)]


#: One field's frequency bytes: ``counts[p - start]`` for postings ``start..start+len``.
Bytes = tuple[int, U8]


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.gw_merge_abi_version.restype = _I64
    if (version := lib.gw_merge_abi_version()) != _ABI_VERSION:
        raise OSError(f"ABI version {version}, expected {_ABI_VERSION}: reinstall")
    lib.gw_merge_rows.argtypes = [_I64, _P, _P, _P, _P, _I64, _I64, _P, _P, _P, _P]
    lib.gw_merge_rows.argtypes += [_I64, _P, _P, _P, _P, _I64, _I64, _P, _P, _P]
    lib.gw_merge_rows.restype = _I64
    lib.gw_score_rows.argtypes = [_I64, _I64, _I64, _P, _P, _I64, _I64, _P, _P, _P, _P]
    lib.gw_score_rows.argtypes += [_P, _P, _P, _P, _I64, _F64, _P]
    lib.gw_score_rows.restype = _I64
    lib.gw_delta_rows.argtypes = [_P, _P, _I64, _P, _I64, _I64, _I64, _P, _P, _P, _P, _P]
    lib.gw_delta_rows.argtypes += [_I64, _F64, _I64, _P, _P, _P, _I64, _P, _P, _P, _P]
    lib.gw_delta_rows.restype = _I64
    return lib


# The file name must match MERGE_LIBRARY in hatch_build.py.
_native = NativeLibrary("_gwmerge", _bind)


def available() -> bool:
    """Whether the compiled merge kernel is loaded (loading it on first call)."""
    return _native.get() is not None


def _ptr(array: npt.NDArray[Any]) -> int:
    if not array.flags.c_contiguous:
        raise ValueError("kernel arrays must be C-contiguous")
    return int(array.__array_interface__["data"][0])


def _bytes(fields: Sequence[Bytes]) -> Any:
    table = (_Bytes * max(len(fields), 1))()
    for slot, (start, counts) in zip(table, fields, strict=False):
        slot.counts, slot.start, slot.len = _ptr(counts), start, int(counts.shape[0])
    return table


def _pointers(arrays: Sequence[npt.NDArray[Any]]) -> Any:
    return (_P * max(len(arrays), 1))(*[_ptr(a) for a in arrays])


def _lib() -> ctypes.CDLL:
    lib = _native.get()
    if lib is None:
        raise RuntimeError(f"the merge kernel is unavailable: {_native.reason}")
    return lib


def merge_rows(
    old_indptr: I64,
    old_docs: I32,
    row_map: I64,
    doc_map: I32,
    old_counts: Sequence[Bytes],
    old_overflow: Sequence[I64],
    new_rows: I64,
    new_docs: I32,
    new_tf: Sequence[I64],
    n_rows: int,
) -> tuple[I64, I32, list[U8], list[I64], I64]:
    """The merged rows (see ``gw_merge_rows``): indptr, docs, one full-length frequency
    byte array per field, each field's old overflow positions moved (-1: dropped), and
    each new posting's position. Raises ValueError for damaged input."""
    capacity = int(old_docs.shape[0]) + int(new_rows.shape[0])
    indptr = np.empty(n_rows + 1, dtype=np.int64)
    docs = np.empty(capacity, dtype=np.int32)
    counts = [np.zeros(capacity, dtype=np.uint8) for _ in old_counts]
    moved = [np.empty(a.shape[0], dtype=np.int64) for a in old_overflow]
    new_out = np.empty(new_rows.shape[0], dtype=np.int64)
    n_ovf = np.array([a.shape[0] for a in old_overflow], dtype=np.int64)
    written = _lib().gw_merge_rows(
        old_indptr.shape[0] - 1,
        _ptr(old_indptr),
        _ptr(old_docs),
        _ptr(row_map),
        _ptr(doc_map),
        doc_map.shape[0],
        len(old_counts),
        _bytes(old_counts),
        _pointers(old_overflow),
        _ptr(n_ovf),
        _pointers(moved),
        new_rows.shape[0],
        _ptr(new_rows),
        _ptr(new_docs),
        _pointers(new_tf),
        _ptr(new_out),
        n_rows,
        capacity,
        _ptr(indptr),
        _ptr(docs),
        _pointers(counts),
    )
    if written < 0:
        raise ValueError("the index rows to merge are inconsistent (damaged input)")
    return indptr, docs[:written], [c[:written] for c in counts], moved, new_out


class Scoring:
    """The scoring arguments shared by ``gw_score_rows`` and ``gw_delta_rows``: field
    weights, ``[docs, fields]`` norms, idf tables and their lengths, the mode and k1."""

    __slots__ = ("_keep", "arguments")

    def __init__(
        self,
        weights: npt.NDArray[np.float64],
        norms: npt.NDArray[np.float64],
        idf: Sequence[npt.NDArray[np.float64]],
        bm25f: bool,
        k1: float,
    ) -> None:
        tables, lengths = _pointers(idf), np.array([t.shape[0] for t in idf], dtype=np.int64)
        self._keep = (weights, norms, list(idf), tables, lengths)
        self.arguments = (_ptr(weights), _ptr(norms), tables, _ptr(lengths), int(bm25f), k1)


def score_rows(
    indptr: I64,
    docs: I32,
    counts: Sequence[Bytes],
    overflow: Sequence[tuple[I64, I64]],
    weights: npt.NDArray[np.float64],
    norms: npt.NDArray[np.float64],
    idf: Sequence[npt.NDArray[np.float64]],
    bm25f: bool,
    k1: float,
    threads: int = 1,
) -> npt.NDArray[np.float64]:
    """Every posting's score (see ``gw_score_rows``); ``norms`` is ``[docs, fields]``,
    ``idf`` the idf of each document frequency ``0..len - 1``: one table (bm25f) or one
    per field. With ``threads`` > 1 the rows are cut into that many runs of about equal
    postings, scored at once (ctypes releases the GIL during each call)."""
    scores = np.empty(docs.shape[0], dtype=np.float64)
    n_rows = indptr.shape[0] - 1
    n_ovf = np.array([at.shape[0] for at, _ in overflow], dtype=np.int64)
    tables = (_bytes(counts), _pointers([at for at, _ in overflow]))
    tfs = _pointers([tf for _, tf in overflow])
    scoring = Scoring(weights, norms, idf, bm25f, k1)
    lib = _lib()

    def run(bounds: tuple[int, int]) -> int:
        return int(
            lib.gw_score_rows(
                n_rows,
                bounds[0],
                bounds[1],
                _ptr(indptr),
                _ptr(docs),
                norms.shape[0],
                len(counts),
                tables[0],
                tables[1],
                tfs,
                _ptr(n_ovf),
                *scoring.arguments,
                _ptr(scores),
            )
        )

    cuts = np.searchsorted(indptr, np.linspace(0, docs.shape[0], threads + 1)[1:-1])
    edges = [0, *np.minimum(cuts, n_rows).tolist(), n_rows]
    runs = list(pairwise(edges))
    if len(runs) == 1:
        failed = [run(runs[0])]
    else:
        with ThreadPoolExecutor(len(runs)) as pool:
            failed = list(pool.map(run, runs))
    if any(failed):
        raise ValueError("a posting's document or frequency is out of range (damaged input)")
    return scores


class _Segment(ctypes.Structure):
    """``gw_segment`` in _merge.c."""

    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("docs", _P),
        ("n_postings", _I64),
        ("counts", _P),
        ("ovf_at", _P),
        ("ovf_tf", _P),
        ("n_ovf", _P),
    ]


class Segment:
    """One segment's postings as ``gw_delta_rows`` reads them (made once per segment: it
    keeps the arrays it points to alive)."""

    __slots__ = ("_keep", "n_fields", "struct")

    def __init__(self, docs: I32, counts: Sequence[Bytes], overflow: Sequence[tuple[I64, I64]]):
        if docs.dtype != np.int32 or len(counts) != len(overflow):
            raise TypeError("a segment needs int32 documents and one overflow table per field")
        n_ovf = np.array([at.shape[0] for at, _ in overflow], dtype=np.int64)
        parts = (
            _bytes(counts),
            _pointers([at for at, _ in overflow]),
            _pointers([tf for _, tf in overflow]),
        )
        self._keep = (docs, list(counts), list(overflow), n_ovf, parts)
        self.struct = _Segment(
            _ptr(docs),
            docs.shape[0],
            ctypes.addressof(parts[0]),
            ctypes.addressof(parts[1]),
            ctypes.addressof(parts[2]),
            _ptr(n_ovf),
        )
        self.n_fields = len(counts)


#: ``delta_rows``' output: indptr, docs, per field the frequency bytes and the overflowing
#: frequencies (positions, values), and the scores.
Gathered = tuple[I64, I32, list[U8], list[tuple[I64, I64]], npt.NDArray[np.float64]]


def delta_rows(
    base: Segment, base_to_now: I32, delta: Segment, n_docs: int, spans: I64, scoring: Scoring
) -> Gathered:
    """A delta index's query rows gathered, merged and scored (see ``gw_delta_rows``):
    ``spans`` holds per row its base postings ``lo, hi`` and its delta postings ``lo, hi``.
    Raises ValueError for damaged input."""
    n_rows, n_fields = spans.shape[0] // 4, base.n_fields
    capacity = int(spans[1::4].sum() - spans[0::4].sum() + spans[3::4].sum() - spans[2::4].sum())
    ovf_capacity = _OVERFLOW_GUESS
    lib = _lib()
    indptr = np.empty(n_rows + 1, dtype=np.int64)
    docs = np.empty(capacity, dtype=np.int32)
    counts = np.empty((n_fields, capacity), dtype=np.uint8)
    scores = np.empty(capacity, dtype=np.float64)
    n_ovf = np.empty(n_fields, dtype=np.int64)
    while True:
        ovf = np.empty((2, n_fields, ovf_capacity), dtype=np.int64)
        written = lib.gw_delta_rows(
            ctypes.byref(base.struct),
            _ptr(base_to_now),
            base_to_now.shape[0],
            ctypes.byref(delta.struct),
            n_docs,
            n_fields,
            n_rows,
            _ptr(spans),
            *scoring.arguments,
            capacity,
            _ptr(indptr),
            _ptr(docs),
            _row_pointers(counts),
            ovf_capacity,
            _row_pointers(ovf[0]),
            _row_pointers(ovf[1]),
            _ptr(n_ovf),
            _ptr(scores),
        )
        if written != -2 or ovf_capacity >= capacity:
            break
        ovf_capacity = capacity  # every posting overflowing: the bound
    if written < 0:
        raise ValueError("the delta index's rows are inconsistent (damaged input)")
    overflow = [(ovf[0, f, : n_ovf[f]], ovf[1, f, : n_ovf[f]]) for f in range(n_fields)]
    return indptr, docs[:written], [c[:written] for c in counts], overflow, scores[:written]


def _row_pointers(table: npt.NDArray[Any]) -> Any:
    """The address of each row of a C-contiguous 2-D array."""
    start, stride = _ptr(table), table.strides[0]
    return (_P * max(table.shape[0], 1))(*[start + r * stride for r in range(table.shape[0])])
