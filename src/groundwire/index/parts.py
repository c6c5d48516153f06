"""Everything one knowledge base holds, as the builder makes it and the snapshot stores it.

:class:`Parts` is plain data: the builder (``builder.py``) produces it, the snapshot
format (``store/``) writes and reads it, and :class:`~groundwire.index.KnowledgeBase`
serves queries over it. None of those imports another, so there is no cycle.

:class:`SnapshotSection` is the extension point of snapshot format version 2: a named, optional
part (for example dense vectors: a ``float32 [entries, dim]`` matrix plus the model id)
stored, checksummed and memory-mapped like every other file, and carried through saves
by code that does not know it. See ``docs/INDEX.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from groundwire.config import IndexSettings
from groundwire.errors import KnowledgeIndexError
from groundwire.index.delta import DeltaIndex
from groundwire.index.lexical import IntArray, LexicalIndex, MaskArray
from groundwire.model import KnowledgeEntry, ValidationIssue

__all__ = [
    "SECTION_DTYPES",
    "Parts",
    "SnapshotSection",
    "StoredSegment",
    "known_sections",
    "register_section",
]

#: Array types a section may hold: plain numbers, little-endian, never objects.
SECTION_DTYPES = frozenset(
    {"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"}
)
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass(frozen=True, slots=True)
class SnapshotSection:
    """A named, optional part of a snapshot: JSON ``meta`` plus numeric ``arrays``.

    Arrays whose first dimension is the number of entries are per entry, in position
    order (entry id order), like every per-entry array of the snapshot. ``required``
    sections make a groundwire that does not know ``name`` refuse the snapshot instead
    of ignoring it (use it only when ignoring would give wrong answers).
    """

    name: str
    meta: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, npt.NDArray[Any]] = field(default_factory=dict)
    required: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise KnowledgeIndexError(
                f"section name {self.name!r} is invalid: expected 1-40 of a-z, 0-9, _ "
                "starting with a letter"
            )
        if not isinstance(self.meta, Mapping):
            raise KnowledgeIndexError(f"section {self.name!r}: meta must be a mapping")
        arrays = {}
        for key, value in self.arrays.items():
            if not isinstance(key, str) or not _NAME.fullmatch(key):
                raise KnowledgeIndexError(f"section {self.name!r}: array name {key!r} is invalid")
            array = np.asarray(value)
            dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
            if dtype.str not in SECTION_DTYPES:
                raise KnowledgeIndexError(
                    f"section {self.name!r}: array {key!r} has dtype {array.dtype}; sections "
                    f"hold plain numbers ({', '.join(sorted(SECTION_DTYPES))})"
                )
            arrays[key] = np.ascontiguousarray(array, dtype=dtype)
        object.__setattr__(self, "arrays", arrays)
        object.__setattr__(self, "meta", dict(self.meta))


#: One file of a snapshot as its manifest lists it: name, digest, bytes, dtype, shape.
StoredFile = tuple[str, str, int, str | None, tuple[int, ...] | None, str | None]


@dataclass(frozen=True, slots=True, eq=False)
class StoredSegment:
    """A precomputed segment as a snapshot folder holds it, kept by a loaded knowledge base
    so that a save of its updates reuses the segment's files (``store/payloads.py``).

    ``lexical`` and ``entries`` are the segment's index and entries (mapped), ``record``
    its manifest record (``counts``, ``stats``), ``files`` the records of the files a
    delta snapshot reuses (logical name → :data:`StoredFile`) and ``arrays`` their mapped
    content (to write them into another folder).
    """

    lexical: LexicalIndex
    entries: Sequence[KnowledgeEntry]
    record: Mapping[str, Any]
    files: Mapping[str, StoredFile]
    arrays: Mapping[str, Any]


class Parts(NamedTuple):
    """Everything a KnowledgeBase holds.

    Phrase maps and relations use internal positions (an entry's rank in id order).
    ``links`` holds each entry's related and parent ids as written (``relations`` keeps
    those that exist), when known. ``digests`` holds each entry's content digest
    (``ingest.validate.entry_digest``, 32 bytes, position order) when known;
    ``sections`` the optional snapshot sections; ``stored`` the snapshot segment that
    ``lexical`` (or, after an update, its base segment) was read from, if any.
    """

    entries: Sequence[KnowledgeEntry]
    positions: Mapping[str, int]
    settings: IndexSettings
    lexical: LexicalIndex | DeltaIndex  # a DeltaIndex after an update (index/delta.py)
    exact_index: Mapping[str, tuple[int, ...]]
    alias_index: Mapping[str, tuple[int, ...]]
    relations: Mapping[str, tuple[str, ...]]
    active: MaskArray
    universal: MaskArray
    domains: Mapping[str, int]
    domain_codes: IntArray
    integration_masks: Mapping[str, MaskArray]
    issues: tuple[ValidationIssue, ...]
    digests: npt.NDArray[np.uint8] | None = None
    links: Mapping[str, tuple[str, ...]] | None = None  # raw related/parent ids; None: unknown
    phrase_keys: tuple[bool, bool] = (True, True)  # ids, titles are exact phrases
    sections: Mapping[str, SnapshotSection] = MappingProxyType({})
    #: The stored segment the lexical index (or its delta's base) was loaded from.
    stored: StoredSegment | None = None


_KNOWN_SECTIONS: set[str] = set()


def register_section(name: str) -> None:
    """Declare that this process understands section ``name`` (see :class:`SnapshotSection`):
    snapshots where it is required then open instead of being refused."""
    SnapshotSection(name)  # validates the name
    _KNOWN_SECTIONS.add(name)


def known_sections() -> frozenset[str]:
    """The sections this process understands (:func:`register_section`)."""
    return frozenset(_KNOWN_SECTIONS)
