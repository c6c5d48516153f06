"""The /v1 API against a real uvicorn on 127.0.0.1: every endpoint, auth, limits, problems."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
from server_helpers import ACME_BOT, ACME_HR, ADMIN, OTHER_KB, SEARCH_ONLY, Live, bearer

from groundwire import create_embedder
from groundwire.config import ServerSettings

PROBLEM = "application/problem+json"


def problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    """Assert ``response`` is a problem document with ``status`` and type ``slug``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["type"] == f"urn:groundwire:problem:{slug}"
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    assert "Traceback" not in response.text
    return dict(body)


# -- the endpoints ------------------------------------------------------------------------------
def test_ground_returns_the_cli_outcome_shape_with_the_snapshot(live: Live) -> None:
    with live.client(ADMIN) as client:
        data = client.post("/v1/ground", json={"query": "how do I rotate an API key"}).json()
    assert data["kb"] == "handbook"
    assert data["snapshot"] == "handbook@1"
    assert data["kind"] == "knowledge"
    assert "security.api-key-rotation" in data["metadata"]["selected_ids"]
    assert data["block"]["citations"]
    assert all(tag in data["block"]["content"] for tag in data["block"]["citations"])
    assert "explain" not in data or data["explain"] is None


def test_ground_explain_adds_breakdowns_and_context(live: Live) -> None:
    body = {"query": "rotate an API key", "explain": True, "max_tokens": 300}
    with live.client(ADMIN) as client:
        data = client.post("/v1/ground", json=body).json()
    first = data["candidates"][0]
    assert {"breakdown", "exact", "alias", "selected", "title", "citation"} <= set(first)
    assert data["explain"]["context"]["tokens"] <= 300
    assert data["metadata"]["context_tokens"] <= 300


def test_ground_scope_changes_the_outcome(live: Live) -> None:
    query = {"query": "connect chat notifications", "explain": True}  # slack not named
    with live.client(ADMIN) as client:
        without = client.post("/v1/ground", json=query).json()
        with_slack = client.post("/v1/ground", json={**query, "integrations": ["slack"]}).json()
        blocked = client.post(
            "/v1/ground",
            json={**query, "integrations": ["slack"], "blocked_domains": ["integrations"]},
        ).json()
        named = client.post("/v1/ground", json={"query": "connect slack notifications"}).json()
    assert named["metadata"]["named_integrations"] == ["slack"]
    assert "integrations.slack-notifications" in named["metadata"]["selected_ids"]
    assert without["metadata"]["out_of_scope_count"] > 0
    assert "slack" in without["metadata"]["out_of_scope_integrations"]
    assert with_slack["metadata"]["selected_ids"] != without["metadata"]["selected_ids"]
    assert not any(item["domain"] == "integrations" for item in blocked["candidates"])


