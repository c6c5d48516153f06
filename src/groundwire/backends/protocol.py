"""The search-backend contract: what the embedded snapshot and Milvus both answer.

A backend holds the entries of one knowledge base and answers four questions under a
declarative :class:`~groundwire.Filter` applied *before* any top-k:

* :meth:`SearchBackend.lexical` — BM25 of the query's analyzed terms, per-field sum with
  the snapshot's field weights, statistics over the whole knowledge base;
* :meth:`SearchBackend.phrase` — entries whose id/title (exact) or alias occurs as a
  phrase in the query, scored with the exact and alias boosts;
* :meth:`SearchBackend.dense` — cosine of a unit query vector with each entry's vector;
* :meth:`SearchBackend.fetch` / :meth:`SearchBackend.stats` — records by id, and what the
  backend holds;
* :meth:`SearchBackend.term_counts` / :meth:`SearchBackend.noise_level` — what the
  relevance gate reads (document frequencies under the filter, the noise floor), so a
  grounding turn over a backend gates as the embedded one does.

Every list is best first, ties broken on id by code point; every hit carries an
``explanation`` (per-field contributions for lexical, the boosts for phrase, the cosine
for dense) that sums to its score. ``tests/backends/conformance.py`` is the shared suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from groundwire.config import IndexSettings
from groundwire.model import Filter, KnowledgeEntry

__all__ = [
    "BackendHit",
    "BackendStats",
    "LazyParts",
    "SearchBackend",
    "cut_links",
    "links",
    "sort_hits",
]


@dataclass(frozen=True, slots=True)
class BackendHit:
    """One ranked id of a backend channel, its score and why (parts summing to the score)."""

    id: str
    score: float
    explanation: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BackendStats:
    """What a backend holds: record count, lexical fields and weights, vectors, snapshot."""

    backend: str
    count: int
    field_weights: Mapping[str, float]
    scoring: str
    k1: float
    b: float
    dimensions: int | None = None
    model_id: str | None = None
    snapshot: str | None = None  # the digest of the snapshot this backend mirrors


@runtime_checkable
class SearchBackend(Protocol):
    """A store that ranks one knowledge base's entries with the embedded index's meaning."""

    @property
    def settings(self) -> IndexSettings:
        """The index settings its entries were analyzed and weighted with."""
        ...

    def lexical(self, query: str, flt: Filter, k: int) -> list[BackendHit]:
        """The ``k`` best eligible entries by BM25 (see the module docstring)."""
        ...

    def phrase(self, query: str, flt: Filter) -> list[BackendHit]:
        """Eligible entries named by a phrase of ``query``: exact and alias boosts."""
        ...

    def dense(self, vector: npt.NDArray[np.float32], flt: Filter, k: int) -> list[BackendHit]:
        """The ``k`` eligible entries whose vectors are most similar to ``vector``."""
        ...

    def lexical_scores(self, query: str, flt: Filter, ids: Sequence[str]) -> dict[str, float]:
        """BM25 of the eligible ``ids`` (0 when one does not match; ineligible left out)."""
        ...

    def dense_scores(
        self, vector: npt.NDArray[np.float32], flt: Filter, ids: Sequence[str]
    ) -> dict[str, float]:
        """Cosine of the eligible ``ids`` with ``vector`` (ineligible left out)."""
        ...

    def fetch(self, ids: Sequence[str], flt: Filter | None = None) -> list[KnowledgeEntry]:
        """The entries with these ids, in the order given; unknown ids are left out.

        With ``flt``, only eligible entries, their ``related``/``parent`` cut to eligible
        ids (what a principal may be shown); without, the host's unscoped records.
        """
        ...

    def stats(self) -> BackendStats:
        """Counts and parameters of what the backend holds."""
        ...

    def term_counts(self, terms: Sequence[str], flt: Filter) -> tuple[int, list[int]]:
        """How many entries ``flt`` admits, and how many of those hold each analyzed term
        in a lexical field (the relevance gate's document frequencies)."""
        ...

    def noise_level(self, quantile: float) -> float:
        """What one coincidental term scores here: the ``quantile`` of the best score each
        indexed term earns any entry on its own (the relevance gate's noise floor)."""
        ...


class LazyParts(Mapping[str, float]):
    """An explanation computed when first read (most hits' explanations never are)."""

    __slots__ = ("_make", "_parts")

    def __init__(self, make: Callable[[], dict[str, float]]) -> None:
        self._make = make
        self._parts: dict[str, float] | None = None

    def _read(self) -> dict[str, float]:
        if self._parts is None:
            self._parts = self._make()
        return self._parts

    def __getitem__(self, name: str) -> float:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return repr(self._read())


def cut_links(entry: KnowledgeEntry, visible: Set[str]) -> KnowledgeEntry:
    """``entry`` with ``related``/``parent`` cut to ``visible`` ids."""
    related = tuple(i for i in entry.related if i in visible)
    parent = entry.parent if entry.parent in visible else None
    if related == entry.related and parent == entry.parent:
        return entry
    return replace(entry, related=related, parent=parent)


def links(entries: Sequence[KnowledgeEntry]) -> list[str]:
    """Every id the entries link to (related, then parent), once each, in order."""
    out = [i for e in entries for i in (*e.related, *([e.parent] if e.parent else []))]
    return list(dict.fromkeys(out))


def sort_hits(hits: Sequence[BackendHit], k: int | None = None) -> list[BackendHit]:
    """Hits best first, ties on id by code point, cut to ``k``."""
    ordered = sorted(hits, key=lambda hit: (-hit.score, hit.id))
    return ordered if k is None else ordered[:k]
