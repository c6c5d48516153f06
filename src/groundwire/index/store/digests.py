"""File digests of snapshots: the algorithms, how a digest is written, hashing a file.

Format 3 records every file's digest with its algorithm, ``<algorithm>:<64 hex>`` (the
form of OCI content descriptors), so one snapshot can hold files hashed with SHA-256
(kept from a version-2 snapshot) beside files hashed with BLAKE3, which everything
written now uses: on SciFact's 29.6 MiB it takes 10-12.5 ms on one core where SHA-256
takes 21-23 ms (``docs/INDEX.md``, "Snapshot format version 3"). Both are
cryptographic: file names are content addresses, and an update relies on a reused name
meaning the same bytes. File names stay ``<logical>.<first 12 hex>.<ext>``.

The ``blake3`` package (a core dependency) is imported here once; without it, files are
written with SHA-256 and a file recorded as BLAKE3 cannot be verified: a full load
refuses it with an install hint (:func:`require`), never skipping the check.
Both hashers release the GIL on large buffers, so files hash on threads in parallel.

A record may also hold a **check**, ``xxh3-128:<32 hex>`` (``xxhash``, a core
dependency): the 128-bit XXH3 of the same bytes, which a full load verifies instead of
the digest (~3x less CPU: 4.4 against 12.7 ms over SciFact's snapshot in a fresh
process). Against damage it is as good: a changed byte goes unnoticed with probability
2^-128. Against someone who can write the snapshot folder no digest at load helps (they
can rewrite the manifest too); what binds content to a caller's expectation is
``expected_manifest_hash``, which re-derives the entries' SHA-256 digests. The digest
stays the content address (file names, reuse by an update). A check this groundwire
does not know, or cannot compute (``xxhash`` missing), is skipped for the digest.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from groundwire.errors import IndexFormatError

_blake3: Callable[..., Any] | None
try:
    from blake3 import blake3 as _blake3
except ImportError:  # pragma: no cover - a core dependency; see require()
    _blake3 = None
_xxh3: Callable[..., Any] | None
try:
    from xxhash import xxh3_128 as _xxh3
except ImportError:  # pragma: no cover - a core dependency; loads fall back to the digest
    _xxh3 = None

__all__ = [
    "ALGORITHMS",
    "CHECK",
    "WRITE",
    "check_of",
    "label",
    "of_chunks",
    "of_file",
    "parse",
    "require",
    "split",
    "tagged",
]

SHA256, BLAKE3, CHECK = "sha256", "blake3", "xxh3-128"
#: The algorithms a format-3 record may name (a reader refuses any other).
ALGORITHMS = (BLAKE3, SHA256)
#: What new files are hashed with: BLAKE3, or SHA-256 when the package is missing.
WRITE = BLAKE3 if _blake3 is not None else SHA256
_LABELS = {SHA256: "SHA-256", BLAKE3: "BLAKE3", CHECK: "XXH3-128"}
_TAGGED = re.compile("(?P<algorithm>[a-z0-9_-]{1,32}):(?P<hex>[0-9a-f]{64})")
_CHECKED = re.compile("(?P<algorithm>[a-z0-9_-]{1,32}):(?P<hex>[0-9a-f]{16,128})")
_CHUNK = 1 << 20


def _hasher(algorithm: str) -> Callable[..., Any]:
    if algorithm == SHA256:
        return hashlib.sha256
    if algorithm == BLAKE3 and _blake3 is not None:
        return _blake3
    if algorithm == CHECK and _xxh3 is not None:
        return _xxh3
    require(algorithm, "")
    raise ValueError(f"unknown digest algorithm {algorithm!r}")


def tagged(algorithm: str, hex_digest: str) -> str:
    """The recorded form of a digest: ``<algorithm>:<hex>``."""
    return f"{algorithm}:{hex_digest}"


def split(digest: str) -> tuple[str, str]:
    """(algorithm, hex) of a recorded digest."""
    algorithm, _, hex_digest = digest.partition(":")
    return algorithm, hex_digest


def label(digest: str) -> str:
    """How messages name a recorded digest's algorithm (``SHA-256``, ``BLAKE3``)."""
    return _LABELS.get(split(digest)[0], split(digest)[0])


def parse(value: Any, where: str, logical: str) -> str | None:
    """A format-3 record's ``digest`` when well formed (None otherwise); an algorithm this
    groundwire does not know is refused by name."""
    found = _TAGGED.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        return None
    if found["algorithm"] not in ALGORITHMS:
        raise IndexFormatError(
            f"{where}: {logical!r} is digested with {found['algorithm']!r}, which this "
            f"groundwire does not know ({', '.join(ALGORITHMS)}); upgrade groundwire"
        )
    return str(value)


def check_of(item: Any, where: str, logical: str) -> str | None:
    """The check a file record holds (``"check"``), when this groundwire can verify it:
    None when there is none, or when its algorithm is unknown here or its package missing
    (the digest is verified instead). A malformed one is refused."""
    value = item.get("check") if isinstance(item, dict) else None
    if value is None:
        return None
    found = _CHECKED.fullmatch(value) if isinstance(value, str) else None
    if found is None or (found["algorithm"] == CHECK and len(found["hex"]) != 32):
        raise IndexFormatError(f"{where}: bad check for {logical!r}: {value!r}")
    if found["algorithm"] != CHECK or _xxh3 is None:
        return None
    return str(value)


def require(algorithm: str, where: str) -> None:
    """Refuse to go on when ``algorithm``'s package is missing (a full load verifies every
    byte; it never skips a file it cannot hash)."""
    if algorithm == BLAKE3 and _blake3 is None:
        prefix = f"{where}: " if where else ""
        raise IndexFormatError(
            f"{prefix}the snapshot's files are digested with BLAKE3, which needs the "
            "'blake3' package (a dependency of groundwire) and it is not installed; "
            "install it with: pip install blake3 (or load with verify='manifest')"
        )


def of_file(fd: int, mapped: mmap.mmap | None, algorithm: str) -> str:
    """The recorded digest of a whole open file: of ``mapped``, its read-only mapping, when
    given (no copy; the bytes hashed are the bytes served), else read with ``pread`` (the
    file position is untouched)."""
    hasher = _hasher(algorithm)
    if mapped is not None:
        return tagged(algorithm, hasher(mapped).hexdigest())  # releases the GIL
    digest = hasher()
    offset = 0
    while True:
        block = os.pread(fd, _CHUNK, offset)
        if not block:
            return tagged(algorithm, digest.hexdigest())
        digest.update(block)
        offset += len(block)


def of_chunks(chunks: Iterable[Any], algorithm: str | None = None) -> tuple[str, int, str | None]:
    """The recorded digest (hashed with ``algorithm``, default :data:`WRITE`), the size in
    bytes and the check (None without ``xxhash``) of buffers written in order."""
    algorithm = algorithm or WRITE
    digest = _hasher(algorithm)()
    check = _xxh3() if _xxh3 is not None else None
    size = 0
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        digest.update(view)
        if check is not None:
            check.update(view)
        size += view.nbytes
    checked = tagged(CHECK, check.hexdigest()) if check is not None else None
    return tagged(algorithm, digest.hexdigest()), size, checked
