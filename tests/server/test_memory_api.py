"""``/v1/memory``: agent memory per key's principal, on a live server with a real SQLite store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from server_helpers import ACME_HR, ADMIN, SEARCH_ONLY, Live


def test_memories_are_the_principals_own(tmp_path: Path, make_server: Callable[..., Live]) -> None:
    live = make_server(memory=tmp_path / "agent.db")
    with live.client(ACME_HR) as hr, live.client(ADMIN) as bot:
        private = hr.post("/v1/memory", json={"content": "Payroll runs on the 25th.",
                                              "acl": ["group:hr"], "type": "fact"})  # fmt: skip
        shared = bot.post("/v1/memory", json={"content": "The office closes at 6 pm."})
        assert private.status_code == 200, private.text
        assert shared.status_code == 200, shared.text
        hr_recall = hr.post("/v1/memory/recall", json={"query": "when does payroll run"}).json()
        bot_recall = bot.post("/v1/memory/recall", json={"query": "when does payroll run"}).json()
        hidden = bot.get(f"/v1/memory/{private.json()['id']}")
        not_forgotten = bot.delete(f"/v1/memory/{private.json()['id']}")
        seen = hr.get(f"/v1/memory/{private.json()['id']}").json()
        forgotten = hr.delete(f"/v1/memory/{private.json()['id']}").json()
        after = hr.post("/v1/memory/recall", json={"query": "when does payroll run"}).json()
    assert hr_recall["memories"][0]["content"] == "Payroll runs on the 25th."
    assert "explain" in hr_recall["memories"][0]
    assert all("Payroll" not in item["content"] for item in bot_recall["memories"])
    assert hidden.status_code == 404
    assert not_forgotten.status_code == 404
    assert seen["acl"] == ["group:hr"]
    assert forgotten == {"id": private.json()["id"], "forgotten": True}
    assert all("Payroll" not in item["content"] for item in after["memories"])


def test_memory_fails_closed(tmp_path: Path, make_server: Callable[..., Live]) -> None:
    anonymous = make_server(auth=False, memory=tmp_path / "a.db")
    without = make_server()
    with anonymous.client() as client:
        refused = client.post("/v1/memory/recall", json={"query": "x"})
    with without.client(ADMIN) as client:
        no_store = client.post("/v1/memory/recall", json={"query": "x"})
    with without.client(SEARCH_ONLY) as client:
        no_grant = client.post("/v1/memory/recall", json={"query": "x"})
    with anonymous.client() as client:
        bad_label = client.post("/v1/memory", json={"content": "x", "acl": ["group:a b"]})
    assert refused.status_code == 403
    assert refused.json()["type"] == "urn:groundwire:problem:memory-needs-principal"
    assert no_store.status_code == 409
    assert no_store.json()["type"] == "urn:groundwire:problem:no-memory"
    assert no_grant.status_code == 403
    assert bad_label.status_code == 422
    assert bad_label.json()["field"] == "acl[0]"
