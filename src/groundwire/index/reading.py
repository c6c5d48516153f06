"""What a turn reads of a snapshot's BM25 index: one interface, two implementations.

A snapshot's lexical index is a :class:`~groundwire.index.lexical.LexicalIndex` (one
precomputed segment) or, after an incremental update, a
:class:`~groundwire.index.delta.DeltaIndex` (a base segment, tombstones and a delta
segment, scored exactly at query time). :class:`LexicalReader` is what both implement
and everything on the turn path reads (``KnowledgeBase.bm25``): term ids, scores of a
query, of given documents, per-field rows for restricted scoring, the documents holding
a term, and the whole-index statistics the relevance gate needs. None of it compacts a
delta: a :class:`~groundwire.index.delta.DeltaIndex` answers from its segments, with
the ids, order and scores of a build from scratch (see docs/INDEX.md, "Turns on a delta
index"). The array-level reader (``KnowledgeBase.lexical``) is for tools off the turn
path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from groundwire.index.lexical import FieldStats, FloatArray, IntArray, QueryScores

__all__ = ["LexicalReader"]


class LexicalReader(Protocol):
    """The BM25 index as a turn reads it (implemented by LexicalIndex and DeltaIndex).

    Term ids are the implementation's own (single terms ``0..V-1`` keyed by
    ``vocabulary``, then term pairs); pass ids only back to the reader that made them.
    Documents are snapshot positions (id order)."""

    @property
    def fields(self) -> tuple[str, ...]:
        """The indexed field names, in field order."""
        ...

    @property
    def weights(self) -> FloatArray:
        """Each field's weight, in field order."""
        ...

    @property
    def k1(self) -> float:
        """BM25's term-frequency saturation."""
        ...

    @property
    def b(self) -> float:
        """BM25's length normalisation."""
        ...

    @property
    def scoring(self) -> str:
        """``"fields"`` or ``"bm25f"`` (see ``index/lexical.py``)."""
        ...

    @property
    def vocabulary(self) -> Mapping[str, int]:
        """Analyzed term → single-term id."""
        ...

    @property
    def lengths(self) -> IntArray:
        """Every document's field lengths, ``(fields, documents)``."""
        ...

    @property
    def stats(self) -> FieldStats:
        """The current per-field statistics."""
        ...

    @property
    def doc_count(self) -> int:
        """Documents indexed now."""
        ...

    def query_ids(self, terms: Sequence[str]) -> list[int]:
        """Term ids of analyzed query terms (known ones, one per occurrence), then the
        ids of indexed adjacent pairs."""
        ...

    def term_ids(self, terms: Iterable[str]) -> Counter[int]:
        """:meth:`query_ids` with multiplicities."""
        ...

    def score(self, terms: Sequence[str]) -> QueryScores:
        """Every document's score for analyzed query terms."""
        ...

    def score_of_ids(self, ids: Sequence[int], doc: int) -> float:
        """One document's score for term ids (0.0 when it does not match)."""
        ...

    def scores_of_ids(self, ids: Sequence[int], docs: IntArray) -> FloatArray:
        """The scores of positions ``docs`` for term ids."""
        ...

    def explain_ids(self, ids: Iterable[int], doc: int) -> dict[str, float]:
        """Per-field contributions to ``doc``'s score for term ids."""
        ...

    def field_row(self, f: int, term: int) -> tuple[IntArray, npt.NDArray[np.int64]]:
        """Field ``f`` of row ``term``: the documents holding it there (ascending) and
        its frequency in each."""
        ...

    def term_docs(self, term: int) -> IntArray:
        """The documents (ascending) holding single term ``term`` in any field."""
        ...

    def best_term_scores(self) -> FloatArray:
        """The best score each single term that any document holds earns on its own
        (one value per such term, in term order): what the relevance gate's noise level
        is a quantile of."""
        ...

    def single_term_postings(self) -> tuple[npt.NDArray[np.int64], IntArray]:
        """Every single-term posting as its term and its document (each once, in the
        implementation's order)."""
        ...

    def single_term_frequencies(self, f: int) -> npt.NDArray[np.int64]:
        """Field ``f``'s frequency at each posting of :meth:`single_term_postings`."""
        ...
