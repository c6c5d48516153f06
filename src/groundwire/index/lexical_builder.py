"""Building a :class:`~groundwire.index.lexical.LexicalIndex`: documents in, score rows out.

Documents arrive field by field as term ids (:meth:`LexicalIndexBuilder.add_ids`);
:meth:`LexicalIndexBuilder.build` turns the per-field occurrences into one CSR row per
term and per indexed pair of adjacent terms, with one precomputed score and one
frequency byte per field per posting. Pairs are integers (``first * V + second`` over
the ``V`` single terms) at build time, never strings.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from groundwire.config import IndexSettings
from groundwire.errors import KnowledgeIndexError
from groundwire.index import merge
from groundwire.index.lexical import (
    TF_OVERFLOW,
    FieldFrequencies,
    FieldStats,
    FloatArray,
    IntArray,
    LexicalIndex,
    idf,
    norm,
)

__all__ = ["LexicalIndexBuilder", "frequencies_of", "pair_tables", "rows_of"]

_NO_KEYS: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
I64 = npt.NDArray[np.int64]


class LexicalIndexBuilder:
    """Collects documents field by field; :meth:`build` freezes them into a LexicalIndex.

    With ``pair_field``, a derived field of adjacent term pairs is built from the
    ``pair_sources`` fields.
    """

    def __init__(
        self,
        fields: Sequence[str],
        *,
        pair_field: str | None = None,
        pair_sources: Sequence[str] = (),
    ) -> None:
        if not fields or len(set(fields)) != len(fields) or pair_field in fields:
            raise KnowledgeIndexError(f"fields must be distinct and non-empty, got {fields!r}")
        unknown = [name for name in pair_sources if name not in fields]
        if unknown:
            raise KnowledgeIndexError(f"pair sources {unknown} are not among fields {fields!r}")
        self.text_fields = tuple(fields)
        self.pair_field = pair_field
        self.fields = (*fields, pair_field) if pair_field else tuple(fields)
        self._pair_sources = tuple(self.text_fields.index(name) for name in pair_sources)
        self.vocabulary: dict[str, int] = {}
        self._terms = [array("i") for _ in self.text_fields]
        self._lengths = [array("i") for _ in self.text_fields]
        self.doc_count = 0

    def term_id(self, term: str) -> int:
        """The id of ``term``, assigning the next one to a new term."""
        vocab = self.vocabulary
        return vocab.setdefault(term, len(vocab))

    def add(self, field_terms: Sequence[Sequence[str]]) -> int:
        """Add one document given its terms per text field (in order); returns its number."""
        setdefault, vocab = self.vocabulary.setdefault, self.vocabulary
        return self.add_ids([[setdefault(t, len(vocab)) for t in terms] for terms in field_terms])

    def add_ids(self, field_ids: Sequence[Sequence[int]]) -> int:
        """Add one document given its term ids (from :meth:`term_id`) per text field.

        A negative id marks a dropped word (a stop word): it takes no place in the
        field, so the words around it count as adjacent.
        """
        if len(field_ids) != len(self.text_fields):
            raise KnowledgeIndexError(
                f"expected terms for {len(self.text_fields)} fields {self.text_fields}, "
                f"got {len(field_ids)}"
            )
        for f, ids in enumerate(field_ids):
            self._terms[f].extend(ids)
            self._lengths[f].append(len(ids))
        self.doc_count += 1
        return self.doc_count - 1

    def occurrences(self) -> tuple[list[IntArray], list[IntArray]]:
        """Each text field's term occurrences (stop words dropped) and their documents."""
        all_docs = np.arange(self.doc_count, dtype=np.int32)
        terms: list[IntArray] = []
        docs: list[IntArray] = []
        for raw, raw_lengths in zip(self._terms, self._lengths, strict=True):
            field_terms = np.frombuffer(raw, np.int32)
            field_docs = np.repeat(all_docs, np.frombuffer(raw_lengths, np.int32))
            kept = field_terms >= 0
            if not kept.all():
                field_terms, field_docs = field_terms[kept], field_docs[kept]
            terms.append(field_terms)
            docs.append(field_docs)
        return terms, docs

    def pair_occurrences(self, terms: list[IntArray], docs: list[IntArray]) -> tuple[I64, IntArray]:
        """Adjacent pairs of the pair-source fields as ``first * V + second`` (``V`` single
        terms), one per occurrence, with their documents."""
        keys, owners = [], []
        n_single = len(self.vocabulary)
        for f in self._pair_sources:
            field_terms, field_docs = terms[f], docs[f]
            same = field_docs[1:] == field_docs[:-1]
            keys.append(field_terms[:-1][same].astype(np.int64) * n_single + field_terms[1:][same])
            owners.append(field_docs[1:][same])
        if not keys:
            return _NO_KEYS, np.empty(0, np.int32)
        return np.concatenate(keys), np.concatenate(owners)

    def build(self, settings: IndexSettings) -> LexicalIndex:
        """Compute statistics and precomputed scores; the builder may be discarded after."""
        n_docs, n_single = self.doc_count, len(self.vocabulary)
        terms, docs = self.occurrences()
        pair_keys = _NO_KEYS
        if self.pair_field is not None:
            pair_keys, pair_terms, pair_docs = _pairs(
                [terms[f] for f in self._pair_sources],
                [docs[f] for f in self._pair_sources],
                n_single,
            )
            terms.append(pair_terms)
            docs.append(pair_docs)
        lengths = np.array(
            [np.bincount(d, minlength=n_docs) for d in docs], dtype=np.int32
        ).reshape(len(self.fields), n_docs)
        return rows_of(
            self.fields,
            settings,
            dict(self.vocabulary),
            pair_keys,
            [_postings_keys(t, d, n_docs) for t, d in zip(terms, docs, strict=True)],
            lengths,
            has_pairs=self.pair_field is not None,
        )


