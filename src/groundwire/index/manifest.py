"""The manifest of snapshot format version 1 and the checks a loader runs on it.

``settings_json`` / ``settings_of`` write and read the index settings it records, and
``analyzer_fingerprint`` how the analyzer tokenizes (checked on load).

``parse_manifest`` validates the manifest itself (magic, version, self-hash, counts),
``file_table`` the per-file entries against the files format version 1 defines, and
``check_arrays`` / ``check_ids`` the opened files against each other: shapes always,
every bound (pointers monotone, ids in range, rows ascending, ids unique) when the
load verifies fully. Every failure is an IndexFormatError naming the snapshot.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.config import AnalyzerConfig, IndexSettings
from groundwire.errors import ConfigError, IndexFormatError
from groundwire.index.format import StringTable
from groundwire.model import ValidationIssue
from groundwire.text import Analyzer
from groundwire.text.stopwords import resolve_stopwords

__all__ = [
    "BOOL",
    "F8",
    "FORMAT_VERSION",
    "I4",
    "I8",
    "MAGIC",
    "U8",
    "analyzer_fingerprint",
    "canonical",
    "check_arrays",
    "check_ids",
    "expected_files",
    "file_table",
    "issues_of",
    "parse_manifest",
    "settings_json",
    "settings_of",
]

MAGIC = "groundwire-snapshot"
FORMAT_VERSION = 1
BOOL, I4, I8, U8, F8 = "|b1", "<i4", "<i8", "<u8", "<f8"
COUNTS = (
    "entries",
    "terms",
    "pairs",
    "postings",
    "fields",
    "exact_phrases",
    "alias_phrases",
    "relations",
    "domains",
    "integrations",
    "issues",
)

#: Analyzed at save and load: a different stemmer, stop list or normalization at load
#: would silently mismatch the index, so the token streams must agree.
_PROBE = (
    "The quick brown foxes' jumping over lazy dogs, running runners ran; it's an e-mail "
    "about Databases, databases' indexing and 42 numbers: 3.14 re-entry co-operate"
)


def settings_json(settings: IndexSettings) -> dict[str, Any]:
    analyzer: dict[str, Any] = {}
    for item in dataclasses.fields(settings.analyzer):
        value = getattr(settings.analyzer, item.name)
        analyzer[item.name] = {"words": sorted(value)} if isinstance(value, frozenset) else value
    return {
        "field_weights": [[name, float(w)] for name, w in settings.field_weights.items()],
        "k1": float(settings.k1),
        "b": float(settings.b),
        "scoring": settings.scoring,
        "analyzer": analyzer,
    }


def settings_of(data: Any, where: str) -> IndexSettings:
    try:
        analyzer = dict(data["analyzer"])
        stop = analyzer.get("stopwords")
        if isinstance(stop, dict):
            analyzer["stopwords"] = frozenset(stop["words"])
        weights = {str(name): weight for name, weight in data["field_weights"]}
        return IndexSettings(
            weights, data["k1"], data["b"], data["scoring"], AnalyzerConfig(**analyzer)
        )
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        raise IndexFormatError(f"{where}: invalid index settings ({exc})") from exc


def analyzer_fingerprint(analyzer: Analyzer) -> str:
    """SHA-256 of how ``analyzer`` tokenizes a probe text and its own stop words."""
    config = analyzer.config
    stop = sorted(resolve_stopwords(config.stopwords, config.language))
    probe = [analyzer.tokens(_PROBE), [analyzer.tokens(word) for word in stop]]
    return hashlib.sha256(json.dumps(probe, ensure_ascii=False).encode()).hexdigest()


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def expected_files(fields: int) -> dict[str, tuple[str, str | None]]:
    """Logical name → (extension, dtype) of every file of format version 1."""
    files: dict[str, tuple[str, str | None]] = {
        "lexical.indptr": ("npy", I8),
        "lexical.docs": ("npy", I4),
        "lexical.scores": ("npy", F8),
        "lexical.lengths": ("npy", I4),
        "lexical.field_doc_count": ("npy", I8),
        "lexical.field_avg_length": ("npy", F8),
        "lexical.pair_keys": ("npy", I8),
    }
    for f in range(fields):
        files.update(
            {
                f"postings.{f}.indptr": ("npy", I8),
                f"postings.{f}.docs": ("npy", I4),
                f"postings.{f}.tf": ("npy", I4),
            }
        )
    files.update(
        {
            "terms.bytes": ("bin", None),
            "terms.offsets": ("npy", I8),
            "terms.keys": ("npy", U8),
            "terms.order": ("npy", I4),
            "ids.bytes": ("bin", None),
            "ids.offsets": ("npy", I8),
            "entries": ("jsonl", None),
            "entries.offsets": ("npy", I8),
        }
    )
    for kind in ("exact", "alias"):
        files.update(
            {
                f"{kind}.keys.bytes": ("bin", None),
                f"{kind}.keys.offsets": ("npy", I8),
                f"{kind}.indptr": ("npy", I8),
                f"{kind}.docs": ("npy", I4),
            }
        )
    files.update(
        {
            "relations.indptr": ("npy", I8),
            "relations.targets": ("npy", I4),
            "active": ("npy", BOOL),
            "universal": ("npy", BOOL),
            "domain_codes": ("npy", I4),
            "integration_masks": ("npy", BOOL),
            "labels": ("json", None),
            "issues": ("json", None),
        }
    )
    return files


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{where}: manifest.json is not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("magic") != MAGIC:
        found = manifest.get("magic") if isinstance(manifest, dict) else None
        raise IndexFormatError(
            f"{where}: not a groundwire snapshot (magic {found!r}, expected {MAGIC!r})"
        )
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise IndexFormatError(f"{where}: invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{where}: snapshot format version {version} is newer than this groundwire "
            f"supports ({FORMAT_VERSION}); upgrade groundwire or rebuild the snapshot"
        )
    claimed = manifest.pop("manifest_sha256", None)
    if claimed != hashlib.sha256(canonical(manifest)).hexdigest():
        raise IndexFormatError(f"{where}: manifest.json is damaged (manifest_sha256 mismatch)")
    counts = manifest.get("counts")
    fields = manifest.get("fields")
    if (
        not isinstance(counts, dict)
        or set(counts) != set(COUNTS)
        or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()
        )
        or not isinstance(fields, list)
        or not all(isinstance(f, str) for f in fields)
        or counts.get("fields") != len(fields)
        or not isinstance(manifest.get("files"), dict)
        or not isinstance(manifest.get("source_manifest_hash"), str)
    ):
        raise IndexFormatError(f"{where}: manifest.json lacks counts, fields or files")
    return manifest


def file_table(
    manifest: dict[str, Any], where: str
) -> dict[str, tuple[str, str, int, str | None, tuple[int, ...] | None]]:
    """Validated ``files`` entries: logical → (file name, sha256, bytes, dtype, shape)."""
    expected = expected_files(len(manifest["fields"]))
    files = manifest["files"]
    if set(files) != set(expected):
        missing, extra = sorted(set(expected) - set(files)), sorted(set(files) - set(expected))
        raise IndexFormatError(f"{where}: file table differs (missing {missing}, extra {extra})")
    table = {}
    for logical, (ext, dtype) in expected.items():
        item = files[logical]
        sha, size = item.get("sha256") if isinstance(item, dict) else None, None
        if isinstance(item, dict):
            size = item.get("bytes")
        if (
            not isinstance(sha, str)
            or len(sha) != 64
            or not isinstance(size, int)
            or isinstance(size, bool)
            or size < 0
        ):
            raise IndexFormatError(f"{where}: bad file entry for {logical!r}")
        name = f"{logical}.{sha[:12]}.{ext}"
        if item.get("file") != name or (dtype is not None and item.get("dtype") != dtype):
            raise IndexFormatError(f"{where}: bad file entry for {logical!r}")
        shape = item.get("shape")
        if dtype is not None and (
            not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise IndexFormatError(f"{where}: bad shape for {logical!r}")
        table[logical] = (name, sha, size, dtype, tuple(shape) if dtype is not None else None)
    return table


def _fail(where: str, what: str) -> IndexFormatError:
    return IndexFormatError(f"{where}: {what}; the snapshot is inconsistent, rebuild it")


def _check_pointers(
    where: str, name: str, ptr: npt.NDArray[Any], rows: int, end: int, full: bool
) -> None:
    """CSR pointers/offsets: ``rows + 1`` long, from 0 to ``end``, never decreasing."""
    if ptr.shape != (rows + 1,) or int(ptr[0]) != 0 or int(ptr[-1]) != end:
        raise _fail(where, f"{name} does not span 0..{end} over {rows} rows")
    if full and rows and bool((ptr[1:] < ptr[:-1]).any()):
        raise _fail(where, f"{name} decreases")


def _check_values(where: str, name: str, values: npt.NDArray[Any], upper: int, full: bool) -> None:
    if full and values.size and (int(values.min()) < 0 or int(values.max()) >= upper):
        raise _fail(where, f"{name} holds values outside 0..{upper - 1}")


def _check_ascending_rows(
    where: str, name: str, ptr: npt.NDArray[Any], values: npt.NDArray[Any], full: bool
) -> None:
    """Within each CSR row, values strictly ascending (binary searches rely on it)."""
    if not full or values.shape[0] < 2:
        return
    bad = values[1:] <= values[:-1]  # comparisons: no widened copy, no difference array
    starts = ptr[1:-1]
    starts = starts[(starts > 0) & (starts < values.shape[0])]
    bad[starts - 1] = False  # a new row may start lower
    if bool(bad.any()):
        raise _fail(where, f"{name} rows are not strictly ascending")


def check_arrays(manifest: dict[str, Any], arrays: dict[str, Any], full: bool, where: str) -> None:
    """Shapes and bounds across files (constant-time ones always, the rest when full)."""
    counts = manifest["counts"]
    n, terms, fields = counts["entries"], counts["terms"], counts["fields"]
    rows = terms + counts["pairs"]  # single terms, then adjacent-term pairs
    ptr = arrays["lexical.indptr"]
    # Always checked in full: the C query kernel trusts these row bounds like slices.
    _check_pointers(where, "lexical.indptr", ptr, rows, arrays["lexical.docs"].shape[0], True)
    pair_keys = arrays["lexical.pair_keys"]
    if pair_keys.shape != (counts["pairs"],):
        raise _fail(where, "lexical.pair_keys does not have one key per pair")
    if (
        full
        and pair_keys.size
        and (
            bool((pair_keys[1:] <= pair_keys[:-1]).any())
            or int(pair_keys[0]) < 0
            or int(pair_keys[-1]) >= terms * terms
        )
    ):
        raise _fail(where, "lexical.pair_keys is not ascending within 0..terms²")
    if arrays["lexical.scores"].shape != arrays["lexical.docs"].shape:
        raise _fail(where, "lexical.scores and lexical.docs differ in length")
    _check_values(where, "lexical.docs", arrays["lexical.docs"], n, full)
    _check_ascending_rows(where, "lexical.docs", ptr, arrays["lexical.docs"], full)
    scores = arrays["lexical.scores"]
    # NaN fails "> 0"; with every score positive, only the maximum can be infinite.
    if full and scores.size and not (bool((scores > 0).all()) and np.isfinite(scores.max())):
        raise _fail(where, "lexical.scores holds a non-positive or non-finite score")
    if arrays["lexical.lengths"].shape != (fields, n):
        raise _fail(where, "lexical.lengths does not have one row per field")
    for name in ("lexical.field_doc_count", "lexical.field_avg_length"):
        if arrays[name].shape != (fields,):
            raise _fail(where, f"{name} does not have one value per field")
    if full and fields:
        # The statistics follow from the lengths exactly as the builder computes them.
        lengths = arrays["lexical.lengths"]
        doc_count = (lengths > 0).sum(axis=1).astype(np.int64)
        totals = lengths.sum(axis=1, dtype=np.int64)
        average = np.divide(
            totals, doc_count, out=np.ones(fields, dtype=np.float64), where=doc_count > 0
        )
        if (
            int(lengths.min(initial=0)) < 0
            or not np.array_equal(arrays["lexical.field_doc_count"], doc_count)
            or not np.array_equal(arrays["lexical.field_avg_length"], average)
        ):
            raise _fail(where, "field lengths and field statistics disagree")
    for f in range(fields):
        p_ptr, p_docs, p_tf = (arrays[f"postings.{f}.{x}"] for x in ("indptr", "docs", "tf"))
        _check_pointers(where, f"postings.{f}.indptr", p_ptr, rows, p_docs.shape[0], full)
        if p_tf.shape != p_docs.shape:
            raise _fail(where, f"postings.{f}.tf and docs differ in length")
        _check_values(where, f"postings.{f}.docs", p_docs, n, full)
        _check_ascending_rows(where, f"postings.{f}.docs", p_ptr, p_docs, full)
        if full and p_tf.size and int(p_tf.min()) < 1:
            raise _fail(where, f"postings.{f}.tf holds a frequency below 1")
    blob_end = arrays["terms.bytes"].shape[0]
    _check_pointers(where, "terms.offsets", arrays["terms.offsets"], terms, blob_end, full)
    for name in ("terms.keys", "terms.order"):
        if arrays[name].shape != (terms,):
            raise _fail(where, f"{name} does not have one value per term")
    _check_values(where, "terms.order", arrays["terms.order"], max(terms, 1), full)
    keys = arrays["terms.keys"]
    if full and terms > 1 and bool((keys[1:] < keys[:-1]).any()):
        raise _fail(where, "terms.keys is not sorted")
    _check_pointers(
        where, "ids.offsets", arrays["ids.offsets"], n, arrays["ids.bytes"].shape[0], full
    )
    _check_pointers(
        where, "entries.offsets", arrays["entries.offsets"], n, arrays["entries"].shape[0], full
    )
    for kind in ("exact", "alias"):
        phrases = counts[f"{kind}_phrases"]
        _check_pointers(
            where,
            f"{kind}.keys.offsets",
            arrays[f"{kind}.keys.offsets"],
            phrases,
            arrays[f"{kind}.keys.bytes"].shape[0],
            full,
        )
        docs = arrays[f"{kind}.docs"]
        _check_pointers(
            where, f"{kind}.indptr", arrays[f"{kind}.indptr"], phrases, docs.shape[0], full
        )
        _check_values(where, f"{kind}.docs", docs, n, full)
    targets = arrays["relations.targets"]
    _check_pointers(
        where, "relations.indptr", arrays["relations.indptr"], n, targets.shape[0], full
    )
    _check_values(where, "relations.targets", targets, n, full)
    labels = arrays["labels"]
    if (
        not isinstance(labels, dict)
        or not all(
            isinstance(labels.get(k), list) and all(isinstance(v, str) for v in labels[k])
            for k in ("domains", "integrations")
        )
        or len(labels["domains"]) != counts["domains"]
        or len(labels["integrations"]) != counts["integrations"]
    ):
        raise _fail(where, "labels.json does not list the domains and integrations")
    for name in ("active", "universal", "domain_codes"):
        if arrays[name].shape != (n,):
            raise _fail(where, f"{name} does not have one value per entry")
    if arrays["integration_masks"].shape != (counts["integrations"], n):
        raise _fail(where, "integration_masks does not have one row per integration")
    _check_values(where, "domain_codes", arrays["domain_codes"], max(counts["domains"], 1), full)
    for name in ("active", "universal", "integration_masks"):
        if full and arrays[name].size and int(arrays[name].view(np.uint8).max()) > 1:
            raise _fail(where, f"{name} holds a value other than 0 and 1")


def _prefixes(table: StringTable) -> npt.NDArray[np.uint64]:
    """The first 8 bytes of every string as a big-endian integer (missing bytes are 0)."""
    blob, offsets = table.blob, np.asarray(table.offsets, dtype=np.int64)
    starts, lengths = offsets[:-1], np.diff(offsets)
    out = np.zeros(len(starts), dtype=np.uint64)
    for j in range(8):
        present = lengths > j
        byte = np.zeros(len(starts), dtype=np.uint64)
        byte[present] = blob[starts[present] + j]
        out |= byte << np.uint64(8 * (7 - j))
    return out


def check_ids(table: StringTable, where: str) -> None:
    """Entry ids strictly increasing (code point order = UTF-8 byte order): no duplicates.

    Compares 8-byte prefixes vectorized; only neighbours with equal prefixes are
    compared in full (a smaller padded prefix means a smaller string, and vice versa).
    """
    if len(table) < 2:
        return
    prefix = _prefixes(table)
    raw = table.raw
    for n in np.flatnonzero(prefix[1:] <= prefix[:-1]).tolist():
        previous, current = raw(n), raw(n + 1)
        if current <= previous:
            what = "duplicate entry id" if current == previous else "entry ids out of order"
            raise IndexFormatError(
                f"{where}: {what} {current.decode('utf-8', 'replace')!r}; rebuild the snapshot"
            )


def issues_of(data: Any, where: str) -> tuple[ValidationIssue, ...]:
    names = [item.name for item in dataclasses.fields(ValidationIssue)]
    if not isinstance(data, list):
        raise _fail(where, "issues.json is not a list")
    issues = []
    for item in data:
        if (
            not isinstance(item, dict)
            or set(item) != set(names)
            or item["severity"] not in ("error", "warning")
            or not all(isinstance(item[k], str) for k in ("code", "message"))
            or not all(item[k] is None or isinstance(item[k], str) for k in names[3:])
        ):
            raise _fail(where, "issues.json holds a malformed issue")
        issues.append(ValidationIssue(**item))
    return tuple(issues)
