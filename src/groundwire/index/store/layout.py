"""What a snapshot folder holds (format versions 1 to 3) and the checks they share.

``parse_manifest`` validates a manifest itself (magic, version, self-hash, required
features); ``settings_json``/``settings_of`` write and read the index settings and
``analyzer_fingerprint`` how the analyzer tokenizes (checked on load). ``file_entry``
validates one file's record (its digest: ``digests.py``); ``check_pointers``/
``check_values``/``check_ascending_rows``/``check_ids`` the opened arrays. Version 2's
files are listed by :func:`segment_files` (``docs/INDEX.md`` describes them); version 3
is version 2 with the digest algorithm recorded per file. Every failure is an
IndexFormatError naming the snapshot.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from groundwire.config import AnalyzerConfig, IndexSettings
from groundwire.errors import ConfigError, IndexFormatError
from groundwire.index.store import bounds, digests
from groundwire.index.store.codecs import StringTable, loads_bounded
from groundwire.model import ValidationIssue
from groundwire.text import Analyzer
from groundwire.text.stopwords import resolve_stopwords

__all__ = [
    "BOOL",
    "DELTA_FEATURE",
    "DIGEST",
    "F8",
    "FEATURES",
    "FORMAT_VERSION",
    "I4",
    "I8",
    "MAGIC",
    "U1",
    "U8",
    "analyzer_fingerprint",
    "base_files",
    "canonical",
    "check_ascending_rows",
    "check_ids",
    "check_pointers",
    "check_scores",
    "check_values",
    "config_fingerprint",
    "delta_files",
    "fail",
    "file_entry",
    "issues_of",
    "parse_manifest",
    "segment_files",
    "settings_json",
    "settings_of",
]

MAGIC = "groundwire-snapshot"
#: The newest format this groundwire writes; it reads every version from 1 on. Version 3:
#: each file record names its digest algorithm (``digests.py``).
FORMAT_VERSION = 3
#: A snapshot holding a base segment, its tombstones and a delta segment (``delta.py``).
DELTA_FEATURE = "delta-segment"
#: Required features beyond the base layout of version 2 that this groundwire reads. A
#: snapshot listing another one is refused (a newer groundwire wrote it), so versions 2
#: and 3 can grow (several segments, deletions) without a version bump.
FEATURES: frozenset[str] = frozenset({DELTA_FEATURE})
#: The one checksum of every file of version 2 (version 1: always SHA-256; version 3:
#: named by each file record).
DIGEST = "sha256"
BOOL, U1, I4, I8, U8, F8 = "|b1", "|u1", "<i4", "<i8", "<u8", "<f8"
_HEX_DIGEST = re.compile("[0-9a-f]{64}")  # fullmatch: no trailing newline slips through
_INT32_END = 2**31  # no int32 value reaches it: "no upper bound" for the C row check
FileSpec = tuple[str, str | None]  # extension, dtype (None: raw bytes or JSON)
#: name, digest (``<algorithm>:<hex>``, every version), bytes, dtype, shape
#: A file record: name, digest, bytes, dtype and shape (arrays), check (see digests.py).
TableEntry = tuple[str, str, int, str | None, tuple[int, ...] | None, str | None]

#: Analyzed at save and load: a different stemmer, stop list or normalization at load
#: would silently mismatch the index, so the token streams must agree.
_PROBE = (
    "The quick brown foxes' jumping over lazy dogs, running runners ran; it's an e-mail "
    "about Databases, databases' indexing and 42 numbers: 3.14 re-entry co-operate"
)


def settings_json(settings: IndexSettings) -> dict[str, Any]:
    """The index settings as the manifest records them."""
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
    """Index settings from a manifest (IndexFormatError when invalid)."""
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
    # analyzer.tokens(word) for each stop word, with one stemmer call for all their words
    # (word by word took ~2 ms of a load): tokens(text) is terms(words(text)), and a
    # word's term ("" for a stop word) does not depend on its neighbours.
    words = [analyzer.words(word) for word in stop]
    terms = iter(analyzer.analyze_words([w for each in words for w in each]))
    stop_tokens = [[t for t in [next(terms) for _ in each] if t] for each in words]
    probe = [analyzer.tokens(_PROBE), stop_tokens]
    return hashlib.sha256(json.dumps(probe, ensure_ascii=False).encode()).hexdigest()


@functools.lru_cache(maxsize=16)
def config_fingerprint(config: AnalyzerConfig) -> str:
    """:func:`analyzer_fingerprint` of an analyzer of ``config``, computed once per process
    and config (a pure function of both: ~0.5 ms a load otherwise)."""
    return analyzer_fingerprint(Analyzer(config))


def canonical(data: Any) -> bytes:
    """The canonical JSON bytes a manifest's self-hash covers."""
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """The manifest, checked: magic, a supported version, its self-hash, known features."""
    manifest = loads_bounded(data, f"{where}: manifest.json")
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
    if version >= 2:
        features = manifest.get("features")
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            raise IndexFormatError(f"{where}: manifest.json lacks its feature list")
        unknown = sorted(set(features) - FEATURES)
        if unknown:
            raise IndexFormatError(
                f"{where}: the snapshot needs features this groundwire does not read "
                f"({', '.join(unknown)}); upgrade groundwire or rebuild the snapshot"
            )
        if version == 2 and manifest.get("digest") != DIGEST:
            raise IndexFormatError(
                f"{where}: unknown checksum {manifest.get('digest')!r} (expected {DIGEST!r})"
            )
    fields = manifest.get("fields")
    if (
        not isinstance(manifest.get("counts"), dict)
        or not isinstance(fields, list)
        or not all(isinstance(f, str) for f in fields)
        or not isinstance(manifest.get("files"), dict)
        or not isinstance(manifest.get("source_manifest_hash"), str)
    ):
        raise IndexFormatError(f"{where}: manifest.json lacks counts, fields or files")
    return manifest


