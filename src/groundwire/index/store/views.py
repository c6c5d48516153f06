"""Lazy views over a snapshot's mapped files: nothing is decoded before it is asked for."""

from __future__ import annotations

from abc import abstractmethod
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from groundwire.errors import IndexFormatError
from groundwire.index.store.codecs import StringTable, decode_entry, encode_entry, encode_strings
from groundwire.index.store.lines import encoded_lines
from groundwire.model import KnowledgeEntry

__all__ = [
    "ById",
    "LazyEntries",
    "Picked",
    "SortedIds",
    "SortedPositions",
    "SplicedEntries",
    "gathered_lines",
    "line_of",
    "spliced_ids",
    "string_rows",
]

I64 = npt.NDArray[np.int64]


class ById(Mapping[str, int]):
    """A string-keyed mapping defined by ``get`` (e.g. entry id → position; None: absent)."""

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


class SortedPositions(ById):
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


class SortedIds(ById):
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

    def locate(self, keys: Sequence[str]) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Where each key goes among the ids (bisect left) and whether it is there."""
        raw, count = self.table.raw, len(self.table)
        at = np.empty(len(keys), dtype=np.int64)
        found = np.zeros(len(keys), dtype=bool)
        for i, key in enumerate(keys):
            data = key.encode("utf-8", "surrogatepass")  # code point order all the same
            at[i] = where = bisect_left(range(count), data, key=raw)
            found[i] = where < count and raw(where) == data
        return at, found

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


def spliced_ids(old: StringTable, new: Sequence[str], source: I64) -> StringTable:
    """The id table by new position: ``source[p]`` an old position, or ``-1 - i`` for
    ``new[i]``. The old ids' bytes are copied run by run (positions that follow each
    other in the old table): one slice per run, none decoded."""
    old_offsets = np.asarray(old.offsets, dtype=np.int64)
    pool_offsets, pool, rows = old_offsets, np.asarray(old.blob, dtype=np.uint8), source
    if new:  # both tables as one: new id i is string len(old) + i of the pool
        encoded, new_offsets = encode_strings(new, "entry ids")
        pool_offsets = np.concatenate([old_offsets, int(old_offsets[-1]) + new_offsets[1:]])
        pool = np.concatenate([pool, np.frombuffer(encoded, np.uint8)])
        rows = np.where(source >= 0, source, len(old) - 1 - source)
    starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)  # where a run begins
    ends = np.append(starts[1:], rows.shape[0]).astype(np.int64)
    lo = pool_offsets[rows[starts]].tolist()
    hi = pool_offsets[rows[ends - 1] + 1].tolist() if rows.shape[0] else []
    blob = np.concatenate([pool[:0], *(pool[a:b] for a, b in zip(lo, hi, strict=True))])
    offsets = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.diff(pool_offsets)[rows], out=offsets[1:])
    return StringTable(blob, offsets)


class LazyEntries(Sequence[KnowledgeEntry]):
    """Entries decoded from the mapped JSON lines on first access, then kept."""

    __slots__ = ("_cache", "_ids", "_view", "blob", "offsets")

    def __init__(
        self, blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], ids: Sequence[str]
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


class Picked(Sequence[str]):
    """The strings of ``table`` at ``positions`` (a delta's entries checked against the
    ids of their positions)."""

    __slots__ = ("_positions", "_table")

    def __init__(self, table: Sequence[str], positions: I64) -> None:
        self._table, self._positions = table, positions

    def __len__(self) -> int:
        return int(self._positions.shape[0])

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._table[int(self._positions[index])]


class SplicedEntries(Sequence[KnowledgeEntry]):
    """Entries by new position: kept ones read from the old sequence, new ones given."""

    __slots__ = ("_new", "_old", "_source")

    def __init__(
        self, old: Sequence[KnowledgeEntry], new: Sequence[KnowledgeEntry], source: I64
    ) -> None:
        # source[p] >= 0: old position; < 0: -1 - index into new. An update of an update
        # reads straight from the first one's entries (no chain of indirections).
        if isinstance(old, SplicedEntries):
            earlier: SplicedEntries = old
            composed = source.copy()
            from_old = source >= 0
            composed[from_old] = earlier._source[source[from_old]]
            composed[~from_old] = source[~from_old] - len(earlier._new)
            old, new, source = earlier._old, _Joined(earlier._new, new), composed
        self._old: Sequence[KnowledgeEntry] = old
        self._new: Sequence[KnowledgeEntry] = new
        self._source: I64 = source

    @property
    def old(self) -> Sequence[KnowledgeEntry]:
        """The entries kept ones are read from (a loaded snapshot's, the first time)."""
        return self._old

    @property
    def source(self) -> I64:
        """Per position: the old position, or ``-1 - i`` for the i-th new entry."""
        return self._source

    @property
    def new(self) -> Sequence[KnowledgeEntry]:
        """The entries added or replaced since ``old``."""
        return self._new

    def lines(self, positions: I64) -> tuple[bytes, I64]:
        """The JSON lines of the entries at ``positions``: copied from mapped lines where
        the entries came from a snapshot, else encoded."""
        old, new = self._old, self._new
        source = self._source[positions]
        parts = _stored_parts(old), _stored_parts(new)
        if parts[0] is not None and parts[1] is not None:
            # Global index into [*old, *new] over the stored sequences old's then new's.
            index = np.where(source >= 0, source, len(old) - 1 - source)
            return _copied_lines([*parts[0], *((e, at + len(old)) for e, at in parts[1])], index)
        picks = [(old, at) if at >= 0 else (new, -1 - at) for at in source.tolist()]
        return gathered_lines(picks)

    def encoded(self) -> tuple[Any, I64] | None:
        """The JSON lines blob and offsets, copying old entries' bytes when the old
        sequence has them (a loaded snapshot), else None."""
        if getattr(self._old, "encoded", None) is None:
            return None
        return self.lines(np.arange(len(self), dtype=np.int64))

    def __len__(self) -> int:
        return int(self._source.shape[0])

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        at = int(self._source[index])
        return self._old[at] if at >= 0 else self._new[-1 - at]


class _Joined(Sequence[KnowledgeEntry]):
    """Two sequences one after the other, read in place (a loaded delta's entries are not
    decoded to be chained)."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Sequence[KnowledgeEntry], second: Sequence[KnowledgeEntry]) -> None:
        self._first, self._second = first, second

    def __len__(self) -> int:
        return len(self._first) + len(self._second)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if index < len(self._first):
            return self._first[index]
        return self._second[index - len(self._first)]

    def line(self, index: int) -> bytes | None:
        if index < len(self._first):
            return stored_line(self._first, index)
        return stored_line(self._second, index - len(self._first))


def stored_line(entries: Sequence[KnowledgeEntry], index: int) -> bytes | None:
    """Entry ``index``'s JSON line as stored, when ``entries`` has it (else None)."""
    if isinstance(entries, LazyEntries):
        offsets = entries._view
        return bytes(entries.blob[offsets[index] : offsets[index + 1]])
    if isinstance(entries, _Joined):
        return entries.line(index)
    return None


def _stored_parts(entries: Sequence[KnowledgeEntry]) -> list[tuple[LazyEntries, int]] | None:
    """``entries`` as stored sequences one after the other (each with its first index),
    or None when some are not stored."""
    if isinstance(entries, LazyEntries):
        return [(entries, 0)]
    if isinstance(entries, _Joined):
        first, second = _stored_parts(entries._first), _stored_parts(entries._second)
        if first is None or second is None:
            return None
        return [*first, *((e, at + len(entries._first)) for e, at in second)]
    return [] if not len(entries) else None


def _copied_lines(parts: list[tuple[LazyEntries, int]], index: I64) -> tuple[bytes, I64]:
    """The stored lines of entries ``index`` of the sequences ``parts`` joined: one copy
    per run of lines that follow each other in one sequence's blob."""
    if not index.shape[0]:
        return b"", np.zeros(1, dtype=np.int64)
    firsts = np.array([at for _, at in parts], dtype=np.int64)
    which = np.searchsorted(firsts, index, side="right") - 1
    lo = np.empty(index.shape[0], dtype=np.int64)
    hi = np.empty(index.shape[0], dtype=np.int64)
    for k, (entries, first) in enumerate(parts):
        pick = which == k
        local = index[pick] - first
        offsets = np.asarray(entries.offsets, dtype=np.int64)
        lo[pick], hi[pick] = offsets[local], offsets[local + 1]
    # A run continues while the same sequence's next line follows the previous one.
    joined = (which[1:] == which[:-1]) & (lo[1:] == hi[:-1])
    starts = np.flatnonzero(np.concatenate([[True], ~joined]))
    ends = np.append(starts[1:], index.shape[0])
    blobs = [np.asarray(entries.blob, dtype=np.uint8) for entries, _ in parts]
    chunks = [
        blobs[w][a:b]
        for w, a, b in zip(
            which[starts].tolist(), lo[starts].tolist(), hi[ends - 1].tolist(), strict=True
        )
    ]
    bounds = np.zeros(index.shape[0] + 1, dtype=np.int64)
    np.cumsum(hi - lo, out=bounds[1:])
    return np.concatenate([np.empty(0, np.uint8), *chunks]).tobytes(), bounds


def line_of(entries: Sequence[KnowledgeEntry], index: int) -> bytes:
    """Entry ``index``'s JSON line: the stored bytes when ``entries`` has them."""
    found = stored_line(entries, index)
    return found if found is not None else encode_entry(entries[index]) + b"\n"


def gathered_lines(picks: Sequence[tuple[Sequence[KnowledgeEntry], int]]) -> tuple[bytes, I64]:
    """The JSON lines of the entries ``picks`` names (sequence, index), joined, and their
    offsets: stored bytes copied, the others encoded together (``lines.py``)."""
    chunks = [stored_line(entries, index) for entries, index in picks]
    missing = [k for k, chunk in enumerate(chunks) if chunk is None]
    if missing:
        fresh = [picks[k][0][picks[k][1]] for k in missing]
        for k, line in zip(missing, encoded_lines(fresh), strict=True):
            chunks[k] = line
    return _joined_lines(cast("list[bytes]", chunks))


def _joined_lines(lines: list[bytes]) -> tuple[bytes, I64]:
    bounds = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, lines), np.int64, len(lines)), out=bounds[1:])
    return b"".join(lines), bounds