def test_search_ranks_with_breakdowns(live: Live) -> None:
    with live.client(ADMIN) as client:
        data = client.post("/v1/search", json={"query": "api key", "limit": 3}).json()
    assert data["mode"] == "lexical"
    assert len(data["hits"]) == 3
    assert data["hits"][0]["id"] == "security.api-keys"
    assert data["hits"][0]["title"] == "API keys"
    scores = [hit["score"] for hit in data["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert data["hits"][0]["breakdown"]["title"] > 0
    with live.client(ADMIN) as client:
        quick = client.post("/v1/search", json={"query": "api key", "limit": 3, "explain": False})
    hits = quick.json()["hits"]
    assert [(hit["id"], hit["score"]) for hit in hits] == [
        (hit["id"], hit["score"]) for hit in data["hits"]
    ]
    assert all(hit["breakdown"] == {} for hit in hits)


def test_dense_mode_without_vectors_is_a_clear_409(live: Live) -> None:
    with live.client(ADMIN) as client:
        response = client.post("/v1/search", json={"query": "api key", "mode": "hybrid"})
        body = problem(response, 409, "mode-unavailable")
        assert body["field"] == "mode"
        problem(
            client.post("/v1/ground", json={"query": "x", "mode": "dense"}), 409, "mode-unavailable"
        )


def test_dense_and_hybrid_modes_with_served_vectors(make_server: Callable[..., Live]) -> None:
    live = make_server(embedder=create_embedder("hashing"))
    with live.client(ADMIN) as client:
        hybrid = client.post("/v1/search", json={"query": "rotate an api key", "mode": "hybrid"})
        dense = client.post("/v1/ground", json={"query": "rotate an api key", "mode": "dense",
                                                "explain": True})  # fmt: skip
        labeled = client.post(
            "/v1/search", json={"kb": "access", "query": "rotate keys", "mode": "dense"}
        )
    assert hybrid.status_code == 200, hybrid.text
    hits = hybrid.json()["hits"]
    assert hits
    assert {"lexical", "dense"} <= set(hits[0]["channels"])
    assert hybrid.json()["retrieval"]["mode"] == "hybrid"
    assert dense.status_code == 200, dense.text
    assert dense.json()["explain"]["channels"] is not None
    # dense search of a labeled knowledge base sees only the key's principal's entries
    assert {hit["id"] for hit in labeled.json()["hits"]} <= {"acme.keys", "shared.keys"}


def test_documents_ground_and_evidence(live: Live) -> None:
    with live.client(ADMIN) as client:
        grounded = client.post(
            "/v1/ground", json={"kb": "docs", "query": "how often rotate signing keys"}
        ).json()
        evidence = client.post(
            "/v1/evidence", json={"kb": "docs", "query": "rotate signing keys", "limit": 1}
        ).json()
        wrong = client.post("/v1/evidence", json={"query": "rotate"})
        turns = client.post(
            "/v1/ground", json={"kb": "docs", "query": "x", "integrations": ["slack"]}
        )
    assert grounded["kind"] == "documents"
    assert grounded["status"] == "ready"
    assert grounded["citations"][0].startswith("[KB:rotate.md#")
    assert evidence["snapshot"] == "docs@1"
    assert len(evidence["excerpts"]) == 1
    assert "Rotate signing keys" in evidence["excerpts"][0]["text"]
    assert problem(wrong, 409, "not-documents")["field"] == "kb"
    problem(turns, 409, "not-for-documents")


def test_entries_status_validate_metrics_health(live: Live) -> None:
    with live.client(ADMIN) as client:
        entry = client.get("/v1/entries/security.api-keys").json()
        missing = client.get("/v1/entries/no.such-entry")
        status = client.get("/v1/status").json()
        validate = client.get("/v1/validate", params={"kb": "access"}).json()
        client.post("/v1/ground", json={"query": "zzqx unknown words"})
        metrics = client.get("/v1/metrics")
    with live.client() as anonymous:
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        assert anonymous.get("/readyz").json()["knowledge_bases"] == ["handbook", "access", "docs"]
    assert entry["entry"]["citation"] == "[KB:security.api-keys@2026-11-15]"
    assert "acl" not in entry["entry"]["metadata"]
    problem(missing, 404, "unknown-entry")
    assert [kb["name"] for kb in status["knowledge_bases"]] == ["handbook", "access", "docs"]
    assert status["auth"] is True
    assert status["key_id"] == "admin"
    assert "slack" in status["knowledge_bases"][0]["integrations"]
    assert validate["ok"] is True
    assert [issue["code"] for issue in validate["issues"]] == ["tenant-mixed"]
    text = metrics.text
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'groundwire_requests_total{method="POST",route="/v1/ground",status="200"}' in text
    assert "groundwire_request_duration_seconds_bucket" in text
    assert 'groundwire_grounding_failures_total{kb="handbook",reason=' in text
    assert 'groundwire_snapshot_age_seconds{kb="handbook"}' in text


# -- who a request acts as ----------------------------------------------------------------------
def test_the_key_is_the_principal(live: Live) -> None:
    """Each key sees exactly its principal's view; nothing in a request can change it."""
    query = {"kb": "access", "query": "rotate keys", "limit": 10}
    with live.client(ACME_HR) as hr, live.client(ACME_BOT) as bot:
        hr_ids = {hit["id"] for hit in hr.post("/v1/search", json=query).json()["hits"]}
        bot_ids = {hit["id"] for hit in bot.post("/v1/search", json=query).json()["hits"]}
        payroll_for_bot = bot.get("/v1/entries/acme.payroll", params={"kb": "access"})
        smuggled = bot.post("/v1/search", json={**query, "tenant": "globex"})
        as_header = bot.post(
            "/v1/search", json=query, headers={"X-Tenant": "globex", "X-Subject": "x"}
        ).json()
    assert hr_ids == {"acme.keys", "acme.payroll", "shared.keys"}
    assert bot_ids == {"acme.keys", "shared.keys"}
    problem(payroll_for_bot, 404, "unknown-entry")  # invisible looks like missing
    assert problem(smuggled, 422, "invalid-request")["field"] == "tenant"
    assert {hit["id"] for hit in as_header["hits"]} == bot_ids


def test_no_auth_acts_as_the_configured_principal_or_anonymous(
    make_server: Callable[..., Live],
) -> None:
    live = make_server(auth=False)
    with live.client() as client:
        hits = client.post("/v1/search", json={"kb": "access", "query": "rotate keys"}).json()
        status = client.get("/v1/status").json()
    assert {hit["id"] for hit in hits["hits"]} == {"shared.keys"}  # anonymous: unlabeled only
    assert status["auth"] is False
    assert status["key_id"] == "local"


# -- authentication and authorization -----------------------------------------------------------
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}, {"X-API-Key": "nope"}],
)
def test_missing_or_unknown_keys_are_401(live: Live, headers: dict[str, str]) -> None:
    with live.client() as client:
        response = client.post("/v1/search", json={"query": "x"}, headers=headers)
    problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_x_api_key_header_authenticates(live: Live) -> None:
    with live.client() as client:
        response = client.post("/v1/search", json={"query": "x"}, headers={"X-API-Key": ADMIN})
    assert response.status_code == 200


