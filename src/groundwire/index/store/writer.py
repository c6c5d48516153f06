"""Saving a knowledge base as a snapshot folder (format version 3; see ``docs/INDEX.md``).

Writing (see ``storage.py``). A new snapshot is written into a private temporary
sibling ``.<name>.tmp-XXXX/`` (0700; files 0600, ``O_EXCL``, fsynced; then the
folder), verified by opening it with full checks, and renamed to ``<name>``. An
existing one is replaced under an ``flock`` on ``<name>/.lock``: files it already holds
with the same bytes are kept (verified by this process before, or hashed now: a delta
save keeps its base segment's files so), the others are written in
``<name>/.tmp-XXXX/`` and moved in under their content-addressed names (never colliding
with different bytes, listed by no manifest yet), the new manifest is verified against
them with full checks, and then ``manifest.json`` is renamed over the old one: a single
atomic ``rename(2)``, the moment readers switch. Files no manifest lists and dead
writers' temporary folders are deleted after the swap; a folder holding any file a
writer would not create is never replaced. A delta index within
``DELTA_COMPACT_SHARE`` whose base was read from a snapshot is saved as that base plus
a delta segment (``segments.py``), anything else as one segment.

What a concurrent reader sees: the old manifest with all of its files, or the new one
with all of its files, never a mix (every file is opened relative to one folder
descriptor and checked against the manifest read). A reader that read the old
manifest just before the swap and then finds one of its files deleted re-reads the
manifest and opens the new snapshot; mapped files stay valid after deletion, so a
loaded snapshot keeps serving. A writer killed at any point leaves the previous
manifest and its files in place; the next save cleans up after it.

Saving the same knowledge base twice gives byte-identical files (no timestamps; phrase
keys sorted), and a loaded snapshot saves the bytes it was read from. Entry lines and
their content digests are encoded in bulk (``lines.py``); the files are hashed, written
and fsynced on a few threads (``storage.write_files``). What was written is still read
back and verified in full before it is installed: the digests are computed from the
buffers handed to ``write(2)``, so only reading the files proves the bytes the kernel
serves are those (a corrupted write, or a file changed in the temporary folder).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from groundwire.errors import IndexFormatError
from groundwire.index.parts import Parts
from groundwire.index.store import checksums, storage
from groundwire.index.store.payloads import encode, manifest_bytes
from groundwire.index.store.reader import load_parts, verify_staged

__all__ = ["save_parts"]


# -- saving -------------------------------------------------------------------------------------
def _check_target(path: str | os.PathLike[str]) -> Path:
    target = Path(os.path.abspath(os.fspath(path)))
    if target.is_symlink():
        raise IndexFormatError(f"{target}: is a symlink; save to a real folder path")
    parent = target.parent
    if not parent.is_dir():
        what = "does not exist" if not parent.exists() else "is not a folder"
        raise IndexFormatError(f"{target}: the parent {parent} {what}; create the folder first")
    if target.exists():
        if not target.is_dir():
            raise IndexFormatError(f"{target}: exists and is not a folder; choose another path")
        foreign = storage.foreign_names(target)
        if foreign:
            raise IndexFormatError(
                f"{target}: holds files that are not part of a snapshot "
                f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); "
                "refusing to replace it, choose another path"
            )
    return target


def save_parts(parts: Parts, path: str | os.PathLike[str]) -> None:
    """Write a knowledge base to the folder ``path`` atomically; an existing snapshot is
    replaced.

    Files are written and fsynced in a private temporary folder, verified by opening
    them (full checks), then installed (see the module docstring). A failure at any
    point leaves the previous snapshot as it was. Raises IndexFormatError.
    """
    target = _check_target(path)
    body, payloads = encode(parts)
    try:
        if not target.exists() and _create(target, body, payloads):
            return
        _replace(target, body, payloads)
    except OSError as exc:
        raise IndexFormatError(
            f"{target}: cannot write the snapshot ({exc.strerror or exc}); "
            "the previous snapshot, if any, is unchanged"
        ) from exc


def _prepare(temp: Path, body: dict[str, Any], payloads: Sequence[storage.Payload]) -> set[str]:
    """Write files and manifest into ``temp``, then verify them as a reader would."""
    files = storage.write_files(temp, payloads)
    storage.write_manifest(temp, manifest_bytes(body, files))
    load_parts(temp, verify="full")
    return {item["file"] for item in files.values()}


def _create(target: Path, body: dict[str, Any], payloads: Sequence[storage.Payload]) -> bool:
    """Build a new snapshot beside ``target`` and rename it into place; False if it appeared."""
    prefix = f".{target.name}.tmp-"
    storage.clean_stale_temps(target.parent, prefix)
    with storage.locked_temp(target.parent, prefix) as temp:
        _prepare(temp, body, payloads)
        return storage.install_new(temp, target)


def _replace(target: Path, body: dict[str, Any], payloads: Sequence[storage.Payload]) -> None:
    """Replace the snapshot at ``target``: files it already holds with the same bytes are
    kept (verified by this process before, or hashed now), the others written in a
    private folder and moved in under names no manifest lists yet, the new manifest
    verified against them (full checks), then swapped in; unlisted files are deleted."""
    with storage.lock(target):
        _check_target(target)  # re-check under the lock
        with storage.locked_temp(target, storage.TMP_PREFIX) as temp:
            before = set(os.listdir(target))
            dir_fd = storage.open_dir(target)
            try:
                files = storage.write_files(temp, payloads, partial(checksums.holds, dir_fd))
            finally:
                os.close(dir_fd)
            written = sorted({item["file"] for item in files.values() if not item.get("reused")})
            manifest = manifest_bytes(body, files)
            storage.move_objects(temp, target, written)
            try:
                verify_staged(target, manifest)
            except BaseException:
                for name in written:
                    if name not in before:  # ours alone: no manifest lists it
                        with contextlib.suppress(OSError):
                            (target / name).unlink()
                raise
            storage.write_manifest(temp, manifest)
            storage.swap_manifest(temp, target)
            storage.collect_garbage(target, {item["file"] for item in files.values()})
