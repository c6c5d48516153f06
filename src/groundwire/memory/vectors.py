"""The vector channel's storage: embeddings cached by (content hash, model id) in the store.

Embedders follow :class:`groundwire.embed.Embedder`. Vectors are stored once per content
hash and model, so the same text remembered twice, or by two agents, is embedded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from groundwire.embed.base import Embedder, Matrix, check_embedder, checked_matrix, require_consent
from groundwire.errors import EmbeddingError

__all__ = ["checked_embedder", "decode", "encode", "query_vector", "vectors_of"]


def checked_embedder(embedder: object, allow_remote: bool) -> Embedder:
    """The embedder, checked; a remote one needs the host's explicit consent."""
    checked = check_embedder(embedder)
    if checked.location == "remote":
        require_consent(checked.model_id, "its server", allow_remote)
    return checked


def vectors_of(embedder: Embedder, texts: list[str]) -> Matrix:
    """The normalized ``[len(texts), dimensions]`` vectors of ``texts``, shape-checked."""
    return checked_matrix(
        embedder.embed_documents(texts), len(texts), embedder.dimensions, embedder.model_id
    )


def query_vector(embedder: Embedder, text: str) -> Matrix:
    """The normalized vector of one query, shape-checked."""
    raw: Any = np.asarray(embedder.embed_query(text), dtype=np.float32).reshape(1, -1)
    row: Matrix = checked_matrix(raw, 1, embedder.dimensions, embedder.model_id)[0]
    return row


def encode(vector: Matrix) -> bytes:
    """One vector as little-endian float32 bytes."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def decode(blob: bytes, dimensions: int) -> Matrix:
    """Bytes written by :func:`encode` back to a float32 vector."""
    vector = np.frombuffer(blob, dtype="<f4")
    if vector.shape != (dimensions,):
        raise EmbeddingError(
            f"a stored vector has {vector.size} values, expected {dimensions}: the "
            "embeddings table is damaged or was written by another model configuration"
        )
    return vector.astype(np.float32)
