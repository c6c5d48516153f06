"""Opening a snapshot folder: verify it and assemble :class:`~groundwire.index.parts.Parts`.

Nothing is re-tokenized and no dictionary is rebuilt: arrays are mapped read-only,
the vocabulary and the entry ids are looked up in the mapped files, and entries are
decoded from their JSON lines on first access. Versions 1 to 3 are read (see
``legacy.py`` and ``layout.py``; 3 is 2 with a digest algorithm per file); the opening,
checksum and mapping steps are shared.

Checksums (``checksums.py``) run on background threads while the bounds are checked,
and a file verified once in a process is not hashed again while its identity holds.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any, Literal

import numpy as np

from groundwire.config import DEFAULT_MAX_ARRAY_BYTES, DEFAULT_MAX_MANIFEST_BYTES, MAX_ENTRIES
from groundwire.errors import ConfigError, IndexFormatError
from groundwire.index.builder import relations_of
from groundwire.index.delta import DeltaIndex
from groundwire.index.lexical import LexicalIndex
from groundwire.index.parts import Parts, SnapshotSection
from groundwire.index.store import bounds, checksums, layout, legacy, segments, storage
from groundwire.index.store.checksums import Table as _Table
from groundwire.index.store.codecs import HashedStrings, StringTable, loads_bounded
from groundwire.index.store.lines import entry_digests
from groundwire.index.store.views import LazyEntries, SortedIds, string_rows
from groundwire.ingest.validate import combine_digests, content_hash
from groundwire.model import KnowledgeEntry

__all__ = ["Verify", "describe", "is_snapshot", "load_parts", "verify_staged"]

#: Opening retries when a concurrent replace deleted the files of the manifest just read.
_ATTEMPTS = 3
Verify = Literal["full", "manifest"]
_TOP_FILES: dict[str, layout.FileSpec] = {"labels": ("json", None), "issues": ("json", None)}
_SEGMENT = "s0/"
_DELTA = "s1/"  # the delta segment of a delta snapshot (s0/: its base)


@dataclasses.dataclass(frozen=True)
class _Limits:
    manifest_bytes: int
    entries: int
    array_bytes: int


def _limit(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name}={value!r} is invalid: expected an integer >= 1")
    return value


def is_snapshot(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a snapshot folder, intact or damaged.

    True when its ``manifest.json`` names this format; and, when there is no
    ``source.yaml``, when it has a ``manifest.json`` of any kind (a damaged file, a
    folder, a FIFO) or files named as a snapshot writer names them
    (``<part>.<sha12>.npy``) — so a damaged snapshot is reported as one, never read
    as a knowledge base or documents folder. Never blocks on a FIFO.
    """
    folder = Path(path)
    if not folder.is_dir():
        return False
    authored = (folder / "source.yaml").exists()
    try:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(folder / storage.MANIFEST, flags)
    except FileNotFoundError:
        return not authored and any(
            storage.OBJECT_NAME.fullmatch(name) for name in os.listdir(folder)
        )
    except OSError:  # a symlink (O_NOFOLLOW) or unreadable: damaged, unless authored
        return not authored
    try:
        head = os.read(fd, 4096) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    return layout.MAGIC.encode() in head or not authored


class _VanishedError(Exception):
    """A file listed in the manifest is gone (a concurrent replace deleted it)."""


# -- opening ------------------------------------------------------------------------------
def _open_all(
    dir_fd: int, table: _Table, limits: _Limits, where: str
) -> dict[str, storage.OpenedFile]:
    """Open and size-check every listed file (the caller closes them)."""
    opened: dict[str, storage.OpenedFile] = {}
    try:
        for logical, (name, _, size, _, _, _) in table.items():
            try:
                opened[logical] = storage.open_file(dir_fd, name, size, limits.array_bytes, where)
            except FileNotFoundError as exc:
                raise _VanishedError(name) from exc
            except OSError as exc:  # e.g. a symlink (O_NOFOLLOW) or no permission
                raise IndexFormatError(f"{where}: cannot open {name} ({exc.strerror})") from exc
    except BaseException:
        for item in opened.values():
            item.close()
        raise
    return opened


