"""Lazy views over a snapshot's mapped files: nothing is decoded before it is asked for."""

from __future__ import annotations

from abc import abstractmethod
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.errors import IndexFormatError
from groundwire.index.store.codecs import StringTable, decode_entry
from groundwire.model import KnowledgeEntry

__all__ = ["LazyEntries", "SortedIds", "SortedPositions", "string_rows"]


class _ById(Mapping[str, int]):
    """A mapping defined by ``get`` (entry id → position, None when absent)."""

    __slots__ = ()

    @abstractmethod
    def get(self, key: str, default: Any = None) -> Any:
        """The position of ``key``, or ``default`` when it is not there."""

    def __getitem__(self, key: str) -> int:
        found: int | None = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None


class SortedPositions(_ById):
    """Entry id → position, by bisection over a list of the ids in position (code point)
    order: what an update makes instead of a dict of every id."""

    __slots__ = ("ids",)

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    def get(self, key: str, default: Any = None) -> Any:
        ids = self.ids
        at = bisect_left(ids, key) if isinstance(key, str) else len(ids)
        return at if at < len(ids) and ids[at] == key else default

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


class SortedIds(_ById):
    """Entry id → position, by binary search over the sorted ids (nothing decoded ahead)."""

    __slots__ = ("table",)

    def __init__(self, table: StringTable) -> None:
        self.table = table

    def get(self, key: str, default: Any = None) -> Any:
        if not isinstance(key, str):
            return default
        try:
            data = key.encode("utf-8")
        except UnicodeEncodeError:
            return default
        raw, count = self.table.raw, len(self.table)
        at = bisect_left(range(count), data, key=raw)
        return at if at < count and raw(at) == data else default

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


class LazyEntries(Sequence[KnowledgeEntry]):
    """Entries decoded from the mapped JSON lines on first access, then kept."""

    __slots__ = ("_cache", "_ids", "_view", "blob", "offsets")

    def __init__(
        self, blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], ids: StringTable
    ) -> None:
        self.blob, self.offsets, self._ids = blob, offsets, ids
        self._view = np.ascontiguousarray(offsets, dtype=np.int64).data.cast("B").cast("q")
        self._cache: list[KnowledgeEntry | None] = [None] * (len(offsets) - 1)

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        entry = self._cache[index]  # IndexError past the end, like a tuple
        if entry is None:
            n = index % len(self._cache)
            data = self.blob[self._view[n] : self._view[n + 1]].tobytes()
            entry = decode_entry(data, f"entry #{n + 1}")
            if entry.id != self._ids[n]:
                raise IndexFormatError(
                    f"entry #{n + 1} has id {entry.id!r}, the id table says {self._ids[n]!r}"
                )
            self._cache[n] = entry
        return entry

    def __iter__(self) -> Iterator[KnowledgeEntry]:
        for index in range(len(self._cache)):
            yield self[index]

    def encoded(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The JSON lines as stored: blob and offsets."""
        return self.blob, self.offsets


def string_rows(
    keys: StringTable, ptr: npt.NDArray[np.int64], values: npt.NDArray[np.int32]
) -> dict[str, tuple[int, ...]]:
    """A string-keyed CSR as a dict: key ``i`` → ``values[ptr[i]:ptr[i + 1]]``."""
    bounds = ptr.tolist()
    flat = values.tolist()
    return {key: tuple(flat[bounds[i] : bounds[i + 1]]) for i, key in enumerate(keys)}