def _pairs(
    terms: Sequence[IntArray], docs: Sequence[IntArray], n_single: int
) -> tuple[I64, IntArray, IntArray]:
    """Adjacent term pairs within each document of each field, as sorted integer keys.

    Returns the distinct keys, each occurrence's term id (``n_single`` + key rank) and
    each occurrence's document.
    """
    keys, owners = [], []
    for field_terms, field_docs in zip(terms, docs, strict=True):
        same = field_docs[1:] == field_docs[:-1]
        keys.append(field_terms[:-1][same].astype(np.int64) * n_single + field_terms[1:][same])
        owners.append(field_docs[1:][same])
    if not keys:
        return _NO_KEYS, np.empty(0, np.int32), np.empty(0, np.int32)
    all_keys = np.concatenate(keys)
    distinct, inverse = np.unique(all_keys, return_inverse=True)
    return distinct, (inverse.ravel() + n_single).astype(np.int32), np.concatenate(owners)


def _postings_keys(terms: IntArray, docs: IntArray, n_docs: int) -> tuple[I64, I64]:
    """One field's (term, doc) occurrences as distinct sorted keys ``term·N + doc`` and
    the frequency of each."""
    keys = terms.astype(np.int64) * max(n_docs, 1) + docs
    unique, tf = np.unique(keys, return_counts=True)
    return unique, tf.astype(np.int64)


def _combine(keys: Sequence[I64]) -> tuple[I64, list[I64]]:
    """The distinct keys of several sorted distinct key arrays and, per array, the index of
    each of its keys among them (ascending)."""
    filled = [k for k in keys if k.shape[0]]
    if len(filled) <= 1:
        unique = filled[0] if filled else _NO_KEYS
        return unique, [np.arange(k.shape[0], dtype=np.int64) for k in keys]
    ordered = all(a[-1] < b[0] for a, b in pairwise(filled))
    if ordered:  # disjoint ranges (pairs follow every single term): concatenation is sorted
        unique = np.concatenate(filled)
        out, at = [], 0
        for k in keys:
            out.append(np.arange(at, at + k.shape[0], dtype=np.int64))
            at += k.shape[0]
        return unique, out
    joined = np.concatenate(keys)
    order = np.argsort(joined, kind="stable")
    ranked = joined[order]
    starts = np.r_[True, ranked[1:] != ranked[:-1]]
    group = np.cumsum(starts) - 1
    inverse = np.empty(joined.shape[0], dtype=np.int64)
    inverse[order] = group
    unique = ranked[starts]
    out, at = [], 0
    for k in keys:
        out.append(inverse[at : at + k.shape[0]])
        at += k.shape[0]
    return unique, out


def frequencies_of(tf: I64, at: I64, start: int, stop: int) -> FieldFrequencies:
    """A field's frequency bytes over postings ``start..stop`` (``tf`` at postings ``at``)."""
    counts = np.zeros(stop - start, dtype=np.uint8)
    big = tf >= TF_OVERFLOW
    counts[at - start] = np.minimum(tf, TF_OVERFLOW).astype(np.uint8)
    return FieldFrequencies(start, counts, at[big].astype(np.int64), tf[big].astype(np.int64))


