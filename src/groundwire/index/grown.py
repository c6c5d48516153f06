"""An update's new entries analyzed against an existing vocabulary, without decoding it.

:class:`GrownVocabulary` is the vocabulary after an update: the old one (a loaded
snapshot's hashed string table, or a build's dict) read in place, plus a dict of the
terms the update added (ids from ``len(base)`` on). :func:`new_occurrences` analyzes the
new entries as ``builder.term_ids_reader`` does (the same term ids: new terms numbered in
order of first appearance), with the C word table of the bulk build when it is compiled:
each distinct word is stemmed once and looked up once, no Python step per word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.index import _bulk
from groundwire.index.builder import term_ids_reader
from groundwire.index.lexical import IntArray
from groundwire.index.lexical_builder import LexicalIndexBuilder
from groundwire.index.store.codecs import HashedStrings, encode_strings, hash_keys
from groundwire.index.store.views import ById
from groundwire.model import KnowledgeEntry
from groundwire.text import Analyzer

__all__ = ["GrownVocabulary", "new_occurrences", "pair_occurrences"]

Reader = Callable[[KnowledgeEntry], str]


class GrownVocabulary(ById):
    """``base`` (ids ``0 .. len(base)-1``) and ``added`` (ids from ``len(base)``)."""

    __slots__ = ("added", "base")

    def __init__(self, base: Mapping[str, int], added: dict[str, int]) -> None:
        self.base, self.added = base, added

    def get(self, key: str, default: Any = None) -> Any:
        found = self.added.get(key)
        return self.base.get(key, default) if found is None else found

    def __iter__(self) -> Iterator[str]:  # id order
        yield from self.base
        yield from self.added

    def __len__(self) -> int:
        return len(self.base) + len(self.added)


def _flat(vocabulary: Mapping[str, int]) -> tuple[Mapping[str, int], dict[str, int]]:
    """The base and a copy of the added terms of ``vocabulary`` (no chain of growths)."""
    if isinstance(vocabulary, GrownVocabulary):
        return vocabulary.base, dict(vocabulary.added)
    return vocabulary, {}


def _known(base: Mapping[str, int], terms: list[str]) -> list[int]:
    """Each term's id in ``base``, -1 where it is not there (a hashed table: one
    vectorized hash, search and byte comparison; a dict: one lookup per distinct term)."""
    if not isinstance(base, HashedStrings) or not terms or not len(base):
        get = base.get
        return [get(t, -1) for t in terms]
    encoded, offsets = encode_strings(terms, "vocabulary")
    blob = np.frombuffer(encoded, dtype=np.uint8)
    keys = hash_keys(blob, offsets)
    table_keys = np.asarray(base.key_array, dtype=np.uint64)
    at = np.minimum(np.searchsorted(table_keys, keys), table_keys.shape[0] - 1)
    same_key = table_keys[at] == keys
    candidate = np.asarray(base.order_array, dtype=np.int64)[at]
    bounds = np.asarray(base.strings.offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    checked = np.flatnonzero(same_key & (bounds[candidate + 1] - bounds[candidate] == sizes))
    width = sizes[checked]
    inside = np.arange(int(width.sum()), dtype=np.int64)
    inside -= np.repeat(np.cumsum(width) - width, width)
    table_blob = np.asarray(base.strings.blob)
    theirs = table_blob[np.repeat(bounds[candidate[checked]], width) + inside]
    ours = blob[np.repeat(offsets[checked], width) + inside]
    wrong = np.zeros(checked.shape[0], dtype=bool)
    wrong[np.repeat(np.arange(checked.shape[0]), width)[theirs != ours]] = True
    out = np.full(len(terms), -1, dtype=np.int64)
    out[checked[~wrong]] = candidate[checked[~wrong]]
    # Another string of the same key came first (rare): the full search.
    unsure = same_key.copy()
    unsure[checked[~wrong]] = False
    for i in np.flatnonzero(unsure).tolist():
        out[i] = base.get(terms[i], -1)
    return out.tolist()


def new_occurrences(
    entries: Sequence[KnowledgeEntry],
    readers: Sequence[Reader],
    analyzer: Analyzer,
    vocabulary: Mapping[str, int],
) -> tuple[list[IntArray], list[IntArray], Mapping[str, int]]:
    """Each text field's term occurrences in ``entries`` (stop words dropped), their
    documents (``0 .. len(entries)-1``) and the vocabulary grown by the new terms."""
    base, added = _flat(vocabulary)
    start = len(base)
    n_fields = len(readers)
    texts = [read(entry) for entry in entries for read in readers]
    if _bulk.available():
        table = _bulk.WordTable()
        buf, ends = analyzer.joined_words(texts)
        numbers, seg_words = table.numbers(buf, ends)
        words = table.words(0)
        stems = analyzer.analyze_words(words)
        distinct = list(dict.fromkeys(t for t in stems if t))
        found = dict(zip(distinct, _known(base, distinct), strict=True))
        setdefault = added.setdefault
        term_ids = []
        for term in stems:
            if not term:
                term_ids.append(-1)
                continue
            known = found[term]
            term_ids.append(known if known >= 0 else setdefault(term, start + len(added)))
        table.set_terms(0, term_ids)
        ids = table.terms_of(numbers)
        text_of = np.repeat(np.arange(len(texts), dtype=np.int64), seg_words)
    else:  # the builder's reader over a dict of every term (no compiled word table)
        builder = LexicalIndexBuilder([f"f{f}" for f in range(n_fields)])
        builder.vocabulary = {**dict(base), **added}
        ids_of = term_ids_reader(analyzer, builder)
        per_text = [ids_of(text) if text else [] for text in texts]
        added = {t: i for t, i in builder.vocabulary.items() if i >= start}
        ids = np.array([i for row in per_text for i in row], dtype=np.int32)
        text_of = np.repeat(np.arange(len(texts), dtype=np.int64), [len(r) for r in per_text])
    field_of, doc_of = text_of % max(n_fields, 1), (text_of // max(n_fields, 1)).astype(np.int32)
    terms, docs = [], []
    for f in range(n_fields):
        pick = (field_of == f) & (ids >= 0)
        terms.append(ids[pick].astype(np.int32))
        docs.append(doc_of[pick])
    return terms, docs, GrownVocabulary(base, added) if added else base


def pair_occurrences(
    terms: list[IntArray], docs: list[IntArray], sources: Sequence[int], n_single: int
) -> tuple[npt.NDArray[np.int64], IntArray]:
    """Adjacent pairs of the ``sources`` fields as ``first * V + second`` (``V``:
    ``n_single``), one per occurrence, with their documents (as the builder makes them)."""
    keys, owners = [], []
    for f in sources:
        field_terms, field_docs = terms[f], docs[f]
        same = field_docs[1:] == field_docs[:-1]
        keys.append(field_terms[:-1][same].astype(np.int64) * n_single + field_terms[1:][same])
        owners.append(field_docs[1:][same])
    if not keys:
        return np.empty(0, dtype=np.int64), np.empty(0, np.int32)
    return np.concatenate(keys), np.concatenate(owners)
