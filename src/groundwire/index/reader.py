"""Opening a snapshot folder: verify it (see ``snapshot.py``) and assemble a KnowledgeBase.

Nothing is re-tokenized and no dictionary is rebuilt: arrays are mapped read-only,
the vocabulary and the entry ids are looked up in the mapped files, and entries are
decoded from their JSON lines on first access.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import threading
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from groundwire.config import DEFAULT_MAX_ARRAY_BYTES, DEFAULT_MAX_MANIFEST_BYTES, MAX_ENTRIES
from groundwire.errors import ConfigError, IndexFormatError
from groundwire.index import storage
from groundwire.index.format import HashedStrings, StringTable, decode_entry
from groundwire.index.knowledge_base import KnowledgeBase, Parts
from groundwire.index.lexical import LexicalIndex
from groundwire.index.manifest import (
    MAGIC,
    analyzer_fingerprint,
    check_arrays,
    check_ids,
    file_table,
    issues_of,
    parse_manifest,
    settings_of,
)
from groundwire.ingest.validate import content_hash
from groundwire.model import KnowledgeEntry
from groundwire.text import Analyzer

__all__ = [
    "DEFAULT_MAX_ARRAY_BYTES",
    "DEFAULT_MAX_MANIFEST_BYTES",
    "LazyEntries",
    "SortedIds",
    "Verify",
    "is_snapshot",
    "load_snapshot",
]

#: Opening retries when a concurrent replace deleted the files of the manifest just read.
_ATTEMPTS = 3
#: Hash in background threads (overlapping the bounds checks) past this many bytes;
#: below it, starting threads costs more than it saves. hashlib releases the GIL.
_PARALLEL_HASH_BYTES = 1024 * 1024
#: One hashing thread per core, at most 4: more threads only fight over the GIL.
_HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
Verify = Literal["full", "manifest"]


# -- loading: lazy views over mapped files ------------------------------------------------------
class SortedIds(Mapping[str, int]):
    """Entry id → position, by binary search over the sorted ids (nothing decoded ahead)."""

    __slots__ = ("table",)

    def __init__(self, table: StringTable) -> None:
        self.table = table

    def get(self, key: str, default: Any = None) -> Any:
        if not isinstance(key, str):
            return default
        try:
            data = key.encode("utf-8")
        except UnicodeEncodeError:
            return default
        raw, count = self.table.raw, len(self.table)
        at = bisect_left(range(count), data, key=raw)
        return at if at < count and raw(at) == data else default

    def __getitem__(self, key: str) -> int:
        found: int | None = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


class LazyEntries(Sequence[KnowledgeEntry]):
    """Entries decoded from the mapped JSON lines on first access, then kept."""

    __slots__ = ("_cache", "_ids", "_view", "blob", "offsets")

    def __init__(
        self, blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], ids: StringTable
    ) -> None:
        self.blob, self.offsets, self._ids = blob, offsets, ids
        self._view = np.ascontiguousarray(offsets, dtype=np.int64).data.cast("B").cast("q")
        self._cache: list[KnowledgeEntry | None] = [None] * (len(offsets) - 1)

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        entry = self._cache[index]  # IndexError past the end, like a tuple
        if entry is None:
            n = index % len(self._cache)
            data = self.blob[self._view[n] : self._view[n + 1]].tobytes()
            entry = decode_entry(data, f"entry #{n + 1}")
            if entry.id != self._ids[n]:
                raise IndexFormatError(
                    f"entry #{n + 1} has id {entry.id!r}, the id table says {self._ids[n]!r}"
                )
            self._cache[n] = entry
        return entry

    def __iter__(self) -> Iterator[KnowledgeEntry]:
        for index in range(len(self._cache)):
            yield self[index]


# -- loading --------------------------------------------------------------------------------------
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
        return not authored and any(_PAYLOAD.fullmatch(name) for name in os.listdir(folder))
    except OSError:  # a symlink (O_NOFOLLOW) or unreadable: damaged, unless authored
        return not authored
    try:
        head = os.read(fd, 4096) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    return MAGIC.encode() in head or not authored


#: The name of a file a snapshot writer makes: a part name, its content's sha12, a type.
_PAYLOAD = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*\.[0-9a-f]{12}\.(?:npy|bin|jsonl|json)")


class _VanishedError(Exception):
    """A file listed in the manifest is gone (a concurrent replace deleted it)."""


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The hashing threads, started once per process (starting them costs ~ms per load)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(_HASH_THREADS, thread_name_prefix="groundwire-sha256")
        return _POOL


def _forget_pool() -> None:
    # A forked child (a server preloading, then forking workers) has none of the
    # parent's threads: it starts its own pool on its next load.
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


_Table = dict[str, tuple[str, str, int, str | None, tuple[int, ...] | None]]


def _open_all(
    dir_fd: int, table: _Table, limits: _Limits, where: str
) -> dict[str, storage.OpenedFile]:
    """Open and size-check every listed file (the caller closes them)."""
    opened: dict[str, storage.OpenedFile] = {}
    try:
        for logical, (name, _, size, _, _) in table.items():
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


def _hash_all(opened: dict[str, storage.OpenedFile]) -> dict[str, Future[str]]:
    """Start hashing every file, largest first, on the shared threads (or inline if small)."""
    items = sorted(opened.items(), key=lambda item: -item[1].size)
    if sum(item.size for _, item in items) <= _PARALLEL_HASH_BYTES:
        done: dict[str, Future[str]] = {}
        for logical, item in items:
            done[logical] = Future()
            done[logical].set_result(storage.sha256_fd(item.fd))
        return done
    pool = _pool()
    return {logical: pool.submit(storage.sha256_fd, item.fd) for logical, item in items}


def _check_digests(digests: dict[str, Future[str]], table: _Table, where: str) -> None:
    for logical, digest in digests.items():
        if digest.result() != table[logical][1]:
            raise IndexFormatError(
                f"{where}: {table[logical][0]} does not match its SHA-256 (the file "
                "was modified or damaged); rebuild the snapshot"
            )


def _read_all(
    opened: dict[str, storage.OpenedFile], table: _Table, full: bool, where: str
) -> dict[str, Any]:
    """Map every array and blob read-only (populated when all will be checked); parse JSON."""
    out: dict[str, Any] = {}
    for logical, item in opened.items():
        name, _, _, dtype, shape = table[logical]
        if name.endswith(".json"):
            try:
                out[logical] = json.loads(os.pread(item.fd, item.size, 0))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise IndexFormatError(f"{where}: {name} is not valid JSON") from exc
            continue
        array = storage.map_file(item, where, dtype, populate=full)
        if shape is not None and array.shape != shape:
            raise IndexFormatError(
                f"{where}: {name} has shape {array.shape}, the manifest says {shape}"
            )
        out[logical] = array
    return out


def _open_parts(
    dir_fd: int, manifest: dict[str, Any], verify: Verify, limits: _Limits, where: str
) -> Parts:
    """Open, verify and assemble a snapshot: hashing runs while the bounds are checked.

    A checksum mismatch is reported before any other problem it may have caused.
    """
    table = file_table(manifest, where)
    opened = _open_all(dir_fd, table, limits, where)
    full = verify == "full"
    digests: dict[str, Future[str]] = {}
    try:
        try:  # headers and mappings first: small reads that hashing threads would delay
            arrays, problem = _read_all(opened, table, full, where), None
        except IndexFormatError as exc:
            arrays, problem = {}, exc
        digests = _hash_all(opened) if full else {}
        if problem is None:
            try:
                check_arrays(manifest, arrays, full, where)
                parts = _assemble(manifest, arrays, full, where)
            except IndexFormatError as exc:
                problem = exc
        _check_digests(digests, table, where)
        if problem is not None:
            raise problem
        return parts
    finally:
        for digest in digests.values():
            digest.cancel()
        wait(digests.values())  # no thread may still read a descriptor we close
        for item in opened.values():
            item.close()


def _string_rows(
    keys: StringTable, ptr: npt.NDArray[np.int64], values: npt.NDArray[np.int32]
) -> dict[str, tuple[int, ...]]:
    bounds = ptr.tolist()
    flat = values.tolist()
    return {key: tuple(flat[bounds[i] : bounds[i + 1]]) for i, key in enumerate(keys)}


def _assemble(manifest: dict[str, Any], arrays: dict[str, Any], full: bool, where: str) -> Parts:
    settings = settings_of(manifest.get("settings"), where)
    analyzer = Analyzer(settings.analyzer)
    if manifest.get("analyzer_fingerprint") != analyzer_fingerprint(analyzer):
        raise IndexFormatError(
            f"{where}: this groundwire analyzes text differently from the one that built the "
            "snapshot (stemmer, stop words or normalization changed); rebuild the snapshot"
        )
    fields = manifest["fields"]
    weights = settings.field_weights
    text_fields = [name for name in weights if name != "bigrams"]
    if fields != text_fields + (["bigrams"] if weights.get("bigrams", 0.0) > 0 else []):
        raise IndexFormatError(f"{where}: the field list does not match the field weights")
    table = StringTable(arrays["terms.bytes"], arrays["terms.offsets"])
    vocabulary = HashedStrings(table, arrays["terms.keys"], arrays["terms.order"])
    lexical = LexicalIndex.from_arrays(
        fields=fields,
        settings=settings,
        vocabulary=vocabulary,
        indptr=arrays["lexical.indptr"],
        docs=arrays["lexical.docs"],
        scores=arrays["lexical.scores"],
        postings=[
            tuple(arrays[f"postings.{f}.{x}"] for x in ("indptr", "docs", "tf"))
            for f in range(len(fields))
        ],
        lengths=arrays["lexical.lengths"],
        doc_count=arrays["lexical.field_doc_count"],
        avg_length=arrays["lexical.field_avg_length"],
        pair_keys=arrays["lexical.pair_keys"],
    )
    ids = StringTable(arrays["ids.bytes"], arrays["ids.offsets"])
    if full:
        check_ids(ids, where)
    entries = LazyEntries(arrays["entries"], arrays["entries.offsets"], ids)
    phrases = {
        kind: _string_rows(
            StringTable(arrays[f"{kind}.keys.bytes"], arrays[f"{kind}.keys.offsets"]),
            arrays[f"{kind}.indptr"],
            arrays[f"{kind}.docs"],
        )
        for kind in ("exact", "alias")
    }
    rel_ptr, targets = arrays["relations.indptr"], arrays["relations.targets"]
    relations = {}
    for doc in np.flatnonzero(np.diff(rel_ptr)).tolist():
        row = targets[int(rel_ptr[doc]) : int(rel_ptr[doc + 1])].tolist()
        relations[ids[doc]] = tuple(ids[t] for t in row)
    labels = arrays["labels"]
    masks = arrays["integration_masks"]
    return Parts(
        entries=entries,
        positions=SortedIds(ids),
        settings=settings,
        lexical=lexical,
        exact_index=phrases["exact"],
        alias_index=phrases["alias"],
        relations=relations,
        active=arrays["active"],
        universal=arrays["universal"],
        domains={name: code for code, name in enumerate(labels["domains"])},
        domain_codes=arrays["domain_codes"],
        integration_masks={name: masks[row] for row, name in enumerate(labels["integrations"])},
        issues=issues_of(arrays["issues"], where),
    )


def load_snapshot(
    path: str | os.PathLike[str],
    expected_manifest_hash: str | None = None,
    *,
    verify: Verify = "full",
    max_manifest_bytes: int | None = None,
    max_entries: int | None = None,
    max_array_bytes: int | None = None,
) -> KnowledgeBase:
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
            manifest = parse_manifest(data, where)
            entries = manifest["counts"]["entries"]
            if entries > limits.entries:
                raise IndexFormatError(
                    f"{where}: {entries:,} entries, over max_entries={limits.entries:,}"
                )
            try:
                parts = _open_parts(dir_fd, manifest, verify, limits, where)
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
            if claimed != expected_manifest_hash:
                raise IndexFormatError(
                    f"{where}: source manifest hash {claimed} differs from the expected "
                    f"{expected_manifest_hash}; it was built from other sources"
                )
            if content_hash(parts.entries) != claimed:
                raise IndexFormatError(
                    f"{where}: the entries do not hash to the recorded source manifest hash"
                )
        return KnowledgeBase._restore(parts)
    raise AssertionError("unreachable")  # pragma: no cover
