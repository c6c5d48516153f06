"""One string names an embedder: ``groundwire eval --model``, ``ingest --embed``, configs.

* ``hashing`` or ``hashing:<dimensions>``: :class:`~groundwire.embed.hashing.HashingEmbedder`;
* ``all-MiniLM-L6-v2`` (the default), or a folder: a local model; a folder with
  ``model.onnx`` and no torch weights runs on onnxruntime, any other on
  sentence-transformers; ``onnx:<folder>`` and ``st:<folder>`` choose explicitly;
* ``openai:<model>``, ``ollama:<model>``, ``vllm:<model>``, ``lmstudio:<model>``,
  ``llamacpp:<model>``: :class:`~groundwire.embed.remote.OpenAIEmbedder` at that
  server's documented address (``base_url`` overrides it); needs ``allow_remote=True``.
"""

from __future__ import annotations

from pathlib import Path

from groundwire.config import DEFAULT_LOCAL_MODEL, OPENAI_COMPATIBLE_PRESETS
from groundwire.embed.base import Embedder
from groundwire.embed.hashing import HashingEmbedder
from groundwire.embed.local import OnnxEmbedder, SentenceTransformerEmbedder
from groundwire.embed.remote import OpenAIEmbedder
from groundwire.errors import ConfigError

__all__ = ["OPENAI_BASE_URL", "create_embedder"]

#: OpenAI's own API.
OPENAI_BASE_URL = "https://api.openai.com/v1"
_TORCH_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def create_embedder(
    spec: str = DEFAULT_LOCAL_MODEL,
    *,
    allow_remote: bool = False,
    base_url: str | None = None,
    api_key: str | None = None,
    dimensions: int | None = None,
) -> Embedder:
    """The embedder ``spec`` names (see the module docstring); nothing loads until used.

    Raises :class:`ConfigError` for an unknown spec or a remote one without consent.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"embedder {spec!r} is invalid: expected e.g. 'all-MiniLM-L6-v2'")
    kind, _, rest = spec.partition(":")
    if kind == "hashing":
        if not rest:
            return HashingEmbedder()
        if not rest.isdigit():
            raise ConfigError(
                f"embedder {spec!r}: expected 'hashing:<dimensions>', e.g. hashing:256"
            )
        return HashingEmbedder(int(rest))
    if rest and (kind == "openai" or kind in OPENAI_COMPATIBLE_PRESETS):
        url = base_url or (OPENAI_BASE_URL if kind == "openai" else OPENAI_COMPATIBLE_PRESETS[kind])
        return OpenAIEmbedder(
            rest, base_url=url, allow_remote=allow_remote, api_key=api_key, dimensions=dimensions
        )
    if rest and kind == "onnx":
        return OnnxEmbedder(rest)
    if rest and kind == "st":
        return SentenceTransformerEmbedder(rest)
    folder = Path(spec).expanduser()
    if (
        folder.is_dir()
        and not any((folder / name).is_file() for name in _TORCH_WEIGHTS)
        and ((folder / "model.onnx").is_file() or (folder / "onnx" / "model.onnx").is_file())
    ):
        return OnnxEmbedder(spec)
    return SentenceTransformerEmbedder(spec)