def rows_of(
    fields: Sequence[str],
    settings: IndexSettings,
    vocabulary: Mapping[str, int],
    pair_keys: I64,
    field_postings: Sequence[tuple[I64, I64]],
    lengths: IntArray,
    *,
    has_pairs: bool,
) -> LexicalIndex:
    """The index over per-field postings (distinct sorted keys ``row·N + doc`` and their
    frequencies, rows numbered singles then pairs) and the field lengths; with
    ``has_pairs`` the last field is the pair field (rows after the single terms).

    Scores use the exact expressions (and order of additions: field order) documented
    in ``lexical.py``; ``retrieve/restricted.py`` recomputes them the same way.
    """
    n_fields, n_docs = lengths.shape
    n_single = len(vocabulary)
    n_terms = n_single + pair_keys.shape[0]
    weights = LexicalIndex.weights_of(settings, fields)
    stats = FieldStats.of(lengths)
    k1, b = float(settings.k1), float(settings.b)
    # Fields of weight 0 score nothing: their postings make no rows (and no frequencies).
    weighted = [
        (keys, tf) if weights[f] > 0 else (_NO_KEYS, _NO_KEYS)
        for f, (keys, tf) in enumerate(field_postings)
    ]
    unique, at = _combine([keys for keys, _ in weighted])
    scale = max(n_docs, 1)
    term_of = unique // scale
    # int32 documents, as a loaded snapshot holds them: the kernel reads both widths
    # at the same speed, and they take half the memory of native-width ones.
    row_docs = (unique % scale).astype(np.int32)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(term_of, minlength=n_terms), out=indptr[1:])
    single_end = int(indptr[n_single])
    frequencies = []
    for f, (_, tf) in enumerate(weighted):
        pair = has_pairs and f == n_fields - 1
        start, stop = (single_end, unique.shape[0]) if pair else (0, single_end)
        frequencies.append(frequencies_of(tf, at[f], start, stop))
    if merge.available():  # one pass in C, the same values bit for bit
        native = merge.scores_of(settings, weights, indptr, row_docs, frequencies, lengths, stats)
        return assembled(
            fields, settings, vocabulary, pair_keys, indptr, row_docs, native, frequencies, lengths
        )
    summed = np.zeros(unique.shape[0], dtype=np.float64)
    for f, (keys, tf) in enumerate(weighted):
        if weights[f] == 0.0 or keys.shape[0] == 0:
            continue
        docs_f = (keys % scale).astype(np.intp)
        tff = tf.astype(np.float64)
        field_norm = norm(lengths[f][docs_f], float(stats.avg_length[f]), b)
        if settings.scoring == "bm25f":
            summed[at[f]] += weights[f] * tff / field_norm
        else:
            terms_f = keys // scale
            df = np.bincount(terms_f, minlength=n_terms).astype(np.float64)
            field_idf = idf(float(stats.doc_count[f]), df)
            summed[at[f]] += (
                weights[f] * field_idf[terms_f] * tff * (k1 + 1) / (tff + k1 * field_norm)
            )
    scores: FloatArray = summed
    if settings.scoring == "bm25f":
        df = np.diff(indptr).astype(np.float64)
        scores = idf(float(stats.n_docs), df)[term_of] * summed * (k1 + 1) / (summed + k1)
    return assembled(
        fields, settings, vocabulary, pair_keys, indptr, row_docs, scores, frequencies, lengths
    )


def assembled(
    fields: Sequence[str],
    settings: IndexSettings,
    vocabulary: Mapping[str, int],
    pair_keys: I64,
    indptr: I64,
    docs: IntArray,
    scores: FloatArray,
    frequencies: Sequence[FieldFrequencies],
    lengths: IntArray,
    stats: FieldStats | None = None,
    pairs: tuple[I64, npt.NDArray[np.int32]] | None = None,
) -> LexicalIndex:
    """The LexicalIndex of finished rows (``indptr`` made read-only: see LexicalIndex);
    ``pairs``: the ``pair_tables`` of ``pair_keys`` when the caller has them already."""
    indptr.flags.writeable = False  # rows read through a memoryview, not a list
    starts, seconds = pair_tables(pair_keys, len(vocabulary)) if pairs is None else pairs
    return LexicalIndex(
        fields=tuple(fields),
        weights=LexicalIndex.weights_of(settings, fields),
        k1=float(settings.k1),
        b=float(settings.b),
        scoring=settings.scoring,
        vocabulary=vocabulary,
        indptr=indptr,
        docs=docs,
        scores=scores,
        frequencies=tuple(frequencies),
        lengths=lengths,
        stats=stats if stats is not None else FieldStats.of(lengths),
        pair_starts=starts,
        pair_seconds=seconds,
    )


def pair_tables(pair_keys: I64, n_single: int) -> tuple[I64, npt.NDArray[np.int32]]:
    """``pair_starts`` (``V + 1`` offsets) and ``pair_seconds`` of sorted pair keys."""
    if not pair_keys.shape[0]:
        return np.empty(0, np.int64), np.empty(0, np.int32)
    firsts = pair_keys // max(n_single, 1)
    seconds = (pair_keys - firsts * n_single).astype(np.int32)
    starts = np.searchsorted(firsts, np.arange(n_single + 1)).astype(np.int64)
    return starts, seconds