def counts_of(data: Any, names: tuple[str, ...], where: str) -> dict[str, int]:
    """A ``counts`` record holding exactly ``names``, each an integer >= 0."""
    if (
        not isinstance(data, dict)
        or set(data) != set(names)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data.values())
    ):
        raise IndexFormatError(f"{where}: manifest.json has malformed counts")
    return data


def file_entry(
    item: Any, logical: str, spec: FileSpec, digest_key: str, where: str, *, plain: bool = False
) -> TableEntry:
    """One validated file record: (file name, digest, bytes, dtype, shape, check).

    The record's digest is ``<algorithm>:<hex>`` (version 3), or with ``plain`` the bare
    hex of a SHA-256 (versions 1 and 2); the entry holds it as ``<algorithm>:<hex>``. The
    check is the record's fast check when this groundwire can verify it, else None."""
    ext, dtype = spec
    value = item.get(digest_key) if isinstance(item, dict) else None
    size = item.get("bytes") if isinstance(item, dict) else None
    if plain:
        bare = value if isinstance(value, str) and _HEX_DIGEST.fullmatch(value) else None
        digest = digests.tagged(digests.SHA256, bare) if bare is not None else None
    else:
        digest = digests.parse(value, where, logical)
    if digest is None or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise IndexFormatError(f"{where}: bad file entry for {logical!r}")
    name = f"{logical}.{digests.split(digest)[1][:12]}.{ext}"
    if item.get("file") != name or (dtype is not None and item.get("dtype") != dtype):
        raise IndexFormatError(f"{where}: bad file entry for {logical!r}")
    shape = item.get("shape")
    if dtype is not None and (
        not isinstance(shape, list)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise IndexFormatError(f"{where}: bad shape for {logical!r}")
    check = None if plain else digests.check_of(item, where, logical)
    return (name, digest, size, dtype, tuple(shape) if dtype is not None else None, check)


def file_table(
    files: Any,
    expected: Mapping[str, FileSpec],
    digest_key: str,
    where: str,
    prefix: str = "",
    *,
    plain: bool = False,
) -> dict[str, TableEntry]:
    """The records of exactly the ``expected`` files (qualified by ``prefix``); ``plain``
    as in :func:`file_entry`."""
    if not isinstance(files, dict) or set(files) != set(expected):
        listed = set(files) if isinstance(files, dict) else set()
        missing, extra = sorted(set(expected) - listed), sorted(listed - set(expected))
        raise IndexFormatError(f"{where}: file table differs (missing {missing}, extra {extra})")
    return {
        prefix + logical: file_entry(files[logical], logical, spec, digest_key, where, plain=plain)
        for logical, spec in expected.items()
    }


#: Files both versions hold alike: score rows, vocabulary, ids, entries, phrases, masks.
COMMON_FILES: dict[str, FileSpec] = {
    "lexical.indptr": ("npy", I8),
    "lexical.docs": ("npy", I4),
    "lexical.scores": ("npy", F8),
    "lexical.lengths": ("npy", I4),
    "terms.bytes": ("bin", None),
    "terms.offsets": ("npy", I8),
    "terms.keys": ("npy", U8),
    "terms.order": ("npy", I4),
    "ids.bytes": ("bin", None),
    "ids.offsets": ("npy", I8),
    "entries": ("jsonl", None),
    "entries.offsets": ("npy", I8),
    **{
        f"{kind}.{name}": spec
        for kind in ("exact", "alias")
        for name, spec in (
            ("keys.bytes", ("bin", None)),
            ("keys.offsets", ("npy", I8)),
            ("indptr", ("npy", I8)),
            ("docs", ("npy", I4)),
        )
    },
    "active": ("npy", BOOL),
    "universal": ("npy", BOOL),
    "domain_codes": ("npy", I4),
    "integration_masks": ("npy", BOOL),
}


def segment_files(fields: int) -> dict[str, FileSpec]:
    """Logical name → (extension, dtype) of every file of a format-2 segment."""
    files: dict[str, FileSpec] = {
        "lexical.pair_starts": ("npy", I8),
        "lexical.pair_seconds": ("npy", I4),
    }
    for f in range(fields):
        files[f"tf.{f}.counts"] = ("npy", U1)
        files[f"tf.{f}.overflow_at"] = ("npy", I8)
        files[f"tf.{f}.overflow_tf"] = ("npy", I8)
    files.update(COMMON_FILES)
    files.update(
        {
            "entries.digests": ("npy", U1),
            "links.indptr": ("npy", I8),
            "links.bytes": ("bin", None),
            "links.offsets": ("npy", I8),
        }
    )
    return files


#: What a delta snapshot reuses of its base segment: the lexical arrays, the vocabulary,
#: and the base's ids, entries and digests (read through the tombstone map).
_BASE_DOCUMENT_FILES = ("ids.bytes", "ids.offsets", "entries", "entries.offsets", "entries.digests")


def base_files(fields: int) -> dict[str, FileSpec]:
    """Logical name → spec of the files of a delta snapshot's base segment."""
    every = segment_files(fields)
    return {
        name: spec
        for name, spec in every.items()
        if name.startswith(("lexical.", "tf.", "terms.")) or name in _BASE_DOCUMENT_FILES
    }


def delta_files(fields: int) -> dict[str, FileSpec]:
    """Logical name → spec of the files of a delta segment: a segment's files (its
    entries and digests only those of the documents added since the base) and the
    tombstone map."""
    return {**segment_files(fields), "base_to_now": ("npy", I4)}


# -- array checks -------------------------------------------------------------------------------
def fail(where: str, what: str) -> IndexFormatError:
    """The error for arrays that disagree with each other or the manifest."""
    return IndexFormatError(f"{where}: {what}; the snapshot is inconsistent, rebuild it")


def check_pointers(
    where: str, name: str, ptr: npt.NDArray[Any], rows: int, end: int, full: bool = True
) -> None:
    """CSR pointers/offsets: ``rows + 1`` long, from 0 to ``end``, never decreasing."""
    if ptr.shape != (rows + 1,) or int(ptr[0]) != 0 or int(ptr[-1]) != end:
        raise fail(where, f"{name} does not span 0..{end} over {rows} rows")
    if full and rows and bool((ptr[1:] < ptr[:-1]).any()):
        raise fail(where, f"{name} decreases")


def check_values(
    where: str, name: str, values: npt.NDArray[Any], upper: int, full: bool = True
) -> None:
    """Every value in ``0..upper - 1``."""
    if full and values.size and (int(values.min()) < 0 or int(values.max()) >= upper):
        raise fail(where, f"{name} holds values outside 0..{upper - 1}")


def check_ascending_rows(
    where: str,
    name: str,
    ptr: npt.NDArray[Any],
    values: npt.NDArray[Any],
    upper: int | None,
    full: bool,
) -> None:
    """Within each CSR row, values strictly ascending (binary searches rely on it); unless
    ``upper`` is None, also every value in ``0..upper - 1``. One C pass accepts sound rows
    (``bounds.py``); numpy judges anything else and names the problem."""
    if not full or bounds.rows_ascending(ptr, values, _INT32_END if upper is None else upper):
        return
    if upper is not None:
        check_values(where, name, values, upper)
    if values.shape[0] < 2:
        return
    bad = values[1:] <= values[:-1]  # comparisons: no widened copy, no difference array
    starts = ptr[1:-1]
    starts = starts[(starts > 0) & (starts < values.shape[0])]
    bad[starts - 1] = False  # a new row may start lower
    if bool(bad.any()):
        raise fail(where, f"{name} rows are not strictly ascending")


def check_scores(where: str, name: str, scores: npt.NDArray[Any], full: bool) -> None:
    """Every score positive and finite: one C pass when the kernel is loaded, else numpy."""
    if not full or not scores.size:
        return
    sound = bounds.positive_finite(scores)
    if sound is None:  # NaN fails "> 0"; with every score positive, only the max can be inf
        sound = bool((scores > 0).all()) and bool(np.isfinite(scores.max()))
    if not sound:
        raise fail(where, f"{name} holds a non-positive or non-finite score")


def _prefixes(table: StringTable) -> npt.NDArray[np.uint64]:
    """The first 8 bytes of every string as a big-endian integer (missing bytes are 0):
    one gather of 8-byte windows of the zero-padded blob, the bytes past each string
    masked off."""
    blob, offsets = np.asarray(table.blob, dtype=np.uint8), np.asarray(table.offsets, np.int64)
    starts, lengths = offsets[:-1], np.diff(offsets)
    padded = np.zeros(blob.shape[0] + 8, dtype=np.uint8)
    padded[: blob.shape[0]] = blob
    windows = np.ascontiguousarray(sliding_window_view(padded, 8)[starts])
    words = windows.view(">u8").ravel().astype(np.uint64)
    drop = (8 * (8 - np.minimum(lengths, 8))).astype(np.uint64)  # bits past the string
    keep = np.where(drop == 64, np.uint64(0), ~np.uint64(0) << (drop & np.uint64(63)))
    return words & keep


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
    """The validation issues recorded in ``issues.json``."""
    names = [item.name for item in dataclasses.fields(ValidationIssue)]
    if not isinstance(data, list):
        raise fail(where, "issues.json is not a list")
    issues = []
    for item in data:
        if (
            not isinstance(item, dict)
            or set(item) != set(names)
            or item["severity"] not in ("error", "warning")
            or not all(isinstance(item[k], str) for k in ("code", "message"))
            or not all(item[k] is None or isinstance(item[k], str) for k in names[3:])
        ):
            raise fail(where, "issues.json holds a malformed issue")
        issues.append(ValidationIssue(**item))
    return tuple(issues)


# -- format version 2 ---------------------------------------------------------------------------
#: Counts a version-2 manifest records for the whole snapshot and for each segment.
COUNTS = ("entries", "segments", "domains", "integrations", "issues")
SEGMENT_COUNTS = (
    "entries",
    "terms",
    "pairs",
    "postings",
    "exact_phrases",
    "alias_phrases",
    "links",
)


def check_labels(labels: Any, counts: dict[str, int], where: str) -> None:
    """``labels.json``: the domain and integration names (index = code / mask row)."""
    if (
        not isinstance(labels, dict)
        or not all(
            isinstance(labels.get(k), list) and all(isinstance(v, str) for v in labels[k])
            for k in ("domains", "integrations")
        )
        or len(labels["domains"]) != counts["domains"]
        or len(labels["integrations"]) != counts["integrations"]
    ):
        raise fail(where, "labels.json does not list the domains and integrations")
