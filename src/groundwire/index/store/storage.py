"""Snapshot folders on disk: private atomic writes, writer locks, verified memory maps.

A snapshot folder holds ``manifest.json`` and content-addressed files named
``<logical>.<first 12 hex of the digest>.<ext>`` (``digests.py``); ``manifest.json`` is
the only mutable name. This module knows nothing of knowledge bases: ``payloads.py``,
``writer.py`` and ``reader.py`` decide what the files hold.

Writing (see :func:`write_files`, :func:`install_new`, :func:`swap_manifest`):
files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode 0600 inside a
temporary folder made by ``mkdtemp`` (mode 0700), hashed, written and fsynced on a
few threads (every file fsynced before the folder is), then the folder itself is
fsynced. A new snapshot is renamed into place as a whole folder; an existing one is
replaced by moving the new content-addressed files in (names never collide with
different content) and then renaming the new ``manifest.json`` over the old one: one
atomic ``rename(2)``. Writers of one folder serialize on ``flock`` of its ``.lock``.

Reading (see :func:`open_dir`, :func:`map_file`): the folder is opened once
(``O_DIRECTORY | O_NOFOLLOW``) and every file is opened relative to that descriptor
with ``O_NOFOLLOW``, checked (regular file, exact size), optionally hashed, and mapped
from the same descriptor, so the bytes verified are the bytes served.
"""

from __future__ import annotations

import contextlib
import io
import math
import mmap
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.errors import IndexFormatError
from groundwire.index.store import digests

try:  # POSIX; elsewhere writers are not serialized (documented)
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK",
    "MANIFEST",
    "Payload",
    "collect_garbage",
    "fsync_dir",
    "install_new",
    "lock",
    "map_file",
    "open_dir",
    "read_small",
    "swap_manifest",
    "write_files",
]

MANIFEST = "manifest.json"
LOCK = ".lock"
TMP_PREFIX = ".tmp-"
#: Names a snapshot writer creates; anything else in a folder is never deleted.
OBJECT_NAME = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)*\.[0-9a-f]{12}\.(npy|bin|json|jsonl)")
#: Threads hashing, writing and fsyncing a save's files: one per core, at most 4.
_WRITE_THREADS = max(1, min(4, os.cpu_count() or 1))
_WRITE_CHUNK = 1 << 26  # os.write moves at most ~2 GiB per call; 64 MiB keeps it simple
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # open(2) of a FIFO returns at once; fstat refuses it
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: fault the whole mapping in at once
_MAX_NPY_HEADER = 1 << 16  # numpy writes headers of a few hundred bytes
_NPY_HEAD = 512  # read first: every header numpy writes for a snapshot array fits
# numpy parses .npy headers with ast.literal_eval, which CPython 3.11 cannot run in two
# threads at once ("AST constructor recursion depth mismatch"): concurrent loads take turns.
_HEADER_LOCK = threading.Lock()
#: The header numpy writes (``write_array_header_1_0``/``2_0``) for a C-order array:
#: dict in this key order, a shape tuple of decimal integers, space padding, newline.
_BYTE = np.dtype(np.uint8)
#: The dtypes of snapshot arrays, made once (``np.dtype(str)`` parses its argument).
_DTYPES = {name: np.dtype(name) for name in ("|b1", "|u1", "<i4", "<i8", "<u8", "<f4", "<f8")}
_NPY_HEADER = re.compile(
    rb"\{'descr': '(?P<descr>[<>|][a-z][0-9]{1,2})', 'fortran_order': False, "
    rb"'shape': (?P<shape>\([0-9, ]{0,200}\)), \} *\n"
)


@dataclass(frozen=True, slots=True)
class Payload:
    """One file to write: its logical name, extension and content (buffers, in order)."""

    logical: str
    ext: str
    chunks: Sequence[Any]  # bytes-like objects (bytes, memoryviews of arrays)
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    #: The file name, digest, size and check this content had when read (a reused file).
    known: tuple[str, str, int, str | None] | None = None
    #: The key of its record in the table :func:`write_files` returns (default: logical).
    slot: str | None = None

    def digest(self) -> tuple[str, int, str | None]:
        """The recorded digest (``<algorithm>:<hex>``, see ``digests.py``), the size in
        bytes and the check of the content."""
        return digests.of_chunks(self.chunks)


