"""A :class:`~groundwire.Filter` evaluated: on one record, or compiled to a mask over many.

:func:`admits` is the reference meaning of a filter on one record (an entry, a chunk
indexed as an entry, a memory): every store must agree with it. :class:`LabelIndex`
compiles the label part of a filter (tenant, ACL, ``where``) to a boolean mask over a
sequence of entries in one pass of array operations; the knowledge base's own masks do
the rest (status, domains, integrations). A test checks that both give the same answer.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.access.labels import Labels, read_labels
from groundwire.model import Filter, KnowledgeEntry

__all__ = ["LabelIndex", "admits", "admits_labels", "matches_where"]

Mask = npt.NDArray[np.bool_]
_CACHE_LIMIT = 64
_MALFORMED = -1  # tenant code of a record whose labels do not parse: matches no filter
_SHARED = 0  # tenant code of a record without a tenant


def admits_labels(flt: Filter, labels: Labels | None) -> bool:
    """Whether a principal filter may see a record with these labels (None: malformed)."""
    if labels is None:
        return False
    if labels.tenant is not None and labels.tenant != flt.tenant:
        return False
    return not labels.acl or not flt.labels.isdisjoint(labels.acl)


def matches_where(flt: Filter, metadata: Mapping[str, Any]) -> bool:
    """Whether metadata meets every ``where`` constraint (a list value: any of its items)."""
    for key, values in flt.where:
        value = metadata.get(key)
        items = value if isinstance(value, list | tuple) else (value,)
        if not any(isinstance(item, str) and item in values for item in items):
            return False
    return True


def admits(flt: Filter, entry: KnowledgeEntry) -> bool:
    """Whether ``entry`` is eligible under ``flt`` (the conjunction in :class:`Filter`)."""
    if entry.status != "active" or entry.domain.casefold() in flt.blocked_domains:
        return False
    scoped = flt.integrations is not None and bool(entry.integrations)
    if scoped and flt.integrations.isdisjoint(i.casefold() for i in entry.integrations):  # type: ignore[union-attr]
        return False
    return admits_labels(flt, read_labels(entry.metadata)) and matches_where(flt, entry.metadata)


class LabelIndex:
    """The tenant and ACL labels of a sequence of entries, as arrays (built in one pass).

    :meth:`mask` compiles a filter's label part to a mask; :meth:`tenant_mask` gives the
    records a tenant's statistics pool holds. Masks are cached per filter (a few dozen);
    safe to share between threads.
    """

    __slots__ = ("_acl_open", "_cache", "_codes", "_entries", "_lock", "_postings", "_tenant_codes")

    def __init__(
        self, entries: Sequence[KnowledgeEntry], label_free: npt.NDArray[np.bool_] | None = None
    ) -> None:
        """``label_free`` marks entries known to carry no label (not read: shared, open)."""
        n = len(entries)
        self._entries = entries
        self._codes: dict[str, int] = {}
        self._tenant_codes = np.zeros(n, dtype=np.int32)
        self._acl_open = np.zeros(n, dtype=bool)
        postings: dict[str, list[int]] = {}
        read: Sequence[int] = range(n)
        if label_free is not None:
            self._acl_open[label_free] = True
            read = np.flatnonzero(~label_free).tolist()
        for position in read:
            labels = read_labels(entries[position].metadata)
            if labels is None:
                self._tenant_codes[position] = _MALFORMED
                continue
            if labels.tenant is not None:
                code = self._codes.setdefault(labels.tenant, len(self._codes) + 1)
                self._tenant_codes[position] = code
            if not labels.acl:
                self._acl_open[position] = True
            for label in labels.acl:
                postings.setdefault(label, []).append(position)
        self._postings = {label: np.array(p, dtype=np.int64) for label, p in postings.items()}
        self._cache: dict[tuple[Any, ...], Mask] = {}
        self._lock = threading.Lock()

    @property
    def has_labels(self) -> bool:
        """Whether any record carries a tenant or ACL label (or a malformed one)."""
        return bool(self._codes or self._postings or (self._tenant_codes == _MALFORMED).any())

    @property
    def tenants(self) -> tuple[str, ...]:
        """The tenant labels present, sorted."""
        return tuple(sorted(self._codes))

    def tenant_mask(self, tenant: str | None) -> Mask:
        """Records of ``tenant`` plus the shared ones (no tenant label); malformed never."""
        mask: Mask = np.equal(self._tenant_codes, _SHARED)
        code = self._codes.get(tenant) if tenant is not None else None
        if code is not None:
            mask |= np.equal(self._tenant_codes, code)
        return mask

    def mask(self, flt: Filter) -> Mask:
        """Records the label part of ``flt`` admits: tenant, ACL and ``where`` (read-only)."""
        key = (flt.tenant, flt.labels, flt.where)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        mask = self.tenant_mask(flt.tenant)
        visible = self._acl_open.copy()
        for label in flt.labels:
            positions = self._postings.get(label)
            if positions is not None:
                visible[positions] = True
        mask &= visible
        if flt.where:
            entries = self._entries
            mask &= np.fromiter(
                (matches_where(flt, e.metadata) for e in entries), dtype=bool, count=len(entries)
            )
        mask.flags.writeable = False
        with self._lock:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = mask
        return mask
