"""Model providers behind one protocol, and :func:`create_provider` to pick one by name.

The SDKs are imported when a provider is constructed, never when this package is.
"""

from __future__ import annotations

from typing import Any

from groundwire.config import OPENAI_COMPATIBLE_PRESETS
from groundwire.errors import ConfigError
from groundwire.llm.base import Provider
from groundwire.llm.providers.anthropic import AnthropicProvider
from groundwire.llm.providers.callable import CallableProvider
from groundwire.llm.providers.openai import OpenAIProvider

__all__ = ["AnthropicProvider", "CallableProvider", "OpenAIProvider", "create_provider"]

#: Names create_provider accepts, besides the local OpenAI-compatible presets.
_SDK_PROVIDERS = ("anthropic", "openai")


def create_provider(spec: str, **kwargs: Any) -> Provider:
    """A provider from ``"name"`` or ``"name:model"``; ``kwargs`` go to its constructor.

    Names: ``openai`` and ``anthropic`` (model from the spec, else ``OPENAI_MODEL`` /
    ``ANTHROPIC_MODEL``), and the local OpenAI-compatible servers ``ollama``, ``vllm``,
    ``llamacpp`` and ``lmstudio`` (their default ``base_url``; pass ``base_url=`` for
    another host). The model is everything after the first colon, so
    ``"ollama:llama3.1:8b"`` asks Ollama for ``llama3.1:8b``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"provider={spec!r} is invalid: expected 'name' or 'name:model'")
    name, _, model = spec.strip().partition(":")
    key = name.strip().lower()
    chosen = model.strip() or None
    if key == "openai":
        return OpenAIProvider(chosen, **kwargs)
    if key == "anthropic":
        return AnthropicProvider(chosen, **kwargs)
    if key in OPENAI_COMPATIBLE_PRESETS:
        kwargs.setdefault("base_url", OPENAI_COMPATIBLE_PRESETS[key])
        kwargs.setdefault("name", key)
        return OpenAIProvider(chosen, **kwargs)
    known = ", ".join(sorted((*_SDK_PROVIDERS, *OPENAI_COMPATIBLE_PRESETS)))
    raise ConfigError(
        f"provider={spec!r} is invalid: unknown provider {name!r}; expected one of {known}, "
        "as 'name' or 'name:model'"
    )
