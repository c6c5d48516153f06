"""A document withdrawn through source sync is unreachable through the server after reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from server_helpers import Live, start

from groundwire.config import ServerSettings
from groundwire.server import KeyRing, Registry, ServerState, hash_key, source_for
from synctools import syncer, write_config

pytestmark = pytest.mark.integration

SECRET = "gw_test-acme-reader"
QUESTION = "invoices archive ten years"
WITHDRAWN = "docs/retention.md"
DOCUMENT_TEXT = "kept for ten years"  # words of the document, not of the query


def _serve(snapshot: Path) -> Live:
    keys = [{"id": "reader", "sha256": hash_key(SECRET), "tenant": "acme", "subject": "reader",
             "allow": ["*"]}]  # fmt: skip
    registry = Registry([source_for(f"docs={snapshot}", 5_000)])
    registry.open_all()
    return start(ServerState(registry, ServerSettings(port=0), keys=KeyRing.from_items(keys)))


def _reachable(live: Live) -> dict[str, Any]:
    """Where the withdrawn document shows through each route (and the snapshot answering)."""
    with live.client(SECRET) as http:
        found = http.post("/v1/search", json={"query": QUESTION, "explain": True}).json()
        evidence = http.post("/v1/evidence", json={"query": QUESTION}).json()
        grounded = http.post("/v1/ground", json={"query": QUESTION, "explain": True}).json()
        entry = http.get(f"/v1/entries/{quote(WITHDRAWN + '#0', safe='')}")
        texts = (found, evidence, grounded)
    return {
        "snapshot": {evidence["snapshot"], grounded["snapshot"], found["snapshot"]},
        "search": [h["id"] for h in found["hits"] if h["id"].startswith(WITHDRAWN)],
        "evidence": [e["source"] for e in evidence["excerpts"] if e["source"] == WITHDRAWN],
        "citations": [
            tag
            for tag in [*evidence["citations"], *grounded["citations"]]
            if tag.startswith(f"[KB:{WITHDRAWN}")
        ],
        "entry": entry.status_code,
        "text": any(DOCUMENT_TEXT in str(data) for data in texts),
    }


def test_a_withdrawn_document_leaves_search_evidence_citations_and_entries(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "retention.md").write_text(
        "# Retention\n\nInvoices are kept for ten years in the archive.\n"
    )
    (docs / "badges.md").write_text("# Badges\n\nLost badges are replaced at the front desk.\n")
    config = write_config(tmp_path, [{"id": "docs", "type": "folder", "path": "docs",
                                      "tenant": "acme"}])  # fmt: skip
    with syncer(config) as sync:
        assert sync.run_once().published is not None
        live = _serve(tmp_path / "kb")
        try:
            before = _reachable(live)
            assert before == {
                "snapshot": {"docs@1"},
                "search": [f"{WITHDRAWN}#0"],
                "evidence": [WITHDRAWN],
                "citations": before["citations"],
                "entry": 200,
                "text": True,
            }
            assert len(before["citations"]) == 2  # cited by /v1/evidence and /v1/ground

            assert list(sync.withdraw(WITHDRAWN, "legal hold")) == [WITHDRAWN]
            published = sync.run_once().published
            assert published is not None
            assert published.documents == 1
            with live.client(SECRET) as http:
                reloaded = http.post("/v1/reload", json={"kb": "docs"}).json()["results"][0]
                assert reloaded == {**reloaded, "reloaded": True, "snapshot": "docs@2"}
                # the document that stays is still served
                kept = http.post("/v1/evidence", json={"query": "lost badges front desk"}).json()
                assert [e["source"] for e in kept["excerpts"]] == ["docs/badges.md"]
                unknown = http.get(f"/v1/entries/{quote('docs/never.md#0', safe='')}")
                gone = http.get(f"/v1/entries/{quote(WITHDRAWN + '#0', safe='')}")
                assert gone.status_code == unknown.status_code == 404
                assert gone.json()["type"] == unknown.json()["type"]
            assert _reachable(live) == {
                "snapshot": {"docs@2"},
                "search": [],
                "evidence": [],
                "citations": [],
                "entry": 404,
                "text": False,
            }
        finally:
            live.stop()