def string_rows(
    keys: StringTable, ptr: npt.NDArray[np.int64], values: npt.NDArray[np.int32]
) -> dict[str, tuple[int, ...]]:
    """A string-keyed CSR as a dict: key ``i`` → ``values[ptr[i]:ptr[i + 1]]``."""
    bounds = ptr.tolist()
    flat = values.tolist()
    return {key: tuple(flat[bounds[i] : bounds[i + 1]]) for i, key in enumerate(keys)}


#: What a stored JSON line holds when it may carry a tenant or ACL label: a JSON string
#: (a metadata key) spells its letters as they are or as ``\\u`` escapes, nothing else.
_LABEL_MARKS = (b"tenant", b"acl", b"\\u")


def label_free(entries: Sequence[KnowledgeEntry]) -> npt.NDArray[np.bool_] | None:
    """Per entry, whether its stored JSON line cannot carry a tenant or ACL label (no
    ``tenant``, ``acl`` or ``\\u`` in its bytes), found without decoding it: reading a
    loaded snapshot's labels then decodes only the entries that may hold some. None when
    ``entries`` are not read from stored lines; False for an entry held in memory."""
    if isinstance(entries, LazyEntries):
        return _free_lines(entries.blob, entries.offsets)
    if isinstance(entries, _Joined):
        first, second = label_free(entries._first), label_free(entries._second)
        if first is None or second is None:
            return None
        return np.concatenate([first, second])
    if isinstance(entries, SplicedEntries):
        old = label_free(entries.old)
        if old is None:
            return None
        source = entries.source
        free = np.zeros(source.shape[0], dtype=bool)
        kept = source >= 0
        free[kept] = old[source[kept]]
        new = label_free(entries.new)
        if new is not None:
            free[~kept] = new[-1 - source[~kept]]
        return free
    return None


def _free_lines(blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    bounds = np.asarray(offsets, dtype=np.int64)
    free = np.ones(max(bounds.shape[0] - 1, 0), dtype=bool)
    data = np.ascontiguousarray(blob, dtype=np.uint8).tobytes()
    marks: list[int] = []
    for mark in _LABEL_MARKS:  # bytes.find: a fast scan; every occurrence, overlaps too
        at = data.find(mark)
        while at >= 0:
            marks += (at, at + len(mark) - 1)  # its first and last byte's lines
            at = data.find(mark, at + 1)
    if marks:
        lines = np.searchsorted(bounds, np.array(marks, dtype=np.int64), side="right") - 1
        free[lines[(lines >= 0) & (lines < free.shape[0])]] = False
    return free
