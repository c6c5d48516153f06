"""A snapshot's segments: their checks, their lexical index, and the delta layout.

A version-2 snapshot holds one precomputed segment, or, with the required feature
``delta-segment`` (``layout.DELTA_FEATURE``), two: ``segments[0]`` is a *base* (the
lexical arrays, vocabulary, ids, entry lines and digests of the snapshot an update
started from: the same files, reused by name) and ``segments[1]`` the *delta*: a
segment's files for the current documents (ids, masks, phrases, links, field lengths,
the current vocabulary) whose postings, entry lines and digests are those of the
documents added or replaced since the base only, plus ``base_to_now`` (each base
document's position now, ``-1``: deleted or replaced). ``delta.py`` describes how it
is queried, ``docs/INDEX.md`` ("On disk") what it costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.config import IndexSettings
from groundwire.errors import IndexFormatError
from groundwire.index.delta import DeltaIndex
from groundwire.index.lexical import FieldFrequencies, FieldStats, LexicalIndex
from groundwire.index.lexical_builder import assembled
from groundwire.index.parts import (
    SECTION_DTYPES,
    SnapshotSection,
    StoredFile,
    StoredSegment,
    known_sections,
)
from groundwire.index.store import checksums, digests, storage
from groundwire.index.store.codecs import HashedStrings, StringTable
from groundwire.index.store.layout import (
    SEGMENT_COUNTS,
    TableEntry,
    base_files,
    canonical,
    check_ascending_rows,
    check_ids,
    check_pointers,
    check_scores,
    check_values,
    counts_of,
    fail,
    file_entry,
)
from groundwire.index.store.views import LazyEntries, Picked, SplicedEntries

__all__ = [
    "DELTA_COUNTS",
    "base_key",
    "check_documents",
    "check_entries",
    "check_lexical",
    "check_segment",
    "delta_parts",
    "lexical_of",
    "section_files",
    "stored_segment",
]

_NO_KEYS: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)

DELTA_COUNTS = (*SEGMENT_COUNTS, "stored_entries")


def check_segment(
    segment: dict[str, Any],
    arrays: Mapping[str, Any],
    counts: dict[str, int],
    pair_field: bool,
    full: bool,
    where: str,
    delta: bool = False,
) -> dict[str, int]:
    """Shapes and bounds of one segment's arrays (``arrays`` keyed by logical name); a
    ``delta`` segment's entries and digests are those of ``stored_entries`` documents.

    Always: shapes, the score rows' bounds (the C kernel trusts them like slices), and
    every array sized by entries, terms or phrases whose values index another array
    (each is a fraction of the postings; unchecked, one would fail later as an
    IndexError). With ``full``: also the posting arrays (documents in range and
    ascending per row, scores positive and finite, frequencies consistent, field
    statistics equal to those of the lengths, pair tables ascending).
    """
    seg = check_lexical(segment, arrays, pair_field, full, where, DELTA_COUNTS if delta else None)
    check_entries(seg["entries"], seg.get("stored_entries"), arrays, full, where)
    check_documents(seg, arrays, counts, where)
    return seg


def check_lexical(
    segment: dict[str, Any],
    arrays: Mapping[str, Any],
    pair_field: bool,
    full: bool,
    where: str,
    names: tuple[str, ...] | None = None,
) -> dict[str, int]:
    """The score rows, frequencies, lengths, statistics and vocabulary of a segment (see
    :func:`check_segment`); returns its counts."""
    seg = counts_of(segment.get("counts"), names or SEGMENT_COUNTS, where)
    n, terms, pairs, postings = seg["entries"], seg["terms"], seg["pairs"], seg["postings"]
    fields = arrays["lexical.lengths"].shape[0] if arrays["lexical.lengths"].ndim == 2 else -1
    ptr, docs, scores = arrays["lexical.indptr"], arrays["lexical.docs"], arrays["lexical.scores"]
    check_pointers(where, "lexical.indptr", ptr, terms + pairs, postings)
    if docs.shape != (postings,) or scores.shape != (postings,):
        raise fail(where, "lexical.docs and lexical.scores do not hold one value per posting")
    if arrays["lexical.lengths"].shape != (fields, n) or fields < 1:
        raise fail(where, "lexical.lengths does not have one row per field")
    starts, seconds = arrays["lexical.pair_starts"], arrays["lexical.pair_seconds"]
    if pairs and not pair_field:
        raise fail(where, "pairs are indexed without a pair field")
    if pairs:
        check_pointers(where, "lexical.pair_starts", starts, terms, pairs)
        check_values(where, "lexical.pair_seconds", seconds, max(terms, 1))
    elif starts.shape[0] or seconds.shape[0]:
        raise fail(where, "pair tables are present without pairs")
    single_end = int(ptr[terms])
    for f in range(fields):
        counts_f = arrays[f"tf.{f}.counts"]
        at, tf = arrays[f"tf.{f}.overflow_at"], arrays[f"tf.{f}.overflow_tf"]
        span = postings - single_end if pair_field and f == fields - 1 else single_end
        if counts_f.shape != (span,) or at.shape != tf.shape or at.ndim != 1:
            raise fail(where, f"tf.{f} does not cover its postings")
        if (
            full
            and at.shape[0]
            and (
                bool((at[1:] <= at[:-1]).any())
                or int(tf.min()) < 255
                or int(at[0]) < 0
                or int(at[-1]) >= postings
            )
        ):
            raise fail(where, f"tf.{f} overflow table is malformed")
    check_ascending_rows(where, "lexical.docs", ptr, docs, n, full)
    check_scores(where, "lexical.scores", scores, full)
    stats = segment.get("stats")
    if not isinstance(stats, dict) or not all(
        isinstance(stats.get(k), list)
        and len(stats[k]) == fields
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in stats[k])
        for k in ("field_docs", "field_lengths")
    ):
        raise fail(where, "the segment's field statistics are malformed")
    if full:
        lengths = arrays["lexical.lengths"]
        if (
            int(lengths.min(initial=0)) < 0
            or (lengths > 0).sum(axis=1).tolist() != stats["field_docs"]
            or lengths.sum(axis=1, dtype=np.int64).tolist() != stats["field_lengths"]
        ):
            raise fail(where, "field lengths and field statistics disagree")
    check_pointers(
        where, "terms.offsets", arrays["terms.offsets"], terms, arrays["terms.bytes"].shape[0]
    )
    for name in ("terms.keys", "terms.order"):
        if arrays[name].shape != (terms,):
            raise fail(where, f"{name} does not have one value per term")
    check_values(where, "terms.order", arrays["terms.order"], max(terms, 1))
    keys = arrays["terms.keys"]
    if full and terms > 1 and bool((keys[1:] < keys[:-1]).any()):
        raise fail(where, "terms.keys is not sorted")
    return seg


def check_entries(
    n: int, stored: int | None, arrays: Mapping[str, Any], full: bool, where: str
) -> None:
    """The id table of ``n`` entries and the lines and digests of ``stored`` of them
    (None: all)."""
    stored = n if stored is None else stored
    check_pointers(where, "ids.offsets", arrays["ids.offsets"], n, arrays["ids.bytes"].shape[0])
    check_pointers(
        where, "entries.offsets", arrays["entries.offsets"], stored, arrays["entries"].shape[0]
    )
    if arrays["entries.digests"].shape != (stored, 32):
        raise fail(where, "entries.digests does not hold 32 bytes per entry")


def check_documents(
    seg: dict[str, int], arrays: Mapping[str, Any], counts: dict[str, int], where: str
) -> None:
    """A segment's links, phrase maps and eligibility masks (see :func:`check_segment`)."""
    n = seg["entries"]
    links = arrays["links.indptr"]
    check_pointers(where, "links.indptr", links, n, seg["links"])
    check_pointers(
        where,
        "links.offsets",
        arrays["links.offsets"],
        seg["links"],
        arrays["links.bytes"].shape[0],
    )
    for kind in ("exact", "alias"):
        phrases = seg[f"{kind}_phrases"]
        blob = arrays[f"{kind}.keys.bytes"].shape[0]
        check_pointers(where, f"{kind}.keys.offsets", arrays[f"{kind}.keys.offsets"], phrases, blob)
        kind_docs = arrays[f"{kind}.docs"]
        check_pointers(
            where, f"{kind}.indptr", arrays[f"{kind}.indptr"], phrases, kind_docs.shape[0]
        )
        check_values(where, f"{kind}.docs", kind_docs, n)
    for name in ("active", "universal", "domain_codes"):
        if arrays[name].shape != (n,):
            raise fail(where, f"{name} does not have one value per entry")
    if arrays["integration_masks"].shape != (counts["integrations"], n):
        raise fail(where, "integration_masks does not have one row per integration")
    check_values(where, "domain_codes", arrays["domain_codes"], max(counts["domains"], 1))
    for name in ("active", "universal", "integration_masks"):
        if arrays[name].size and int(arrays[name].view(np.uint8).max()) > 1:
            raise fail(where, f"{name} holds a value other than 0 and 1")


