"""What a save writes: a knowledge base's files (as ``storage.Payload``) and its manifest.

``encode`` turns :class:`~groundwire.index.parts.Parts` into the manifest's body and
every file's content (format version 3, see ``docs/INDEX.md``): one precomputed segment,
or a base segment reused from the snapshot an update started from and a delta segment
(``segments.py``); ``manifest_bytes`` places the written files' records into the
manifest and hashes it. ``writer.py`` writes, verifies and installs them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.config import DELTA_COMPACT_SHARE, MAX_SNAPSHOT_JSON_DEPTH
from groundwire.errors import IndexFormatError, KnowledgeIndexError
from groundwire.index.builder import links_of
from groundwire.index.delta import DeltaIndex
from groundwire.index.grown import GrownVocabulary
from groundwire.index.lexical import LexicalIndex
from groundwire.index.parts import Parts, SnapshotSection, StoredSegment, known_sections
from groundwire.index.store import storage
from groundwire.index.store.codecs import (
    HashedStrings,
    check_json_depth,
    encode_strings,
    hash_keys,
    npy_header,
    sort_keys,
)
from groundwire.index.store.layout import (
    BOOL,
    DELTA_FEATURE,
    F8,
    FORMAT_VERSION,
    I4,
    I8,
    MAGIC,
    U1,
    U8,
    analyzer_fingerprint,
    canonical,
    settings_json,
)
from groundwire.index.store.lines import encoded_entries, entry_digests
from groundwire.index.store.views import (
    SortedIds,
    SortedPositions,
    SplicedEntries,
    gathered_lines,
)
from groundwire.ingest.validate import combine_digests
from groundwire.model import KnowledgeEntry
from groundwire.text import Analyzer

__all__ = ["encode", "manifest_bytes"]


@cache  # ~10 ms a save: the installed version does not change while a process runs
def _writer() -> str:
    import importlib.metadata  # only when saving: ~10 ms to import

    try:
        return f"groundwire {importlib.metadata.version('groundwire')}"
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "groundwire"


# -- encoding -----------------------------------------------------------------------------------
def _array(logical: str, array: npt.NDArray[Any], dtype: str) -> storage.Payload:
    data = np.ascontiguousarray(array, dtype=np.dtype(dtype))
    return storage.Payload(
        logical, "npy", [npy_header(data), data.reshape(-1).view(np.uint8).data], dtype, data.shape
    )


def _blob(logical: str, data: Any, ext: str = "bin") -> storage.Payload:
    return storage.Payload(logical, ext, [data])


def _json(logical: str, data: Any) -> storage.Payload:
    return storage.Payload(logical, "json", [canonical(data)])


def _strings(logical: str, strings: Sequence[str]) -> list[storage.Payload]:
    blob, offsets = encode_strings(strings, logical)
    return [_blob(f"{logical}.bytes", blob), _array(f"{logical}.offsets", offsets, I8)]


def _csr(logical: str, rows: Sequence[Sequence[int]]) -> list[storage.Payload]:
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, rows), np.int64, len(rows)), out=indptr[1:])
    values = np.fromiter((v for row in rows for v in row), np.int32, int(indptr[-1]))
    return [_array(f"{logical}.indptr", indptr, I8), _array(f"{logical}.docs", values, I4)]


def _vocabulary(lexical: LexicalIndex) -> list[storage.Payload]:
    vocabulary = lexical.vocabulary
    if isinstance(vocabulary, HashedStrings):  # a loaded snapshot: reuse its tables
        table = vocabulary.strings
        blob, offsets = table.blob, table.offsets
        keys, order = vocabulary.key_array, vocabulary.order_array
    elif isinstance(vocabulary, GrownVocabulary) and isinstance(vocabulary.base, HashedStrings):
        blob, offsets, keys, order = _grown_tables(vocabulary.base, list(vocabulary.added))
    else:
        terms = list(vocabulary)
        ids = np.fromiter(vocabulary.values(), np.int64, len(terms))
        if not np.array_equal(ids, np.arange(len(terms))):  # not in id order: sort
            ordered: list[str] = [""] * len(terms)
            for term, tid in vocabulary.items():
                ordered[tid] = term
            terms = ordered
        encoded, offsets = encode_strings(terms, "vocabulary")
        blob = np.frombuffer(encoded, dtype=np.uint8)
        keys, order = sort_keys(hash_keys(blob, offsets))
    return [
        _blob("terms.bytes", blob),
        _array("terms.offsets", offsets, I8),
        _array("terms.keys", keys, U8),
        _array("terms.order", order, I4),
    ]


def _grown_tables(
    base: HashedStrings, added: list[str]
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.uint64], Any]:
    """A loaded vocabulary's tables with ``added`` (ids from ``len(base)``) appended: only
    the new terms hashed, the keys merged (equal to hashing and sorting them all)."""
    encoded, new_offsets = encode_strings(added, "vocabulary")
    new_blob = np.frombuffer(encoded, dtype=np.uint8)
    old_offsets = np.asarray(base.strings.offsets, dtype=np.int64)
    blob = np.concatenate([np.asarray(base.strings.blob, dtype=np.uint8), new_blob])
    offsets = np.concatenate([old_offsets, old_offsets[-1] + new_offsets[1:]])
    keys = np.concatenate([np.asarray(base.key_array), hash_keys(new_blob, new_offsets)])
    numbers = np.arange(len(base), len(base) + len(added), dtype=np.int32)
    order = np.concatenate([np.asarray(base.order_array, dtype=np.int32), numbers])
    # Stable: ties keep base numbers first and each part's own order, as sort_keys does.
    by_key = np.argsort(keys, kind="stable")
    return blob, offsets, keys[by_key], order[by_key]


def _entries(
    entries: Sequence[KnowledgeEntry],
    digests: npt.NDArray[np.uint8] | None,
    stored: npt.NDArray[np.int64] | None = None,
) -> tuple[list[storage.Payload], npt.NDArray[np.uint8]]:
    """The entry lines, offsets and digests of every entry, or of those at ``stored``
    positions (a delta segment's); returns them and every entry's digest. Lines and
    digests are encoded in bulk (``lines.py``) unless stored ones can be copied."""
    chunks: list[Any]
    fresh = None
    if stored is not None:
        if isinstance(entries, SplicedEntries):
            blob, offsets = entries.lines(stored)
        else:
            blob, offsets = gathered_lines([(entries, at) for at in stored.tolist()])
        chunks = [blob]
    else:
        encoded = getattr(entries, "encoded", None)  # a loaded (or updated) snapshot's lines
        found = encoded() if encoded is not None else None
        if found is not None:
            chunks, offsets = [found[0]], found[1]
        else:
            chunks, offsets, fresh = encoded_entries(entries, digests is None)
    if digests is None:
        fresh = fresh if fresh is not None else entry_digests(entries)
        digests = np.frombuffer(fresh, np.uint8)
    digests = np.asarray(digests, dtype=np.uint8).reshape(len(entries), 32)
    lines = storage.Payload("entries", "jsonl", chunks)
    kept = digests if stored is None else digests[stored]
    return [lines, _array("entries.offsets", offsets, I8), _array("entries.digests", kept, U1)], (
        digests
    )


def _bounds(lines: Sequence[bytes]) -> npt.NDArray[np.int64]:
    offsets = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, lines), np.int64, len(lines)), out=offsets[1:])
    return offsets


def _stored_delta(parts: Parts) -> DeltaIndex | None:
    """The delta index to store as a base and a delta segment: the base must be the
    stored segment it was read from, and the delta within ``DELTA_COMPACT_SHARE``
    (otherwise the save writes the compaction, as an update would make it)."""
    lexical, stored = parts.lexical, parts.stored
    if (
        not isinstance(lexical, DeltaIndex)
        or stored is None
        or lexical.base is not stored.lexical
        or lexical.share > DELTA_COMPACT_SHARE
    ):
        return None
    return lexical


def _base(stored: StoredSegment) -> tuple[dict[str, Any], list[storage.Payload]]:
    """The base segment's record and files: known by name and digest (reused where the
    target holds them), their content the mapped arrays (written where it does not)."""
    payloads = []
    for logical, (name, digest, size, dtype, _, check) in stored.files.items():
        data = stored.arrays[logical]
        if dtype is not None:
            payload = _array(logical, data, dtype)
        else:
            payload = _blob(logical, data, name.rsplit(".", 1)[1])
        known = (name, digest, size, check)
        payloads.append(dataclasses.replace(payload, known=known, slot=f"base/{logical}"))
    return dict(stored.record), payloads


def _phrases(logical: str, index: Mapping[str, tuple[int, ...]]) -> list[storage.Payload]:
    keys = sorted(index)  # build order depends on set iteration; sorted is deterministic
    return [*_strings(f"{logical}.keys", keys), *_csr(logical, [index[k] for k in keys])]


def _links(parts: Parts) -> tuple[list[storage.Payload], int]:
    """Each entry's related then parent ids (duplicates and itself dropped), unresolved:
    loading keeps those that exist. From ``parts.links`` when known (no entry decoded)."""
    links = parts.links if parts.links is not None else links_of(parts.entries)
    n = len(parts.entries)
    linked = sorted((parts.positions[key], row) for key, row in links.items())
    sizes = np.zeros(n, dtype=np.int64)
    for at, row in linked:
        sizes[at] = len(row)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    flat = [i for _, row in linked for i in row]
    return [_array("links.indptr", indptr, I8), *_strings("links", flat)], len(flat)


def _lexical(lexical: LexicalIndex) -> list[storage.Payload]:
    payloads = [
        _array("lexical.indptr", lexical.indptr, I8),
        _array("lexical.docs", lexical.docs, I4),
        _array("lexical.scores", lexical.scores, F8),
        _array("lexical.lengths", lexical.lengths, I4),
        _array("lexical.pair_starts", lexical.pair_starts, I8),
        _array("lexical.pair_seconds", lexical.pair_seconds, I4),
    ]
    for f, freq in enumerate(lexical.frequencies):
        payloads += [
            _array(f"tf.{f}.counts", freq.counts, U1),
            _array(f"tf.{f}.overflow_at", freq.overflow_at, I8),
            _array(f"tf.{f}.overflow_tf", freq.overflow_tf, I8),
        ]
    return payloads


def _section(section: SnapshotSection) -> tuple[dict[str, Any], list[storage.Payload]]:
    if section.required and section.name not in known_sections():
        raise KnowledgeIndexError(
            f"section {section.name!r} is required but not registered: call "
            "register_section() in the code that reads it, or make it optional"
        )
    meta = dict(section.meta)
    try:
        check_json_depth(canonical(meta), MAX_SNAPSHOT_JSON_DEPTH - 4, "")
    except (IndexFormatError, TypeError, ValueError, RecursionError) as exc:
        raise KnowledgeIndexError(
            f"section {section.name!r}: meta must be JSON of at most "
            f"{MAX_SNAPSHOT_JSON_DEPTH - 4} levels ({exc})"
        ) from None
    payloads = [
        _array(f"section.{section.name}.{key}", array, array.dtype.str)
        for key, array in sorted(section.arrays.items())
    ]
    return {"required": section.required, "meta": meta}, payloads


def encode(parts: Parts) -> tuple[dict[str, Any], list[storage.Payload]]:
    """The manifest (without its file tables) and every file of a knowledge base."""
    lexical, n = parts.lexical, len(parts.entries)
    delta = _stored_delta(parts)
    added: npt.NDArray[np.int64] | None = None
    if delta is not None:  # a base segment (reused), its tombstones and a delta segment
        lexical = delta.delta
        is_base = np.zeros(n, dtype=bool)
        is_base[delta.base_to_now[delta.base_to_now >= 0]] = True
        added = np.flatnonzero(~is_base)
    elif isinstance(lexical, DeltaIndex):  # one precomputed segment
        lexical = lexical.compacted()
    pairs = int(lexical.pair_seconds.shape[0])
    if n >= 2**31 or len(lexical.vocabulary) + pairs >= 2**31:
        raise KnowledgeIndexError("snapshots hold fewer than 2**31 entries and terms")
    if isinstance(parts.positions, SortedIds):  # a loaded or updated snapshot's table
        table = parts.positions.table
        id_files = [_blob("ids.bytes", table.blob), _array("ids.offsets", table.offsets, I8)]
    else:
        sorted_ids = isinstance(parts.positions, SortedPositions)
        ids = list(parts.positions) if sorted_ids else [entry.id for entry in parts.entries]
        id_files = _strings("ids", ids)
    entry_files, digests = _entries(parts.entries, parts.digests, added)
    link_files, links = _links(parts)
    segment = [
        *_lexical(lexical),
        *_vocabulary(lexical),
        *id_files,
        *entry_files,
        *link_files,
        *_phrases("exact", parts.exact_index),
        *_phrases("alias", parts.alias_index),
    ]
    domains = sorted(parts.domains, key=lambda name: parts.domains[name])
    integrations = sorted(parts.integration_masks)
    masks = np.zeros((len(integrations), n), dtype=bool)
    for row, name in enumerate(integrations):
        masks[row] = parts.integration_masks[name]
    segment += [
        _array("active", parts.active, BOOL),
        _array("universal", parts.universal, BOOL),
        _array("domain_codes", parts.domain_codes, I4),
        _array("integration_masks", masks, BOOL),
    ]
    if delta is not None:
        segment.append(_array("base_to_now", delta.base_to_now, I4))
    sections: dict[str, Any] = {}
    section_files: dict[str, list[storage.Payload]] = {}
    for name in sorted(parts.sections):
        sections[name], section_files[name] = _section(parts.sections[name])
    top = [
        _json("labels", {"domains": domains, "integrations": integrations}),
        _json("issues", [dataclasses.asdict(issue) for issue in parts.issues]),
    ]
    lengths = lexical.lengths
    body = {
        "magic": MAGIC,
        "format_version": FORMAT_VERSION,
        "writer": _writer(),
        "features": [] if delta is None else [DELTA_FEATURE],
        "settings": settings_json(parts.settings),
        "analyzer_fingerprint": analyzer_fingerprint(Analyzer(parts.settings.analyzer)),
        "fields": list(lexical.fields),
        "counts": {
            "entries": n,
            "segments": 1 if delta is None else 2,
            "domains": len(domains),
            "integrations": len(integrations),
            "issues": len(parts.issues),
        },
        "source_manifest_hash": combine_digests([np.ascontiguousarray(digests).tobytes()]),
        "phrases": {"ids": parts.phrase_keys[0], "titles": parts.phrase_keys[1]},
        "sections": sections,
        "segments": [
            {
                "counts": {
                    "entries": n,
                    "terms": len(lexical.vocabulary),
                    "pairs": pairs,
                    "postings": int(lexical.docs.shape[0]),
                    "exact_phrases": len(parts.exact_index),
                    "alias_phrases": len(parts.alias_index),
                    "links": links,
                    **({} if added is None else {"stored_entries": int(added.shape[0])}),
                },
                "stats": {
                    "field_docs": (lengths > 0).sum(axis=1).tolist(),
                    "field_lengths": lengths.sum(axis=1, dtype=np.int64).tolist(),
                },
            }
        ],
    }
    base: list[storage.Payload] = []
    if delta is not None:
        assert parts.stored is not None
        record, base = _base(parts.stored)
        body["segments"] = [record, *body["segments"]]  # type: ignore[misc]
    payloads = [*top, *base, *segment, *(p for ps in section_files.values() for p in ps)]
    body["_layout"] = {
        "top": [p.logical for p in top],
        "base": [p.slot for p in base],
        "segment": [p.logical for p in segment],
        "sections": {name: [p.logical for p in ps] for name, ps in section_files.items()},
    }
    return body, payloads


def manifest_bytes(body: dict[str, Any], files: dict[str, Any]) -> bytes:
    """The manifest: ``files`` (logical → record) placed into its tables, self-hashed."""
    manifest = {k: v for k, v in body.items() if k != "_layout"}
    layout = body["_layout"]
    manifest["files"] = {name: _digest_record(files[name]) for name in layout["top"]}
    segment = dict(manifest["segments"][-1])
    segment["files"] = {name: _digest_record(files[name]) for name in layout["segment"]}
    segment["sections"] = {
        section: {"files": {name.rsplit(".", 1)[1]: _digest_record(files[name]) for name in names}}
        for section, names in layout["sections"].items()
    }
    if layout["base"]:
        base = dict(manifest["segments"][0])
        base["files"] = {slot[5:]: _digest_record(files[slot]) for slot in layout["base"]}
        manifest["segments"] = [base, segment]
    else:
        manifest["segments"] = [segment]
    manifest["manifest_sha256"] = hashlib.sha256(canonical(manifest)).hexdigest()
    return (json.dumps(manifest, ensure_ascii=False, indent=1) + "\n").encode()


def _digest_record(item: dict[str, Any]) -> dict[str, Any]:
    record = {"file": item["file"], "digest": item["digest"], "bytes": item["bytes"]}
    if "dtype" in item:
        record["dtype"], record["shape"] = item["dtype"], item["shape"]
    if "check" in item:
        record["check"] = item["check"]
    return record
