"""Scoped views of a knowledge base: one principal's entries, and nothing else.

- :func:`label_index` — the tenant/ACL labels of a knowledge base as arrays (built once
  per snapshot, cached), to compile a :class:`~groundwire.Filter` to a mask.
- :func:`subset` — a knowledge base of some entries of another, built the same way
  (settings, phrase keys), with ``related``/``parent`` links cut to the entries kept.
- :class:`ScopedReader` — ``kb.reader(principal)``: the subset a principal may see.

A subset is a knowledge base of its own: its BM25 statistics, phrase maps and relations
come from its entries alone, so an entry left out changes no score of one kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields

import numpy as np

from groundwire.access.authorize import authorize_mask, check_callback, predicate_of
from groundwire.access.filters import LabelIndex
from groundwire.config import (
    DEFAULT_ALIAS_BOOST,
    DEFAULT_EXACT_BOOST,
    DEFAULT_MAX_QUERY_CHARS,
    TENANT_POOL_SNAPSHOTS,
)
from groundwire.errors import ConfigError, KnowledgeIndexError
from groundwire.index.knowledge_base import KnowledgeBase, entry_name
from groundwire.index.lexical import MaskArray
from groundwire.index.store.views import label_free
from groundwire.index.vectors import VectorIndex
from groundwire.model import Filter, Hit, KnowledgeEntry, Principal, Scope

__all__ = ["ScopedReader", "entry_name", "label_index", "scrub_links", "subset", "subset_vectors"]

# Per-snapshot caches hold their knowledge base (so an id is never reused while cached),
# for as many snapshots as the tenant pools.
_CACHE_LIMIT = TENANT_POOL_SNAPSHOTS
_labels: dict[int, tuple[KnowledgeBase, LabelIndex]] = {}
_lock = threading.Lock()
_reading: dict[int, threading.Lock] = {}  # one reader of a snapshot's labels at a time


def label_index(kb: KnowledgeBase) -> LabelIndex:
    """The labels of ``kb``'s entries (read once per snapshot; a snapshot never changes).

    Only the entries whose stored line may hold a label are decoded (``label_free``;
    decoding all of them took seconds at 200k entries), and concurrent callers (the
    engine's warm-up and a first turn) wait for one reading."""
    cached = _labels.get(id(kb))
    if cached is not None and cached[0] is kb:
        return cached[1]
    with _lock:
        reading = _reading.setdefault(id(kb), threading.Lock())
    with reading:
        cached = _labels.get(id(kb))  # read by another caller meanwhile
        if cached is not None and cached[0] is kb:
            return cached[1]
        entries = kb._entries  # read in place: a loaded snapshot's stay undecoded
        built = LabelIndex(entries, label_free(entries))
        with _lock:
            if len(_labels) >= _CACHE_LIMIT:
                _labels.clear()
            _labels[id(kb)] = (kb, built)
            _reading.pop(id(kb), None)
    return built


_ENTRY_SLOTS: tuple[str, ...] = tuple(f.name for f in fields(KnowledgeEntry))
#: Entries with links cut, kept for reuse (a few turns' worth of several snapshots).
_CUT_CACHE_LIMIT = 4096
_cuts: dict[tuple[int, tuple[str, ...], str | None], tuple[KnowledgeEntry, KnowledgeEntry]] = {}


def scrub_links(entry: KnowledgeEntry, visible: Callable[[str], bool]) -> KnowledgeEntry:
    """``entry`` with ``related``/``parent`` cut to the ids ``visible`` accepts (itself when
    nothing goes), so a returned entry never names one the reader may not see."""
    related = tuple(i for i in entry.related if visible(i))
    parent = entry.parent if entry.parent is not None and visible(entry.parent) else None
    if related == entry.related and parent == entry.parent:
        return entry
    # Turns on one snapshot cut the same links again and again: reuse the cut copy
    # (entries are immutable; the cache holds the original, so its id stays unique).
    key = (id(entry), related, parent)
    cached = _cuts.get(key)
    if cached is not None and cached[0] is entry:
        return cached[1]
    cut = object.__new__(KnowledgeEntry)  # replace() would re-run __init__ on every field
    for name in _ENTRY_SLOTS:
        object.__setattr__(cut, name, getattr(entry, name))
    object.__setattr__(cut, "related", related)
    object.__setattr__(cut, "parent", parent)
    if len(_cuts) >= _CUT_CACHE_LIMIT:
        _cuts.clear()
    _cuts[key] = (entry, cut)
    return cut


def subset(kb: KnowledgeBase, keep: MaskArray) -> KnowledgeBase:
    """The entries of ``kb`` that ``keep`` selects, as a knowledge base built like ``kb``.

    Returns ``kb`` itself when everything is kept. Validation issues are not carried
    over (they may name entries left out).
    """
    if bool(keep.all()):
        return kb
    entries = [kb.entry(doc) for doc in np.flatnonzero(keep).tolist()]
    kept = {entry.id for entry in entries}
    exact_ids, exact_titles = kb.phrase_keys
    return KnowledgeBase(
        [scrub_links(entry, kept.__contains__) for entry in entries],
        kb.settings,
        exact_ids=exact_ids,
        exact_titles=exact_titles,
    )


_views: dict[tuple[int, int], tuple[VectorIndex, KnowledgeBase, VectorIndex]] = {}


def subset_vectors(kb: KnowledgeBase, view: KnowledgeBase, vectors: VectorIndex) -> VectorIndex:
    """``vectors`` of ``kb`` restricted to the entries of ``view`` (a :func:`subset` of
    ``kb``): what dense channels of the view search. ``vectors`` itself when the view is
    ``kb``; built once per (vectors, view)."""
    if view is kb:
        return vectors
    key = (id(vectors), id(view))
    cached = _views.get(key)
    if cached is not None and cached[0] is vectors and cached[1] is view:
        return cached[2]
    vectors.check_for(kb)
    positions = [kb.position(entry.id) for entry in view]
    if any(position is None for position in positions):
        raise KnowledgeIndexError("the view holds entries its knowledge base does not")
    part = vectors.subset([p for p in positions if p is not None])
    with _lock:
        if len(_views) >= _CACHE_LIMIT:
            _views.clear()
        _views[key] = (vectors, view, part)
    return part


class ScopedReader:
    """One principal's view of a knowledge base (``kb.reader(principal)``).

    Holds exactly the entries whose tenant and ACL labels admit ``principal`` (None: the
    anonymous view, entries without labels), that match ``where`` (metadata constraints)
    and that ``authorize(principal, entry)`` allows — called once per such entry here,
    failing closed (see :mod:`groundwire.access.authorize`; failures are listed in
    :attr:`authorization_errors`). The view is its own knowledge base (:func:`subset`):
    what the principal cannot see changes no score, no phrase match and no relation, and
    entries' ``related``/``parent`` name visible entries only. Unknown and invisible ids
    are indistinguishable. Readers share no mutable state: :meth:`close` drops this one's
    view and affects no other reader and not the snapshot.
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        principal: Principal | None,
        *,
        where: Mapping[str, str | Sequence[str]] | None = None,
        authorize: Callable[[Principal | None, KnowledgeEntry], object] | None = None,
        authorize_timeout_ms: int | None = None,
    ) -> None:
        if not isinstance(kb, KnowledgeBase):
            raise ConfigError(f"kb must be a KnowledgeBase, got {type(kb).__name__}")
        if principal is not None and not isinstance(principal, Principal):
            raise ConfigError(
                "principal must be a Principal(tenant, subject, groups) your authentication "
                f"verified, or None for the anonymous view; got {type(principal).__name__}"
            )
        check_callback(authorize, "authorize")
        if authorize_timeout_ms is not None and (
            not isinstance(authorize_timeout_ms, int) or authorize_timeout_ms < 1
        ):
            raise ConfigError(f"authorize_timeout_ms={authorize_timeout_ms!r}: expected >= 1")
        self.principal = principal
        try:
            flt = Filter.of(principal, where=where)
        except TypeError as exc:
            raise ConfigError(str(exc)) from exc
        keep = label_index(kb).mask(flt)
        errors: tuple[str, ...] = ()
        if authorize is not None:
            keep, verdicts = authorize_mask(
                keep,
                kb.entry,
                predicate_of(principal, authorize),
                option="authorize",
                noun="entry",
                timeout_ms=authorize_timeout_ms,
                describe=entry_name,
            )
            errors = verdicts.errors
        self.authorization_errors: tuple[str, ...] = errors
        self._source: KnowledgeBase | None = kb
        self._kb: KnowledgeBase | None = subset(kb, keep)

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._kb is None

    def close(self) -> None:
        """Drop this reader's view; every later call raises KnowledgeIndexError."""
        self._kb = self._source = None

    def __enter__(self) -> ScopedReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def knowledge_base(self) -> KnowledgeBase:
        """The view as a knowledge base (hand it to ``retrieve``, ``retrieve_evidence``, ...)."""
        kb = self._kb
        if kb is None:
            raise KnowledgeIndexError("this reader is closed; open a new one with kb.reader()")
        return kb

    def vectors_for(self, vectors: VectorIndex) -> VectorIndex:
        """The rows of ``vectors`` (built for the reader's knowledge base) that belong to
        the view, as the view's own vector index (for dense and hybrid searches)."""
        view, source = self.knowledge_base, self._source
        assert source is not None
        return subset_vectors(source, view, vectors)

    # -- reading ----------------------------------------------------------------------------
    def search(
        self,
        query: str,
        k: int = 10,
        *,
        scope: Scope | None = None,
        blocked_domains: Sequence[str] = (),
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> list[Hit]:
        """:meth:`KnowledgeBase.search` over the view."""
        return self.knowledge_base.search(
            query,
            k,
            scope=scope,
            blocked_domains=blocked_domains,
            exact_boost=exact_boost,
            alias_boost=alias_boost,
            max_query_chars=max_query_chars,
        )

    def search_ids(
        self,
        query: str,
        k: int = 10,
        *,
        scope: Scope | None = None,
        blocked_domains: Sequence[str] = (),
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> tuple[list[str], list[float]]:
        """:meth:`KnowledgeBase.search_ids` over the view."""
        return self.knowledge_base.search_ids(
            query, k, scope=scope, blocked_domains=blocked_domains, max_query_chars=max_query_chars
        )

    def explain(self, query: str, entry_id: str) -> Hit:
        """:meth:`KnowledgeBase.explain` over the view (an invisible id is unknown)."""
        return self.knowledge_base.explain(query, entry_id)

    def get(self, entry_id: str) -> KnowledgeEntry | None:
        """The visible entry with this id, or None."""
        return self.knowledge_base.get(entry_id)

    def related(self, entry_id: str) -> tuple[str, ...]:
        """Visible related then parent ids of a visible entry."""
        return self.knowledge_base.related(entry_id)

    @property
    def entries(self) -> tuple[KnowledgeEntry, ...]:
        """Every visible entry, in id order."""
        return self.knowledge_base.entries

    def __len__(self) -> int:
        return len(self.knowledge_base)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.knowledge_base

    def __iter__(self) -> Iterator[KnowledgeEntry]:
        return iter(self.knowledge_base)
