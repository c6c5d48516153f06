"""The embedding cache: a rebuild embeds only what changed (counted), persistent in SQLite."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from groundwire import (
    CachedEmbedder,
    EmbeddingCache,
    EmbeddingError,
    HashingEmbedder,
    KnowledgeBase,
    VectorIndex,
)
from groundwire.embed.base import Matrix


class Counting(HashingEmbedder):
    """A hashing embedder that records every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(64)
        self.seen: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        self.seen.extend(texts)
        return super().embed_documents(texts)


def _docs(changed: str = "") -> list[dict[str, str]]:
    return [
        {
            "id": f"doc-{n}",
            "title": f"Title {n}",
            "text": f"body text number {n} {changed if n == 3 else ''}",
        }
        for n in range(8)
    ]


def test_rebuild_embeds_only_the_changed_document(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "embeddings.sqlite"
    first = Counting()
    with EmbeddingCache(path) as cache:
        built = VectorIndex.build(
            KnowledgeBase.from_documents(_docs()), CachedEmbedder(first, cache)
        )
    assert len(first.seen) == 8
    second = Counting()  # a new process would open the same file
    with EmbeddingCache(path) as cache:
        cached = CachedEmbedder(second, cache)
        rebuilt = VectorIndex.build(KnowledgeBase.from_documents(_docs("edited")), cached)
        assert cache.count(second.model_id) == 9
    assert second.seen == ["Title 3\nbody text number 3 edited"]
    assert (cached.embedded, cached.reused) == (1, 7)
    np.testing.assert_array_equal(built.matrix()[:3], rebuilt.matrix()[:3])
    assert not np.array_equal(built.matrix()[3], rebuilt.matrix()[3])


def test_identical_texts_are_embedded_once_and_models_are_kept_apart() -> None:
    cache = EmbeddingCache()
    a, b = Counting(), HashingEmbedder(32)
    CachedEmbedder(a, cache).embed_documents(["same", "same", "other"])
    assert a.seen == ["same", "other"]
    vectors = CachedEmbedder(b, cache).embed_documents(["same"])
    assert vectors.shape == (1, 32)  # another model id: never served the 64-dim vectors
    queries = CachedEmbedder(a, cache)
    queries.embed_query("same")
    assert queries.reused == 0  # queries and documents are cached apart


def test_progress_counts_every_row() -> None:
    seen: list[int] = []
    cached = CachedEmbedder(Counting(), EmbeddingCache(), progress=seen.append)
    cached.embed_documents(["a b", "c d", "a b"])
    cached.embed_documents(["a b", "e f"])
    assert sum(seen) == 5


def test_a_cache_that_is_not_sqlite_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "cache.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(EmbeddingError, match="delete the file"):
        EmbeddingCache(bad)
