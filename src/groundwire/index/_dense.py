"""ctypes binding of the optional dense kernel (``_dense.c``, built by ``hatch_build.py``).

:func:`topk` and :func:`rows` score float32 or int8 rows against a query in place (no
copy of the matrix, the masks applied during the scan, no BLAS thread pool). Without the
compiled library (no C compiler at install, ``GROUNDWIRE_NO_KERNEL=1``) they return None
and :class:`~groundwire.index.vectors.VectorIndex` uses numpy, whose scores agree to
float32 rounding.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.index._native import NativeLibrary

__all__ = ["Codes", "Matrix", "available", "rows", "topk", "topk_rescored", "unavailable_reason"]

_ABI_VERSION = 3  # GW_DENSE_ABI in _dense.c
_TYPES = {np.dtype(np.float32): 0, np.dtype(np.int8): 1}
_I16_MAX = 32767.0

_P, _I64, _F64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
_ARGS: list[Any] = [_P, _I64, _I64, _I64, _P, _P, _F64, _P]


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.gw_dense_abi_version.restype = _I64
    version = lib.gw_dense_abi_version()
    if version != _ABI_VERSION:
        raise OSError(f"ABI version {version}, expected {_ABI_VERSION}: reinstall")
    lib.gw_dense_topk.argtypes = [*_ARGS, _P, _P, _I64, _P, _P]
    lib.gw_dense_topk.restype = _I64
    lib.gw_dense_rows.argtypes = [*_ARGS, _P, _I64, _P]
    lib.gw_dense_rows.restype = _I64
    lib.gw_dense_topk_rescored.argtypes = [
        _P, _P, _P, _I64, _I64, _P, _F64, _F64, _P, _P, _I64, _I64, _P, _P, _P,
    ]  # fmt: skip
    lib.gw_dense_topk_rescored.restype = _I64
    return lib


# The file name must match DENSE_LIBRARY in hatch_build.py.
_native = NativeLibrary("_gwdense", _bind)


def available() -> bool:
    """Whether the compiled dense kernel is loaded (loading it on first call)."""
    return _native.get() is not None


def unavailable_reason() -> str | None:
    """Why the dense kernel is unavailable (None when it is available)."""
    return _native.reason


def _address(array: npt.NDArray[Any] | None) -> int | None:
    return None if array is None else int(array.__array_interface__["data"][0])


class Matrix:
    """A stored matrix as the kernel reads it: pointers taken once (the arrays never change).

    None from :meth:`of` when the kernel is unavailable or the type is not float32/int8.
    """

    __slots__ = ("_keep", "d", "dtype", "matrix", "n", "scale", "valid")

    def __init__(
        self,
        matrix: npt.NDArray[Any],
        scale: npt.NDArray[np.float32] | None,
        valid: npt.NDArray[np.bool_],
    ) -> None:
        self._keep = (matrix, scale, valid)  # the pointers stay valid while this lives
        self.n, self.d = int(matrix.shape[0]), int(matrix.shape[1])
        self.dtype = _TYPES[matrix.dtype]
        self.matrix = _address(matrix)
        self.scale = _address(scale)
        self.valid = None if bool(valid.all()) else _address(valid)

    @classmethod
    def of(
        cls,
        matrix: npt.NDArray[Any],
        scale: npt.NDArray[np.float32] | None,
        valid: npt.NDArray[np.bool_],
    ) -> Matrix | None:
        """The kernel's view of ``matrix`` (C-contiguous), or None when it cannot read it."""
        usable = (
            matrix.dtype in _TYPES
            and matrix.ndim == 2
            and matrix.shape[1] >= 1
            and matrix.flags.c_contiguous
            and (scale is None or (scale.dtype == np.float32 and scale.flags.c_contiguous))
            and valid.flags.c_contiguous
        )
        if not usable or not available():
            return None
        return cls(matrix, scale, valid)

    def _query(self, query: npt.NDArray[np.float32]) -> tuple[Any, ...]:
        if self.dtype == 0:
            return (query, _address(query), None, 0.0)
        peak = float(np.abs(query).max()) if query.shape[0] else 0.0
        step = peak / _I16_MAX if peak > 0 else 1.0
        quantized = np.rint(query / np.float32(step)).astype(np.int16)
        return (quantized, None, _address(quantized), step)


