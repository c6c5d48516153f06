"""Embeddings: the :class:`Embedder` contract, hashing, local and remote models, the cache."""

from groundwire.embed.base import Embedder, EmbedderLocation, normalize_rows
from groundwire.embed.cache import CachedEmbedder, EmbeddingCache, content_hash
from groundwire.embed.factory import create_embedder
from groundwire.embed.hashing import HashingEmbedder
from groundwire.embed.local import (
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    export_onnx,
    family_prefixes,
)
from groundwire.embed.remote import EMBEDDING_RETRY, OpenAIEmbedder

__all__ = [
    "EMBEDDING_RETRY",
    "CachedEmbedder",
    "Embedder",
    "EmbedderLocation",
    "EmbeddingCache",
    "HashingEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "content_hash",
    "create_embedder",
    "export_onnx",
    "family_prefixes",
    "normalize_rows",
]
