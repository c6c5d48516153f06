"""The C ABI of the query kernel (``_kernel.c``): the ``gw_query`` struct and entry points.

``_kernel.py`` loads the library and drives it; this module only describes it, so a
change of a signature or of the struct is one place to edit (and ``GW_ABI_VERSION``
in the C source to bump).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["ABI_VERSION", "Library", "Query", "function", "optional"]

ABI_VERSION = 3  # GW_ABI_VERSION in _kernel.c
_P, _I64, _F64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
_F64P = ctypes.POINTER(ctypes.c_double)


class Query(ctypes.Structure):
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
        ("indptr", _P),
        ("n_terms", _I64),
        ("pair_starts", _P),
        ("pair_seconds", _P),
        ("n_single", _I64),
        ("n_pairs", _I64),
        ("codes", _P),
        ("n_codes", _I64),
        ("rows", _P),
        ("row_lo", _P),
        ("row_hi", _P),
        ("capacity", _I64),
        ("row_tops", _P),
        ("prune", _I64),
    ]


class Library:
    """The loaded library's entry points."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        version = function(lib, "gw_abi_version", [], _I64)()
        if version != ABI_VERSION:
            raise OSError(f"ABI version {version}, expected {ABI_VERSION}: reinstall groundwire")
        self.topk = function(lib, "gw_query_topk", [_P], _I64)
        self.score_of = function(lib, "gw_query_score_of", [_P, _I64], _F64)
        self.rows_topk = function(lib, "gw_query_rows_topk", [_P], _I64)
        self.codes_topk = function(lib, "gw_query_codes_topk", [_P], _I64)
        self.resolve = function(lib, "gw_query_resolve", [_P], _I64)
        self.rows_score_of = function(lib, "gw_query_rows_score_of", [_P, _I64, _F64P], _I64)
        # Load-time checks (index/store/bounds.py): looked up, not required, so a library
        # built before them still serves queries (the checks then run in numpy).
        self.check_rows = optional(lib, "gw_check_rows", [_P, _I64, _P, _I64, _I64], _I64)
        self.check_positive_finite = optional(lib, "gw_check_positive_finite", [_P, _I64], _I64)
        # Batched scores of given documents (fusion); without it, one call per document.
        self.rows_scores = optional(lib, "gw_query_rows_scores", [_P, _P, _I64, _P], _I64)
        self.lib = lib


def function(lib: ctypes.CDLL, name: str, args: list[Any], result: Any) -> Callable[..., Any]:
    function = getattr(lib, name)
    function.argtypes = args
    function.restype = result
    return function  # type: ignore[no-any-return]


def optional(
    lib: ctypes.CDLL, name: str, args: list[Any], result: Any
) -> Callable[..., Any] | None:
    """``function``, or None when the library has no such entry point."""
    return function(lib, name, args, result) if hasattr(lib, name) else None