def section_files(
    manifest: dict[str, Any], segment: dict[str, Any], prefix: str, where: str, plain: bool
) -> dict[str, TableEntry]:
    """The files of the sections the manifest declares, as ``segment`` provides them
    (``<prefix>section/<name>/<array>``); a required section this process does not
    read is refused. ``plain``: bare SHA-256 digests (version 2)."""
    table: dict[str, TableEntry] = {}
    declared = manifest.get("sections", {})
    provided = segment.get("sections", {})
    if not isinstance(declared, dict) or not isinstance(provided, dict):
        raise IndexFormatError(f"{where}: manifest.json has malformed sections")
    if set(declared) != set(provided):
        raise IndexFormatError(f"{where}: sections declared and provided differ")
    for name, spec in declared.items():
        try:
            SnapshotSection(name)
        except Exception as exc:
            raise IndexFormatError(f"{where}: {exc}") from None
        if (
            not isinstance(spec, dict)
            or not isinstance(spec.get("required"), bool)
            or not isinstance(spec.get("meta"), dict)
        ):
            raise IndexFormatError(f"{where}: section {name!r} is malformed")
        if spec["required"] and name not in known_sections():
            raise IndexFormatError(
                f"{where}: the snapshot requires section {name!r}, which this groundwire "
                "does not read; upgrade groundwire or rebuild the snapshot"
            )
        files = provided[name].get("files") if isinstance(provided[name], dict) else None
        if not isinstance(files, dict):
            raise IndexFormatError(f"{where}: section {name!r} lists no files")
        for array, item in files.items():
            dtype = item.get("dtype") if isinstance(item, dict) else None
            if not isinstance(array, str) or dtype not in SECTION_DTYPES:
                raise IndexFormatError(f"{where}: section {name!r} has a bad file {array!r}")
            stem = f"section.{name}.{array}"
            entry = file_entry(item, stem, ("npy", dtype), "digest", where, plain=plain)
            table[f"{prefix}section/{name}/{array}"] = entry
    return table