def topk(
    view: Matrix, query: npt.NDArray[np.float32], k: int, mask: npt.NDArray[np.bool_] | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The ``k`` best rows (allowed by ``mask`` and holding a vector), best first, ties by
    row; ``query`` is float32 ``[d]`` (C-contiguous) and ``mask`` bool ``[n]`` or None."""
    lib = _native.get()
    assert lib is not None  # a Matrix exists only when the kernel is loaded
    keep, qf, qi, step = view._query(query)
    room = max(1, min(k, view.n))
    out_rows = np.empty(room, dtype=np.int64)
    out_scores = np.empty(room, dtype=np.float32)
    count = lib.gw_dense_topk(
        view.matrix, view.dtype, view.n, view.d, qf, qi, step, view.scale,
        _address(mask), view.valid, room, _address(out_rows), _address(out_scores),
    )  # fmt: skip
    del keep
    if count < 0:
        raise ValueError("dense kernel refused its arguments")
    return out_rows[:count], out_scores[:count]


def rows(
    view: Matrix, query: npt.NDArray[np.float32], positions: npt.NDArray[np.int64]
) -> npt.NDArray[np.float32]:
    """Scores of the rows ``positions`` (int64, C-contiguous, each within the matrix)."""
    lib = _native.get()
    assert lib is not None
    keep, qf, qi, step = view._query(query)
    out = np.empty(positions.shape[0], dtype=np.float32)
    status = lib.gw_dense_rows(
        view.matrix, view.dtype, view.n, view.d, qf, qi, step, view.scale,
        _address(positions), positions.shape[0], _address(out),
    )  # fmt: skip
    del keep
    if status < 0:
        raise ValueError("dense kernel refused a row outside the matrix")
    return out


class Codes:
    """int8 codes of a float32 matrix's rows (row scale = largest magnitude / 127) and the
    largest quantization error ``max |x - x^|`` and code length ``max |x^|`` over rows:
    what :func:`topk_rescored` scans and how far a code score may be from the exact one
    (the kernel bounds it per query from these two, see ``gw_quantize_query``)."""

    __slots__ = ("codes", "max_error", "max_norm", "scale")

    def __init__(self, matrix: npt.NDArray[np.float32], block: int = 16_384) -> None:
        n, d = matrix.shape
        self.codes = np.empty((n, d), dtype=np.int8)
        self.scale = np.empty(n, dtype=np.float32)
        error, norm = 0.0, 0.0
        for start in range(0, n, block):  # in blocks: a memory map is read once, in order
            rows = np.asarray(matrix[start : start + block], dtype=np.float64)
            peak = np.abs(rows).max(axis=1) if rows.shape[1] else np.zeros(rows.shape[0])
            scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
            codes = np.clip(np.rint(rows / scale[:, None]), -127, 127).astype(np.int8)
            approx = codes.astype(np.float64) * scale.astype(np.float64)[:, None]
            if rows.shape[0]:
                error = max(error, float(np.linalg.norm(rows - approx, axis=1).max()))
                norm = max(norm, float(np.linalg.norm(approx, axis=1).max()))
            self.codes[start : start + block], self.scale[start : start + block] = codes, scale
        self.max_error, self.max_norm = error, norm


def topk_rescored(
    view: Matrix,
    codes: Codes,
    query: npt.NDArray[np.float32],
    k: int,
    pool: int,
    mask: npt.NDArray[np.bool_] | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], bool]:
    """:func:`topk` of a float32 ``view`` found through ``codes`` (at most ``pool`` >= k code
    candidates rescored exactly, best code first, until certified), and whether the pool
    was certified (else the full scan answered)."""
    lib = _native.get()
    assert lib is not None
    assert view.dtype == 0
    room = max(1, min(k, view.n))
    out_rows = np.empty(room, dtype=np.int64)
    out_scores = np.empty(room, dtype=np.float32)
    certified = ctypes.c_int64(0)
    count = lib.gw_dense_topk_rescored(
        view.matrix, _address(codes.codes), _address(codes.scale), view.n, view.d,
        _address(query), codes.max_error, codes.max_norm, _address(mask), view.valid, room,
        max(room, pool), _address(out_rows), _address(out_scores), ctypes.byref(certified),
    )  # fmt: skip
    if count == -2:
        raise MemoryError("dense kernel: no memory for the scan's scratch")
    if count < 0:
        raise ValueError("dense kernel refused its arguments")
    return out_rows[:count], out_scores[:count], bool(certified.value)
