"""schemathesis against the OpenAPI schema of a live server: no 5xx, no response off-schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fake_servers  # registered by tests/conftest.py
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from server_helpers import ACCESS_SOURCE, ADMIN, HANDBOOK, Live, bearer, keys_items, start

from groundwire import MemoryStore, create_provider
from groundwire.config import ServerSettings
from groundwire.server import KeyRing, Registry, ServerState, create_app, source_for

#: Examples per operation: enough to reach every branch of the bodies, bounded for CI.
EXAMPLES = 25


def _registry(access: Path) -> Registry:
    return Registry(
        [source_for(f"handbook={HANDBOOK}", 5_000), source_for(f"access={access}", 5_000)]
    )


def _schema() -> dict[str, Any]:
    """The app's OpenAPI document (building it opens nothing)."""
    app = create_app(ServerState(_registry(Path("unused.json")), ServerSettings(port=0)))
    return app.openapi()


schema = schemathesis.openapi.from_dict(_schema())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    access = tmp_path_factory.mktemp("schema") / "access.json"
    access.write_text(json.dumps(ACCESS_SOURCE), encoding="utf-8")
    registry = _registry(access)
    registry.open_all()
    state = ServerState(
        registry,
        ServerSettings(port=0, rate_per_second=0),  # every example reaches its handler
        keys=KeyRing.from_items(keys_items()),
        memory=MemoryStore(access.with_name("agent.db")),
    )
    model = fake_servers.FakeLLMServer()  # /v1/ask answers from a loopback model
    model.openai.default = fake_servers.Reply(text="Rotate keys monthly.")
    state.provider = lambda: create_provider(
        "openai:gpt-test", api_key="k", base_url=model.openai.base_url
    )
    live = start(state)
    yield live
    live.stop()
    model.close()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_conforms_to_its_schema(case: Any, server: Live) -> None:
    case.call_and_validate(base_url=server.url, headers=bearer(ADMIN))