# -- writing --------------------------------------------------------------------------------
def _write_file(dir_fd: int, name: str, chunks: Sequence[Any]) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view.nbytes:
                written = os.write(fd, view[:_WRITE_CHUNK])
                view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make renames and creations in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_files(
    folder: Path,
    payloads: Sequence[Payload],
    reuse: Callable[[str, str, int, str | None], bool] | None = None,
) -> dict[str, dict[str, Any]]:
    """Write every payload into ``folder`` under its content-addressed name (fsynced),
    except those ``reuse(name, digest, size, check)`` says are already where they go (marked
    ``reused``) and names written once already (same name, same bytes).

    Digests, writes and fsyncs run on a few threads (hashing, ``write(2)`` and
    ``fsync(2)`` release the GIL): a save's files are hashed and made durable side by
    side instead of one after the other. Returns the manifest's ``files`` table: slot
    (logical name) → file, digest (``<algorithm>:<hex>``), bytes, dtype/shape for arrays
    and the check (see ``digests.py``) when one was computed or known.
    """
    table: dict[str, dict[str, Any]] = {}
    done: dict[str, bool] = {}  # name → reused
    dir_fd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        with ThreadPoolExecutor(_WRITE_THREADS, thread_name_prefix="groundwire-write") as pool:
            hashed = {
                at: pool.submit(payload.digest)
                for at, payload in enumerate(payloads)
                if payload.known is None
            }
            writes: list[Future[None]] = []
            for at, payload in enumerate(payloads):
                known = payload.known
                if known is not None and known[0] in done:
                    name, digest, size, check = known
                elif known is not None and reuse is not None and reuse(*known):
                    name, digest, size, check = known
                    done[name] = True
                else:
                    digest, size, check = hashed[at].result() if at in hashed else payload.digest()
                    name = f"{payload.logical}.{digests.split(digest)[1][:12]}.{payload.ext}"
                    if name not in done:
                        done[name] = reuse is not None and reuse(name, digest, size, check)
                        if not done[name]:
                            writes.append(pool.submit(_write_file, dir_fd, name, payload.chunks))
                entry: dict[str, Any] = {"file": name, "digest": digest, "bytes": size}
                if check is not None:
                    entry["check"] = check
                if done[name]:
                    entry["reused"] = True
                if payload.dtype is not None and payload.shape is not None:
                    entry["dtype"] = payload.dtype
                    entry["shape"] = list(payload.shape)
                table[payload.slot or payload.logical] = entry
            for write in writes:
                write.result()  # the first failure propagates
    finally:
        os.close(dir_fd)
    return table


def write_manifest(folder: Path, data: bytes) -> None:
    """Write ``manifest.json`` into a temporary folder and fsync the folder."""
    dir_fd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        _write_file(dir_fd, MANIFEST, [data])
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def make_temp(parent: Path, prefix: str) -> Path:
    """A new private (0700) temporary folder in ``parent``."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def install_new(temp: Path, target: Path) -> bool:
    """Rename a complete temporary snapshot folder to ``target``; False if it exists now."""
    try:
        os.rename(temp, target)
    except OSError as exc:
        if target.exists() or target.is_symlink():
            return False
        raise IndexFormatError(f"{target}: cannot install the snapshot ({exc.strerror})") from exc
    fsync_dir(target.parent)
    return True


def move_objects(temp: Path, target: Path, names: Sequence[str]) -> None:
    """Move content-addressed files from ``temp`` into ``target`` (same name, same bytes)."""
    for name in names:
        os.replace(temp / name, target / name)
    fsync_dir(target)


def swap_manifest(temp: Path, target: Path) -> None:
    """Atomically make ``temp``'s manifest the one of ``target``: readers switch here."""
    os.replace(temp / MANIFEST, target / MANIFEST)
    fsync_dir(target)


