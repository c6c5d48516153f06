"""File checksums for loads: hashed on background threads, verdicts remembered per process.

Each file is hashed with its record's check when it has one this process can compute
(XXH3-128, ``digests.py``), else with the algorithm its digest names (BLAKE3, or SHA-256
for files of older snapshots). A verdict is remembered for the record it was checked
against: one by the digest vouches for any record of that digest, one by a check for the
same (digest, check) only, so a writer reusing a loaded file with its record
(:func:`holds`) does not hash it again, and a record whose digest was changed is not
taken on the word of an earlier check. Both release the GIL, so files are hashed on a
small shared pool while the loader maps them and checks their bounds. A file's verdict
is remembered per process by its identity (device, inode, size, mtime and ctime in ns)
and its digest: snapshot files are content-addressed and never rewritten, and any write
through the file system changes the mtime and the ctime (which no user call can set
back), so a file with the same identity holds the bytes that were hashed. Reloading a
snapshot (an engine's reload, a forked worker, a second process's load is *not*
covered: the cache is in memory) therefore hashes only files it has not verified. What
this cannot see is damage below the file system (a failing disk) after the first
verification, which a mapped file being served would not notice either.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from groundwire.errors import IndexFormatError
from groundwire.index.store import digests, storage
from groundwire.index.store.layout import TableEntry

__all__ = [
    "Table",
    "check",
    "forget_verdicts",
    "hash_all",
    "holds",
    "proven",
    "remember_proven",
    "snapshot_key",
    "submit",
]

#: Hash in background threads (overlapping the bounds checks) past this many bytes;
#: below it, starting threads costs more than it saves.
_PARALLEL_HASH_BYTES = 1024 * 1024
#: Files this large are hashed on the threads; smaller ones by the loading thread once
#: its checks are done (while the threads finish): a thread needs the GIL between two
#: files, and waits up to the switch interval (5 ms) for it while the loader runs Python.
_THREAD_FILE_BYTES = 256 * 1024
#: One hashing thread per core, at most 4: more threads only fight over the GIL.
_HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
#: File verdicts remembered per process (a few snapshots' worth of files).
_VERDICTS_LIMIT = 4096
#: Whole snapshots remembered as fully verified (checksums and every bound) per process.
_PROVEN_LIMIT = 64
Table = dict[str, TableEntry]


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_VERDICTS: OrderedDict[tuple[Any, ...], None] = OrderedDict()
_VERDICTS_LOCK = threading.Lock()
_PROVEN: OrderedDict[tuple[Any, ...], None] = OrderedDict()


def _pool() -> ThreadPoolExecutor:
    """The hashing threads, started once per process (starting them costs ~ms per load)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(_HASH_THREADS, thread_name_prefix="groundwire-hash")
        return _POOL


