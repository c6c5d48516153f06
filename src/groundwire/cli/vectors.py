"""Options and helpers shared by the commands that embed: eval, search, index, ingest.

Vectors of a snapshot are kept in it, as its ``vectors`` section; a legacy
``<snapshot>.vectors`` file beside it is still read (``groundwire.index.vector_files``).
Embeddings are cached in ``$XDG_CACHE_HOME/groundwire/embeddings.sqlite`` (default
``~/.cache``), so a rebuild or a second eval embeds only what changed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from groundwire import (
    CachedEmbedder,
    Embedder,
    EmbeddingCache,
    KnowledgeBase,
    VectorIndex,
    create_embedder,
)
from groundwire.config import DEFAULT_LOCAL_MODEL, EMBEDDING_CACHE_FILE
from groundwire.index.vector_files import snapshot_vectors

__all__ = [
    "AllowRemoteOpt",
    "CacheOpt",
    "ModeOpt",
    "ModelOpt",
    "cached_embedder",
    "default_cache",
    "vectors_for",
]

ModeOpt = Annotated[
    str,
    typer.Option(
        "--mode",
        help="lexical (BM25 and phrases), dense (embeddings) or hybrid (both, fused).",
        metavar="MODE",
    ),
]
ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        metavar="MODEL",
        help="Embedder for dense/hybrid: all-MiniLM-L6-v2 (default, local), hashing, a "
        "model folder, or openai:NAME / ollama:NAME (needs --allow-remote).",
    ),
]
CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--embedding-cache",
        metavar="FILE",
        help="SQLite embedding cache (default: ~/.cache/groundwire/embeddings.sqlite).",
        show_default=False,
    ),
]
AllowRemoteOpt = Annotated[
    bool,
    typer.Option(
        "--allow-remote",
        help="Consent to sending documents and queries to a remote embeddings server.",
        show_default=False,
    ),
]
MODES = ("lexical", "dense", "hybrid")


def default_cache() -> Path:
    """The embedding cache file under the user's cache folder."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / EMBEDDING_CACHE_FILE


def cached_embedder(
    model: str = DEFAULT_LOCAL_MODEL, cache: Path | None = None, allow_remote: bool = False
) -> CachedEmbedder:
    """``model`` behind the persistent embedding cache."""
    embedder: Embedder = create_embedder(model, allow_remote=allow_remote)
    return CachedEmbedder(embedder, EmbeddingCache(cache or default_cache()))


def vectors_for(kb: KnowledgeBase, source: Path, embedder: Embedder) -> VectorIndex:
    """The snapshot's vectors (its section, else the legacy file beside it) when they are
    ``embedder``'s model's, else built now."""
    return snapshot_vectors(kb, source, embedder)
