"""One turn's eligibility: what this request may see, computed once, before any top-k.

:func:`turn_eligibility` evaluates a :class:`~groundwire.Filter` and the host's predicate
over a knowledge base, in this order:

1. status, blocked domains and integrations: the knowledge base's cached masks;
2. tenant, ACL and ``where``: the label index (:func:`~groundwire.index.scoped.label_index`);
3. the host predicate ``allow(entry)`` on the entries still eligible, failing closed
   (:mod:`groundwire.access.authorize`), with the optional deadline.

The :class:`Eligibility` it returns is the one answer every channel of the turn uses.
The pipeline ranks on ``pool`` (the tenant's statistics pool, below) under
``pool_mask``: the lexical and phrase channels, the dense channel over the pool's rows
of the vectors (:func:`~groundwire.index.scoped.subset_vectors`) and the reranker's
candidates all see only eligible entries before their top-k. ``mask`` covers the whole
snapshot's positions: expansion checks links against it (and every added entry again
on its record, :meth:`Eligibility.allows`), as will stores that index the whole
snapshot.

**Statistics isolation between tenants.** Lexical scores come from a statistics pool
per tenant (:func:`tenant_pool`): that tenant's entries plus the shared ones (no tenant
label), indexed on their own. Another tenant's entries change no score — document
frequencies, lengths, phrase keys — so a tenant cannot learn another's vocabulary
through scores. Within a tenant, entries hidden by ACL, status, domain, scope or the
predicate take no slot but do count in the tenant's statistics (the same trade-off as a
search engine's document-level security). A principal that needs even that isolated uses
``kb.reader(principal)``, whose view is a knowledge base of its visible entries only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

import numpy as np

from groundwire.access.authorize import authorize_mask, check_callback
from groundwire.access.filters import admits
from groundwire.config import (
    ELIGIBILITY_CACHE_BYTES,
    TENANT_POOL_LIMIT,
    TENANT_POOL_SNAPSHOTS,
)
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import IntArray, MaskArray
from groundwire.index.scoped import entry_name, label_index, scrub_links, subset
from groundwire.model import Filter, KnowledgeEntry, Scope

__all__ = ["Eligibility", "tenant_pool", "turn_eligibility", "warm_tenant_pools"]


@dataclass(frozen=True, slots=True)
class Eligibility:
    """What one request may see, as masks, and the statistics pool lexical ranking uses.

    ``mask`` covers ``kb``'s positions; ``pool`` is ``kb`` or its tenant's pool, whose
    positions ``pool_mask`` covers (``pool_positions[i]`` is the ``kb`` position of
    pool entry ``i``; None when the pool is ``kb``). ``unscoped`` and ``pool_unscoped``
    are the same without the integration scope (labels, domains and predicate still
    apply). ``authorization_errors`` lists the predicate's failures (counts per kind, no
    ids).
    """

    kb: KnowledgeBase
    filter: Filter
    mask: MaskArray
    pool: KnowledgeBase
    pool_mask: MaskArray
    pool_positions: IntArray | None
    unscoped: MaskArray
    pool_unscoped: MaskArray
    authorization_errors: tuple[str, ...] = ()
    #: Memos of :meth:`visible` and :meth:`scrub` under ``mask``: shared by every turn
    #: with the same masks (no predicate), so links are checked once per snapshot view.
    seen: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)
    cuts: dict[str, tuple[KnowledgeEntry, KnowledgeEntry]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def widened(self, integrations: Iterable[str]) -> Eligibility:
        """The same eligibility with ``integrations`` (casefolded) enabled as well.

        Only the integration scope changes: it is re-applied to ``unscoped``, which already
        holds the tenant, ACL, ``where``, blocked domains and the predicate's verdicts, so
        nothing the request may not see can become eligible (and the predicate is not
        asked again). Unchanged when the filter has no integration scope.
        """
        names = frozenset(integrations)
        enabled = self.filter.integrations
        if enabled is None or names <= enabled:
            return self
        flt = replace(self.filter, integrations=enabled | names)
        mask = self.unscoped & self.kb.eligibility(Scope(tuple(sorted(enabled | names))), ())
        mask.flags.writeable = False
        positions = self.pool_positions
        return Eligibility(
            self.kb,
            flt,
            mask,
            self.pool,
            mask if positions is None else mask[positions],
            positions,
            self.unscoped,
            self.pool_unscoped,
            self.authorization_errors,
        )

    def allows(self, entry_id: str) -> bool:
        """Whether ``entry_id`` is eligible: in the mask, and its record passes the filter
        (checked again on the record itself, as after relationship expansion)."""
        if not self.visible(entry_id):
            return False
        doc = self.kb.position(entry_id)
        assert doc is not None
        return admits(self.filter, self.kb.entry(doc))

    def visible(self, entry_id: str) -> bool:
        """Whether ``entry_id`` is in the mask (the cheap check; :meth:`allows` also
        re-reads the record). Remembered for the turn: linked ids repeat."""
        known = self.seen.get(entry_id)
        if known is None:
            doc = self.kb.position(entry_id)
            known = self.seen[entry_id] = doc is not None and bool(self.mask[doc])
        return known

    def scrub(self, entry: KnowledgeEntry) -> KnowledgeEntry:
        """``entry`` with ``related``/``parent`` cut to ids this request may see."""
        if not entry.related and entry.parent is None:
            return entry
        known = self.cuts.get(entry.id)
        if known is not None and known[0] is entry:
            return known[1]
        cut = scrub_links(entry, self.visible)
        self.cuts[entry.id] = (entry, cut)
        return cut


# -- per-snapshot memory ----------------------------------------------------------------------
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class _PerSnapshot(Generic[_K, _V]):
    """Values per (snapshot, key), least recently used dropped, for the
    :data:`TENANT_POOL_SNAPSHOTS` most recent snapshots (so a rebuild frees the old one).
    Each snapshot's entry holds the snapshot: its id is never reused while cached."""

    def __init__(self, limit: Callable[[KnowledgeBase], int]) -> None:
        self._limit = limit
        self._held: OrderedDict[int, tuple[KnowledgeBase, OrderedDict[_K, _V]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, kb: KnowledgeBase, key: _K) -> _V | None:
        with self._lock:
            held = self._held.get(id(kb))
            if held is None or held[0] is not kb or key not in held[1]:
                return None
            self._held.move_to_end(id(kb))
            held[1].move_to_end(key)
            return held[1][key]

    def put(self, kb: KnowledgeBase, key: _K, value: _V) -> None:
        with self._lock:
            held = self._held.get(id(kb))
            if held is None or held[0] is not kb:
                held = self._held[id(kb)] = (kb, OrderedDict())
            self._held.move_to_end(id(kb))
            held[1][key] = value
            while len(held[1]) > self._limit(kb):
                held[1].popitem(last=False)
            while len(self._held) > TENANT_POOL_SNAPSHOTS:
                self._held.popitem(last=False)

    def snapshots(self) -> list[KnowledgeBase]:
        """The snapshots held, oldest first."""
        with self._lock:
            return [kb for kb, _ in self._held.values()]


# -- tenant statistics pools -------------------------------------------------------------------
Pool = tuple[KnowledgeBase, IntArray | None]
_pools: _PerSnapshot[str | None, Pool] = _PerSnapshot(lambda kb: TENANT_POOL_LIMIT)
_building: dict[tuple[int, str | None], threading.Lock] = {}
_building_lock = threading.Lock()


def tenant_pool(kb: KnowledgeBase, tenant: str | None) -> Pool:
    """The statistics pool of ``tenant`` in ``kb`` and its entries' ``kb`` positions.

    The pool holds the tenant's entries plus the shared ones; it is ``kb`` itself (and the
    positions None) when that is every entry, as in a knowledge base without tenant
    labels. Built once per (snapshot, tenant); :data:`TENANT_POOL_LIMIT` pools are kept
    per snapshot for the :data:`TENANT_POOL_SNAPSHOTS` most recent snapshots; concurrent
    turns of one tenant build it once.
    """
    found = _pools.get(kb, tenant)
    if found is not None:
        return found
    key = (id(kb), tenant)
    with _building_lock:
        building = _building.setdefault(key, threading.Lock())
    with building:
        found = _pools.get(kb, tenant)  # another turn may have built it while this one waited
        if found is not None:
            return found
        keep = label_index(kb).tenant_mask(tenant)
        pool = subset(kb, keep)
        built: Pool = (pool, None if pool is kb else np.flatnonzero(keep).astype(np.int64))
        _pools.put(kb, tenant, built)
        with _building_lock:
            _building.pop(key, None)
    return built


def warm_tenant_pools(kb: KnowledgeBase) -> None:
    """Build the pools of ``kb``'s tenants (and the anonymous one) ahead of the first turns."""
    for tenant in (None, *label_index(kb).tenants[: TENANT_POOL_LIMIT - 1]):
        tenant_pool(kb, tenant)


# -- the turn ----------------------------------------------------------------------------------
def turn_eligibility(
    kb: KnowledgeBase,
    flt: Filter,
    allow: Callable[[KnowledgeEntry], object] | None = None,
    *,
    timeout_ms: int | None = None,
) -> Eligibility:
    """The eligibility of one request (see the module docstring); computed once per turn.

    The predicate is asked about every entry eligible but for the integration scope, so
    that the unscoped view (the scope hint's) holds the same answers without asking twice.
    """
    check_callback(allow, "allow")
    if allow is None:  # the masks depend on the filter alone: computed once per snapshot
        view = _views.get(kb, flt)
        if view is None:
            view = _evaluate(kb, flt, None, timeout_ms)
            _views.put(kb, flt, view)
        return view
    return _evaluate(kb, flt, allow, timeout_ms)


#: Filters (principal views x scopes x blocked domains) remembered per snapshot, at most
#: (fewer for large snapshots: ELIGIBILITY_CACHE_BYTES bounds their masks).
_VIEW_LIMIT = 256
# filter -> its eligibility when no predicate is involved, so the masks and the link memos
# are reused turn after turn.
_views: _PerSnapshot[Filter, Eligibility] = _PerSnapshot(
    lambda kb: max(4, min(_VIEW_LIMIT, ELIGIBILITY_CACHE_BYTES // max(1, 4 * len(kb))))
)


def _evaluate(
    kb: KnowledgeBase,
    flt: Filter,
    allow: Callable[[KnowledgeEntry], object] | None,
    timeout_ms: int | None,
) -> Eligibility:
    blocked = tuple(sorted(flt.blocked_domains))
    unscoped = kb.eligibility(None, blocked) & label_index(kb).mask(flt)
    errors: tuple[str, ...] = ()
    if allow is not None:
        unscoped, verdicts = authorize_mask(
            unscoped,
            kb.entry,
            allow,
            option="allow",
            noun="entry",
            timeout_ms=timeout_ms,
            describe=entry_name,
        )
        errors = verdicts.errors
    mask = unscoped
    if flt.integrations is not None:
        mask = unscoped & kb.eligibility(Scope(tuple(sorted(flt.integrations))), ())
    unscoped.flags.writeable = False
    mask.flags.writeable = False
    pool, positions = tenant_pool(kb, flt.tenant)
    if positions is None:
        return Eligibility(kb, flt, mask, pool, mask, None, unscoped, unscoped, errors)
    return Eligibility(
        kb, flt, mask, pool, mask[positions], positions, unscoped, unscoped[positions], errors
    )
