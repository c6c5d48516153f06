"""The embedder contract: what every embedding model looks like to groundwire.

An :class:`Embedder` turns texts into unit-length float32 vectors. ``model_id`` names
the model *and* everything that changes its vectors (prefixes, dimensions), because the
embedding cache keys vectors by ``(content hash, model_id)``. ``location`` is
``"local"`` (runs in this process) or ``"remote"`` (sends text to a server, which needs
explicit consent: see :func:`require_consent`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from groundwire.config import MAX_EMBED_CHARS
from groundwire.errors import ConfigError, EmbeddingError

__all__ = [
    "Embedder",
    "EmbedderLocation",
    "Matrix",
    "check_embedder",
    "check_texts",
    "checked_matrix",
    "first_row",
    "normalize_rows",
    "require_consent",
]

EmbedderLocation = Literal["local", "remote"]
#: A float32 matrix, one unit-length row per text.
Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Texts in, unit-length float32 vectors out (one row per text, in order)."""

    @property
    def model_id(self) -> str:
        """The model and every option that changes its vectors (a cache key part)."""
        ...

    @property
    def dimensions(self) -> int:
        """Length of every vector."""
        ...

    @property
    def location(self) -> EmbedderLocation:
        """``"local"`` (this process) or ``"remote"`` (text leaves the machine)."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Vectors of documents (float32 ``[len(texts), dimensions]``, rows of length 1)."""
        ...

    def embed_query(self, text: str) -> Matrix:
        """The vector of one query (float32 ``[dimensions]``, length 1)."""
        ...


def check_embedder(embedder: object) -> Embedder:
    """``embedder`` if it implements :class:`Embedder`, else a :class:`ConfigError`."""
    if not isinstance(embedder, Embedder):
        raise ConfigError(
            f"embedder={embedder!r} is invalid: expected an Embedder (model_id, dimensions, "
            "location, embed_documents, embed_query), e.g. groundwire.HashingEmbedder()"
        )
    return embedder


def check_texts(texts: object) -> list[str]:
    """The texts as a list, each cut to :data:`MAX_EMBED_CHARS`; a clear error otherwise."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ConfigError("texts must be a list of strings (one vector per text)")
    out = []
    for n, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigError(f"texts[{n}] is a {type(text).__name__}; expected a string")
        out.append(text[:MAX_EMBED_CHARS])
    return out


def normalize_rows(matrix: npt.NDArray[np.floating]) -> Matrix:
    """Rows scaled to length 1 (float32); all-zero rows stay zero."""
    values = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(values, axis=-1, keepdims=True)
    out: Matrix = np.divide(values, norms, out=np.zeros_like(values), where=norms > 0)
    return out


def first_row(matrix: Matrix) -> Matrix:
    """Row 0 of a matrix, as a float32 vector."""
    return np.asarray(matrix[0], dtype=np.float32)


def checked_matrix(values: object, count: int, dimensions: int, model: str) -> Matrix:
    """``values`` as a finite, normalized float32 ``[count, dimensions]`` matrix.

    Raises :class:`EmbeddingError` naming the model when the shape or values are wrong.
    """
    try:
        matrix = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{model}: embeddings are not numeric vectors ({exc})") from exc
    if matrix.ndim != 2 or matrix.shape != (count, dimensions):
        raise EmbeddingError(
            f"{model}: expected {count} vector(s) of {dimensions} dimensions, got shape "
            f"{tuple(matrix.shape)}; check that the model matches its configured dimensions"
        )
    if not np.isfinite(matrix).all():
        raise EmbeddingError(f"{model}: embeddings contain NaN or infinite values")
    return normalize_rows(matrix)


def require_consent(model: str, where: str, allow_remote: bool) -> None:
    """Refuse a remote embedder unless the caller consented to sending text to ``where``."""
    if allow_remote is not True:
        raise ConfigError(
            f"remote embedding with {model!r} at {where} sends your documents and queries to "
            "that server; pass allow_remote=True (CLI: --allow-remote) to consent, or use a "
            "local model such as 'all-MiniLM-L6-v2' or 'hashing'"
        )
