"""ctypes binding of the optional fusion kernel (``_fusion.c``, built by ``hatch_build.py``).

:func:`fuse_lists` is :func:`groundwire.retrieve.channels.fuse`'s arithmetic for min-max,
floor (theoretical min-max) and RRF channels in two calls, the union's missing scores
filled in between by the caller's scorers; the fused scores are those of the numpy path
bit for bit (same double operations in the same order). None when the kernel is not
built (no C compiler at install, ``GROUNDWIRE_NO_KERNEL=1``): the caller uses numpy.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.index._native import NativeLibrary

__all__ = ["FLOOR", "MINMAX", "RRF", "Fused", "available", "fuse_lists"]

_ABI_VERSION = 1  # GW_FUSION_ABI in _fusion.c
#: Channel kinds (``enum`` in ``_fusion.c``).
MINMAX, FLOOR, RRF = 0, 1, 2

_P, _I64 = ctypes.c_void_p, ctypes.c_int64

Positions = npt.NDArray[np.int64]
Values = npt.NDArray[np.float64]
#: Fills the raw scores of union members a channel did not list: (channel index, their
#: positions, ascending) -> their scores, or None to leave them at 0.
Filler = Callable[[int, Positions], Sequence[float] | Values | None]


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.gw_fusion_abi_version.restype = _I64
    version = lib.gw_fusion_abi_version()
    if version != _ABI_VERSION:
        raise OSError(f"ABI version {version}, expected {_ABI_VERSION}: reinstall")
    lib.gw_fuse_union.argtypes = [_I64, _P, _P, _P, _I64, _P, _P, _P, _P, _P, _P]
    lib.gw_fuse_union.restype = _I64
    lib.gw_fuse_finish.argtypes = [_I64, _I64, _I64, _P, _P, _P, _I64, _P, _P, _P, _P, _P,
                                   _I64, _P]  # fmt: skip
    lib.gw_fuse_finish.restype = _I64
    return lib


# The file name must match FUSION_LIBRARY in hatch_build.py.
_native = NativeLibrary("_gwfusion", _bind)


def available() -> bool:
    """Whether the compiled fusion kernel is loaded (loading it on first call)."""
    return _native.get() is not None


def _address(array: npt.NDArray[Any]) -> int:
    return int(array.__array_interface__["data"][0])


class Fused:
    """A fusion's arrays: ``union`` (ascending positions) and, per channel ``c``,
    ``ranks[c]`` (0: not listed), ``raw[c]``, ``norm[c]``, ``added[c]`` over the union;
    ``totals`` and ``order`` (the best union indexes, best first)."""

    __slots__ = ("added", "norm", "order", "ranks", "raw", "totals", "union")

    def __init__(
        self,
        union: Positions,
        ranks: Positions,
        raw: Values,
        norm: Values,
        added: Values,
        totals: Values,
        order: Positions,
    ) -> None:
        self.union, self.ranks, self.raw, self.norm = union, ranks, raw, norm
        self.added, self.totals, self.order = added, totals, order


def fuse_lists(
    docs: Sequence[Positions],
    scores: Sequence[Values],
    kinds: Sequence[int],
    weights: Sequence[float],
    floors: Sequence[float],
    rrf_k: int,
    limit: int | None,
    fill: Filler,
) -> Fused | None:
    """The fusion of channels (``docs[c]``/``scores[c]`` their ranked lists, int64 and
    float64; ``kinds[c]`` MINMAX, FLOOR or RRF); ``fill`` is asked for the
    raw scores of members channel ``c`` did not list (not for RRF channels). None when the
    kernel is unavailable or refuses the lists (a position listed twice by one list)."""
    lib = _native.get()
    if lib is None:
        return None
    n = len(docs)
    total = sum(d.shape[0] for d in docs)
    room = max(1, total)
    # Two buffers, their addresses taken once (each address costs a microsecond or more):
    # ints = docs, scratch (2), union, order | lengths, kinds, counts | ranks, missing;
    # floats = scores, totals | weights, floors | raw, norm, added.
    ints = np.empty(5 * room + 3 * n + 2 * n * room, dtype=np.int64)
    floats = np.empty(2 * room + 2 * n + 3 * n * room, dtype=np.float64)
    head, table = 5 * room + 3 * n, 2 * room + 2 * n
    np.concatenate(docs, out=ints[:total])
    np.concatenate(scores, out=floats[:total])
    ints[5 * room : head] = [*(d.shape[0] for d in docs), *kinds, *([0] * n)]
    floats[2 * room : table] = [*weights, *floors]
    i0, f0 = _address(ints), _address(floats)
    size = lib.gw_fuse_union(
        n, i0, f0, i0 + 8 * 5 * room, room, i0 + 8 * room, i0 + 8 * 3 * room,
        i0 + 8 * head, f0 + 8 * table, i0 + 8 * (head + n * room),
        i0 + 8 * (5 * room + 2 * n),
    )  # fmt: skip
    if size < 0:
        return None
    union = ints[3 * room : 3 * room + size]
    ranks = ints[head : head + n * room].reshape(n, room)
    missing = ints[head + n * room :].reshape(n, room)
    raw = floats[table : table + n * room].reshape(n, room)
    counts = ints[5 * room + 2 * n : head].tolist()
    for c in range(n):
        if counts[c] and kinds[c] != RRF:
            at = missing[c, : counts[c]]
            values = fill(c, union[at])
            if values is not None:
                raw[c, at] = np.asarray(values, dtype=np.float64)
    keep = size if limit is None else min(limit, size)
    count = lib.gw_fuse_finish(
        n, size, room, i0 + 8 * (5 * room + n), f0 + 8 * 2 * room,
        f0 + 8 * (2 * room + n), rrf_k, i0 + 8 * head, f0 + 8 * table,
        f0 + 8 * (table + n * room), f0 + 8 * (table + 2 * n * room), f0 + 8 * room, keep,
        i0 + 8 * 4 * room,
    )  # fmt: skip
    if count < 0:
        return None
    norm = floats[table + n * room : table + 2 * n * room].reshape(n, room)
    added = floats[table + 2 * n * room :].reshape(n, room)
    return Fused(
        union, ranks[:, :size], raw[:, :size], norm[:, :size], added[:, :size],
        floats[room : room + size], ints[4 * room : 4 * room + count],
    )  # fmt: skip
