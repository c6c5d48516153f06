"""Fixtures for the llm tests: scripted fake provider servers, and no real credentials.

- ``fake``: a :class:`fake_servers.FakeLLMServer` on 127.0.0.1 serving both APIs,
  closed (blocked replies released) when the test ends. ``fake_openai`` and
  ``fake_anthropic`` are its two endpoints; ``make_fake()`` starts extra servers (two
  OpenAI-compatible hosts for a fallback test, say); ``fake_servers_module`` is the
  helper module itself (``Reply``, ``ToolCallSpec``, ``WAIT_LIMIT_S``). A fake that
  failed while handling a request fails the test at teardown.
- Every test here runs without the provider environment variables (``OPENAI_*``,
  ``ANTHROPIC_*``), so a developer's real key or base URL never leaks into a test, and
  with 127.0.0.1 exempt from any proxy.

The helper module is loaded by path by ``tests/conftest.py`` (tests run with
``--import-mode=importlib``) and registered as ``fake_servers``, so a test module may
``from fake_servers import Reply, ToolCallSpec``; ``fake_servers_module`` is defined there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fake_servers  # registered by tests/conftest.py, which runs first
import pytest

#: Provider settings read from the environment; cleared for every test in this folder.
PROVIDER_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_CUSTOM_HEADERS",
)


@pytest.fixture(autouse=True)
def _isolate_provider_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    # An empty config folder: the anthropic SDK never finds a developer's profile.
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic-config"))
    exempt = {"127.0.0.1", "localhost"}
    for name in ("NO_PROXY", "no_proxy"):
        current = {h for h in os.environ.get(name, "").split(",") if h}
        monkeypatch.setenv(name, ",".join(sorted(current | exempt)))


@pytest.fixture
def fake() -> Iterator[Any]:
    """A FakeLLMServer serving the OpenAI and Anthropic APIs on 127.0.0.1."""
    server = fake_servers.FakeLLMServer()
    yield server
    server.close()
    assert not server.handler_errors, f"the fake server failed: {server.handler_errors}"


@pytest.fixture
def fake_openai(fake: Any) -> Any:
    """The OpenAI chat completions endpoint of ``fake``."""
    return fake.openai


@pytest.fixture
def fake_anthropic(fake: Any) -> Any:
    """The Anthropic messages endpoint of ``fake``."""
    return fake.anthropic


@pytest.fixture
def make_fake() -> Iterator[Callable[[], Any]]:
    """Start more FakeLLMServers; all are closed when the test ends."""
    servers: list[Any] = []

    def make() -> Any:
        server = fake_servers.FakeLLMServer()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()
    for server in servers:
        assert not server.handler_errors, f"a fake server failed: {server.handler_errors}"