def base_key(
    manifest: dict[str, Any], opened: dict[str, storage.OpenedFile], table: dict[str, TableEntry]
) -> tuple[tuple[Any, ...], dict[str, storage.OpenedFile]] | None:
    """What full checks of a segment's base files prove (``checksums.snapshot_key`` over
    them and the counts and statistics they are checked against), and those files: a
    delta snapshot whose base this process proved is not checked again (version 2)."""
    if manifest["format_version"] == 1:
        return None
    fields = manifest["fields"]
    record = base_key_record(manifest["segments"][0], fields)
    names = ["s0/" + logical for logical in base_files(len(fields))]
    subset = {name: opened[name] for name in names}
    return checksums.snapshot_key(canonical(record), subset, table), subset


def lexical_of(
    seg: Mapping[str, Any],
    record: Mapping[str, Any],
    fields: list[str],
    settings: IndexSettings,
    vocabulary: HashedStrings,
) -> LexicalIndex:
    """The lexical index of one checked segment (``seg``: its arrays by logical name)."""
    pair_field = fields[-1:] == ["bigrams"]
    stats = record["stats"]
    field_docs = np.array(stats["field_docs"], dtype=np.int64)
    totals = np.array(stats["field_lengths"], dtype=np.int64)
    avg = np.divide(totals, field_docs, out=np.ones(len(totals)), where=field_docs > 0)
    ptr = seg["lexical.indptr"]
    single_end = int(ptr[record["counts"]["terms"]])
    frequencies = tuple(
        FieldFrequencies(
            single_end if pair_field and f == len(fields) - 1 else 0,
            seg[f"tf.{f}.counts"],
            seg[f"tf.{f}.overflow_at"],
            seg[f"tf.{f}.overflow_tf"],
        )
        for f in range(len(fields))
    )
    return assembled(
        fields,
        settings,
        vocabulary,
        _NO_KEYS,
        ptr,
        seg["lexical.docs"],
        seg["lexical.scores"],
        frequencies,
        seg["lexical.lengths"],
        FieldStats(field_docs, avg, int(record["counts"]["entries"])),
        (seg["lexical.pair_starts"], seg["lexical.pair_seconds"]),
    )


def vocabulary_of(seg: Mapping[str, Any]) -> HashedStrings:
    """A segment's vocabulary, looked up in its mapped tables."""
    table = StringTable(seg["terms.bytes"], seg["terms.offsets"])
    return HashedStrings(table, seg["terms.keys"], seg["terms.order"])


def stored_segment(
    lexical: LexicalIndex,
    entries: Any,
    record: Mapping[str, Any],
    seg: Mapping[str, Any],
) -> StoredSegment:
    """What a delta save reuses of a loaded segment: its base files' records and arrays."""
    wanted = base_files(lexical.lengths.shape[0])
    listed = record["files"]
    files: dict[str, StoredFile] = {}
    for logical, (_, dtype) in wanted.items():
        item = listed[logical]
        shape = tuple(item["shape"]) if dtype is not None else None
        digest = str(item["digest"])
        if ":" not in digest:  # version 2: a bare SHA-256
            digest = digests.tagged(digests.SHA256, digest)
        check = digests.check_of(item, "", logical)  # validated when the table was read
        files[logical] = (item["file"], digest, int(item["bytes"]), dtype, shape, check)
    base = {k: v for k, v in record.items() if k in ("counts", "stats")}
    return StoredSegment(lexical, entries, base, files, {k: seg[k] for k in wanted})