@contextlib.contextmanager
def lock(folder: Path) -> Iterator[None]:
    """Hold the exclusive writer lock of a snapshot folder (``flock`` on ``.lock``)."""
    flags = os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC
    try:
        fd = os.open(folder / LOCK, flags, 0o600)
    except OSError as exc:
        raise IndexFormatError(f"{folder}: cannot create the writer lock ({exc.strerror})") from exc
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def locked_temp(parent: Path, prefix: str) -> Iterator[Path]:
    """A private temporary folder holding a locked ``.lock`` while its writer lives.

    The lock file is locked under another name and then renamed to ``.lock``, so a
    cleaner never sees an unlocked ``.lock`` of a live writer (see clean_stale_temps).
    """
    temp = make_temp(parent, prefix)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
    fd = os.open(temp / (LOCK + ".new"), flags, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(temp / (LOCK + ".new"), temp / LOCK)
        yield temp
    finally:
        os.close(fd)
        shutil.rmtree(temp, ignore_errors=True)  # gone already once installed


def clean_stale_temps(parent: Path, prefix: str) -> None:
    """Remove temporary folders ``prefix*`` in ``parent`` whose writer died.

    A live writer holds its folder's ``.lock``; a lock we can take belongs to nobody.
    """
    if fcntl is None:
        return
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        folder = parent / name
        try:
            fd = os.open(folder / LOCK, os.O_RDWR | _O_NOFOLLOW | _O_CLOEXEC)
        except OSError:
            continue  # no lock yet (being created) or not ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live writer
        else:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)


def collect_garbage(target: Path, keep: set[str]) -> None:
    """Delete files of older snapshots and dead writers' temporary folders (lock held).

    Only names a writer creates are considered; anything else is left alone.
    """
    for name in os.listdir(target):
        path = target / name
        if name.startswith(TMP_PREFIX) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif OBJECT_NAME.fullmatch(name) and name not in keep:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def foreign_names(target: Path) -> list[str]:
    """Names in a folder that no snapshot writer creates (replacing would be unsafe)."""
    own = {MANIFEST, LOCK}
    return sorted(
        name
        for name in os.listdir(target)
        if name not in own and not name.startswith(TMP_PREFIX) and not OBJECT_NAME.fullmatch(name)
    )


# -- reading --------------------------------------------------------------------------------
def open_dir(path: Path) -> int:
    """Open a snapshot folder (not through a symlink); raises IndexFormatError."""
    try:
        return os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
    except FileNotFoundError as exc:
        raise IndexFormatError(
            f"{path}: no such snapshot folder; build one with 'groundwire index'"
        ) from exc
    except OSError as exc:
        if os.path.islink(path):
            raise IndexFormatError(
                f"{path}: is a symlink; open the snapshot folder itself"
            ) from exc
        raise IndexFormatError(f"{path}: not a snapshot folder ({exc.strerror})") from exc


