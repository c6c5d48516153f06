"""Where a snapshot's vectors are kept, and the legacy side file.

Writers (``index``/``ingest --embed``, the sync publisher) keep vectors *in* the
snapshot, as its ``vectors`` section (:func:`with_vectors`): one immutable snapshot,
written atomically and covered by its manifest and checksums, so a snapshot and its
vectors can never be swapped in apart. Readers (:func:`saved_vectors`,
:func:`snapshot_vectors`) take the section first and, for snapshots written before the
section existed, the side file ``<snapshot>.vectors`` beside it (:func:`vectors_path`),
whose format :func:`write_vector_file`/:func:`read_vector_file` keep: magic, a JSON
header (model id, dimensions, type, ids, SHA-256 of the matrix), the matrix 64-byte
aligned, int8 row scales. A writer removes a side file it leaves behind
(:func:`remove_side_file`): stale, it could hold the vectors of withdrawn text.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from groundwire.config import VECTOR_DTYPES
from groundwire.embed.base import Embedder
from groundwire.errors import IndexFormatError
from groundwire.index import store
from groundwire.index.vectors import SECTION, VectorIndex

if TYPE_CHECKING:
    from groundwire.index.knowledge_base import KnowledgeBase

__all__ = [
    "read_vector_file",
    "remove_side_file",
    "saved_vectors",
    "snapshot_vectors",
    "vectors_path",
    "with_vectors",
    "write_vector_file",
]

_MAGIC = b"GWVECTORS\x00v1\n"
_ALIGN = 64


def vectors_path(snapshot: str | os.PathLike[str]) -> Path:
    """The legacy side file of a snapshot: ``<snapshot>.vectors`` beside it."""
    path = Path(snapshot)
    return path.with_name(path.name + ".vectors")


def with_vectors(kb: KnowledgeBase, vectors: VectorIndex | None) -> KnowledgeBase:
    """``kb`` carrying ``vectors`` (checked to be ``kb``'s) as its ``vectors`` section, to
    ``save``; None drops a section ``kb`` carries."""
    if vectors is None:
        return kb.without_section(SECTION)
    return kb.with_section(vectors.check_for(kb).section())


def remove_side_file(snapshot: str | os.PathLike[str]) -> None:
    """Delete ``<snapshot>.vectors`` if there is one (call after saving the snapshot)."""
    side = vectors_path(snapshot)
    try:
        side.unlink(missing_ok=True)
    except OSError as exc:
        raise IndexFormatError(
            f"{side}: cannot remove the stale vectors file ({exc.strerror or exc}); delete it"
        ) from exc


def saved_vectors(
    kb: KnowledgeBase,
    snapshot: str | os.PathLike[str] | None,
    model_id: str | None = None,
    *,
    verify: bool = True,
) -> VectorIndex | None:
    """``kb``'s stored vectors (of ``model_id``, when given): its ``vectors`` section, else
    the side file of the snapshot folder ``snapshot`` when it holds ``kb``'s ids; None
    when neither does. Damage raises :class:`IndexFormatError`."""
    held = VectorIndex.from_section(kb)
    if held is not None and model_id in (None, held.model_id):
        return held
    if snapshot is None or not store.is_snapshot(snapshot):
        return None
    side = vectors_path(snapshot)
    if not side.is_file():
        return None
    vectors = read_vector_file(side, verify=verify)
    if model_id in (None, vectors.model_id) and vectors.matches(kb):
        return vectors
    return None


def snapshot_vectors(
    kb: KnowledgeBase,
    snapshot: str | os.PathLike[str] | None,
    embedder: Embedder,
    *,
    verify: bool = True,
) -> VectorIndex:
    """``kb``'s vectors for ``embedder``'s model: the stored ones (:func:`saved_vectors`)
    when they are that model's, else built now."""
    held = saved_vectors(kb, snapshot, embedder.model_id, verify=verify)
    return held if held is not None else VectorIndex.build(kb, embedder)


def write_vector_file(vectors: VectorIndex, path: str | os.PathLike[str]) -> None:
    """Write ``vectors`` to the side-file format at ``path``, atomically."""
    target = Path(path)
    matrix, scale_array = vectors.stored_arrays()
    payload = np.ascontiguousarray(matrix).tobytes()
    scale = b"" if scale_array is None else scale_array.astype("<f4").tobytes()
    header = {
        "model_id": vectors.model_id,
        "dimensions": vectors.dimensions,
        "dtype": vectors.dtype,
        "count": len(vectors.ids),
        "ids": list(vectors.ids),
        "sha256": hashlib.sha256(payload + scale).hexdigest(),
    }
    encoded = json.dumps(header, ensure_ascii=False).encode("utf-8")
    head = _MAGIC + len(encoded).to_bytes(8, "little") + encoded
    head += b"\x00" * (-len(head) % _ALIGN)
    if target.is_dir():
        raise IndexFormatError(f"{target}: is a folder; vectors are saved to one file")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(head)
            handle.write(payload)
            handle.write(scale)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise IndexFormatError(f"{target}: cannot write vectors ({exc.strerror or exc})") from exc
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _header(source: Path) -> tuple[dict[str, Any], int, int]:
    where = f"{source}: "
    try:
        with source.open("rb") as handle:
            if handle.read(len(_MAGIC)) != _MAGIC:
                raise IndexFormatError(where + "not a groundwire vectors file; rebuild it")
            length = int.from_bytes(handle.read(8), "little")
            if not 0 < length < 1 << 31:
                raise IndexFormatError(where + "corrupt header length; rebuild it")
            header: dict[str, Any] = json.loads(handle.read(length).decode("utf-8"))
        size = source.stat().st_size
    except OSError as exc:
        raise IndexFormatError(where + f"cannot read ({exc.strerror or exc})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise IndexFormatError(where + "corrupt header; rebuild the vectors") from exc
    if not isinstance(header, dict):
        raise IndexFormatError(where + "corrupt header; rebuild the vectors")
    offset = len(_MAGIC) + 8 + length
    return header, offset + (-offset % _ALIGN), size


def read_vector_file(path: str | os.PathLike[str], *, verify: bool = True) -> VectorIndex:
    """Open a side file, the matrix memory-mapped; ``verify`` checks its SHA-256. Raises
    :class:`IndexFormatError` for a missing, truncated, tampered or foreign file."""
    source = Path(path)
    where = f"{source}: "
    header, offset, size = _header(source)
    try:
        count, dims, dtype = int(header["count"]), int(header["dimensions"]), header["dtype"]
        ids, model_id, digest = list(header["ids"]), str(header["model_id"]), header["sha256"]
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexFormatError(where + "header misses fields; rebuild the vectors") from exc
    if dtype not in VECTOR_DTYPES or len(ids) != count or dims < 1:
        raise IndexFormatError(where + "header is inconsistent; rebuild the vectors")
    body = count * dims * np.dtype(dtype).itemsize
    scale_bytes = 4 * count if dtype == "int8" else 0
    if size != offset + body + scale_bytes:
        raise IndexFormatError(where + "truncated or padded; rebuild the vectors")
    matrix: np.ndarray = np.zeros((0, dims), dtype=dtype)
    if count:
        matrix = np.memmap(source, dtype=dtype, mode="r", offset=offset, shape=(count, dims))
    scale = None
    if scale_bytes:
        scale = np.array(
            np.memmap(source, dtype="<f4", mode="r", offset=offset + body, shape=(count,))
        )
    if verify:
        actual = hashlib.sha256(np.asarray(matrix).tobytes())
        if scale is not None:
            actual.update(scale.tobytes())
        if actual.hexdigest() != digest:
            raise IndexFormatError(where + "checksum mismatch (changed or damaged); rebuild")
    return VectorIndex.stored(ids, model_id, matrix, scale)
