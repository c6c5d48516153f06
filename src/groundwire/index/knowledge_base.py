"""The immutable knowledge snapshot: entries, phrase maps, relations and BM25.

Entries are held in id order (code point), so a document's number is its rank in
that order and every tie in scoring breaks on id without extra work.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import numpy as np

from groundwire.access.authorize import authorize_mask, check_callback
from groundwire.config import (
    DEFAULT_ALIAS_BOOST,
    DEFAULT_EXACT_BOOST,
    DEFAULT_MAX_QUERY_CHARS,
    MAX_PHRASE_TOKENS,
    MAX_SEARCH_K,
    IndexSettings,
    document_settings,
)
from groundwire.errors import KnowledgeIndexError, QueryError, ValidationFailedError
from groundwire.index.lexical import (
    SKIP,
    UNKNOWN,
    IntArray,
    LexicalIndex,
    LexicalIndexBuilder,
    MaskArray,
)
from groundwire.ingest.validate import normalize_and_validate
from groundwire.model import (
    Document,
    Hit,
    KnowledgeEntry,
    KnowledgeSource,
    Principal,
    Scope,
    ValidationIssue,
)
from groundwire.text import Analyzer

if TYPE_CHECKING:
    from groundwire.index.scoped import ScopedReader

__all__ = ["FIELD_TEXT", "KnowledgeBase", "Parts", "Ranked", "Ranking"]

#: How each indexable field is read from an entry.
FIELD_TEXT: Mapping[str, Callable[[KnowledgeEntry], str]] = {
    "title": lambda e: e.title,
    "aliases": lambda e: "\n".join(e.aliases),
    "keywords": lambda e: "\n".join(e.keywords),
    "summary": lambda e: e.summary,
    "body": lambda e: e.body,
    "symbols": lambda e: _symbols(e.metadata.get("symbols")),
}
#: A derived field: adjacent term pairs of these fields, matched by query term pairs.
BIGRAMS = "bigrams"
BIGRAM_SOURCES = frozenset({"title", "summary", "body"})
_MASK_CACHE_LIMIT = 64
_STATUS_ONLY: tuple[Any, ...] = ((), None)  # eligibility key: nothing blocked, no scope
#: Query words whose codes a knowledge base remembers (see KnowledgeBase._word_codes).
WORD_CACHE_LIMIT = 65_536
_NUMBER = (int, float)
_NO_PHRASE_HITS: Set[int] = frozenset()
#: A code name distinctive enough to be a phrase key: with an underscore, a digit or an
#: inner capital (a plain word such as ``request`` would match ordinary questions).
_CODE_NAME = re.compile(r"^(?=\w*(?:_|\d|[a-z][A-Z]))\w+$", re.M)
# Hit._make without its Python-level frame: searches build up to k hits per query.
_new_hit = partial(tuple.__new__, Hit)


def _symbols(value: object) -> str:
    """Code symbols of a document chunk (a string or a list of names) as field text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "\n".join(item for item in value if isinstance(item, str))
    return ""


class Ranked(NamedTuple):
    """One ranked document of a query (internal numbering) and why it scored."""

    doc: int
    score: float
    lexical: float
    exact: bool
    alias: bool


class Ranking(NamedTuple):
    """A ranked list as parallel lists (cheap to build for large k) plus the phrase hits."""

    docs: list[int]
    scores: list[float]
    lexical: list[float]
    exact: set[int]
    alias: set[int]
    total: int  # size of the candidate union before the cap

    def items(self) -> list[Ranked]:
        """The ranked documents as records, best first."""
        return [
            Ranked(doc, score, lex, doc in self.exact, doc in self.alias)
            for doc, score, lex in zip(self.docs, self.scores, self.lexical, strict=True)
        ]


class Parts(NamedTuple):
    """Everything a KnowledgeBase holds, as the snapshot format (``snapshot.py``) stores it.

    Phrase maps and relations use internal positions (an entry's rank in id order).
    """

    entries: Sequence[KnowledgeEntry]
    positions: Mapping[str, int]
    settings: IndexSettings
    lexical: LexicalIndex
    exact_index: Mapping[str, tuple[int, ...]]
    alias_index: Mapping[str, tuple[int, ...]]
    relations: Mapping[str, tuple[str, ...]]
    active: MaskArray
    universal: MaskArray
    domains: Mapping[str, int]
    domain_codes: IntArray
    integration_masks: Mapping[str, MaskArray]
    issues: tuple[ValidationIssue, ...]