def submit(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run ``fn(*args)`` on the hashing threads (for work that releases the GIL)."""
    return _pool().submit(fn, *args)


def _forget_pool() -> None:
    # A forked child (a server preloading, then forking workers) has none of the
    # parent's threads: it starts its own pool on its next load.
    global _POOL, _POOL_LOCK, _VERDICTS_LOCK
    _POOL, _POOL_LOCK, _VERDICTS_LOCK = None, threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _verified(item: storage.OpenedFile, digest: str, check: str | None) -> bool:
    """Whether this file was verified against this record before: a verdict by its digest
    vouches for any record of that digest, one by its check for the same (digest, check)."""
    with _VERDICTS_LOCK:
        return (*item.identity, digest, None) in _VERDICTS or (
            check is not None and (*item.identity, digest, check) in _VERDICTS
        )


def _remember(item: storage.OpenedFile, digest: str, check: str | None) -> None:
    # The identity is re-read after hashing: a write during it would have changed it.
    if storage.identity_of(os.fstat(item.fd)) != item.identity:
        return
    with _VERDICTS_LOCK:
        _VERDICTS[(*item.identity, digest, check)] = None
        while len(_VERDICTS) > _VERDICTS_LIMIT:
            _VERDICTS.popitem(last=False)


def holds(dir_fd: int, name: str, digest: str, size: int, check: str | None = None) -> bool:
    """Whether the folder ``dir_fd`` holds ``name`` with exactly these bytes: verified by
    this process against this record before (same identity, no read) or hashed now with
    the digest (the content address). A writer reuses such a file instead of writing it
    again."""
    try:
        item = storage.open_file(dir_fd, name, size, size, name)
    except (OSError, IndexFormatError):
        return False
    try:
        if _verified(item, digest, check):
            return True
        try:
            if digests.of_file(item.fd, None, digests.split(digest)[0]) != digest:
                return False
        except (IndexFormatError, ValueError):  # an algorithm this process cannot run
            return False
        _remember(item, digest, None)
        return True
    finally:
        item.close()


def forget_verdicts() -> None:
    """Forget every remembered verdict (the next full load hashes and checks everything)."""
    with _VERDICTS_LOCK:
        _VERDICTS.clear()
        _PROVEN.clear()


def _expected(entry: TableEntry) -> str:
    """What a full load verifies a file against: its check when usable, else its digest."""
    return entry[5] or entry[1]


def snapshot_key(
    manifest: bytes, opened: dict[str, storage.OpenedFile], table: Table
) -> tuple[Any, ...]:
    """What a fully verified load proved: the manifest's SHA-256 and every file's identity
    and digest (as opened now)."""
    files = tuple(
        sorted((k, *item.identity, table[k][1], table[k][5] or "") for k, item in opened.items())
    )
    return (hashlib.sha256(manifest).digest(), files)


def proven(key: tuple[Any, ...]) -> bool:
    """Whether a load of exactly these files (same identities) passed full verification:
    the bounds checks are functions of the bytes, which the identities vouch for."""
    with _VERDICTS_LOCK:
        return key in _PROVEN


def remember_proven(key: tuple[Any, ...], opened: dict[str, storage.OpenedFile]) -> None:
    """Remember a fully verified load, unless a file's identity changed meanwhile."""
    if any(storage.identity_of(os.fstat(item.fd)) != item.identity for item in opened.values()):
        return
    with _VERDICTS_LOCK:
        _PROVEN[key] = None
        while len(_PROVEN) > _PROVEN_LIMIT:
            _PROVEN.popitem(last=False)


def hash_all(
    opened: dict[str, storage.OpenedFile], table: Table, where: str
) -> dict[str, Future[str]]:
    """Start hashing every file not verified before, each with its check or its digest's
    algorithm (see the module docstring):
    the large ones on the shared threads, largest first; the small ones (all of them when
    there is little to hash) when :func:`check` asks. Refuses (before hashing anything)
    when an algorithm's package is missing."""
    items = sorted(
        ((k, v) for k, v in opened.items() if not _verified(v, table[k][1], table[k][5])),
        key=lambda item: -item[1].size,
    )
    algorithms = {logical: digests.split(_expected(table[logical]))[0] for logical, _ in items}
    for algorithm in sorted(set(algorithms.values())):
        digests.require(algorithm, where)
    threaded = sum(item.size for _, item in items) > _PARALLEL_HASH_BYTES
    pending: dict[str, Future[str]] = {}
    for logical, item in reversed(items):  # smallest first: check() hashes these first
        if not threaded or item.size < _THREAD_FILE_BYTES:
            pending[logical] = _Deferred(item, algorithms[logical])
    if threaded:
        pool = _pool()
        for logical, item in items:
            if logical not in pending:
                pending[logical] = pool.submit(
                    digests.of_file, item.fd, item.mapped, algorithms[logical]
                )
    return pending


class _Deferred(Future[str]):
    """A file hashed by the loading thread when :func:`check` asks for its digest."""

    def __init__(self, item: storage.OpenedFile, algorithm: str) -> None:
        super().__init__()
        self._item, self._algorithm = item, algorithm

    def result(self, timeout: float | None = None) -> str:
        if not self.done():
            try:
                self.set_result(digests.of_file(self._item.fd, self._item.mapped, self._algorithm))
            except BaseException as exc:
                self.set_exception(exc)
        return super().result(timeout)

    def cancel(self) -> bool:
        # Never submitted, so no worker will mark it notified: do it here, or a wait()
        # on it (the loader waits for every digest before closing) would never return.
        cancelled = super().cancel()
        if cancelled:
            self.set_running_or_notify_cancel()
        return cancelled


def check(
    pending: dict[str, Future[str]],
    opened: dict[str, storage.OpenedFile],
    table: Table,
    where: str,
) -> None:
    for logical, digest in pending.items():
        entry = table[logical]
        expected = _expected(entry)
        if digest.result() != expected:
            kind = "check" if entry[5] else "digest"
            raise IndexFormatError(
                f"{where}: {entry[0]} does not match its {digests.label(expected)} {kind} "
                "(the file was modified or damaged); rebuild the snapshot"
            )
        _remember(opened[logical], entry[1], entry[5])
