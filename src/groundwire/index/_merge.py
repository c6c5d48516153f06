"""ctypes binding of the optional merge kernel (``_merge.c``, built by ``hatch_build.py``).

:func:`merge_rows`, :func:`row_df` and :func:`score_rows` are the linear passes of an
update (and of a batched build): renumber and merge postings, count document
frequencies, score every posting. Without the compiled library (no C compiler at
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

__all__ = ["Bytes", "available", "merge_rows", "row_df", "score_rows"]

_ABI_VERSION = 2  # GW_MERGE_ABI in _merge.c
_P, _I64, _F64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]


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
    lib.gw_row_df.argtypes = [_I64, _P, _I64, _P, _P]
    lib.gw_row_df.restype = None
    lib.gw_score_rows.argtypes = [_I64, _I64, _I64, _P, _P, _I64, _I64, _P, _P, _P, _P]
    lib.gw_score_rows.argtypes += [_P, _P, _P, _I64, _F64, _P]
    lib.gw_score_rows.restype = _I64
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


def row_df(indptr: I64, counts: Sequence[Bytes]) -> I64:
    """Per field and row, the postings whose frequency is not 0 (``[fields, rows]``)."""
    n_rows = indptr.shape[0] - 1
    out = np.empty((len(counts), n_rows), dtype=np.int64)
    _lib().gw_row_df(n_rows, _ptr(indptr), len(counts), _bytes(counts), _ptr(out))
    return out


def score_rows(
    indptr: I64,
    docs: I32,
    counts: Sequence[Bytes],
    overflow: Sequence[tuple[I64, I64]],
    weights: npt.NDArray[np.float64],
    norms: npt.NDArray[np.float64],
    idf: npt.NDArray[np.float64],
    bm25f: bool,
    k1: float,
    threads: int = 1,
) -> npt.NDArray[np.float64]:
    """Every posting's score (see ``gw_score_rows``); ``norms`` is ``[docs, fields]``,
    ``idf`` per row (bm25f) or ``[fields, rows]``. With ``threads`` > 1 the rows are
    cut into that many runs of about equal postings, scored at once (ctypes releases
    the GIL during each call)."""
    scores = np.empty(docs.shape[0], dtype=np.float64)
    n_rows = indptr.shape[0] - 1
    n_ovf = np.array([at.shape[0] for at, _ in overflow], dtype=np.int64)
    tables = (_bytes(counts), _pointers([at for at, _ in overflow]))
    tfs = _pointers([tf for _, tf in overflow])
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
                _ptr(weights),
                _ptr(norms),
                _ptr(idf),
                1 if bm25f else 0,
                k1,
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
        raise ValueError("a posting's document is out of range (damaged input)")
    return scores
