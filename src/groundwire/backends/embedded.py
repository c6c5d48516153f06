"""The embedded snapshot as a :class:`~groundwire.backends.SearchBackend`.

A thin adapter over the public API of :class:`~groundwire.KnowledgeBase` (eligibility,
``rank``, ``phrase_matches``, breakdowns) and :class:`~groundwire.VectorIndex`. The
filter's label part is compiled once per filter by :class:`~groundwire.access.filters.
LabelIndex`; statistics are those of the whole snapshot (the "global statistics" the
conformance suite compares backends on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from groundwire.access.filters import LabelIndex
from groundwire.backends.protocol import (
    BackendHit,
    BackendStats,
    LazyParts,
    cut_links,
    links,
    sort_hits,
)
from groundwire.config import DEFAULT_ALIAS_BOOST, DEFAULT_EXACT_BOOST, IndexSettings
from groundwire.errors import QueryError
from groundwire.index.knowledge_base import KnowledgeBase, check_k, check_query
from groundwire.index.lexical import MaskArray
from groundwire.index.vectors import VectorIndex
from groundwire.model import Filter, KnowledgeEntry, Scope
from groundwire.retrieve.gate import noise_level, term_rows
from groundwire.text import Analyzer

__all__ = ["EmbeddedBackend"]

#: Breakdown keys that are boosts, not lexical fields.
_BOOSTS = frozenset({"exact", "alias"})


class EmbeddedBackend:
    """Search a built :class:`KnowledgeBase` (and optionally its vectors) by the contract."""

    def __init__(
        self,
        kb: KnowledgeBase,
        vectors: VectorIndex | None = None,
        *,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int | None = None,
    ) -> None:
        self._kb = kb
        self._vectors = vectors.check_for(kb) if vectors is not None else None
        self._labels = LabelIndex(kb.entries)
        self._analyzer = Analyzer(kb.settings.analyzer)
        self._exact_boost = float(exact_boost)
        self._alias_boost = float(alias_boost)
        self._max_query_chars = max_query_chars

    @property
    def knowledge_base(self) -> KnowledgeBase:
        """The snapshot searched."""
        return self._kb

    @property
    def settings(self) -> IndexSettings:
        """The snapshot's index settings."""
        return self._kb.settings

    def mask(self, flt: Filter) -> MaskArray:
        """The positions ``flt`` admits (status, domains, scope, tenant, ACL, ``where``)."""
        scope = None if flt.integrations is None else Scope(tuple(sorted(flt.integrations)))
        return self._kb.eligibility(scope, flt.blocked_domains) & self._labels.mask(flt)

    def _terms(self, query: str) -> list[str]:
        if self._max_query_chars is None:
            return self._analyzer.tokens(check_query(query, 10**9))
        return self._analyzer.tokens(check_query(query, self._max_query_chars))

    def lexical(self, query: str, flt: Filter, k: int) -> list[BackendHit]:
        """BM25 top ``k`` of the eligible entries; the explanation is per field."""
        check_k("k", k)
        terms = self._terms(query)
        ids = self._kb.query_ids([terms])
        if not ids:
            return []
        kb = self._kb
        ranking = kb.rank(
            ids, (), lexical_k=k, limit=k, mask=self.mask(flt), exact_boost=0, alias_boost=0
        )
        return [
            BackendHit(kb.entry(doc).id, score, _field_parts(kb.breakdown(ids, doc)))
            for doc, score in zip(ranking.docs, ranking.lexical, strict=True)
        ]

    def phrase(self, query: str, flt: Filter) -> list[BackendHit]:
        """Eligible entries whose exact (id/title) or alias phrase occurs in ``query``."""
        kb = self._kb
        exact, alias = kb.phrase_matches(self._terms(query))
        mask = self.mask(flt)
        hits = []
        for doc in exact | alias:
            parts = {
                "exact": self._exact_boost if doc in exact else 0.0,
                "alias": self._alias_boost if doc in alias else 0.0,
            }
            parts = {name: value for name, value in parts.items() if value > 0}
            if mask[doc] and parts:
                hits.append(BackendHit(kb.entry(doc).id, sum(parts.values()), parts))
        return sort_hits(hits)

    def dense(self, vector: npt.NDArray[np.float32], flt: Filter, k: int) -> list[BackendHit]:
        """Cosine top ``k`` of the eligible entries (exact scan)."""
        check_k("k", k)
        vectors = self._vectors
        if vectors is None:
            raise QueryError("this backend has no vectors; pass vectors= when creating it")
        query = vectors.check_query(vector)
        docs, scores = vectors.search(query, k, self.mask(flt), exact=True)
        kb = self._kb
        return [
            BackendHit(kb.entry(doc).id, float(score), {"dense": float(score)})
            for doc, score in zip(docs, scores, strict=True)
        ]

    def _eligible_docs(self, flt: Filter, ids: Sequence[str]) -> list[int]:
        kb, mask = self._kb, self.mask(flt)
        docs = (kb.position(entry_id) for entry_id in dict.fromkeys(ids))
        return [doc for doc in docs if doc is not None and mask[doc]]

    def lexical_scores(self, query: str, flt: Filter, ids: Sequence[str]) -> dict[str, float]:
        """BM25 of the eligible ``ids`` (0 when one does not match; ineligible left out)."""
        kb = self._kb
        query_ids = kb.query_ids([self._terms(query)])
        return {
            kb.entry(doc).id: kb.bm25.score_of_ids(query_ids, doc)
            for doc in self._eligible_docs(flt, ids)
        }

    def dense_scores(
        self, vector: npt.NDArray[np.float32], flt: Filter, ids: Sequence[str]
    ) -> dict[str, float]:
        """Cosine of the eligible ``ids`` with ``vector`` (ineligible left out)."""
        vectors = self._vectors
        if vectors is None:
            raise QueryError("this backend has no vectors; pass vectors= when creating it")
        docs = self._eligible_docs(flt, ids)
        if not docs:
            return {}
        scores = vectors.scores(vectors.check_query(vector), docs).tolist()
        kb = self._kb
        return {kb.entry(d).id: float(s) for d, s in zip(docs, scores, strict=True)}

    def fetch(self, ids: Sequence[str], flt: Filter | None = None) -> list[KnowledgeEntry]:
        """The entries with these ids, in the order given; unknown ids are left out (with
        ``flt``: only eligible ones, links cut to eligible ids)."""
        kb = self._kb
        found = [entry for entry in map(kb.get, ids) if entry is not None]
        if flt is None:
            return found
        mask = self.mask(flt)
        allowed = {e.id for e in found} | set(links(found))
        visible = {i for i in allowed if kb.is_eligible(i, mask)}
        return [cut_links(entry, visible) for entry in found if entry.id in visible]

    def term_counts(self, terms: Sequence[str], flt: Filter) -> tuple[int, list[int]]:
        """Eligible entries, and how many of them hold each analyzed term."""
        mask = self.mask(flt)
        rows = term_rows(self._kb, terms, mask)
        return int(np.count_nonzero(mask)), [int(row.shape[0]) for row in rows]

    def noise_level(self, quantile: float) -> float:
        """The snapshot's noise floor (:func:`groundwire.retrieve.gate.noise_level`)."""
        return noise_level(self._kb, quantile)

    def stats(self) -> BackendStats:
        """What the snapshot holds."""
        settings = self._kb.settings
        vectors = self._vectors
        return BackendStats(
            backend="embedded",
            count=len(self._kb),
            field_weights=dict(settings.field_weights),
            scoring=settings.scoring,
            k1=float(settings.k1),
            b=float(settings.b),
            dimensions=None if vectors is None else vectors.dimensions,
            model_id=None if vectors is None else vectors.model_id,
        )


def _field_parts(breakdown: Mapping[str, float]) -> LazyParts:
    """A hit's per-field BM25 parts (boosts and zero fields left out), read lazily."""
    return LazyParts(lambda: {f: v for f, v in breakdown.items() if f not in _BOOSTS and v})
