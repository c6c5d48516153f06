"""The optional compiled libraries beside this package (built by ``hatch_build.py``).

Each kernel module (``_kernel``, ``_dense``, ``_merge``, ``_fusion``) keeps one
:class:`NativeLibrary`: loaded with ctypes on first use, once, thread-safely; unavailable —
with the reason — when it was not built (no C compiler at install), does not load or fit
(``bind`` raises), or ``GROUNDWIRE_NO_KERNEL=1`` is set. Callers then take their numpy path.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["NativeLibrary", "library_name"]

T = TypeVar("T")

_NOT_LOADED = "not loaded yet"


def library_name(stem: str) -> str:
    """The file name of compiled library ``stem`` on this platform."""
    suffix = ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"
    return stem + suffix


class NativeLibrary(Generic[T]):
    """One compiled library, loaded on first use; ``bind`` declares its entry points (and
    checks its ABI version), returning what callers use, or raises OSError/AttributeError."""

    __slots__ = ("_bind", "_lock", "_path", "_reason", "_value")

    def __init__(self, stem: str, bind: Callable[[ctypes.CDLL], T]) -> None:
        self._path = Path(__file__).with_name(library_name(stem))
        self._bind = bind
        self._lock = threading.Lock()
        self._value: T | None = None
        self._reason: str | None = _NOT_LOADED

    def get(self) -> T | None:
        """The bound library, or None when it is unavailable (see :attr:`reason`)."""
        if self._reason is None:
            return self._value
        with self._lock:
            if self._reason == _NOT_LOADED:
                self._reason = self._load()
            return self._value

    @property
    def reason(self) -> str | None:
        """Why the library is unavailable (None when it is available)."""
        self.get()
        return self._reason

    def _load(self) -> str | None:
        path = self._path
        if os.environ.get("GROUNDWIRE_NO_KERNEL") == "1":
            return "disabled by GROUNDWIRE_NO_KERNEL=1"
        if not path.is_file():
            return f"{path} was not built (no C compiler at install?)"
        try:
            self._value = self._bind(ctypes.CDLL(str(path)))
        except (OSError, AttributeError) as exc:
            return f"{path} could not be loaded: {exc}"
        return None