def _read_all(
    opened: dict[str, storage.OpenedFile], table: _Table, full: bool, where: str
) -> dict[str, Any]:
    """Map every array and blob read-only; parse JSON.

    Nothing is populated up front: the hashing threads, started right after, fault the
    pages in as they read them (off the loading thread), and under ``manifest`` only
    what queries touch is ever read.
    """
    out: dict[str, Any] = {}
    for logical, item in opened.items():
        name, _, _, dtype, shape, _ = table[logical]
        if name.endswith(".json"):
            out[logical] = loads_bounded(os.pread(item.fd, item.size, 0), f"{where}: {name}")
            continue
        array = storage.map_file(item, where, dtype)
        if shape is not None and array.shape != shape:
            raise IndexFormatError(
                f"{where}: {name} has shape {array.shape}, the manifest says {shape}"
            )
        out[logical] = array
    return out


Assemble = Callable[[dict[str, Any], dict[str, Any], bool, str, bool], Parts]


def _open_parts(
    dir_fd: int,
    manifest: tuple[bytes, dict[str, Any]],
    table: _Table,
    assemble: Assemble,
    verify: Verify,
    limits: _Limits,
    where: str,
) -> Parts:
    """Open, verify and assemble a snapshot: hashing runs while the bounds are checked.

    ``manifest`` is the manifest's bytes and its parsed content. A checksum mismatch is
    reported before any other problem it may have caused. Under ``full``, a snapshot
    whose manifest and files (same identities) passed full verification in this process
    before is not hashed or bounds-checked again: only its files are stat-ed.
    """
    opened = _open_all(dir_fd, table, limits, where)
    key = checksums.snapshot_key(manifest[0], opened, table)
    full = verify == "full" and not checksums.proven(key)
    base = segments.base_key(manifest[1], opened, table)
    base_proven = base is not None and checksums.proven(base[0])
    digests: dict[str, Future[str]] = {}
    started: list[Any] = []
    try:
        try:  # headers and mappings first: small reads that hashing threads would delay
            arrays, problem = _read_all(opened, table, full, where), None
        except IndexFormatError as exc:
            arrays, problem = {}, exc
        if full:  # the posting passes first: the checks below wait for them
            passes = bounds.posting_passes(manifest[1], arrays, (_SEGMENT, _DELTA), base_proven)
            started = bounds.ahead(checksums.submit, passes)
        digests = checksums.hash_all(opened, table, where) if full else {}
        if problem is None:
            try:
                parts = assemble(manifest[1], arrays, full, where, base_proven)
            except IndexFormatError as exc:
                problem = exc
        checksums.check(digests, opened, table, where)
        if problem is not None:
            raise problem
        if full:
            checksums.remember_proven(key, opened)
            if base is not None:
                checksums.remember_proven(*base)
        return parts
    finally:
        for digest in digests.values():
            digest.cancel()
        wait(digests.values())  # no thread may still read a descriptor we close
        bounds.settle(started)
        for item in opened.values():
            item.close()


# -- assembling -----------------------------------------------------------------------------------
def _settings(manifest: dict[str, Any], where: str) -> Any:
    settings = layout.settings_of(manifest.get("settings"), where)
    if manifest.get("analyzer_fingerprint") != layout.config_fingerprint(settings.analyzer):
        raise IndexFormatError(
            f"{where}: this groundwire analyzes text differently from the one that built the "
            "snapshot (stemmer, stop words or normalization changed); rebuild the snapshot"
        )
    fields = manifest["fields"]
    weights = settings.field_weights
    text_fields = [name for name in weights if name != "bigrams"]
    if fields != text_fields + (["bigrams"] if weights.get("bigrams", 0.0) > 0 else []):
        raise IndexFormatError(f"{where}: the field list does not match the field weights")
    return settings


def _common(
    arrays: dict[str, Any], full: bool, where: str
) -> tuple[StringTable, HashedStrings, LazyEntries, dict[str, dict[str, tuple[int, ...]]]]:
    """The id table, the vocabulary, the entries and the phrase maps of one segment."""
    ids = StringTable(arrays["ids.bytes"], arrays["ids.offsets"])
    if full:
        layout.check_ids(ids, where)
    table = StringTable(arrays["terms.bytes"], arrays["terms.offsets"])
    vocabulary = HashedStrings(table, arrays["terms.keys"], arrays["terms.order"])
    entries = LazyEntries(arrays["entries"], arrays["entries.offsets"], ids)
    phrases = {
        kind: string_rows(
            StringTable(arrays[f"{kind}.keys.bytes"], arrays[f"{kind}.keys.offsets"]),
            arrays[f"{kind}.indptr"],
            arrays[f"{kind}.docs"],
        )
        for kind in ("exact", "alias")
    }
    return ids, vocabulary, entries, phrases