def test_keys_outside_their_grant_are_403(live: Live) -> None:
    with live.client(SEARCH_ONLY) as search_only, live.client(OTHER_KB) as other:
        assert search_only.post("/v1/search", json={"query": "x"}).status_code == 200
        problem(search_only.post("/v1/ground", json={"query": "x"}), 403, "call-not-allowed")
        problem(search_only.get("/v1/metrics"), 403, "call-not-allowed")
        problem(search_only.post("/v1/reload", json={}), 403, "call-not-allowed")
        denied = problem(
            other.post("/v1/search", json={"kb": "access", "query": "x"}), 403, "kb-not-allowed"
        )
        assert denied["field"] == "kb"
        unknown = problem(
            other.post("/v1/search", json={"kb": "nope", "query": "x"}), 404, "unknown-kb"
        )
        assert "access" not in unknown["detail"]  # names only what this key may use
        names = [kb["name"] for kb in other.get("/v1/status").json()["knowledge_bases"]]
    assert names == ["handbook"]


def test_secrets_never_reach_the_access_log(live: Live, caplog: pytest.LogCaptureFixture) -> None:
    def lines() -> list[dict[str, Any]]:
        return [json.loads(record.getMessage()) for record in caplog.records]

    with caplog.at_level("INFO", logger="groundwire.server.access"):
        with live.client(ADMIN) as client:
            client.post("/v1/search", json={"query": "secret question text"})
        for _ in range(1_000):  # the line is written just after the response is sent
            if any(item["route"] == "/v1/search" for item in lines()):
                break
            threading.Event().wait(0.01)
    line = next(item for item in lines() if item["route"] == "/v1/search")
    assert line["key"] == "admin"
    assert line["status"] == 200
    assert line["kb"] == "handbook"
    assert ADMIN not in caplog.text
    assert "secret question text" not in caplog.text


# -- limits --------------------------------------------------------------------------------------
def test_rate_limit_is_429_with_retry_after(make_server: Callable[..., Live]) -> None:
    live = make_server(settings=ServerSettings(port=0, rate_per_second=0.01, rate_burst=2))
    with live.client(ADMIN) as client, live.client(ACME_HR) as other:
        assert client.post("/v1/search", json={"query": "x"}).status_code == 200
        assert client.post("/v1/search", json={"query": "x"}).status_code == 200
        limited = client.post("/v1/search", json={"query": "x"})
        assert other.post("/v1/search", json={"query": "x"}).status_code == 200  # per key
    problem(limited, 429, "rate-limited")
    assert int(limited.headers["retry-after"]) >= 1


