"""The embedding cache: vectors keyed by (model id, content hash), in SQLite or in memory.

:class:`CachedEmbedder` wraps any :class:`~groundwire.embed.base.Embedder`: it looks
every text up by the SHA-256 of its UTF-8 bytes under the embedder's ``model_id``, sends
only the texts it has not seen to the model (identical texts once), stores their vectors
and returns the rows in input order. A rebuild after editing one document therefore
embeds only that document's chunks. Documents and queries are kept apart (a model may
prefix them differently).

The SQLite file holds one table, written one transaction per batch, so an interrupted
embedding keeps every finished batch and a failed write changes nothing. Stored vectors
are float32; a row whose length does not match the model's dimensions is ignored and
embedded again.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from groundwire.config import MEMORY_BUSY_TIMEOUT_S
from groundwire.embed.base import (
    Embedder,
    EmbedderLocation,
    Matrix,
    check_embedder,
    check_texts,
    first_row,
)
from groundwire.errors import ConfigError, EmbeddingError

__all__ = ["CachedEmbedder", "EmbeddingCache", "content_hash"]

Kind = Literal["document", "query"]
#: Texts embedded per model call (and cache transaction) when filling the cache.
_FILL_BATCH = 256
_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    model_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model_id, kind, content)
) WITHOUT ROWID
"""


def content_hash(text: str) -> str:
    """The SHA-256 of ``text``'s UTF-8 bytes, in hex: the cache's content key."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingCache:
    """Vectors by ``(model_id, kind, content hash)``: a SQLite file, or memory (``path=None``).

    Thread-safe. ``close()`` (or ``with``) releases the file.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None and self.path.is_dir():
            raise ConfigError(f"{self.path}: is a folder; the embedding cache is one SQLite file")
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                target, timeout=MEMORY_BUSY_TIMEOUT_S, check_same_thread=False
            )
            self._db.execute(_SCHEMA)
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise EmbeddingError(
                f"{target}: cannot open the embedding cache ({exc}); delete the file to "
                "start a new cache"
            ) from exc
        self._lock = threading.Lock()

    def get(
        self, model_id: str, kind: Kind, keys: Sequence[str], dimensions: int
    ) -> dict[str, Matrix]:
        """Stored vectors of ``keys`` (content hashes) that have ``dimensions`` values."""
        found: dict[str, Matrix] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            for start in range(0, len(unique), 500):  # SQLite's bound-parameter limit
                part = unique[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    "SELECT content, dimensions, vector FROM vectors WHERE model_id = ? "
                    f"AND kind = ? AND content IN ({marks})",
                    (model_id, kind, *part),
                ).fetchall()
                for content, dims, blob in rows:
                    if dims == dimensions and len(blob) == 4 * dimensions:
                        found[content] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        return found

    def put(self, model_id: str, kind: Kind, items: Iterable[tuple[str, Matrix]]) -> None:
        """Store vectors under their content hashes, in one transaction."""
        rows = [
            (model_id, kind, key, int(vector.shape[0]), vector.astype("<f4").tobytes())
            for key, vector in items
        ]
        with self._lock:
            try:
                with self._db:
                    self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?,?,?,?,?)", rows)
            except sqlite3.DatabaseError as exc:
                raise EmbeddingError(
                    f"{self.path or ':memory:'}: cannot write the embedding cache ({exc})"
                ) from exc

    def count(self, model_id: str | None = None) -> int:
        """Vectors stored (for one model, or all)."""
        with self._lock:
            if model_id is None:
                return int(self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])
            query = "SELECT COUNT(*) FROM vectors WHERE model_id = ?"
            return int(self._db.execute(query, (model_id,)).fetchone()[0])

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CachedEmbedder:
    """An embedder that asks its model only for texts the cache has not seen.

    Same ``model_id``, ``dimensions`` and ``location`` as the wrapped embedder.
    ``embedded`` and ``reused`` count texts sent to the model and served from the cache;
    ``progress(count)`` is called as texts are done (cached ones at once).
    """

    def __init__(
        self,
        embedder: Embedder,
        cache: EmbeddingCache | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.inner = check_embedder(embedder)
        self.cache = cache if cache is not None else EmbeddingCache()
        self.progress = progress
        self.embedded = 0
        self.reused = 0

    @property
    def model_id(self) -> str:
        """The wrapped embedder's model id."""
        return self.inner.model_id

    @property
    def dimensions(self) -> int:
        """The wrapped embedder's dimensions."""
        return self.inner.dimensions

    @property
    def location(self) -> EmbedderLocation:
        """The wrapped embedder's location."""
        return self.inner.location

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Vectors of ``texts``, from the cache where stored, else from the model."""
        return self._embed(check_texts(texts), "document")

    def embed_query(self, text: str) -> Matrix:
        """The query's vector, cached like documents (under the query kind)."""
        return first_row(self._embed(check_texts([text]), "query"))

    def _embed(self, texts: list[str], kind: Kind) -> Matrix:
        model_id, dims = self.model_id, self.dimensions
        keys = [content_hash(text) for text in texts]
        found = self.cache.get(model_id, kind, keys, dims)
        positions = Counter(keys)  # how many input rows each distinct text fills
        reused = sum(positions[key] for key in found)
        self.reused += reused
        if self.progress is not None and reused:
            self.progress(reused)
        missing = list(
            {key: text for key, text in zip(keys, texts, strict=True) if key not in found}.items()
        )
        for start in range(0, len(missing), _FILL_BATCH):
            batch = missing[start : start + _FILL_BATCH]
            batch_texts = [text for _, text in batch]
            if kind == "query":
                vectors = np.stack([self.inner.embed_query(text) for text in batch_texts])
            else:
                vectors = self.inner.embed_documents(batch_texts)
            if vectors.shape != (len(batch), dims):
                raise EmbeddingError(
                    f"{model_id}: returned shape {tuple(vectors.shape)} for {len(batch)} "
                    f"text(s) of {dims} dimensions"
                )
            pairs = [(key, vectors[n]) for n, (key, _) in enumerate(batch)]
            self.cache.put(model_id, kind, pairs)
            found.update(pairs)
            self.embedded += len(batch)
            if self.progress is not None:
                self.progress(sum(positions[key] for key, _ in batch))
        out = np.zeros((len(texts), dims), dtype=np.float32)
        for row, key in enumerate(keys):
            out[row] = found[key]
        return out

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, cache={self.cache.path or ':memory:'})"
