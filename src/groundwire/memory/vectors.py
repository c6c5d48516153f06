"""The vector channel: embeddings cached by (content hash, model id), brute-force cosine.

:class:`EmbedderLike` is the structural shape of the ``Embedder`` contract
(ARCHITECTURE.md): any object with these members drops in, local models and hashing
embedders alike. Vectors are stored once per content hash and model, so the same text
remembered twice, or by two agents, is embedded once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from groundwire.errors import ConfigError

__all__ = ["EmbedderLike", "check_embedder", "decode", "encode", "normalized"]

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class EmbedderLike(Protocol):
    """An embedding model: ``embed_documents`` returns one normalized row per text."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    @property
    def location(self) -> Literal["local", "remote"]: ...

    def embed_documents(self, texts: Sequence[str]) -> Any: ...

    def embed_query(self, text: str) -> Any: ...


def check_embedder(embedder: object, allow_remote: bool) -> EmbedderLike:
    """The embedder, checked; a remote one needs the host's explicit consent."""
    if not isinstance(embedder, EmbedderLike):
        raise ConfigError(
            f"embedder={embedder!r} is invalid: expected an Embedder (model_id, dimensions, "
            "location, embed_documents, embed_query)"
        )
    dims = embedder.dimensions
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise ConfigError(f"embedder.dimensions={dims!r} is invalid: expected an integer >= 1")
    if embedder.location not in ("local", "remote"):
        raise ConfigError(
            f"embedder.location={embedder.location!r} is invalid: expected 'local' or 'remote'"
        )
    if embedder.location == "remote" and not allow_remote:
        raise ConfigError(
            f"embedder {embedder.model_id!r} sends memory text to a remote service: pass "
            "allow_remote_embedder=True to consent, or use a local embedder"
        )
    return embedder


def normalized(rows: Any, dimensions: int, count: int) -> Vectors:
    """``rows`` as a float32 ``[count, dimensions]`` matrix of unit (or zero) rows."""
    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.shape != (count, dimensions):
        raise ConfigError(
            f"the embedder returned an array of shape {matrix.shape}, expected "
            f"({count}, {dimensions}): check its dimensions"
        )
    if not np.isfinite(matrix).all():
        raise ConfigError("the embedder returned NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: Vectors = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


def encode(vector: Vectors) -> bytes:
    """One vector as little-endian float32 bytes."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def decode(blob: bytes, dimensions: int) -> Vectors:
    """Bytes written by :func:`encode` back to a float32 vector."""
    vector = np.frombuffer(blob, dtype="<f4")
    if vector.shape != (dimensions,):
        raise ConfigError(
            f"a stored vector has {vector.size} values, expected {dimensions}: the "
            "embeddings table is damaged"
        )
    return vector.astype(np.float32)