def test_body_over_the_limit_is_413(make_server: Callable[..., Live]) -> None:
    live = make_server(settings=ServerSettings(port=0, max_body_bytes=1_000))
    big = json.dumps({"query": "x" * 2_000})
    with live.client(ADMIN) as client:
        declared = client.post(
            "/v1/search", content=big, headers={"content-type": "application/json"}
        )

        def chunks() -> Any:  # no Content-Length: the limit counts what arrives
            yield big[:600].encode()
            yield big[600:].encode()

        streamed = client.post(
            "/v1/search", content=chunks(), headers={"content-type": "application/json"}
        )
    problem(declared, 413, "body-too-large")
    problem(streamed, 413, "body-too-large")


def test_query_over_the_limit_is_422_naming_the_field(make_server: Callable[..., Live]) -> None:
    live = make_server(settings=ServerSettings(port=0, max_query_chars=50))
    with live.client(ADMIN) as client:
        long_query = client.post("/v1/ground", json={"query": "q" * 51})
        long_turn = client.post(
            "/v1/ground", json={"query": "ok", "turns": [{"role": "user", "text": "t" * 51}]}
        )
        assert client.post("/v1/ground", json={"query": "q" * 50}).status_code == 200
    assert problem(long_query, 422, "text-too-long")["field"] == "query"
    assert problem(long_turn, 422, "text-too-long")["field"] == "turns[0].text"


def test_request_timeout_is_503(make_server: Callable[..., Live]) -> None:
    live = make_server(settings=ServerSettings(port=0, request_timeout_s=0.001))
    with live.client(ADMIN) as client:
        response = client.post("/v1/ground", json={"query": "rotate an API key " * 30})
    assert response.status_code in (200, 503)  # a fast machine may beat a 1 ms deadline
    if response.status_code == 503:
        problem(response, 503, "timeout")


# -- problem documents ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 101}, "limit"),
        ({"query": "x", "kb": "../etc"}, "kb"),
        ({}, "query"),
        ({"query": 3}, "query"),
    ],
)
def test_invalid_bodies_name_the_field(live: Live, body: dict[str, Any], field: str) -> None:
    with live.client(ADMIN) as client:
        response = client.post("/v1/search", json=body)
    assert problem(response, 422, "invalid-request")["field"] == field


def test_malformed_json_route_and_method_are_problems(live: Live) -> None:
    with live.client(ADMIN) as client:
        bad_json = client.post(
            "/v1/ground", content=b"{nope", headers={"content-type": "application/json"}
        )
        no_route = client.get("/v1/nothing")
        wrong_method = client.get("/v1/ground")
        turns = client.post(
            "/v1/ground", json={"query": "x", "turns": [{"role": "system", "text": "t"}]}
        )
    assert "not valid JSON" in problem(bad_json, 422, "invalid-request")["detail"]
    problem(no_route, 404, "not-found")
    problem(wrong_method, 405, "method-not-allowed")
    assert problem(turns, 422, "invalid-request")["field"] == "turns[0].role"


def test_a_raw_socket_with_garbage_gets_no_traceback(live: Live) -> None:
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /v1/ground HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                    b"Content-Type: application/json\r\nAuthorization: Bearer " + ADMIN.encode()
                    + b"\r\n\r\n\xff\xfe\x00{]")  # fmt: skip
        reply = raw.recv(65536).decode("latin-1")
    head, _, body = reply.partition("\r\n\r\n")
    assert head.startswith(("HTTP/1.1 400", "HTTP/1.1 422"))
    assert "application/problem+json" in head
    assert "Traceback" not in reply
    if body:
        assert "UTF-8 JSON" in json.loads(body)["detail"] or "JSON" in json.loads(body)["detail"]


def test_openapi_documents_every_endpoint(live: Live) -> None:
    with live.client() as client:
        schema = client.get("/openapi.json").json()
    paths = set(schema["paths"])
    assert {
        "/v1/ground", "/v1/search", "/v1/evidence", "/v1/ask", "/v1/status", "/v1/validate",
        "/v1/entries/{entry_id}", "/v1/reload", "/v1/metrics", "/healthz", "/readyz",
    } <= paths  # fmt: skip
    assert "ProblemDocument" in schema["components"]["schemas"]
    assert "401" in schema["paths"]["/v1/ground"]["post"]["responses"]


def test_bearer_helper_is_the_header_the_server_reads() -> None:
    assert bearer("k") == {"Authorization": "Bearer k"}
