"""ctypes binding of the optional bulk-build kernel (``_bulk.c``, built by ``hatch_build.py``).

:func:`doc_postings` turns a batch of analyzed documents into their postings in document
order; :func:`bucket_scatter` sorts postings by row without comparing (a stable counting
sort). Without the compiled library (no C compiler at install, ``GROUNDWIRE_NO_KERNEL=1``)
:func:`available` is False and the build takes the numpy builder (``lexical_builder.py``),
whose results are identical (tested).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from groundwire.index._native import NativeLibrary

__all__ = ["DocPostings", "WordTable", "available", "bucket_scatter", "doc_postings"]

_ABI_VERSION = 1  # GW_BULK_ABI in _bulk.c
_P, _I64 = ctypes.c_void_p, ctypes.c_int64

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.gw_bulk_abi_version.restype = _I64
    if (version := lib.gw_bulk_abi_version()) != _ABI_VERSION:
        raise OSError(f"ABI version {version}, expected {_ABI_VERSION}: reinstall")
    lib.gw_doc_postings.argtypes = [_I64, _I64, _P, _P, _P, _P, _I64, _I64, _I64, _P]
    lib.gw_doc_postings.argtypes += [_P, _P, _P, _P, _P, _P, _P, _P, _P, _I64, _P, _P, _P, _P]
    lib.gw_doc_postings.restype = _I64
    lib.gw_bucket_scatter.argtypes = [_I64, _P, _P, _I64, _P, _P, _P, _P, _I64, _P, _P, _P]
    lib.gw_bucket_scatter.argtypes += [_P, _I64, _P, _P]
    lib.gw_bucket_scatter.restype = _I64
    lib.gw_word_numbers.argtypes = [_P, _I64, _I64, _P, _P, _P, _I64, _P, _P]
    lib.gw_word_numbers.restype = _I64
    lib.gw_word_rehash.argtypes = [_P]
    lib.gw_word_rehash.restype = None
    return lib


# The file name must match BULK_LIBRARY in hatch_build.py.
_native = NativeLibrary("_gwbulk", _bind)


def available() -> bool:
    """Whether the compiled bulk-build kernel is loaded (loading it on first call)."""
    return _native.get() is not None


def _lib() -> ctypes.CDLL:
    lib = _native.get()
    if lib is None:
        raise RuntimeError(f"the bulk-build kernel is unavailable: {_native.reason}")
    return lib


def _ptr(array: npt.NDArray[Any]) -> int:
    if not array.flags.c_contiguous:
        raise ValueError("kernel arrays must be C-contiguous")
    return int(array.__array_interface__["data"][0])


class _Words(ctypes.Structure):
    """``gw_words`` in _bulk.c."""

    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("n_slots", _I64),
        ("slots", _P),
        ("n_words", _I64),
        ("word_cap", _I64),
        ("word_off", _P),
        ("word_len", _P),
        ("word_hash", _P),
        ("arena_len", _I64),
        ("arena_cap", _I64),
        ("arena", _P),
    ]


class WordTable:
    """Distinct words (as UTF-8 bytes) → their numbers in order of first sight, and each
    word's term id (:meth:`set_terms`), across a whole build (``gw_word_numbers``)."""

    def __init__(self) -> None:
        self._slots = np.zeros(1 << 16, dtype=np.int32)
        self._off = np.empty(1 << 14, dtype=np.int64)
        self._len = np.empty(1 << 14, dtype=np.int32)
        self._hash = np.empty(1 << 14, dtype=np.uint64)
        self._arena = np.empty(1 << 17, dtype=np.uint8)
        self._terms = np.empty(0, dtype=np.int32)
        self._table = _Words()
        self._point()

    def _point(self) -> None:
        t = self._table
        t.n_slots, t.slots = self._slots.shape[0], _ptr(self._slots)
        t.word_cap, t.word_off = self._off.shape[0], _ptr(self._off)
        t.word_len, t.word_hash = _ptr(self._len), _ptr(self._hash)
        t.arena_cap, t.arena = self._arena.shape[0], _ptr(self._arena)

    def __len__(self) -> int:
        return int(self._table.n_words)

    def numbers(self, buf: bytes, ends: Sequence[int]) -> tuple[I32, I64]:
        """Each word's number (words separated by spaces) and the words per segment
        (segment ``i`` ends at ``ends[i]``); new words are added."""
        seg_end = np.array(ends, dtype=np.int64)
        seg_words = np.zeros(seg_end.shape[0], dtype=np.int64)
        out = np.empty(len(buf) // 2 + 1, dtype=np.int32)  # a word and its space: 2 bytes
        state = np.zeros(3, dtype=np.int64)
        lib, table = _lib(), ctypes.byref(self._table)
        while True:
            status = lib.gw_word_numbers(
                buf, len(buf), seg_end.shape[0], _ptr(seg_end), table, _ptr(out),
                out.shape[0], _ptr(seg_words), _ptr(state),
            )  # fmt: skip
            if status == 0:
                return out[: int(state[2])], seg_words
            if status != 1:
                raise ValueError("words and segment ends disagree (inconsistent build input)")
            self._grow(len(buf))

    def _grow(self, room: int) -> None:
        """Make room for ``room`` more bytes of words (one call's worth at most)."""
        t = self._table
        if t.n_words >= t.word_cap:
            cap = 2 * self._off.shape[0]
            self._off = np.resize(self._off, cap)
            self._len = np.resize(self._len, cap)
            self._hash = np.resize(self._hash, cap)
        if t.arena_len + room > t.arena_cap:
            self._arena = np.resize(self._arena, t.arena_len + room + self._arena.shape[0])
        grow_slots = 2 * (t.n_words + 1) > t.n_slots
        if grow_slots:
            self._slots = np.zeros(2 * self._slots.shape[0], dtype=np.int32)
        self._point()
        if grow_slots:
            _lib().gw_word_rehash(ctypes.byref(t))

    def words(self, start: int) -> list[str]:
        """The words numbered ``start`` and after, decoded."""
        if start >= len(self):
            return []
        base = int(self._off[start])
        arena = self._arena[base : self._table.arena_len].tobytes()
        offs = (self._off[start : len(self)] - base).tolist()
        lens = self._len[start : len(self)].tolist()
        return [arena[o : o + n].decode() for o, n in zip(offs, lens, strict=True)]

    def set_terms(self, start: int, terms: Sequence[int]) -> None:
        """The term ids (-1: dropped) of the words numbered ``start`` and after."""
        self._terms = np.concatenate([self._terms[:start], np.array(terms, dtype=np.int32)]).astype(
            np.int32
        )

    def terms_of(self, numbers: I32) -> I32:
        """The term id of each word number."""
        return self._terms[numbers]


def _pointers(arrays: Sequence[npt.NDArray[Any]]) -> Any:
    return (_P * max(len(arrays), 1))(*[_ptr(a) for a in arrays])


@dataclass(slots=True)
class DocPostings:
    """One batch's postings in document order (see ``gw_doc_postings``); a consumer may
    drop columns it has used."""

    lengths: I32  # [fields (+ the pair field), documents]
    terms: I32  # single postings: the term
    counts: list[U8]  # single postings: one frequency byte per text field
    per_doc: I32  # single postings per document
    firsts: I32  # pair postings: the first and second term
    seconds: I32
    pair_counts: U8
    pair_per_doc: I32
    overflow: tuple[I64, npt.NDArray[np.int32], I64]  # position, field (n: pair), frequency


def doc_postings(
    ids: I32,
    seg_len: I64,
    weighted: Sequence[bool],
    pair_sources: Sequence[bool],
    with_pairs: bool,
    n_terms: int,
) -> DocPostings:
    """The postings of documents whose term ids are ``ids`` (document-major, fields in
    order; -1 a dropped word), ``seg_len[doc, field]`` of them per field."""
    n_docs, n_fields = seg_len.shape
    cap = int(ids.shape[0])
    lengths = np.empty((n_fields + with_pairs, n_docs), dtype=np.int32)
    terms = np.empty(cap, dtype=np.int32)
    counts = np.zeros((n_fields, cap), dtype=np.uint8)
    per_doc = np.empty(n_docs, dtype=np.int32)
    firsts, seconds = np.empty(cap, dtype=np.int32), np.empty(cap, dtype=np.int32)
    pair_counts = np.empty(cap, dtype=np.uint8)
    pair_per_doc = np.empty(n_docs, dtype=np.int32)
    ovf_cap = 2 * (cap // 255) + 2  # a frequency of 255 takes 255 words (of a field or pairs)
    ovf_pos, ovf_tf = np.empty(ovf_cap, dtype=np.int64), np.empty(ovf_cap, dtype=np.int64)
    ovf_field = np.empty(ovf_cap, dtype=np.int32)
    sizes = np.zeros(3, dtype=np.int64)  # single postings, pair postings, overflows
    # Named, so that they live until the call returns.
    seg = np.ascontiguousarray(seg_len, dtype=np.int64)
    weighted_u8 = np.array(weighted, dtype=np.uint8)
    sources_u8 = np.array(pair_sources, dtype=np.uint8)
    status = _lib().gw_doc_postings(
        n_docs,
        n_fields,
        _ptr(ids),
        _ptr(seg),
        _ptr(weighted_u8),
        _ptr(sources_u8),
        int(with_pairs),
        n_terms,
        cap,
        _ptr(lengths),
        _ptr(terms),
        _ptr(counts),
        _ptr(per_doc),
        _ptr(sizes[0:]),
        _ptr(firsts),
        _ptr(seconds),
        _ptr(pair_counts),
        _ptr(pair_per_doc),
        _ptr(sizes[1:]),
        ovf_cap,
        _ptr(ovf_pos),
        _ptr(ovf_field),
        _ptr(ovf_tf),
        _ptr(sizes[2:]),
    )
    if status == -2:
        raise MemoryError("the bulk-build kernel ran out of memory")
    if status != 0:
        raise ValueError("a term id is out of range (inconsistent build input)")
    n_s, n_p, n_o = (int(x) for x in sizes)
    # Copies, so the batch keeps only what it holds (not the capacity).
    return DocPostings(
        lengths,
        terms[:n_s].copy(),
        [counts[f, :n_s].copy() for f in range(n_fields)],
        per_doc,
        firsts[:n_p].copy(),
        seconds[:n_p].copy(),
        pair_counts[:n_p].copy(),
        pair_per_doc,
        (ovf_pos[:n_o].copy(), ovf_field[:n_o].copy(), ovf_tf[:n_o].copy()),
    )


def bucket_scatter(
    keys: Sequence[I32],
    n_keys: int,
    payload: Sequence[Sequence[npt.NDArray[Any]]],
    *,
    per_doc: Sequence[I32] | None = None,
    watch: I64 | None = None,
    docs_out: I32 | None = None,
    out: Sequence[npt.NDArray[Any] | None] = (),
) -> tuple[I64, I32 | None, list[npt.NDArray[Any]], I64]:
    """Stably sort the concatenation of chunks (``keys[c]``, payload columns
    ``payload[p][c]`` of 1- or 4-byte items) by key: ``bounds`` (where each key's
    items start, ``n_keys + 1``), the items' documents when ``per_doc`` gives each chunk's
    items per document (documents numbered on across chunks), the sorted columns, and
    the sorted places of the ``watch`` items (ascending indexes into the concatenation).
    ``docs_out`` and ``out`` (per column, None: a new array) receive them in place."""
    n_chunks = len(keys)
    sizes = np.array([k.shape[0] for k in keys], dtype=np.int64)
    total = int(sizes.sum())
    watched = np.ascontiguousarray(watch if watch is not None else np.empty(0), dtype=np.int64)
    bounds = np.empty(n_keys + 1, dtype=np.int64)
    given = list(out) + [None] * (len(payload) - len(out))
    columns = [
        np.empty(total, dtype=column[0].dtype) if target is None else target
        for column, target in zip(payload, given, strict=True)
    ]
    if any(c.shape[0] != total or not c.flags.c_contiguous for c in columns):
        raise ValueError("an output column does not fit the items")
    widths = np.array([c.itemsize for c in columns], dtype=np.int64)
    flat = [chunk for column in payload for chunk in column]
    docs = None
    if per_doc is not None:
        docs = np.empty(total, dtype=np.int32) if docs_out is None else docs_out
        if docs.shape[0] != total or docs.dtype != np.int32 or not docs.flags.c_contiguous:
            raise ValueError("the documents' output does not fit the items")
    n_docs = np.array([d.shape[0] for d in per_doc] if per_doc else [0], dtype=np.int64)
    bases = np.concatenate(([0], np.cumsum(n_docs)[:-1])).astype(np.int64)
    watch_out = np.empty(watched.shape[0], dtype=np.int64)
    status = _lib().gw_bucket_scatter(
        n_chunks,
        _ptr(sizes),
        _pointers(keys),
        n_keys,
        _pointers(per_doc) if per_doc is not None else None,
        _ptr(n_docs),
        _ptr(bases),
        _ptr(docs) if docs is not None else None,
        len(columns),
        _pointers(flat),
        _pointers(columns),
        _ptr(widths),
        _ptr(bounds),
        watched.shape[0],
        _ptr(watched),
        _ptr(watch_out),
    )
    if status == -2:
        raise MemoryError("the bulk-build kernel ran out of memory")
    if status != 0:
        raise ValueError("a sort key is out of range (inconsistent build input)")
    return bounds, docs, columns, watch_out
