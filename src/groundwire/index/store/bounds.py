"""The posting checks of a full load in one C pass (``_kernel.c``), when the kernel is loaded.

A snapshot's largest checks — every posting row strictly ascending with its documents in
range, every score positive and finite — take ~15 ms of numpy temporaries on SciFact
(1.15M postings) and well under 2 ms as one pass in C. These predicates answer only
"sound or not": ``None`` when the kernel (or its check entry points) is unavailable or
the arrays are not the native, contiguous int32/int64/float64 the C code reads; the
callers in ``layout.py`` then run the numpy checks, which also name the problem when
the C pass finds one. Both paths accept exactly the same arrays (property-tested).

A full load starts these passes :func:`ahead` of its checks, on the hashing threads
(the C code releases the GIL), so they run while the loader parses and maps; the
predicate then takes the answer of the pass started for exactly those array objects.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.index import _kernel

__all__ = ["ahead", "positive_finite", "posting_passes", "rows_ascending", "settle"]

#: Postings smaller than this are checked by the loading thread (a thread costs more).
AHEAD_BYTES = 256 * 1024
_INT64, _INT32, _FLOAT64 = np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.float64)


def _readable(array: npt.NDArray[Any], dtype: np.dtype[Any]) -> bool:
    return array.dtype == dtype and array.ndim == 1 and bool(array.flags.c_contiguous)


#: A pass started ahead: its arguments (held, so their ids stay theirs) and its answer.
_Started = tuple[tuple[Any, ...], "Future[bool | None]"]
_AHEAD: dict[tuple[Any, ...], _Started] = {}
_AHEAD_LOCK = threading.Lock()
Submit = Callable[..., "Future[bool | None]"]


def _forget_started() -> None:
    # A forked child has none of the parent's threads (nor a lock one of them held).
    global _AHEAD_LOCK
    _AHEAD.clear()
    _AHEAD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_started)


def _key(check: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (check.__name__, *(id(arg) if isinstance(arg, np.ndarray) else arg for arg in args))


def ahead(submit: Submit, passes: Iterable[tuple[str, tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """Start passes (``("rows_ascending", (ptr, values, upper))`` or
    ``("positive_finite", (values,))``) with ``submit`` (a thread pool's); returns their
    keys for :func:`settle`. A predicate called later with the same array objects and
    bounds waits for the started pass instead of running its own."""
    keys = []
    for name, args in passes:
        check = _CHECKS[name]
        key = _key(check, args)
        future = submit(check, *args)
        with _AHEAD_LOCK:
            _AHEAD[key] = (args, future)
        keys.append(key)
    return keys


def posting_passes(
    manifest: dict[str, Any], arrays: dict[str, Any], prefixes: tuple[str, str], base_proven: bool
) -> list[tuple[str, tuple[Any, ...]]]:
    """The passes over each segment's postings (files ``<prefix>lexical.*``, the base's
    prefix first) that a full load's checks will ask for: large segments only, and not a
    delta snapshot's base proven before (its checks do not run). Nothing here is trusted:
    the checks validate it all after; a record that does not match only means that its
    check runs its own pass."""
    listed = manifest.get("segments") if manifest.get("format_version") != 1 else None
    if not isinstance(listed, list):
        return []
    passes: list[tuple[str, tuple[Any, ...]]] = []
    for index, prefix in enumerate(prefixes):
        docs = arrays.get(prefix + "lexical.docs")
        if docs is None or docs.nbytes < AHEAD_BYTES or index >= len(listed):
            continue
        if index == 0 and base_proven and prefixes[1] + "lexical.docs" in arrays:
            continue
        counts = listed[index].get("counts") if isinstance(listed[index], dict) else None
        upper = counts.get("entries") if isinstance(counts, dict) else None
        if not isinstance(upper, int) or isinstance(upper, bool):
            continue
        ptr, scores = arrays[prefix + "lexical.indptr"], arrays[prefix + "lexical.scores"]
        passes += [("rows_ascending", (ptr, docs, upper)), ("positive_finite", (scores,))]
    return passes


def settle(keys: Iterable[tuple[Any, ...]]) -> None:
    """Forget the passes of ``keys`` no predicate took (a load that failed first), once
    they ended: none may outlive the load that started it."""
    with _AHEAD_LOCK:
        left = [_AHEAD.pop(key) for key in keys if key in _AHEAD]
    for _, future in left:
        future.cancel()
    wait([future for _, future in left])


def _taken(check: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, bool | None]:
    """(True, the answer) of a pass started ahead with exactly these arguments."""
    key = _key(check, args)
    with _AHEAD_LOCK:
        started = _AHEAD.get(key)
        arrays = zip(started[0] if started else (), args, strict=False)
        if started is None or any(a is not b for a, b in arrays if isinstance(a, np.ndarray)):
            return False, None  # (other arguments are in the key by value)
        del _AHEAD[key]
    return True, started[1].result()


def rows_ascending(ptr: npt.NDArray[Any], values: npt.NDArray[Any], upper: int) -> bool | None:
    """Whether the CSR rows ``values[ptr[r]:ptr[r + 1]]`` are sound: ``ptr`` never
    decreasing from 0 to ``len(values)``, every row strictly ascending within
    ``0..upper - 1``. None: ask numpy."""
    taken, answer = _taken(_rows_ascending, (ptr, values, upper))
    return answer if taken else _rows_ascending(ptr, values, upper)


def positive_finite(values: npt.NDArray[Any]) -> bool | None:
    """Whether every value is positive and finite (NaN is not). None: ask numpy."""
    taken, answer = _taken(_positive_finite, (values,))
    return answer if taken else _positive_finite(values)


def _rows_ascending(ptr: npt.NDArray[Any], values: npt.NDArray[Any], upper: int) -> bool | None:
    library = _kernel.library()
    check = library.check_rows if library is not None else None
    if check is None or not (_readable(ptr, _INT64) and _readable(values, _INT32)):
        return None
    if ptr.shape[0] < 1:
        return None
    rows = ptr.shape[0] - 1
    return int(check(ptr.ctypes.data, rows, values.ctypes.data, values.shape[0], upper)) == 0


def _positive_finite(values: npt.NDArray[Any]) -> bool | None:
    library = _kernel.library()
    check = library.check_positive_finite if library is not None else None
    if check is None or not _readable(values, _FLOAT64):
        return None
    return int(check(values.ctypes.data, values.shape[0])) == 0


_CHECKS: dict[str, Callable[..., bool | None]] = {
    "rows_ascending": _rows_ascending,
    "positive_finite": _positive_finite,
}
