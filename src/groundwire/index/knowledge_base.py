"""The immutable knowledge snapshot: entries, phrase maps, relations and BM25, queried.

A :class:`KnowledgeBase` serves searches over :class:`~groundwire.index.parts.Parts`:
built from entries (``builder.py``) or opened from a snapshot folder (``store/``).
Entries are held in id order (code point), so a document's number (its position) is
its rank in that order and every tie in scoring breaks on id without extra work.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from groundwire.access.authorize import authorize_mask, check_callback
from groundwire.config import (
    ChunkingConfig,
    IndexSettings,
    document_settings,
)
from groundwire.errors import KnowledgeIndexError, ValidationFailedError
from groundwire.index import store
from groundwire.index.builder import build_parts, document_entries
from groundwire.index.changes import (
    INGEST_SECTION,
    DocumentChanges,
    chunking_section,
    document_changes,
)
from groundwire.index.delta import DeltaIndex
from groundwire.index.lexical import LexicalIndex, MaskArray
from groundwire.index.lookups import Masks, Phrases
from groundwire.index.parts import Parts, SnapshotSection
from groundwire.index.query import (
    Breakdown,
    Ranked,
    Ranking,
    check_k,
    check_query,
)
from groundwire.index.reading import LexicalReader
from groundwire.index.search import Searching
from groundwire.index.update import changed_entries, update_parts
from groundwire.ingest.policy import AccessPolicy
from groundwire.ingest.validate import normalize_and_validate
from groundwire.model import (
    Document,
    KnowledgeEntry,
    KnowledgeSource,
    LoadedDocument,
    Principal,
    Scope,
    ValidationIssue,
)
from groundwire.text import Analyzer

if TYPE_CHECKING:
    from groundwire.index.scoped import ScopedReader

#: ``check_query``, ``Breakdown``, ``Ranked`` and ``Ranking`` live in ``query.py``; they
#: stay importable from here for code written before the split.
__all__ = ["Breakdown", "KnowledgeBase", "Ranked", "Ranking", "check_k", "check_query"]


class KnowledgeBase(Searching):
    """An immutable, searchable snapshot of knowledge entries (or documents).

    Build with :meth:`from_sources`, :meth:`from_documents` or :meth:`build`;
    query with :meth:`search`. Safe to share between threads.
    """

    __slots__ = (
        "_analyzer",
        "_entries",
        "_entry_ids",
        "_lexical",
        "_masks",
        "_parts",
        "_phrases",
        "_position",
        "_relations",
        "_settings",
        "_unrestricted",
        "_word_cache",
        "_word_lock",
        "issues",
    )

    def __init__(
        self,
        entries: Sequence[KnowledgeEntry],
        settings: IndexSettings,
        *,
        exact_ids: bool = True,
        exact_titles: bool = True,
        issues: Sequence[ValidationIssue] = (),
        progress: Callable[[int], None] | None = None,
        memory_budget: int | None = None,
    ) -> None:
        """Build from normalized entries; prefer the ``from_*`` constructors.

        ``memory_budget`` bounds the analysis working memory in bytes (default
        ``config.BUILD_MEMORY_BUDGET``; see docs/INDEX.md, "Building")."""
        parts = build_parts(
            entries,
            settings,
            exact_ids=exact_ids,
            exact_titles=exact_titles,
            issues=issues,
            progress=progress,
            memory_budget=memory_budget,
        )
        self._install(parts, [entry.id for entry in parts.entries])

    def _install(self, parts: Parts, entry_ids: list[str] | None = None) -> None:
        self._parts = parts
        self._entries, self._position = parts.entries, parts.positions
        # Ids by position: a hit's id without a trip through its entry object (two memory
        # reads instead of three per hit; ~0.5 µs of a SciFact search). None for a loaded
        # snapshot, whose entries (and ids) are decoded on first access.
        self._entry_ids = entry_ids
        self._settings = parts.settings
        self._analyzer = Analyzer(parts.settings.analyzer)
        self.issues = tuple(parts.issues)
        self._lexical = parts.lexical
        self._phrases = Phrases(parts.exact_index, parts.alias_index)
        self._relations = parts.relations
        self._masks = Masks(
            parts.active,
            parts.universal,
            parts.domains,
            parts.domain_codes,
            parts.integration_masks,
        )
        self._unrestricted: tuple[MaskArray, MaskArray | None] | None = None
        self._word_cache: dict[str, int] = {}
        self._word_lock = threading.Lock()

    @classmethod
    def _restore(cls, parts: Parts) -> KnowledgeBase:
        """A knowledge base over already-built parts (a loaded snapshot); nothing is rebuilt."""
        kb = cls.__new__(cls)
        kb._install(parts)
        return kb

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_sources(
        cls,
        sources: Sequence[KnowledgeSource | Mapping[str, Any]],
        settings: IndexSettings | None = None,
    ) -> KnowledgeBase:
        """Validate and index knowledge sources; raises ValidationFailedError on errors."""
        settings = settings if settings is not None else IndexSettings()
        report = normalize_and_validate(sources, Analyzer(settings.analyzer))
        if not report.ok:
            raise ValidationFailedError(report.issues)
        return cls(report.entries, settings, issues=report.issues)

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document | Mapping[str, Any]],
        settings: IndexSettings | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        exact_titles: bool = False,
        memory_budget: int | None = None,
    ) -> KnowledgeBase:
        """Index plain documents (``id``, ``title``, ``text``, optional ``metadata``).

        ``settings`` default to :func:`~groundwire.config.document_settings`. Document
        titles are not curated names, so they are not exact-phrase keys unless
        ``exact_titles=True`` (boosting them cost nDCG on SciFact and CACM); opaque
        document ids never are. ``memory_budget``: as for the constructor.
        """
        if settings is None:
            settings = document_settings()
        entries = document_entries(documents)
        return cls(
            entries,
            settings,
            exact_ids=False,
            exact_titles=exact_titles,
            progress=progress,
            memory_budget=memory_budget,
        )

    def update(
        self,
        upserts: Iterable[KnowledgeEntry | Document | Mapping[str, Any]] = (),
        deletes: Iterable[str] = (),
        *,
        compact: bool | None = None,
    ) -> KnowledgeBase:
        """A new knowledge base with ``deletes`` (ids) removed and ``upserts`` added or
        replacing the entries of their ids; this one is unchanged (see ``index/update.py``).

        The change goes to a delta segment scored exactly at query time (its cost is the
        change, ``index/delta.py``); ``compact`` True merges everything into one
        precomputed index now, None (default) does when the delta passes
        ``DELTA_COMPACT_SHARE``, False never.

        Upserts are normalized entries (e.g. from ``normalize_and_validate``) or documents
        (``Document`` or mappings, as for :meth:`from_documents`). Searches on the result
        equal those of a build from scratch over the same final entries: ids, order and
        scores. Only the upserts are analyzed. Raises KnowledgeIndexError for an unknown
        id to delete, or an id given twice.
        """
        entries = [
            item if isinstance(item, KnowledgeEntry) else document_entries([item])[0]
            for item in upserts
        ]
        exact_ids, exact_titles = self._parts.phrase_keys
        parts = update_parts(
            self._parts,
            entries,
            deletes,
            exact_ids=exact_ids,
            exact_titles=exact_titles,
            compact=compact,
        )
        return KnowledgeBase._restore(parts)

    def update_documents(
        self,
        documents: Sequence[LoadedDocument],
        chunking: ChunkingConfig | None = None,
        *,
        access: AccessPolicy | None = None,
    ) -> tuple[KnowledgeBase, DocumentChanges]:
        """Bring a snapshot of ingested documents up to ``documents`` (all of them, as
        loaded now): only new and changed files are chunked and indexed, the chunks of
        vanished files are deleted (see ``index/changes.py``). New and changed chunks are
        labeled by ``access`` as ``label_chunks`` labels them; with another policy than
        the snapshot was labeled with, every chunk is relabeled (the result equals a
        rebuild with ``access``). Returns the new knowledge base (carrying the new
        ``ingest`` section) and what changed. Raises KnowledgeIndexError when this
        snapshot was not made by ``ingest`` with the same ``chunking``, or carries access
        labels and ``access`` is None. A host labeler's labels are not re-applied: label
        those chunks yourself and pass them to :meth:`update`.
        """
        config = chunking if chunking is not None else ChunkingConfig()
        recorded = self.sections.get(INGEST_SECTION)
        changes = document_changes(self, recorded, documents, config, access)
        updated = self.update(changes.upserts, changes.deletes)
        return updated.with_section(chunking_section(config, access)), changes

    @staticmethod
    def chunking_section(
        chunking: ChunkingConfig, access: AccessPolicy | None = None
    ) -> SnapshotSection:
        """The section a snapshot of ingested documents carries so that
        :meth:`update_documents` can check it is updated with the same chunking, and
        knows which access policy labeled it."""
        return chunking_section(chunking, access)

    def update_entries(
        self, entries: Sequence[KnowledgeEntry]
    ) -> tuple[KnowledgeBase, tuple[str, ...], tuple[str, ...]]:
        """Bring this knowledge base to exactly ``entries`` (normalized, all of them):
        only entries whose content changed (``entry_digest``) are analyzed; ids no longer
        present are deleted. Returns the new knowledge base, the upserted and the deleted
        ids."""
        upserts, deletes = changed_entries(self._parts, entries)
        changed = tuple(e.id for e in upserts)
        return self.update(upserts, deletes), changed, deletes

    def with_issues(self, issues: Sequence[ValidationIssue]) -> KnowledgeBase:
        """This knowledge base with ``issues`` as its build's validation issues."""
        kb = KnowledgeBase.__new__(KnowledgeBase)
        kb._install(self._parts._replace(issues=tuple(issues)), self._entry_ids)
        return kb

    # -- snapshots ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this snapshot to the folder ``path``, atomically (see ``index/store/``).

        An existing snapshot at ``path`` is replaced; readers see the old one or the new
        one, never a mix, and a failed write leaves the old one. Raises IndexFormatError.
        """
        store.save_parts(self._parts, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        expected_manifest_hash: str | None = None,
        *,
        verify: Literal["full", "manifest"] = "full",
        max_manifest_bytes: int | None = None,
        max_entries: int | None = None,
        max_array_bytes: int | None = None,
    ) -> KnowledgeBase:
        """Open a snapshot written by :meth:`save` without rebuilding (arrays memory-mapped).

        ``verify="full"`` checks every file's checksum and every bound; ``"manifest"``
        checks sizes, headers, counts and the arrays whose values index others (see
        docs/INDEX.md). With ``expected_manifest_hash`` the entries' content hash must
        equal it. Raises IndexFormatError.
        """
        parts = store.load_parts(
            path,
            expected_manifest_hash,
            verify=verify,
            max_manifest_bytes=max_manifest_bytes,
            max_entries=max_entries,
            max_array_bytes=max_array_bytes,
        )
        return cls._restore(parts)

    @staticmethod
    def describe_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
        """What the manifest of the snapshot at ``path`` says: ``format_version``,
        ``entries``, ``terms``, ``segments``, ``files``, ``bytes``,
        ``source_manifest_hash`` (manifest checked, no array read). Raises IndexFormatError."""
        return store.describe(path)

    @staticmethod
    def is_snapshot(path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is a snapshot folder (its ``manifest.json`` names the format)."""
        return store.is_snapshot(path)

    # -- sections (format version 2's extension point) -----------------------------------
    @property
    def sections(self) -> Mapping[str, SnapshotSection]:
        """The optional sections this snapshot carries (see :class:`SnapshotSection`)."""
        return self._parts.sections

    def with_section(self, section: SnapshotSection) -> KnowledgeBase:
        """A knowledge base equal to this one plus ``section`` (replacing one of its name).

        Per-entry arrays (first dimension = the number of entries) are in position order.
        """
        if not isinstance(section, SnapshotSection):
            raise KnowledgeIndexError(f"section={section!r} is invalid: expected a SnapshotSection")
        sections = {**self._parts.sections, section.name: section}
        kb = KnowledgeBase.__new__(KnowledgeBase)
        kb._install(self._parts._replace(sections=sections), self._entry_ids)
        return kb

    def without_section(self, name: str) -> KnowledgeBase:
        """A knowledge base equal to this one without the section ``name`` (if any)."""
        sections = {k: v for k, v in self._parts.sections.items() if k != name}
        kb = KnowledgeBase.__new__(KnowledgeBase)
        kb._install(self._parts._replace(sections=sections), self._entry_ids)
        return kb

    # -- inspection -------------------------------------------------------------------------
    @property
    def settings(self) -> IndexSettings:
        """The settings this snapshot was built with."""
        return self._settings

    @property
    def phrase_keys(self) -> tuple[bool, bool]:
        """Whether entry ids and whether titles are exact-phrase keys (as built)."""
        return self._parts.phrase_keys

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer shared by this snapshot's index and its queries."""
        return self._analyzer

    @property
    def bm25(self) -> LexicalReader:
        """The BM25 index as turns read it (``index/reading.py``): the precomputed
        index, or after an update the delta index, scored exactly and never compacted.
        Everything on the turn path reads this."""
        return self._lexical

    @property
    def lexical(self) -> LexicalIndex:
        """The precomputed BM25 index's arrays, for tools off the turn path: after an
        update, the delta segment is compacted into one index on first use (seconds
        and a second index's memory at a million documents; see :meth:`compacted`).
        Turns read :attr:`bm25`."""
        lexical = self._lexical
        return lexical.compacted() if isinstance(lexical, DeltaIndex) else lexical

    @property
    def delta_share(self) -> float:
        """The share of documents an update left in a delta segment or as tombstones
        (0.0: one precomputed index; see ``index/delta.py``)."""
        lexical = self._lexical
        return lexical.share if isinstance(lexical, DeltaIndex) else 0.0

    def compacted(self) -> KnowledgeBase:
        """This knowledge base with its delta segment merged into one precomputed index
        (itself when there is none). Results are the same; queries are faster."""
        lexical = self._lexical
        if not isinstance(lexical, DeltaIndex):
            return self
        return KnowledgeBase._restore(self._parts._replace(lexical=lexical.compacted()))

    @property
    def entries(self) -> tuple[KnowledgeEntry, ...]:
        """Every entry, in id order."""
        entries = self._entries
        return entries if isinstance(entries, tuple) else tuple(entries)

    @property
    def exact_index(self) -> Mapping[str, tuple[str, ...]]:
        """Normalized id/title phrase → entry ids."""
        return {k: tuple(self._ids_of(list(v))) for k, v in self._phrases.exact.items()}

    @property
    def alias_index(self) -> Mapping[str, tuple[str, ...]]:
        """Normalized alias phrase → entry ids."""
        return {k: tuple(self._ids_of(list(v))) for k, v in self._phrases.alias.items()}

    @property
    def integration_masks(self) -> Mapping[str, MaskArray]:
        """Each integration an entry names (casefolded) → the mask of the entries naming it."""
        return self._masks.integrations

    @property
    def relation_index(self) -> Mapping[str, tuple[str, ...]]:
        """Entry id → related then parent ids (existing entries only)."""
        return dict(self._relations)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._position

    def __iter__(self) -> Iterator[KnowledgeEntry]:
        return iter(self._entries)

    def get(self, entry_id: str) -> KnowledgeEntry | None:
        """The entry with this id, or None."""
        doc = self._position.get(entry_id)
        return None if doc is None else self._entries[doc]

    def entry(self, doc: int) -> KnowledgeEntry:
        """The entry at internal position ``doc``."""
        return self._entries[doc]

    def position(self, entry_id: str) -> int | None:
        """Internal position of an entry id (its rank in id order), or None."""
        return self._position.get(entry_id)

    def related(self, entry_id: str) -> tuple[str, ...]:
        """Related then parent ids of an entry (only ids that exist)."""
        return self._relations.get(entry_id, ())

    def reader(
        self,
        principal: Principal | None,
        *,
        where: Mapping[str, str | Sequence[str]] | None = None,
        authorize: Callable[[Principal | None, KnowledgeEntry], object] | None = None,
        authorize_timeout_ms: int | None = None,
    ) -> ScopedReader:
        """A reader that only ever sees what ``principal`` may see (None: anonymous).

        See :class:`~groundwire.index.scoped.ScopedReader`; ``close()`` drops it.
        """
        from groundwire.index.scoped import ScopedReader

        return ScopedReader(
            self,
            principal,
            where=where,
            authorize=authorize,
            authorize_timeout_ms=authorize_timeout_ms,
        )

    # -- eligibility ------------------------------------------------------------------------
    def eligibility(
        self,
        scope: Scope | None = None,
        blocked_domains: Iterable[str] = (),
        allow: Callable[[KnowledgeEntry], object] | None = None,
    ) -> MaskArray:
        """Which entries a request may see, as a boolean mask over positions.

        Active status always; domain not blocked (case-insensitive); with a ``scope``,
        entries that apply everywhere plus those with an enabled integration;
        ``scope=None`` does not filter by integration. ``allow(entry)`` is a host
        predicate, called once per otherwise eligible entry: only ``True`` allows; an
        exception or any other value denies (logged to ``groundwire.access``), and an
        async function is refused with a ConfigError. Tenant and ACL labels are not
        applied here: this is the unscoped index; use :meth:`reader` for a principal.
        """
        if scope is None and allow is None and not blocked_domains:
            return self._masks.status_only()
        blocked = tuple(sorted({d.casefold() for d in blocked_domains}))
        enabled = (
            None
            if scope is None
            else tuple(sorted({i.casefold() for i in scope.enabled_integrations}))
        )
        mask = self._masks.mask(blocked, enabled)
        if allow is not None:  # one fail-closed evaluation (access/authorize.py): only True allows
            check_callback(allow, "allow")
            mask, _ = authorize_mask(
                mask, self.entry, allow, option="allow", noun="entry", describe=entry_name
            )
        return mask

    def _eligible(
        self,
        scope: Scope | None,
        blocked_domains: Iterable[str],
        allow: Callable[[KnowledgeEntry], object] | None,
    ) -> tuple[MaskArray, MaskArray | None]:
        """:meth:`eligibility` and its complement; kept for unrestricted searches."""
        if scope is None and allow is None and not blocked_domains:
            unrestricted = self._unrestricted
            if unrestricted is None:
                mask = self.eligibility()
                unrestricted = self._unrestricted = (mask, self._masks.skip(mask))
            return unrestricted
        mask = self.eligibility(scope, blocked_domains, allow)
        return mask, self._masks.skip(mask)

    def is_eligible(self, entry_id: str, mask: MaskArray) -> bool:
        """Whether an entry id is allowed by a mask from :meth:`eligibility`."""
        doc = self._position.get(entry_id)
        return doc is not None and bool(mask[doc])


def entry_name(entry: KnowledgeEntry) -> str:
    """An entry as the operator's log names it (never a result)."""
    return repr(entry.id)