def _parts(
    entries: Sequence[KnowledgeEntry],
    positions: SortedIds,
    settings: Any,
    lexical: LexicalIndex | DeltaIndex,
    phrases: dict[str, dict[str, tuple[int, ...]]],
    relations: dict[str, tuple[str, ...]],
    arrays: dict[str, Any],
    where: str,
) -> Parts:
    """Parts of a version-1 layout (``arrays`` holding ``labels`` and ``issues``) or of a
    segment (the caller replaces labels, issues and masks)."""
    labels = arrays.get("labels", {"domains": [], "integrations": []})
    return Parts(
        entries=entries,
        positions=positions,
        settings=settings,
        lexical=lexical,
        exact_index=phrases["exact"],
        alias_index=phrases["alias"],
        relations=relations,
        issues=layout.issues_of(arrays.get("issues", []), where),
        **_masks(arrays, labels),
    )


def _masks(arrays: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    masks = arrays["integration_masks"]
    return {
        "active": arrays["active"],
        "universal": arrays["universal"],
        "domains": {name: code for code, name in enumerate(labels["domains"])},
        "domain_codes": arrays["domain_codes"],
        "integration_masks": {name: masks[row] for row, name in enumerate(labels["integrations"])},
    }


def _assemble_v1(
    manifest: dict[str, Any], arrays: dict[str, Any], full: bool, where: str, _: bool
) -> Parts:
    legacy.check_arrays(manifest, arrays, full, where)
    settings = _settings(manifest, where)
    fields = manifest["fields"]
    ids, vocabulary, entries, phrases = _common(arrays, full, where)
    weights = LexicalIndex.weights_of(settings, fields)
    lexical = legacy.lexical_of(fields, weights, settings, vocabulary, arrays)
    rel_ptr, targets = arrays["relations.indptr"], arrays["relations.targets"]
    relations = {}
    for doc in np.flatnonzero(np.diff(rel_ptr)).tolist():
        row = targets[int(rel_ptr[doc]) : int(rel_ptr[doc + 1])].tolist()
        relations[ids[doc]] = tuple(ids[t] for t in row)
    parts = _parts(entries, SortedIds(ids), settings, lexical, phrases, relations, arrays, where)
    # Version 1 did not record which phrases were keys: entries had id and title keys,
    # documents none (their titles are never keys unless asked).
    keyed = bool(phrases["exact"])
    return parts._replace(phrase_keys=(keyed, keyed))


def _table_v2(manifest: dict[str, Any], where: str) -> _Table:
    """Every file of a version-2 or -3 snapshot: top-level names, then ``s0/`` segment
    files and ``s0/section/<name>/<array>`` section arrays; with a delta segment
    (``segments.py``) ``s0/`` holds the base's files and ``s1/`` the delta's and the
    sections. Version 2 records bare SHA-256 digests; version 3 names each file's
    algorithm."""
    plain = manifest["format_version"] == 2
    counts = layout.counts_of(manifest["counts"], layout.COUNTS, where)
    delta = layout.DELTA_FEATURE in manifest["features"]
    want = 2 if delta else 1
    listed = manifest.get("segments")
    if not isinstance(listed, list) or len(listed) != want or counts["segments"] != want:
        raise IndexFormatError(f"{where}: manifest.json does not list {want} segment(s)")
    if not all(isinstance(item, dict) for item in listed):
        raise IndexFormatError(f"{where}: manifest.json has a malformed segment")
    table = layout.file_table(manifest["files"], _TOP_FILES, "digest", where, plain=plain)
    fields = len(manifest["fields"])
    segment, prefix, expected = listed[0], _SEGMENT, layout.segment_files(fields)
    if delta:
        base = layout.base_files(fields)
        files = segment.get("files")
        table.update(layout.file_table(files, base, "digest", where, _SEGMENT, plain=plain))
        segment, prefix, expected = listed[1], _DELTA, layout.delta_files(fields)
    files = segment.get("files")
    table.update(layout.file_table(files, expected, "digest", where, prefix, plain=plain))
    table.update(segments.section_files(manifest, segment, prefix, where, plain))
    return table


def _assemble_v2(
    manifest: dict[str, Any], arrays: dict[str, Any], full: bool, where: str, base_proven: bool
) -> Parts:
    counts = manifest["counts"]
    delta = layout.DELTA_FEATURE in manifest["features"]
    prefix = _DELTA if delta else _SEGMENT
    segment = manifest["segments"][-1]
    seg = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    pair_field = manifest["fields"][-1:] == ["bigrams"]
    segments.check_segment(segment, seg, counts, pair_field, full, where, delta)
    layout.check_labels(arrays["labels"], counts, where)
    settings = _settings(manifest, where)
    fields = manifest["fields"]
    ids, vocabulary, entries, phrases = _common(seg, full, where)
    lexical: LexicalIndex | DeltaIndex
    digests: Any = seg["entries.digests"]
    if delta:
        lexical, entries, digests, stored = segments.delta_parts(
            manifest, arrays, full, where, settings, base_proven
        )
    else:
        lexical = segments.lexical_of(seg, segment, fields, settings, vocabulary)
        stored = segments.stored_segment(lexical, entries, segment, seg)
    positions = SortedIds(ids)
    table = StringTable(seg["links.bytes"], seg["links.offsets"])
    bounds = seg["links.indptr"]
    links = {
        ids[doc]: tuple(table[int(bounds[doc]) : int(bounds[doc + 1])])
        for doc in np.flatnonzero(np.diff(bounds)).tolist()
    }
    relations = relations_of(links, positions)
    phrases_json = manifest.get("phrases")
    if not isinstance(phrases_json, dict) or not all(
        isinstance(phrases_json.get(k), bool) for k in ("ids", "titles")
    ):
        raise IndexFormatError(f"{where}: manifest.json lacks its phrase options")
    sections = {}
    for name, spec in manifest.get("sections", {}).items():
        section_prefix = f"section/{name}/"
        data = {k[len(section_prefix) :]: v for k, v in seg.items() if k.startswith(section_prefix)}
        sections[name] = SnapshotSection(name, spec["meta"], data, spec["required"])
    parts = _parts(entries, positions, settings, lexical, phrases, relations, seg, where)
    return parts._replace(
        issues=layout.issues_of(arrays["issues"], where),
        digests=digests,
        sections=sections,
        links=links,
        phrase_keys=(phrases_json["ids"], phrases_json["titles"]),
        stored=stored,
        **_masks(seg, arrays["labels"]),
    )


def _check_content(parts: Parts, version: int, claimed: str, expected: str, where: str) -> None:
    if claimed != expected:
        raise IndexFormatError(
            f"{where}: source manifest hash {claimed} differs from the expected "
            f"{expected}; it was built from other sources"
        )
    if version == 1:
        actual = legacy.legacy_content_hash(parts.entries)
    else:
        digests = parts.digests
        if digests is None or combine_digests(bytes(row) for row in digests) != claimed:
            actual = ""
        else:
            held = np.ascontiguousarray(digests, dtype=np.uint8).tobytes()
            same = held == entry_digests(parts.entries)  # in bulk: lines.py
            actual = claimed if same else content_hash(parts.entries)
    if actual != claimed:
        raise IndexFormatError(
            f"{where}: the entries do not hash to the recorded source manifest hash"
        )


def load_parts(
    path: str | os.PathLike[str],
    expected_manifest_hash: str | None = None,
    *,
    verify: Verify = "full",
    max_manifest_bytes: int | None = None,
    max_entries: int | None = None,
    max_array_bytes: int | None = None,
) -> Parts:
    """Open the snapshot at ``path`` (see :meth:`KnowledgeBase.load`)."""
    if verify not in ("full", "manifest"):
        raise ConfigError(f"verify={verify!r} is invalid: expected 'full' or 'manifest'")
    limits = _Limits(
        _limit("max_manifest_bytes", max_manifest_bytes, DEFAULT_MAX_MANIFEST_BYTES),
        _limit("max_entries", max_entries, MAX_ENTRIES),
        _limit("max_array_bytes", max_array_bytes, DEFAULT_MAX_ARRAY_BYTES),
    )
    folder = Path(os.fspath(path))
    where = str(folder)
    for attempt in range(_ATTEMPTS):
        dir_fd = storage.open_dir(folder)
        try:
            try:
                data = storage.read_small(dir_fd, storage.MANIFEST, limits.manifest_bytes, where)
            except FileNotFoundError as exc:
                raise IndexFormatError(
                    f"{where}: no manifest.json; not a snapshot (build one with 'groundwire index')"
                ) from exc
            except OSError as exc:
                raise IndexFormatError(
                    f"{where}: cannot read manifest.json ({exc.strerror})"
                ) from exc
            try:
                parts, manifest = _load(dir_fd, data, verify, limits, where)
            except _VanishedError as gone:
                if attempt + 1 < _ATTEMPTS:
                    continue  # replaced while we read it: read the new manifest
                raise IndexFormatError(
                    f"{where}: {gone} is listed in manifest.json but missing; rebuild the snapshot"
                ) from None
        finally:
            os.close(dir_fd)
        if expected_manifest_hash is not None:
            claimed = manifest["source_manifest_hash"]
            version = manifest["format_version"]
            _check_content(parts, version, claimed, expected_manifest_hash, where)
        return parts
    raise AssertionError("unreachable")  # pragma: no cover


def _load(
    dir_fd: int, data: bytes, verify: Verify, limits: _Limits, where: str
) -> tuple[Parts, dict[str, Any]]:
    """The parts of the snapshot whose manifest is ``data``, files in ``dir_fd``."""
    manifest = layout.parse_manifest(data, where)
    if manifest["format_version"] == 1:
        counts = layout.counts_of(manifest["counts"], legacy.COUNTS, where)
        expected = legacy.expected_files(len(manifest["fields"]))
        table = layout.file_table(manifest["files"], expected, "sha256", where, plain=True)
        assemble: Assemble = _assemble_v1
    else:
        table, assemble = _table_v2(manifest, where), _assemble_v2
        counts = manifest["counts"]
    if counts["entries"] > limits.entries:
        raise IndexFormatError(
            f"{where}: {counts['entries']:,} entries, over max_entries={limits.entries:,}"
        )
    parts = _open_parts(dir_fd, (data, manifest), table, assemble, verify, limits, where)
    return parts, manifest


def verify_staged(folder: Path, manifest: bytes) -> Parts:
    """Open the files of ``folder`` as the manifest ``manifest`` (not yet installed there)
    lists them, with full checks: what a writer verifies before it swaps the manifest."""
    where = str(folder)
    limits = _Limits(2**62, 2**62, 2**62)  # the writer's own snapshot: no reader limits
    dir_fd = storage.open_dir(folder)
    try:
        return _load(dir_fd, manifest, "full", limits, where)[0]
    except _VanishedError as gone:
        raise IndexFormatError(f"{where}: {gone} vanished while it was verified") from None
    finally:
        os.close(dir_fd)


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What a snapshot's manifest says about it (checked like a load's first step):
    format version, entries, terms, segments, files, bytes and the source hash."""
    folder = Path(os.fspath(path))
    where = str(folder)
    dir_fd = storage.open_dir(folder)
    try:
        data = storage.read_small(dir_fd, storage.MANIFEST, DEFAULT_MAX_MANIFEST_BYTES, where)
    except OSError as exc:
        raise IndexFormatError(f"{where}: cannot read manifest.json ({exc.strerror})") from exc
    finally:
        os.close(dir_fd)
    manifest = layout.parse_manifest(data, where)
    if manifest["format_version"] == 1:
        records = list(manifest["files"].values())
        segments = [{"counts": manifest["counts"]}]
    else:
        segments = manifest.get("segments") or []
        records = [*manifest["files"].values()]
        for segment in segments:
            records += segment.get("files", {}).values()
            for section in segment.get("sections", {}).values():
                records += section.get("files", {}).values()
    try:
        records = list({item["file"]: item for item in records}.values())  # a file listed twice
        return {
            "format_version": manifest["format_version"],
            "entries": int(manifest["counts"]["entries"]),
            "terms": int(segments[-1]["counts"]["terms"]) if segments else 0,  # the current
            "segments": len(segments),
            "files": len(records) + 1,
            "bytes": sum(int(item["bytes"]) for item in records) + len(data),
            "source_manifest_hash": manifest["source_manifest_hash"],
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexFormatError(f"{where}: manifest.json lacks counts or files ({exc})") from exc