def identity_of(info: os.stat_result) -> tuple[int, int, int, int, int]:
    """A file's identity: device, inode, size, modification and change times (ns)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _open_regular(dir_fd: int, name: str, where: str) -> tuple[int, os.stat_result]:
    """Open ``name`` relative to ``dir_fd``: (fd, size). FileNotFoundError propagates.

    Opened non-blocking, so a FIFO (or device) put in a file's place is refused at once
    instead of waiting forever for a writer; a regular file reads the same either way.
    """
    fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IndexFormatError(f"{where}: {name} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_small(dir_fd: int, name: str, limit: int, where: str) -> bytes:
    """The bytes of a small file (``manifest.json``), refusing more than ``limit`` bytes."""
    fd, info = _open_regular(dir_fd, name, where)
    size = info.st_size
    try:
        if size > limit:
            raise IndexFormatError(
                f"{where}: {name} has {size:,} bytes, over the limit of {limit:,}; "
                "raise max_manifest_bytes if the snapshot is trusted"
            )
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise IndexFormatError(f"{where}: {name} grew past {limit:,} bytes while read")
    return data


@dataclass
class OpenedFile:
    """One snapshot file opened for reading (size checked); close after mapping.

    ``identity`` is (device, inode, size, mtime ns, ctime ns) when opened: any write to
    the file through the file system changes it (see ``checksums.py``'s verdict cache).
    ``mapped`` is the whole file's read-only mapping once :func:`map_file` made one.
    """

    name: str
    fd: int
    size: int
    identity: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    mapped: mmap.mmap | None = None

    def close(self) -> None:
        """Close the descriptor (a mapping made from it stays valid)."""
        os.close(self.fd)


def open_file(dir_fd: int, name: str, size: int, limit: int, where: str) -> OpenedFile:
    """Open a listed file and check its exact size and the per-file limit."""
    fd, info = _open_regular(dir_fd, name, where)
    actual = info.st_size
    if actual != size or actual > limit:
        os.close(fd)
        if actual > limit:
            raise IndexFormatError(
                f"{where}: {name} has {actual:,} bytes, over max_array_bytes={limit:,}"
            )
        raise IndexFormatError(
            f"{where}: {name} has {actual:,} bytes, the manifest says {size:,} "
            "(truncated or replaced); rebuild the snapshot"
        )
    return OpenedFile(name, fd, actual, identity_of(info))


def _npy_header_fast(head: bytes, dtype: str) -> tuple[tuple[int, ...], int] | None:
    """Shape and data offset when the header is exactly what numpy writes for a C-order
    ``dtype`` array (every snapshot writer's): one regex instead of ``ast.literal_eval``
    (~60 µs a file). None for anything else, which numpy's own parser then judges."""
    if head[:6] != b"\x93NUMPY" or head[6:8] not in (b"\x01\x00", b"\x02\x00"):
        return None
    start = 10 if head[6] == 1 else 12
    length = int.from_bytes(head[8:start], "little")
    found = _NPY_HEADER.fullmatch(head, start, start + length)
    if found is None or found["descr"].decode("ascii") != dtype:
        return None
    text = found["shape"]
    shape = tuple(int(d) for d in text[1:-1].split(b",") if d.strip())
    if repr(shape).encode("ascii") != text:  # e.g. "(5)", "(,)", "(007,)": not numpy's
        return None
    return shape, start + length


def _npy_header(opened: OpenedFile, where: str, dtype: str) -> tuple[tuple[int, ...], int]:
    """Shape and data offset of a ``.npy`` file whose header names exactly ``dtype``."""
    head = os.pread(opened.fd, min(opened.size, _NPY_HEAD), 0)
    fast = _npy_header_fast(head, dtype)
    if fast is not None:
        return fast
    if len(head) < min(opened.size, _MAX_NPY_HEADER):  # numpy's parser judges the rest
        head = os.pread(opened.fd, min(opened.size, _MAX_NPY_HEADER), 0)
    handle = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(handle)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"unsupported .npy version {version}")
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        with _HEADER_LOCK:
            shape, fortran, kind = read_header(handle)
    except Exception as exc:  # untrusted bytes: numpy's parser may raise almost anything
        raise IndexFormatError(f"{where}: {opened.name}: bad .npy header ({exc})") from exc
    if kind.hasobject or kind.str != dtype or fortran:
        raise IndexFormatError(
            f"{where}: {opened.name} holds {kind.str}{' (Fortran order)' * fortran}, "
            f"expected {dtype}"
        )
    return shape, handle.tell()


def map_file(
    opened: OpenedFile, where: str, dtype: str | None, *, populate: bool = False
) -> npt.NDArray[Any]:
    """Memory-map an opened file read-only: a ``.npy`` array (``dtype`` given) or raw bytes.

    The ``.npy`` header is parsed by numpy's own reader; only the expected plain dtype
    in C order is accepted (never an object dtype: nothing is unpickled), and the data
    must end exactly at the end of the file. ``populate`` maps every page up front
    (one batched fault instead of one per page) for callers about to read them all.
    """
    shape: tuple[int, ...] = (opened.size,)
    kind, offset = _BYTE, 0
    if dtype is not None:
        shape, offset = _npy_header(opened, where, dtype)
        kind = _DTYPES.get(dtype) or np.dtype(dtype)
    count = math.prod(shape)
    if offset + count * kind.itemsize != opened.size:
        raise IndexFormatError(
            f"{where}: {opened.name}: header shape {shape} does not match the file size"
        )
    if count == 0:
        array = np.zeros(shape, dtype=kind)
        array.flags.writeable = False
        return array
    flags = mmap.MAP_SHARED | (_MAP_POPULATE if populate else 0)
    mapped = mmap.mmap(opened.fd, opened.size, flags=flags, prot=mmap.PROT_READ)
    opened.mapped = mapped
    array = np.frombuffer(mapped, dtype=kind, count=count, offset=offset)  # read-only
    return array if len(shape) == 1 else array.reshape(shape)
