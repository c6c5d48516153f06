"""Lookups over positions that a search consults before and beside BM25.

:class:`Masks` answers "which entries may this request see" (status, blocked domains,
enabled integrations) as cached boolean masks; :class:`Phrases` finds the entries whose
exact (id, title) or alias phrase occurs in a query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from groundwire.index.lexical import IntArray, MaskArray

__all__ = ["Masks", "Phrases"]

_CACHE_LIMIT = 64
_STATUS_ONLY: tuple[Any, ...] = ((), None)  # nothing blocked, no scope


class Masks:
    """Eligibility masks over positions, cached per (blocked domains, enabled integrations).

    Thread-safe: masks are built from read-only arrays and published read-only; a race
    builds an equal mask twice.
    """

    __slots__ = (
        "_cache",
        "_skips",
        "active",
        "domain_codes",
        "domains",
        "integrations",
        "universal",
    )

    def __init__(
        self,
        active: MaskArray,
        universal: MaskArray,
        domains: Mapping[str, int],
        domain_codes: IntArray,
        integrations: Mapping[str, MaskArray],
    ) -> None:
        self.active, self.universal = active, universal
        self.domains, self.domain_codes = domains, domain_codes
        self.integrations = integrations
        self._cache: dict[tuple[Any, ...], MaskArray] = {}
        self._skips: dict[int, tuple[MaskArray, MaskArray | None]] = {}

    def status_only(self) -> MaskArray:
        """Active entries (no domain blocked, no scope): the common case, cached."""
        cached = self._cache.get(_STATUS_ONLY)
        return cached if cached is not None else self.mask((), None)

    def mask(self, blocked: Sequence[str], enabled: Sequence[str] | None) -> MaskArray:
        """Active, not in a ``blocked`` domain (casefolded, sorted), and with ``enabled``
        integrations (None: not filtered) universal or holding one of them."""
        key = (tuple(blocked), None if enabled is None else tuple(enabled))
        mask = self._cache.get(key)
        if mask is None:
            mask = self.active.copy()
            codes = [self.domains[d] for d in blocked if d in self.domains]
            if codes:
                mask &= ~np.isin(self.domain_codes, codes)
            if enabled is not None:
                allowed = self.universal.copy()
                for name in enabled:
                    if name in self.integrations:
                        allowed |= self.integrations[name]
                mask &= allowed
            mask.flags.writeable = False
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = mask
        return mask

    def skip(self, mask: MaskArray | None) -> MaskArray | None:
        """The complement of a mask (cached per mask object); None when it rejects nothing."""
        if mask is None:
            return None
        cached = self._skips.get(id(mask))
        if cached is None or cached[0] is not mask:  # holding the mask keeps its id unique
            if len(self._skips) >= _CACHE_LIMIT:
                self._skips.clear()
            skip = ~mask
            cached = (mask, skip if skip.any() else None)
            self._skips[id(mask)] = cached
        return cached[1]


class Phrases:
    """Normalized phrase → positions, for exact (id/title) and alias phrases."""

    __slots__ = ("alias", "exact", "starts")

    def __init__(
        self, exact: Mapping[str, tuple[int, ...]], alias: Mapping[str, tuple[int, ...]]
    ) -> None:
        self.exact, self.alias = exact, alias
        # First two terms of every multi-term phrase → the phrase lengths starting so:
        # two terms prune almost every query position, so few n-grams are ever joined.
        lengths: dict[str, set[int]] = {}
        for key in (*exact, *alias):
            terms = key.split(" ")
            if len(terms) > 1:
                lengths.setdefault(f"{terms[0]} {terms[1]}", set()).add(len(terms))
        self.starts = {start: tuple(sorted(ns)) for start, ns in lengths.items()}

    def __bool__(self) -> bool:
        return bool(self.exact) or bool(self.alias)

    def matches(self, terms: Sequence[str]) -> tuple[set[int], set[int]]:
        """Positions of entries whose exact or alias phrase occurs in ``terms``.

        Checks every contiguous n-gram of the terms up to the longest indexed phrase.
        """
        exact: set[int] = set()
        alias: set[int] = set()
        exact_index, alias_index = self.exact, self.alias
        if not exact_index and not alias_index:  # e.g. documents: no phrase keys at all
            return exact, alias
        starts = self.starts
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