def base_key_record(record: Mapping[str, Any], fields: list[str]) -> dict[str, Any]:
    """What a base segment's lexical checks depend on besides its files' bytes."""
    counts = record.get("counts") if isinstance(record, dict) else None
    counts = counts if isinstance(counts, dict) else {}
    lexical = {k: counts.get(k) for k in ("entries", "terms", "pairs", "postings")}
    return {"counts": lexical, "stats": record.get("stats"), "fields": fields}


def delta_parts(
    manifest: dict[str, Any],
    arrays: Mapping[str, Any],
    full: bool,
    where: str,
    settings: IndexSettings,
    base_proven: bool,
) -> tuple[DeltaIndex, Any, npt.NDArray[np.uint8], StoredSegment]:
    """The delta index, the entries, their digests (position order) and the stored base
    of a delta snapshot: ``arrays`` holds the base's files under ``s0/`` and the delta's
    under ``s1/`` (the delta segment itself was checked by ``check_segment``).

    Checked always: the base's shapes and row bounds, the tombstone map (values in
    range, live ones ascending, as many documents as the delta's). With ``full``: the
    base's postings (unless this process proved the same files before, ``base_proven``)
    and that the current vocabulary begins with the base's."""
    fields = manifest["fields"]
    pair_field = fields[-1:] == ["bigrams"]
    base_record, record = manifest["segments"]
    base = {k[3:]: v for k, v in arrays.items() if k.startswith("s0/")}
    seg = {k[3:]: v for k, v in arrays.items() if k.startswith("s1/")}
    check_base = full and not base_proven
    base_counts = check_lexical(base_record, base, pair_field, check_base, where)
    check_entries(base_counts["entries"], None, base, check_base, where)
    base_ids = StringTable(base["ids.bytes"], base["ids.offsets"])
    if check_base:
        check_ids(base_ids, where)
    n, base_n = int(record["counts"]["entries"]), base_counts["entries"]
    stored_n = int(record["counts"]["stored_entries"])
    base_to_now = seg["base_to_now"]
    if base_to_now.shape != (base_n,):
        raise fail(where, "base_to_now does not have one value per base document")
    live = np.flatnonzero(base_to_now >= 0)
    now = base_to_now[live]
    if (
        int(base_to_now.min(initial=0)) < -1
        or int(base_to_now.max(initial=-1)) >= n
        or bool((now[1:] <= now[:-1]).any())
        or live.shape[0] + stored_n != n
    ):
        raise fail(where, "base_to_now does not map the base documents onto the current ones")
    base_terms = base_counts["terms"]
    if int(record["counts"]["terms"]) < base_terms:
        raise fail(where, "the delta's vocabulary is smaller than its base's")
    if full:
        base_ptr, ptr = base["terms.offsets"], seg["terms.offsets"]
        end = int(base_ptr[-1])
        if not np.array_equal(base_ptr, ptr[: base_terms + 1]) or not np.array_equal(
            base["terms.bytes"], seg["terms.bytes"][:end]
        ):
            raise fail(where, "the delta's vocabulary does not begin with its base's")
    base_lexical = lexical_of(base, base_record, fields, settings, vocabulary_of(base))
    lexical = lexical_of(seg, record, fields, settings, vocabulary_of(seg))
    index = DeltaIndex(base_lexical, base_to_now, lexical, settings)
    is_base = np.zeros(n, dtype=bool)
    is_base[now] = True
    added = np.flatnonzero(~is_base)
    source = np.empty(n, dtype=np.int64)
    source[now] = live
    source[added] = -1 - np.arange(stored_n, dtype=np.int64)
    ids = StringTable(seg["ids.bytes"], seg["ids.offsets"])
    base_entries = LazyEntries(base["entries"], base["entries.offsets"], base_ids)
    fresh = LazyEntries(seg["entries"], seg["entries.offsets"], Picked(ids, added))
    spliced = np.empty(n, dtype="V32")  # one 32-byte item per entry: one gather each
    spliced[now] = np.take(_items(base["entries.digests"]), live)
    spliced[added] = _items(seg["entries.digests"])
    digests = spliced.view(np.uint8).reshape(n, 32)
    digests.flags.writeable = False
    entries = SplicedEntries(base_entries, fresh, source)
    stored = stored_segment(base_lexical, base_entries, base_record, base)
    return index, entries, digests, stored


def _items(digests: npt.NDArray[np.uint8]) -> npt.NDArray[np.void]:
    """``(k, 32)`` digest bytes as ``k`` 32-byte items."""
    return np.ascontiguousarray(digests, dtype=np.uint8).reshape(-1, 32).view("V32").ravel()