class QueryIds(Sequence[int]):
    """A query's term ids (:meth:`LexicalIndex.ids_of_codes` of its word codes), found on
    first use: the breakdowns of one search share them, and most searches never read them.
    Resolving is deterministic, so two threads racing to do it agree."""

    __slots__ = ("_codes", "_ids", "_lexical")

    def __init__(self, lexical: LexicalIndex, codes: list[int]) -> None:
        self._lexical = lexical
        self._codes = codes
        self._ids: list[int] | None = None

    def ids(self) -> list[int]:
        """The term ids, as a list."""
        ids = self._ids
        if ids is None:
            ids = self._ids = self._lexical.ids_of_codes(self._codes)
        return ids

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self.ids()[index]

    def __len__(self) -> int:
        return len(self.ids())

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids())

    def __repr__(self) -> str:
        return f"QueryIds({self.ids()!r})"


class Breakdown(Mapping[str, float]):
    """Per-field BM25 contributions plus ``exact``/``alias`` boosts, computed on first read.

    Explaining costs more than scoring, so a hit only pays for it when asked. The
    computation is deterministic, so two threads racing to resolve it agree.
    """

    __slots__ = ("_args", "_values")

    def __init__(
        self,
        lexical: LexicalIndex,
        ids: Sequence[int],
        doc: int,
        exact: float = 0.0,
        alias: float = 0.0,
    ) -> None:
        self._args = (lexical, ids, doc, exact, alias)
        self._values: dict[str, float] | None = None

    def _resolve(self) -> dict[str, float]:
        values = self._values
        if values is None:
            lexical, ids, doc, exact, alias = self._args
            values = lexical.explain_ids(ids, doc)
            values["exact"] = exact
            values["alias"] = alias
            self._values = values
        return values

    def __getitem__(self, key: str) -> float:
        return self._resolve()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolve())

    def __len__(self) -> int:
        return len(self._resolve())

    def __repr__(self) -> str:
        return repr(self._resolve())


def check_query(query: object, max_chars: int) -> str:
    """Validate a query's type and length (``max_query_chars``); returns it."""
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    if len(query) > max_chars:
        raise QueryError(
            f"query has {len(query):,} characters, over max_query_chars={max_chars:,}; "
            "shorten it or raise the limit"
        )
    return query


def check_boosts(exact_boost: object, alias_boost: object) -> None:
    """Validate the exact and alias boosts: finite numbers >= 0."""
    for name, boost in (("exact_boost", exact_boost), ("alias_boost", alias_boost)):
        if not isinstance(boost, _NUMBER) or not 0 <= boost < math.inf:
            raise QueryError(f"{name}={boost!r} is invalid: expected a finite number >= 0")


