"""``/v1/ask``: Server-Sent Events from a real provider SDK talking to a loopback fake model."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from server_helpers import ADMIN, SEARCH_ONLY, Live

from groundwire import create_provider


@pytest.fixture
def fake(fake_servers_module: ModuleType) -> Iterator[Any]:
    server = fake_servers_module.FakeLLMServer()
    yield server
    server.close()


@pytest.fixture
def asking(make_server: Callable[..., Live], fake: Any) -> Live:
    def provider() -> Any:
        return create_provider("openai:gpt-test", api_key="k", base_url=fake.openai.base_url)

    return make_server(provider=provider)


def events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of an SSE body."""
    found = []
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((lines["event"], json.loads(lines["data"])))
    return found


def test_knowledge_answer_streams_then_checks_citations(asking: Live, fake: Any) -> None:
    fake.openai.enqueue_text(
        "Create a new key first [KB:security.api-key-rotation@2026-11-15], then revoke "
        "the old one [KB:made.up@1].",
        chunks=["Create a new key first ", "[KB:security.api-key-rotation@2026-11-15], ",
                "then revoke the old one [KB:made.up@1]."],
    )  # fmt: skip
    with asking.client(ADMIN) as client:
        response = client.post("/v1/ask", json={"question": "how do I rotate an API key"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    stream = events(response)
    names = [name for name, _ in stream]
    assert names[0] == "grounding"
    assert names[-1] == "done"
    assert names.count("text") == 3
    grounding, done = stream[0][1], stream[-1][1]
    assert "[KB:security.api-key-rotation@2026-11-15]" in grounding["offered"]
    assert done["snapshot"] == "handbook@1"
    checks = {check["tag"]: check["valid"] for check in done["citations"]}
    assert checks == {"[KB:security.api-key-rotation@2026-11-15]": True, "[KB:made.up@1]": False}
    assert done["citations_ok"] is False
    system = fake.openai.requests[0].json["messages"][0]
    assert system["role"] == "system"
    assert "security.api-key-rotation" in system["content"]


def test_documents_answer_is_held_until_citations_pass(asking: Live, fake: Any) -> None:
    with asking.client(ADMIN) as client:
        evidence = client.post(
            "/v1/evidence", json={"kb": "docs", "query": "rotate signing keys"}
        ).json()
        tag = evidence["citations"][0]
        fake.openai.enqueue_text(f"Every month {tag}.")
        ok = events(
            client.post("/v1/ask", json={"kb": "docs", "question": "how often rotate signing keys"})
        )
        fake.openai.enqueue_text("Every month [KB:invented.md#0@x].")
        rejected = events(
            client.post("/v1/ask", json={"kb": "docs", "question": "how often rotate signing keys"})
        )
    names = [name for name, _ in ok]
    assert names[0] == "grounding"
    assert names[-1] == "done"
    assert set(names[1:-1]) == {"text"}
    assert "".join(data["text"] for name, data in ok if name == "text") == ok[-1][1]["answer"]
    assert ok[-1][1]["status"] == "answered"
    assert ok[-1][1]["citations_ok"] is True
    assert [name for name, _ in rejected] == ["grounding", "done"]  # nothing shown
    assert rejected[-1][1]["status"] == "rejected"
    assert rejected[-1][1]["answer"] == ""


def test_a_provider_failure_is_an_error_event(asking: Live, fake: Any) -> None:
    fake.openai.enqueue_error(400, "model not found")
    with asking.client(ADMIN) as client:
        stream = events(client.post("/v1/ask", json={"question": "rotate an API key"}))
    name, data = stream[-1]
    assert name == "error"
    assert data["type"] == "urn:groundwire:problem:provider-failed"
    assert "Traceback" not in json.dumps(data)


def test_ask_needs_a_provider_and_a_grant(live: Live, asking: Live) -> None:
    with live.client(ADMIN) as client:
        response = client.post("/v1/ask", json={"question": "x"})
    assert response.status_code == 503
    assert response.json()["type"] == "urn:groundwire:problem:no-provider"
    with asking.client(SEARCH_ONLY) as client:
        assert client.post("/v1/ask", json={"question": "x"}).status_code == 403
