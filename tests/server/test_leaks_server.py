"""Nothing a key's principal may not see ever shows through the server.

The randomized scenarios of ``tests/access/test_leaks.py`` (tenants, groups, users,
labeled entries with statuses, domains, scopes and links pointing anywhere; labeled
document chunks; queries made of what the principal may not see) are served by a real
server on 127.0.0.1: the entries as a knowledge base, the chunks as an ingested documents
snapshot. Each principal of the seed gets its own key. Every JSON answer of
``/v1/ground`` (explain on), ``/v1/search`` (explain on and off), ``/v1/evidence`` and
``/v1/entries/{id}`` is searched for the ids, paths and markers of everything that
principal may not see; an entry it may not see answers exactly like an unknown id (404).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from server_helpers import Live, bearer, start
from tests.conftest import load_by_path

import groundwire as gw
from groundwire.config import ServerSettings
from groundwire.server import KeyRing, Registry, ServerState, hash_key, source_for

leaks = load_by_path("leak_scenarios", Path(__file__).parents[1] / "access" / "test_leaks.py")

pytestmark = pytest.mark.integration

#: A tenth of the access suite's scenarios (GROUNDWIRE_LEAK_SEEDS scales it too).
SEEDS = range(0, int(os.environ.get("GROUNDWIRE_LEAK_SEEDS", "200")), 8)


def principals(s: Any) -> list[gw.Principal]:
    """The scenario's principal (when it has one) and one more per tenant, seeded."""
    rng = random.Random(s.seed * 104729)
    found = [] if s.principal is None else [s.principal]
    for tenant in leaks.TENANTS:
        groups = rng.sample(leaks.GROUPS, rng.randint(0, 2))
        found.append(gw.Principal(tenant, rng.choice(leaks.USERS), groups))
    return found


def keys_items(people: list[gw.Principal]) -> list[dict[str, Any]]:
    return [
        {"id": f"key-{n}", "sha256": hash_key(f"gw_leak-{n}"), "tenant": p.tenant,
         "subject": p.subject, "groups": list(p.groups), "allow": ["*"]}
        for n, p in enumerate(people)
    ]  # fmt: skip


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    running: list[Live] = []

    def make(s: Any, people: list[gw.Principal], embedder: Any) -> Live:
        entries = tmp_path / "entries.json"
        entries.write_text(json.dumps(s.source), encoding="utf-8")
        docs = tmp_path / "docs.snapshot"
        leaks.docs_kb(s).save(docs)
        keys = tmp_path / "keys.yaml"
        keys.write_text(yaml.safe_dump({"keys": keys_items(people)}), encoding="utf-8")
        registry = Registry(
            [source_for(f"entries={entries}", 5_000, embedder), source_for(f"docs={docs}", 5_000)]
        )
        registry.open_all()
        state = ServerState(registry, ServerSettings(port=0, rate_per_second=0),
                            keys=KeyRing.load(keys))  # fmt: skip
        live = start(state)
        running.append(live)
        return live

    yield make
    for live in running:
        live.stop()


def _text(data: Any, query: str | None = None) -> str:
    """The answer as one string; the query it echoes (the evidence question line) dropped."""
    text = json.dumps(data, ensure_ascii=False)
    return text if query is None else leaks._scrub_query(text, query)


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> Any:
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def check_principal(s: Any, live: Live, secret: str, mode: str) -> None:
    labels = leaks.label_visible(s)
    scope = list(s.scope.enabled_integrations)
    with httpx.Client(base_url=live.url, headers=bearer(secret), timeout=30.0) as http:
        for query in s.queries:
            turn = leaks.named_visible(s, query)
            what = f"{s.principal} {query!r}"
            body = {"kb": "entries", "query": query, "integrations": scope,
                    "blocked_domains": list(s.blocked), "mode": mode}  # fmt: skip
            grounded = _post(http, "/v1/ground", {**body, "explain": True})
            meta = grounded["metadata"]
            assert set(meta["selected_ids"]) | set(meta["expanded_ids"]) <= turn, what
            assert {c["id"] for c in grounded["candidates"]} <= turn, what
            leaks.assert_no_leak(s, _text(grounded, query), turn, f"server ground {what}")
            for explain in (True, False) if mode == "lexical" else (False,):
                found = _post(http, "/v1/search", {**body, "limit": 50, "explain": explain})
                assert {h["id"] for h in found["hits"]} <= turn, what
                leaks.assert_no_leak(s, _text(found), turn, f"server search {what}")
            docs = {"kb": "docs", "query": query, "limit": 20}
            evidence = _post(http, "/v1/evidence", docs)
            sources = {e["source"] for e in evidence["excerpts"]}
            assert sources <= labels, what
            assert all(c.split("#")[0].removeprefix("[KB:") in labels
                       for c in evidence["citations"]), what  # fmt: skip
            leaks.assert_no_leak(s, _text(evidence, query), labels, f"server evidence {what}")
            doc_turn = _post(http, "/v1/ground", {"kb": "docs", "query": query, "explain": True})
            leaks.assert_no_leak(s, _text(doc_turn, query), labels, f"server doc ground {what}")
            doc_hits = _post(http, "/v1/search", {"kb": "docs", "query": query, "limit": 50,
                                                  "explain": True})  # fmt: skip
            leaks.assert_no_leak(s, _text(doc_hits), labels, f"server doc search {what}")
        check_entries(s, http, labels)


def check_entries(s: Any, http: httpx.Client, labels: set[str]) -> None:
    """Every entry and chunk it may see answers; every other one is a plain 404."""
    chunks = {path: c.id for path, (text, _) in s.docs.items() for c in gw.chunk_text(text, path)}
    targets = [("entries", e["id"], e["id"]) for e in s.entries]
    targets += [("docs", path, chunk) for path, chunk in chunks.items()]
    for kb, owner, entry_id in targets:
        response = http.get(f"/v1/entries/{quote(entry_id, safe='')}", params={"kb": kb})
        if owner in labels:
            assert response.status_code == 200, response.text
            leaks.assert_no_leak(s, response.text, labels, f"server entry {entry_id}")
            continue
        unknown_id = f"{entry_id}.gone"  # the same shape, no such entry
        unknown = http.get(f"/v1/entries/{quote(unknown_id, safe='')}", params={"kb": kb})
        assert response.status_code == unknown.status_code == 404
        same = {"content-length": "", "date": ""}
        assert dict(response.headers) | same == dict(unknown.headers) | same
        # the same answer but for the id it echoes (``instance`` is the path as requested)
        got, expected = response.json(), json.loads(unknown.text.replace(unknown_id, entry_id))
        assert got.pop("instance").startswith("/v1/entries/d" if kb == "docs" else "/v1/")
        expected.pop("instance")
        assert got == expected, f"seed {s.seed}: a forbidden id answers unlike an unknown one"


@pytest.mark.parametrize("seed", SEEDS)
def test_the_server_reveals_nothing(seed: int, serve: Any) -> None:
    s = leaks.scenario(seed)
    people = principals(s)
    mode = ("lexical", "hybrid", "dense")[seed % 3]
    live = serve(s, people, None if mode == "lexical" else leaks.EMBEDDER)
    for n, principal in enumerate(people):
        check_principal(dataclasses.replace(s, principal=principal), live, f"gw_leak-{n}", mode)
