"""Incremental updates: add, replace and delete entries without re-analyzing the others.

A knowledge base is immutable, so an update makes a new one (readers of the old one keep
it). Only the added or replaced entries are analyzed. Every other entry's postings, field
frequencies and lengths are taken from the existing index, renumbered to the new
positions, merged with the new entries' postings, and every score is computed again from
the new statistics (document counts, average lengths, document frequencies) with the
builder's own expressions (``lexical_builder.rows_of``). So a search after any sequence
of updates returns exactly what a build from scratch over the same final entries returns:
the same ids, order and scores (bit for bit); only term and pair ids may be numbered
differently, which no result shows. Cost: analysis of the changed entries plus
``O(postings)`` array work, with no sort of old postings (they stay in order when
renumbered; new ones are merged in).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from groundwire.config import DELTA_COMPACT_SHARE, IndexSettings
from groundwire.errors import KnowledgeIndexError
from groundwire.index import merge
from groundwire.index.builder import links_of, phrases_of, relations_of, text_readers
from groundwire.index.delta import DeltaIndex, empty_delta
from groundwire.index.grown import new_occurrences, pair_occurrences
from groundwire.index.lexical import IntArray, LexicalIndex, MaskArray
from groundwire.index.lexical_builder import rows_of
from groundwire.index.parts import Parts, StoredSegment
from groundwire.index.store.codecs import StringTable, encode_strings
from groundwire.index.store.lines import entry_digests
from groundwire.index.store.views import ById, SortedIds, SplicedEntries, spliced_ids
from groundwire.model import KnowledgeEntry
from groundwire.text import Analyzer

__all__ = ["changed_entries", "compact", "merged_rows", "update_parts"]

I64 = npt.NDArray[np.int64]
_P = ParamSpec("_P")
_T = TypeVar("_T")


def _gc_paused(function: Callable[_P, _T]) -> Callable[_P, _T]:
    """``function`` with the cyclic garbage collector paused while it runs: an update
    makes millions of acyclic objects (ids, positions), and each collection would walk
    every live object of a large in-memory knowledge base (a fifth of a 50k-document
    delete's CPU time)."""

    @wraps(function)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return paused


@_gc_paused
def update_parts(
    parts: Parts,
    upserts: Sequence[KnowledgeEntry],
    deletes: Iterable[str],
    *,
    exact_ids: bool = True,
    exact_titles: bool = True,
    compact: bool | None = None,
) -> Parts:
    """``parts`` with ``deletes`` removed and ``upserts`` added or replacing the entries of
    their ids (see the module docstring). Deleting an id that is not there is an error;
    an id may not be both upserted and deleted, nor upserted twice.

    The result holds a delta segment (``index/delta.py``) unless ``compact`` is True, or
    None (the default) and the delta would exceed ``DELTA_COMPACT_SHARE``: then one
    precomputed index, as before. ``compact=False`` always keeps a delta segment."""
    settings = parts.settings
    new = sorted(upserts, key=lambda e: e.id)
    new_ids = [e.id for e in new]
    if len(set(new_ids)) != len(new_ids):
        raise KnowledgeIndexError("an update names the same entry id twice; ids must be unique")
    gone = set(deletes)
    both = gone & set(new_ids)
    if both:
        raise KnowledgeIndexError(f"ids {sorted(both)[:5]} are both deleted and upserted")
    ids_before = SortedIds(_id_table(parts))
    doomed = sorted(gone)
    at, found = ids_before.locate([*doomed, *new_ids])
    if not found[: len(doomed)].all():
        missing = [i for i, ok in zip(doomed, found.tolist(), strict=False) if not ok]
        raise KnowledgeIndexError(f"cannot delete {missing[:5]}: no such entries")
    old_n = len(parts.entries)
    keep = np.ones(old_n, dtype=bool)
    keep[at[found]] = False  # deleted, or replaced by an upsert of the same id
    source = _merge_order(keep, at[len(doomed) :])
    n = int(source.shape[0])
    from_old = source >= 0
    old_to_new = np.full(old_n, -1, dtype=np.int64)
    old_to_new[source[from_old]] = np.flatnonzero(from_old)
    new_at = np.empty(len(new), dtype=np.int64)
    new_at[-1 - source[~from_old]] = np.flatnonzero(~from_old)
    entries = SplicedEntries(parts.entries, new, source)
    # The id table by new position, spliced as bytes (no string per entry decoded).
    positions = SortedIds(spliced_ids(ids_before.table, new_ids, source))
    analyzer = Analyzer(settings.analyzer)
    lexical = _updated(parts.lexical, settings, analyzer, new, old_to_new, new_at, n, compact)
    exact, alias = _phrases(parts, old_to_new, new, new_at, analyzer, exact_ids, exact_titles)
    masks = _masks(parts, source, from_old, new)
    digests = _digests(parts, source, from_old, new)
    old_links = parts.links if parts.links is not None else links_of(parts.entries)
    links = {k: v for k, v in old_links.items() if k in positions}
    links.update(links_of(new))
    return Parts(
        entries=entries,
        positions=positions,
        settings=settings,
        lexical=lexical,
        exact_index=exact,
        alias_index=alias,
        relations=relations_of(links, positions),
        links=links,
        phrase_keys=(exact_ids, exact_titles),
        issues=parts.issues,
        digests=digests,
        # Sections holding arrays are per entry and no longer line up: their owner adds
        # them again. Meta-only sections (e.g. how documents were chunked) carry over.
        sections={k: v for k, v in parts.sections.items() if not v.arrays},
        stored=_stored(parts, lexical),
        **masks,
    )


def _stored(parts: Parts, lexical: LexicalIndex | DeltaIndex) -> StoredSegment | None:
    """The stored segment a delta save can reuse: the base's, while the base is it."""
    stored = parts.stored
    if stored is None or not isinstance(lexical, DeltaIndex) or lexical.base is not stored.lexical:
        return None
    return stored


def _id_table(parts: Parts) -> StringTable:
    """The ids by position as a string table: a loaded or updated snapshot's own, or
    encoded (a build's dict of positions, in id order)."""
    table = getattr(parts.positions, "table", None)
    if isinstance(table, StringTable):
        return table
    encoded, offsets = encode_strings(list(parts.positions), "entry ids")
    return StringTable(np.frombuffer(encoded, dtype=np.uint8), offsets)


def _merge_order(keep: MaskArray, at: I64) -> I64:
    """For each new position (ids in code point order): its old position, or ``-1 - i``
    for the i-th new entry (sorted; ``at``: where each goes among all old ids, none of
    them a kept id)."""
    kept = np.flatnonzero(keep)
    if not at.shape[0]:
        return kept.astype(np.int64)
    # Kept old ids before a new id's place come before it.
    kept_before = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    new_pos = kept_before[at] + np.arange(at.shape[0], dtype=np.int64)
    # Each kept id moves right by the new ids placed at or before it (a count, no search).
    placed = np.cumsum(np.bincount(at, minlength=keep.shape[0] + 1))
    old_pos = np.arange(kept.shape[0], dtype=np.int64) + placed[kept]
    source = np.empty(kept.shape[0] + at.shape[0], dtype=np.int64)
    source[old_pos] = kept
    source[new_pos] = -1 - np.arange(at.shape[0], dtype=np.int64)
    return source


def _updated(
    old: LexicalIndex | DeltaIndex,
    settings: IndexSettings,
    analyzer: Analyzer,
    new: Sequence[KnowledgeEntry],
    old_to_new: I64,
    new_at: I64,
    n: int,
    compact: bool | None,
) -> LexicalIndex | DeltaIndex:
    """The lexical index after an update: the delta segment updated (the base's
    postings untouched, its tombstones moved), or everything merged and scored afresh."""
    if isinstance(old, DeltaIndex):
        base, base_map, delta = old.base, old.base_to_now, old.delta
    else:
        if compact:  # one merge of everything, as a plain index is updated
            return _lexical(old, settings, analyzer, new, old_to_new, new_at, n)
        base, delta = old, empty_delta(old, settings)
        base_map = np.arange(old.doc_count, dtype=np.int32)
    moved = np.where(base_map >= 0, old_to_new[np.maximum(base_map, 0)], -1).astype(np.int32)
    fresh = _lexical(delta, settings, analyzer, new, old_to_new, new_at, n)
    updated = DeltaIndex(base, moved, fresh, settings)
    if compact or (compact is None and updated.share > DELTA_COMPACT_SHARE):
        return updated.compacted()
    return updated


def compact(index: DeltaIndex) -> LexicalIndex:
    """The base's live postings renumbered and the delta's merged in, scored afresh:
    one precomputed index equal to a build from scratch (``DeltaIndex.compacted``)."""
    base, delta = index.base, index.delta
    base_single, single = len(base.vocabulary), len(delta.vocabulary)
    scale = max(index.doc_count, 1)
    base_keys = base.pair_keys
    rekeyed = base_keys // max(base_single, 1) * single + base_keys % max(base_single, 1)
    delta_keys = delta.pair_keys
    pair_keys, pair_rows = _grown(rekeyed, delta_keys)
    row_map = np.concatenate([np.arange(base_single, dtype=np.int64), single + pair_rows])
    delta_rows = np.concatenate(
        [np.arange(single, dtype=np.int64), single + np.searchsorted(pair_keys, delta_keys)]
    )
    rows = np.repeat(delta_rows, np.diff(delta.indptr))
    docs = np.asarray(delta.docs, dtype=np.int64)
    added = []
    for freq in delta.frequencies:
        tf = freq.span(0, int(docs.shape[0]))
        pick = tf > 0
        added.append((rows[pick] * scale + docs[pick], tf[pick]))
    has_pairs = text_readers(index.settings)[1] is not None
    doc_map = index.base_to_now.astype(np.int64)
    return merged_rows(
        base,
        index.settings,
        delta.vocabulary,
        pair_keys,
        row_map,
        doc_map,
        added,
        delta.lengths,
        has_pairs=has_pairs,
    )


def merged_rows(
    old: LexicalIndex,
    settings: IndexSettings,
    vocabulary: Mapping[str, int],
    pair_keys: I64,
    row_map: I64,
    old_to_new: I64,
    added: list[tuple[I64, I64]],
    lengths: IntArray,
    *,
    has_pairs: bool,
) -> LexicalIndex:
    """``old`` renumbered (rows by ``row_map``, documents by ``old_to_new``, -1: gone)
    with ``added`` merged in (per field: sorted keys ``row·N + doc``, frequencies) and
    scored for ``lengths``: the merge kernel, or the numpy path (equal bit for bit)."""
    if merge.available():
        return merge.merged_index(
            old,
            settings,
            vocabulary,
            pair_keys,
            row_map,
            old_to_new,
            added,
            lengths,
            has_pairs=has_pairs,
        )
    postings = _renumbered(old, row_map, old_to_new, added, int(lengths.shape[1]))
    return rows_of(
        list(old.fields), settings, vocabulary, pair_keys, postings, lengths, has_pairs=has_pairs
    )


def _lexical(
    old: LexicalIndex,
    settings: IndexSettings,
    analyzer: Analyzer,
    new: Sequence[KnowledgeEntry],
    old_to_new: I64,
    new_at: I64,
    n: int,
) -> LexicalIndex:
    """The old rows renumbered and the new entries' rows merged in, scored afresh."""
    names, pair_field, pair_sources, readers = text_readers(settings)
    vocabulary = old.vocabulary
    old_single = len(vocabulary)
    terms_of: Mapping[str, int] = vocabulary
    terms: list[IntArray] = [_NO.astype(np.int32) for _ in names]
    local_docs: list[IntArray] = list(terms)
    if new:
        terms, local_docs, terms_of = new_occurrences(new, readers, analyzer, vocabulary)
    single = len(terms_of)
    docs = [new_at[d] for d in local_docs]
    scale = max(n, 1)
    # Old pairs keyed for the grown vocabulary (order kept: every second term < V).
    old_keys_v = old.pair_keys
    old_pairs = old_keys_v // max(old_single, 1) * single + old_keys_v % max(old_single, 1)
    new_pairs: I64 = _NO
    owners: npt.NDArray[Any] = _NO
    if pair_field is not None:
        sources = [names.index(name) for name in pair_sources]
        new_pairs, owners = pair_occurrences(terms, local_docs, sources, single)
    new_pair_docs = new_at[owners]
    pair_keys, pair_rows = _grown(old_pairs, new_pairs)
    # Old row -> new row: single terms keep their ids, pairs move past the new ones.
    row_map = np.concatenate([np.arange(old_single, dtype=np.int64), single + pair_rows])
    fields = [*names, pair_field] if pair_field is not None else list(names)
    added = []
    for f, name in enumerate(fields):
        if name == pair_field:
            add_rows = single + np.searchsorted(pair_keys, new_pairs)
            added.append(_counted(add_rows * scale + new_pair_docs))
        else:
            added.append(_counted(terms[f].astype(np.int64) * scale + docs[f]))
    lengths = np.zeros((len(fields), n), dtype=np.int32)
    kept = np.flatnonzero(old_to_new >= 0)
    lengths[:, old_to_new[kept]] = np.asarray(old.lengths)[:, kept]
    if new:
        counted = [np.bincount(d, minlength=len(new)) for d in local_docs]
        if pair_field is not None:
            counted.append(np.bincount(owners, minlength=len(new)))
        lengths[:, new_at] = np.array(counted, dtype=np.int32)
    return merged_rows(
        old,
        settings,
        terms_of,
        pair_keys,
        row_map,
        old_to_new,
        added,
        lengths,
        has_pairs=pair_field is not None,
    )


def _renumbered(
    old: LexicalIndex, row_map: I64, old_to_new: I64, added: list[tuple[I64, I64]], n: int
) -> list[tuple[I64, I64]]:
    """The numpy path: per field, old postings renumbered merged with ``added`` (distinct
    sorted keys ``row·n + doc`` and frequencies), for ``rows_of``."""
    rows = np.repeat(row_map, np.diff(old.indptr))
    old_docs = old_to_new[np.asarray(old.docs, dtype=np.int64)]
    live = old_docs >= 0
    postings = []
    for f, (add_keys, add_tf) in enumerate(added):
        tf = old.frequencies[f].span(0, old.docs.shape[0])
        pick = live & (tf > 0)
        keys = np.concatenate([rows[pick] * max(n, 1) + old_docs[pick], add_keys])
        order = np.argsort(keys, kind="stable")  # two sorted runs: a linear merge
        postings.append((keys[order], np.concatenate([tf[pick], add_tf])[order]))
    return postings


_NO: I64 = np.empty(0, dtype=np.int64)


def _grown(old: I64, new: I64) -> tuple[I64, I64]:
    """``old`` (sorted, distinct) with the keys of ``new`` it lacks, sorted, and where each
    old key went: O(len(old)) without a search per old key."""
    fresh = merge.distinct(new)
    if not fresh.shape[0] or not old.shape[0]:
        where = np.arange(old.shape[0], dtype=np.int64)
        return np.concatenate([old, fresh]).astype(np.int64), where
    at = np.searchsorted(old, fresh)
    present = (at < old.shape[0]) & (old[np.minimum(at, old.shape[0] - 1)] == fresh)
    inserted = at[~present]
    # Old key i moves right by the number of keys inserted before it (at positions <= i).
    shift = np.cumsum(np.bincount(inserted, minlength=old.shape[0] + 1))[: old.shape[0]]
    where = np.arange(old.shape[0], dtype=np.int64) + shift
    return np.insert(old, inserted, fresh[~present]).astype(np.int64), where


def _counted(keys: I64) -> tuple[I64, I64]:
    unique, counts = np.unique(keys, return_counts=True)
    return unique.astype(np.int64), counts.astype(np.int64)


def _phrases(
    parts: Parts,
    old_to_new: I64,
    new: Sequence[KnowledgeEntry],
    new_at: I64,
    analyzer: Analyzer,
    exact_ids: bool,
    exact_titles: bool,
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    added = phrases_of(new, analyzer, exact_ids, exact_titles)
    # Python ints: a list lookup per position, not a numpy one (none without phrases)
    remap = old_to_new.tolist() if parts.exact_index or parts.alias_index else []
    out = []
    for old_map, new_map in zip((parts.exact_index, parts.alias_index), added, strict=True):
        merged: dict[str, list[int]] = {}
        for key, docs in old_map.items():
            kept = [at for at in map(remap.__getitem__, docs) if at >= 0]
            if kept:
                merged[key] = kept
        for key, docs in new_map.items():
            merged.setdefault(key, []).extend(int(new_at[d]) for d in docs)
        out.append({k: tuple(sorted(v)) for k, v in merged.items()})
    return out[0], out[1]


def _masks(
    parts: Parts, source: I64, from_old: MaskArray, new: Sequence[KnowledgeEntry]
) -> dict[str, Any]:
    fresh = [new[-1 - s] for s in source[~from_old].tolist()]
    n = int(source.shape[0])

    def spliced(old: Any, added: list[Any], dtype: Any) -> Any:
        if not new:  # deletes only: every position is an old one
            return np.asarray(old)[source].astype(dtype, copy=False)
        out = np.zeros(n, dtype=dtype)
        out[from_old] = np.asarray(old)[source[from_old]]
        out[~from_old] = added
        return out

    active = spliced(parts.active, [e.status == "active" for e in fresh], bool)
    universal = spliced(parts.universal, [not e.integrations for e in fresh], bool)
    domains = dict(parts.domains)
    added = [domains.setdefault(e.domain.casefold(), len(domains)) for e in fresh]
    codes = spliced(parts.domain_codes, added, np.int32)
    masks: dict[str, MaskArray] = {
        name: spliced(mask, [False] * len(fresh), bool)
        for name, mask in parts.integration_masks.items()
    }
    for at, entry in zip(np.flatnonzero(~from_old).tolist(), fresh, strict=True):
        for name in {i.casefold() for i in entry.integrations}:
            masks.setdefault(name, np.zeros(n, dtype=bool))[at] = True
    return {
        "active": active,
        "universal": universal,
        "domains": domains,
        "domain_codes": codes,
        "integration_masks": masks,
    }


def changed_entries(
    parts: Parts, entries: Sequence[KnowledgeEntry]
) -> tuple[list[KnowledgeEntry], tuple[str, ...]]:
    """The entries of ``entries`` whose content (``entry_digest``) is not what ``parts``
    holds under their id, and the ids ``parts`` holds that ``entries`` lacks (sorted).
    The held digests are read, not recomputed, when known (a loaded snapshot's)."""
    held = parts.digests
    table = entry_digests(parts.entries) if held is None else np.ascontiguousarray(held).tobytes()
    positions = parts.positions
    if isinstance(positions, ById):  # iterated in position order
        ids: Iterable[tuple[int, str]] = enumerate(positions)
    else:
        ids = ((at, entry_id) for entry_id, at in positions.items())
    old = {entry_id: table[32 * at : 32 * at + 32] for at, entry_id in ids}
    fresh = entry_digests(entries)
    upserts = [e for k, e in enumerate(entries) if old.get(e.id) != fresh[32 * k : 32 * k + 32]]
    return upserts, tuple(sorted(set(old) - {e.id for e in entries}))


def _digests(
    parts: Parts, source: I64, from_old: MaskArray, new: Sequence[KnowledgeEntry]
) -> npt.NDArray[np.uint8] | None:
    if parts.digests is None:
        return None  # computed when saved
    old = np.ascontiguousarray(parts.digests, dtype=np.uint8).reshape(-1, 32).view("V32")
    if not new:  # deletes only: every position is an old one
        return np.take(old.ravel(), source).view(np.uint8).reshape(-1, 32)
    out = np.empty(source.shape[0], dtype="V32")  # one 32-byte item per entry: one gather
    out[np.flatnonzero(from_old)] = np.take(old.ravel(), source[from_old])
    fresh = [new[-1 - s] for s in source[~from_old].tolist()]
    if fresh:
        out[np.flatnonzero(~from_old)] = np.frombuffer(entry_digests(fresh), "V32")
    return out.view(np.uint8).reshape(-1, 32)
