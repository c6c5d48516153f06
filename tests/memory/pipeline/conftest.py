"""Fixtures for the write pipeline's tests: loopback model servers, providers, pipelines.

- ``fake``: a FakeLLMServer (tests/llm/fake_servers.py) on 127.0.0.1 speaking the OpenAI
  and Anthropic wire formats, scripted per test; the provider environment is cleared.
- ``provider_for(kind)``: the real OpenAIProvider or AnthropicProvider (their official
  SDKs) pointed at it, with retries that never sleep.
- ``make_pipeline(store, provider=None, **config)``: a MemoryPipeline with the test's
  configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fake_servers  # registered by tests/conftest.py
import pytest

from groundwire import (
    AnthropicProvider,
    MemoryPipeline,
    MemoryPipelineConfig,
    OpenAIProvider,
    RetryPolicy,
)

ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_AUTH_TOKEN",
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic-config"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = fake_servers.FakeLLMServer()
    yield server
    server.close()
    assert not server.handler_errors, f"the fake server failed: {server.handler_errors}"


#: Two attempts, no real waiting: a 5xx is retried once by the provider itself.
NO_WAIT = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, jitter=0.0, sleep=lambda s: None)


@pytest.fixture
def provider_for(fake: Any) -> Callable[[str], Any]:
    def make(kind: str = "openai") -> Any:
        if kind == "openai":
            return OpenAIProvider(
                "gpt-test", api_key="k", base_url=fake.openai.base_url, retry=NO_WAIT
            )
        return AnthropicProvider(
            "claude-test", api_key="k", base_url=fake.anthropic.base_url, retry=NO_WAIT
        )

    return make


@pytest.fixture
def make_pipeline() -> Iterator[Callable[..., MemoryPipeline]]:
    made: list[MemoryPipeline] = []

    def make(store: Any, provider: Any = None, **config: Any) -> MemoryPipeline:
        settings = {"backoff_s": 0.0, "backoff_max_s": 0.0, **config}
        made.append(MemoryPipeline(store, provider, config=MemoryPipelineConfig(**settings)))
        return made[-1]

    yield make
    for pipeline in made:
        pipeline.close()