def check_k(name: str, k: object) -> int:
    """Validate a result count."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEARCH_K:
        raise QueryError(f"{name}={k!r} is invalid: expected an integer from 1 to {MAX_SEARCH_K}")
    return k


class KnowledgeBase:
    """An immutable, searchable snapshot of knowledge entries (or documents).

    Build with :meth:`from_sources`, :meth:`from_documents` or :meth:`build`;
    query with :meth:`search`. Safe to share between threads.
    """

    __slots__ = (
        "_active",
        "_alias_index",
        "_analyzer",
        "_bigrams",
        "_domain_codes",
        "_domains",
        "_entries",
        "_entry_ids",
        "_exact_index",
        "_integration_masks",
        "_lexical",
        "_mask_cache",
        "_phrase_lengths",
        "_position",
        "_relations",
        "_settings",
        "_skip_cache",
        "_universal",
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
    ) -> None:
        """Build from normalized entries; prefer the ``from_*`` constructors."""
        ordered = sorted(entries, key=lambda e: e.id)
        # Annotated as read-only views: a loaded snapshot decodes them lazily (Parts).
        self._position: Mapping[str, int] = {entry.id: n for n, entry in enumerate(ordered)}
        if len(self._position) != len(ordered):
            dupes = sorted({e.id for e in ordered if sum(1 for o in ordered if o.id == e.id) > 1})
            raise KnowledgeIndexError(f"duplicate entry ids {dupes[:5]}; ids must be unique")
        self._entries: Sequence[KnowledgeEntry] = tuple(ordered)
        # Ids by position: a hit's id without a trip through its entry object (two memory
        # reads instead of three per hit; ~0.5 µs of a SciFact search). None for a loaded
        # snapshot, whose entries (and ids) are decoded on first access.
        self._entry_ids: list[str] | None = [entry.id for entry in ordered]
        self._settings = settings
        self._analyzer = Analyzer(settings.analyzer)
        self.issues = tuple(issues)
        self._bigrams = settings.field_weights.get(BIGRAMS, 0.0) > 0
        self._lexical = self._build_lexical(progress)
        self._exact_index: Mapping[str, tuple[int, ...]]
        self._alias_index: Mapping[str, tuple[int, ...]]
        self._exact_index, self._alias_index = self._build_phrases(exact_ids, exact_titles)
        self._phrase_lengths = self._phrase_starts()
        self._relations: Mapping[str, tuple[str, ...]] = self._build_relations()
        self._build_masks()
        self._mask_cache: dict[tuple[Any, ...], MaskArray] = {}
        self._skip_cache: dict[int, tuple[MaskArray, MaskArray | None]] = {}
        self._unrestricted: tuple[MaskArray, MaskArray | None] | None = None
        self._word_cache: dict[str, int] = {}
        self._word_lock = threading.Lock()

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
    ) -> KnowledgeBase:
        """Index plain documents (``id``, ``title``, ``text``, optional ``metadata``).

        ``settings`` default to :func:`~groundwire.config.document_settings`. Document
        titles are not curated names, so they are not exact-phrase keys unless
        ``exact_titles=True`` (boosting them cost nDCG on SciFact and CACM); opaque
        document ids never are.
        """
        if settings is None:
            settings = document_settings()
        entries = [_document_entry(doc, n) for n, doc in enumerate(documents)]
        return cls(entries, settings, exact_ids=False, exact_titles=exact_titles, progress=progress)

    def _build_lexical(self, progress: Callable[[int], None] | None) -> LexicalIndex:
        weights = self._settings.field_weights
        names = [name for name in weights if name != BIGRAMS]
        unknown = [name for name in names if name not in FIELD_TEXT]
        if unknown:
            known = sorted([*FIELD_TEXT, BIGRAMS])
            raise KnowledgeIndexError(f"unknown field(s) {unknown}; indexable fields are {known}")
        readers = [FIELD_TEXT[name] for name in names]
        builder = LexicalIndexBuilder(
            names,
            pair_field=BIGRAMS if self._bigrams else None,
            pair_sources=[name for name in names if name in BIGRAM_SOURCES]
            if self._bigrams
            else (),
        )
        ids_of = self._term_ids_reader(builder)
        for n, entry in enumerate(self._entries):
            builder.add_ids([ids_of(text) if (text := read(entry)) else [] for read in readers])
            if progress is not None and n % 1024 == 1023:
                progress(1024)
        if progress is not None and len(self._entries) % 1024:
            progress(len(self._entries) % 1024)
        return builder.build(self._settings)

    def _term_ids_reader(self, builder: LexicalIndexBuilder) -> Callable[[str], list[int]]:
        """Text → term ids, remembering each distinct word's id (-1 for a stop word).

        One dictionary lookup per word once a word has been seen: building spends most
        of its time here, so words skip the analyzer's own cache and the vocabulary.
        """
        analyzer = self._analyzer
        known: dict[str, int] = {}

        def ids_of(text: str) -> list[int]:
            words = analyzer.words(text)
            try:
                return [known[word] for word in words]  # -1 marks a stop word
            except KeyError:
                new = list(dict.fromkeys(word for word in words if word not in known))
                for word, term in zip(new, analyzer.analyze_words(new), strict=True):
                    known[word] = builder.term_id(term) if term else -1
                return [known[word] for word in words]

        return ids_of

    def _build_phrases(
        self, exact_ids: bool, exact_titles: bool
    ) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
        phrase = self._analyzer.phrase
        exact: dict[str, list[int]] = {}
        alias: dict[str, list[int]] = {}
        for doc, entry in enumerate(self._entries):
            keys = {phrase(entry.title)} if exact_titles else set()
            if exact_ids:
                keys.add(phrase(entry.id))
            for key in keys:
                if key and key.count(" ") < MAX_PHRASE_TOKENS:
                    exact.setdefault(key, []).append(doc)
            for key in {phrase(a) for a in entry.aliases}:
                if key and key.count(" ") < MAX_PHRASE_TOKENS:
                    alias.setdefault(key, []).append(doc)
        return ({k: tuple(v) for k, v in exact.items()}, {k: tuple(v) for k, v in alias.items()})

    def _phrase_starts(self) -> dict[str, tuple[int, ...]]:
        """First two terms of every multi-term phrase → the phrase lengths starting so.

        Two terms prune almost every query position, so few n-grams are ever joined.
        """
        lengths: dict[str, set[int]] = {}
        for key in (*self._exact_index, *self._alias_index):
            terms = key.split(" ")
            if len(terms) > 1:
                lengths.setdefault(f"{terms[0]} {terms[1]}", set()).add(len(terms))
        return {start: tuple(sorted(ns)) for start, ns in lengths.items()}

    def _build_relations(self) -> dict[str, tuple[str, ...]]:
        relations: dict[str, tuple[str, ...]] = {}
        for entry in self._entries:
            links = [*entry.related, *([entry.parent] if entry.parent else [])]
            kept = [i for i in dict.fromkeys(links) if i in self._position and i != entry.id]
            if kept:
                relations[entry.id] = tuple(kept)
        return relations

    def _build_masks(self) -> None:
        n = len(self._entries)
        self._active = np.fromiter((e.status == "active" for e in self._entries), bool, n)
        self._universal = np.fromiter((not e.integrations for e in self._entries), bool, n)
        self._domains: Mapping[str, int]
        domains: dict[str, int] = {}
        self._domains = domains
        self._domain_codes: IntArray = np.fromiter(
            (domains.setdefault(e.domain.casefold(), len(domains)) for e in self._entries),
            np.int32,
            n,
        )
        masks: dict[str, MaskArray] = {}
        for doc, entry in enumerate(self._entries):
            for name in {i.casefold() for i in entry.integrations}:
                masks.setdefault(name, np.zeros(n, dtype=bool))[doc] = True
        self._integration_masks: Mapping[str, MaskArray] = masks

    # -- snapshots ----------------------------------------------------------------------------
    def _parts(self) -> Parts:
        """Everything this snapshot holds, for the snapshot writer."""
        return Parts(
            entries=self._entries,
            positions=self._position,
            settings=self._settings,
            lexical=self._lexical,
            exact_index=self._exact_index,
            alias_index=self._alias_index,
            relations=self._relations,
            active=self._active,
            universal=self._universal,
            domains=self._domains,
            domain_codes=self._domain_codes,
            integration_masks=self._integration_masks,
            issues=self.issues,
        )

    @classmethod
    def _restore(cls, parts: Parts) -> KnowledgeBase:
        """A knowledge base over already-built parts (a loaded snapshot); nothing is rebuilt."""
        kb = cls.__new__(cls)
        kb._entries, kb._position, kb._settings = parts.entries, parts.positions, parts.settings
        kb._entry_ids = None
        kb._analyzer = Analyzer(parts.settings.analyzer)
        kb.issues = tuple(parts.issues)
        kb._bigrams = parts.settings.field_weights.get(BIGRAMS, 0.0) > 0
        kb._lexical = parts.lexical
        kb._exact_index, kb._alias_index = parts.exact_index, parts.alias_index
        kb._phrase_lengths = kb._phrase_starts()
        kb._relations = parts.relations
        kb._active, kb._universal = parts.active, parts.universal
        kb._domains, kb._domain_codes = parts.domains, parts.domain_codes
        kb._integration_masks = parts.integration_masks
        kb._mask_cache = {}
        kb._skip_cache = {}
        kb._unrestricted = None
        kb._word_cache = {}
        kb._word_lock = threading.Lock()
        return kb

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this snapshot to the folder ``path``, atomically (see ``index/snapshot.py``).

        An existing snapshot at ``path`` is replaced; readers see the old one or the new
        one, never a mix, and a failed write leaves the old one. Raises IndexFormatError.
        """
        from groundwire.index.snapshot import save_snapshot

        save_snapshot(self, path)

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

        ``verify="full"`` checks every file's SHA-256 and every bound; ``"manifest"``
        checks sizes, headers and counts only (see docs). With ``expected_manifest_hash``
        the entries' content hash must equal it. Raises IndexFormatError.
        """
        from groundwire.index.snapshot import load_snapshot

        return load_snapshot(
            path,
            expected_manifest_hash,
            verify=verify,
            max_manifest_bytes=max_manifest_bytes,
            max_entries=max_entries,
            max_array_bytes=max_array_bytes,
        )

    @staticmethod
    def is_snapshot(path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is a snapshot folder (its ``manifest.json`` names the format)."""
        from groundwire.index.snapshot import is_snapshot

        return is_snapshot(path)

    # -- inspection -------------------------------------------------------------------------
    @property
    def settings(self) -> IndexSettings:
        """The settings this snapshot was built with."""
        return self._settings

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer shared by this snapshot's index and its queries."""
        return self._analyzer

    @property
    def lexical(self) -> LexicalIndex:
        """The precomputed BM25 index."""
        return self._lexical

    @property
    def entries(self) -> tuple[KnowledgeEntry, ...]:
        """Every entry, in id order."""
        entries = self._entries
        return entries if isinstance(entries, tuple) else tuple(entries)

    @property
    def exact_index(self) -> Mapping[str, tuple[str, ...]]:
        """Normalized id/title phrase → entry ids."""
        return {k: tuple(self._entries[d].id for d in v) for k, v in self._exact_index.items()}

    @property
    def alias_index(self) -> Mapping[str, tuple[str, ...]]:
        """Normalized alias phrase → entry ids."""
        return {k: tuple(self._entries[d].id for d in v) for k, v in self._alias_index.items()}

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
            cached = self._mask_cache.get(_STATUS_ONLY)  # the common case, without key work
            if cached is not None:
                return cached
        blocked = tuple(sorted({d.casefold() for d in blocked_domains}))
        enabled = (
            None
            if scope is None
            else tuple(sorted({i.casefold() for i in scope.enabled_integrations}))
        )
        key = (blocked, enabled)
        mask = self._mask_cache.get(key)
        if mask is None:
            mask = self._active.copy()
            codes = [self._domains[d] for d in blocked if d in self._domains]
            if codes:
                mask &= ~np.isin(self._domain_codes, codes)
            if enabled is not None:
                allowed = self._universal.copy()
                for name in enabled:
                    if name in self._integration_masks:
                        allowed |= self._integration_masks[name]
                mask &= allowed
            mask.flags.writeable = False
            if len(self._mask_cache) >= _MASK_CACHE_LIMIT:
                self._mask_cache.clear()
            self._mask_cache[key] = mask
        if allow is not None:  # one fail-closed evaluation (access/authorize.py): only True allows
            check_callback(allow, "allow")
            mask, _ = authorize_mask(
                mask, self.entry, allow, option="allow", noun="entry", describe=_entry_name
            )
        return mask

    def _skip(self, mask: MaskArray | None) -> MaskArray | None:
        """The complement of a mask (cached per mask object); None when it rejects nothing."""
        if mask is None:
            return None
        cached = self._skip_cache.get(id(mask))
        if cached is None or cached[0] is not mask:  # holding the mask keeps its id unique
            if len(self._skip_cache) >= _MASK_CACHE_LIMIT:
                self._skip_cache.clear()
            skip = ~mask
            cached = (mask, skip if skip.any() else None)
            self._skip_cache[id(mask)] = cached
        return cached[1]

    def _eligible(
        self,
        scope: Scope | None,
        blocked_domains: Iterable[str],
        allow: Callable[[KnowledgeEntry], object] | None,
    ) -> tuple[MaskArray, MaskArray | None]:
        """:meth:`eligibility` and its :meth:`_skip`; kept for unrestricted searches."""
        if scope is None and allow is None and not blocked_domains:
            unrestricted = self._unrestricted
            if unrestricted is None:
                mask = self.eligibility()
                unrestricted = self._unrestricted = (mask, self._skip(mask))
            return unrestricted
        mask = self.eligibility(scope, blocked_domains, allow)
        return mask, self._skip(mask)

    def is_eligible(self, entry_id: str, mask: MaskArray) -> bool:
        """Whether an entry id is allowed by a mask from :meth:`eligibility`."""
        doc = self._position.get(entry_id)
        return doc is not None and bool(mask[doc])

    # -- scoring ------------------------------------------------------------------------------
    def query_ids(self, segments: Iterable[Sequence[str]]) -> list[int]:
        """The BM25 query of analyzed text segments: each segment's term ids and, when the
        index has term pairs, its adjacent pairs (a pair never spans two segments)."""
        query_ids = self._lexical.query_ids
        return [tid for terms in segments for tid in query_ids(terms)]

    def _word_codes(self, words: list[str]) -> list[int]:
        """The word codes of normalized query words (from ``Analyzer.words``): each word's
        term id, SKIP for a stop word, UNKNOWN for a word whose term is not indexed.

        Each distinct word is analyzed and looked up once, then remembered (up to
        WORD_CACHE_LIMIT words; the cache is emptied when full), so a known word costs one
        dictionary lookup instead of the analyzer's stem cache plus the vocabulary.
        Thread-safe: lookups only read; new words are added under a lock, and a search
        uses the codes it read or computed even if another thread empties the cache.
        """
        known = self._word_cache
        try:
            return [known[word] for word in words]
        except KeyError:
            return self._learn_words(words)

    def _learn_words(self, words: list[str]) -> list[int]:
        known = self._word_cache
        codes = {word: code for word in words if (code := known.get(word)) is not None}
        new = [word for word in dict.fromkeys(words) if word not in codes]
        get = self._lexical.vocabulary.get
        learned = {
            word: get(term, UNKNOWN) if term else SKIP  # "" is a stop word
            for word, term in zip(new, self._analyzer.analyze_words(new), strict=True)
        }
        with self._word_lock:
            if len(known) + len(learned) > WORD_CACHE_LIMIT:
                known.clear()
            known.update(learned)
        codes.update(learned)
        return [codes[word] for word in words]

    def phrase_matches(self, terms: Sequence[str]) -> tuple[set[int], set[int]]:
        """Positions of entries whose exact (id/title) or alias phrase occurs in ``terms``.

        Checks every contiguous n-gram of the terms up to the longest indexed phrase.
        """
        exact: set[int] = set()
        alias: set[int] = set()
        exact_index, alias_index = self._exact_index, self._alias_index
        if not exact_index and not alias_index:  # e.g. documents: no phrase keys at all
            return exact, alias
        starts = self._phrase_lengths
        count = len(terms)
        for i, term in enumerate(terms):
            if term in exact_index:
                exact.update(exact_index[term])
            if term in alias_index:
                alias.update(alias_index[term])
            if i + 1 < count:
                for n in starts.get(f"{term} {terms[i + 1]}", ()):
                    if i + n > count:
                        break
                    key = " ".join(terms[i : i + n])
                    exact.update(exact_index.get(key, ()))
                    alias.update(alias_index.get(key, ()))
        return exact, alias

    def rank(
        self,
        lexical_ids: Sequence[int],
        phrase_terms: Sequence[str],
        *,
        lexical_k: int,
        limit: int,
        mask: MaskArray | None = None,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
    ) -> Ranking:
        """Union of the BM25 top ``lexical_k`` (for term ids from :meth:`query_ids`) and
        phrase hits, boosted, sorted, capped.

        Only positions allowed by ``mask`` take part (before top-k). A boost of 0
        turns its phrase channel off.
        """
        lexical_index = self._lexical
        skip = self._skip(mask)
        if skip is None:
            mask = None  # everything is eligible: skip masking work
        doc_list, value_list = lexical_index.top(lexical_ids, lexical_k, skip)
        exact: set[int] = set()
        alias: set[int] = set()
        if exact_boost > 0 or alias_boost > 0:
            exact, alias = self.phrase_matches(phrase_terms)
            exact = {d for d in exact if mask is None or mask[d]} if exact_boost > 0 else set()
            alias = {d for d in alias if mask is None or mask[d]} if alias_boost > 0 else set()
        if not exact and not alias:  # top() already sorted by score, then position
            head = value_list[:limit]
            return Ranking(doc_list[:limit], head, head, exact, alias, len(doc_list))
        lexical = dict(zip(doc_list, value_list, strict=True))
        for doc in exact | alias:
            if doc not in lexical:
                lexical[doc] = lexical_index.score_of_ids(lexical_ids, doc)
        order = sorted(
            (
                -(
                    lex
                    + (exact_boost if doc in exact else 0.0)
                    + (alias_boost if doc in alias else 0.0)
                ),
                doc,
                lex,
            )
            for doc, lex in lexical.items()
        )[:limit]
        return Ranking(
            [doc for _, doc, _ in order],
            [-negative for negative, _, _ in order],
            [lex for _, _, lex in order],
            exact,
            alias,
            len(lexical),
        )

    def breakdown(
        self, lexical_ids: Sequence[int], doc: int, exact: float = 0.0, alias: float = 0.0
    ) -> Breakdown:
        """The lazily computed explanation of position ``doc`` with the boosts it received."""
        return Breakdown(self._lexical, lexical_ids, doc, exact, alias)

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        scope: Scope | None = None,
        blocked_domains: Iterable[str] = (),
        allow: Callable[[KnowledgeEntry], object] | None = None,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> list[Hit]:
        """The ``k`` best active entries for ``query``: BM25 plus exact/alias boosts.

        Ties break on id (code point order). ``scope``, ``blocked_domains`` and
        ``allow`` restrict eligibility before ranking (see :meth:`eligibility`).
        Each hit's ``breakdown`` explains its score per field and boost.
        """
        found = self._ranked(
            query, k, scope, blocked_domains, allow, exact_boost, alias_boost, max_query_chars
        )
        if found is None:
            return []
        docs, scores, exact, alias, ids = found
        index = self._lexical
        breakdowns: Iterable[Breakdown]
        if exact or alias:
            breakdowns = [
                Breakdown(
                    index,
                    ids,
                    doc,
                    exact_boost if doc in exact else 0.0,
                    alias_boost if doc in alias else 0.0,
                )
                for doc in docs
            ]
        else:  # no phrase hits among the results (the common case): no Python-level loop
            breakdowns = map(Breakdown, repeat(index), repeat(ids), docs)
        return list(map(_new_hit, zip(self._ids_of(docs), scores, breakdowns, strict=True)))

    def search_ids(
        self,
        query: str,
        k: int = 10,
        *,
        scope: Scope | None = None,
        blocked_domains: Iterable[str] = (),
        allow: Callable[[KnowledgeEntry], object] | None = None,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> tuple[list[str], list[float]]:
        """:meth:`search` reduced to ranked ids and scores, without explanations.

        Same ranking as :meth:`search`; cheaper when only the order matters (evaluation,
        pipelines that fetch entries themselves).
        """
        found = self._ranked(
            query, k, scope, blocked_domains, allow, exact_boost, alias_boost, max_query_chars
        )
        if found is None:
            return [], []
        return self._ids_of(found[0]), found[1]

    def _ids_of(self, docs: list[int]) -> list[str]:
        """The entry ids at positions ``docs``."""
        ids = self._entry_ids
        if ids is not None:
            return [ids[doc] for doc in docs]
        entries = self._entries
        return [entries[doc].id for doc in docs]

    def _ranked(
        self,
        query: str,
        k: int,
        scope: Scope | None,
        blocked_domains: Iterable[str],
        allow: Callable[[KnowledgeEntry], object] | None,
        exact_boost: float,
        alias_boost: float,
        max_query_chars: int,
    ) -> tuple[list[int], list[float], Set[int], Set[int], Sequence[int]] | None:
        """Validate a search and rank it; None when the query has no terms.

        Returns the documents and scores, best first, the exact and alias phrase hits
        among the candidates, and the query's term ids (resolved lazily, for breakdowns).
        Without phrase boosts to apply (boosts 0, or no phrase keys at all, e.g. documents),
        the query goes from word codes to results in one kernel call
        (:meth:`LexicalIndex.top_codes`); otherwise through :meth:`rank`, which gives the
        same BM25 order.
        """
        words = self._analyzer.words(check_query(query, max_query_chars))
        check_k("k", k)
        check_callback(allow, "allow")
        if exact_boost is not DEFAULT_EXACT_BOOST or alias_boost is not DEFAULT_ALIAS_BOOST:
            check_boosts(exact_boost, alias_boost)  # the defaults are valid
        codes = self._word_codes(words)
        if codes.count(SKIP) == len(codes):  # no words, or only stop words
            return None
        mask, skip = self._eligible(scope, blocked_domains, allow)
        lexical = self._lexical
        if (exact_boost > 0 or alias_boost > 0) and (self._exact_index or self._alias_index):
            ids = lexical.ids_of_codes(codes)
            ranking = self.rank(
                ids,
                self._analyzer.terms(words),
                lexical_k=k,
                limit=k,
                mask=mask,
                exact_boost=exact_boost,
                alias_boost=alias_boost,
            )
            return ranking.docs, ranking.scores, ranking.exact, ranking.alias, ids
        docs, scores = lexical.top_codes(codes, k, skip)
        return docs, scores, _NO_PHRASE_HITS, _NO_PHRASE_HITS, QueryIds(lexical, codes)

    def explain(
        self,
        query: str,
        entry_id: str,
        *,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> Hit:
        """The score of one entry for ``query`` with its breakdown, eligible or not.

        Takes the same boosts as :meth:`search`, so the two agree on every hit.
        """
        doc = self._position.get(entry_id)
        if doc is None:
            raise KnowledgeIndexError(f"no entry with id {entry_id!r} in this knowledge base")
        terms = self._analyzer.tokens(check_query(query, max_query_chars))
        lexical_ids = self._lexical.query_ids(terms)
        exact, alias = (
            self.phrase_matches(terms) if exact_boost > 0 or alias_boost > 0 else ((), ())
        )
        lexical = self._lexical.score_of_ids(lexical_ids, doc)
        breakdown = self.breakdown(
            lexical_ids,
            doc,
            exact_boost if doc in exact else 0.0,
            alias_boost if doc in alias else 0.0,
        )
        return Hit(entry_id, lexical + breakdown["exact"] + breakdown["alias"], breakdown)


def _entry_name(entry: KnowledgeEntry) -> str:
    """An entry as the operator's log names it."""
    return repr(entry.id)


def _document_entry(doc: Document | Mapping[str, Any], n: int) -> KnowledgeEntry:
    if isinstance(doc, Mapping):
        doc_id, title, text = doc.get("id", doc.get("_id")), doc.get("title", ""), doc.get("text")
        metadata = doc.get("metadata") or {}
    elif isinstance(doc, Document):
        doc_id, title, text, metadata = doc.id, doc.title, doc.text, doc.metadata
    else:
        raise KnowledgeIndexError(
            f"document #{n + 1} is a {type(doc).__name__}; expected a "
            "Document or a mapping with id, title and text"
        )
    if not isinstance(doc_id, str) or not doc_id:
        raise KnowledgeIndexError(
            f"document #{n + 1} has no id; give every document a unique string 'id'"
        )
    if not isinstance(title, str) or not isinstance(text, str):
        raise KnowledgeIndexError(f"document {doc_id!r}: 'title' and 'text' must be strings")
    # A chunk's source version (chunks_to_documents), so it is cited as [KB:<id>@<version>].
    version = metadata.get("version", "") if isinstance(metadata, Mapping) else ""
    code = isinstance(metadata, Mapping) and metadata.get("kind") == "code"
    symbols = metadata.get("symbols", ()) if code else ()
    return KnowledgeEntry(
        id=doc_id,
        title=title,
        summary="",
        domain="",
        integrations=(),
        body=text,
        # Names a code chunk defines, written the way code writes them (snake_case,
        # camelCase, digits), are phrase keys: a query naming one finds its definition.
        aliases=tuple(_CODE_NAME.findall(_symbols(symbols))),
        version=version if isinstance(version, str) else "",
        metadata=dict(metadata),
    )
