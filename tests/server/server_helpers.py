"""Helpers of the server tests (loaded by tests/server/conftest.py as ``server_helpers``):
a real uvicorn on 127.0.0.1 (port 0), the test keys, a labeled knowledge base."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from groundwire.server import ServerState, create_app, hash_key

ROOT = Path(__file__).resolve().parents[2]
HANDBOOK = ROOT / "examples" / "handbook"

#: Secrets of the test keys (their SHA-256 goes into the keys file, as in production).
ACME_HR = "gw_test-acme-hr-secret"
ACME_BOT = "gw_test-acme-bot-secret"
SEARCH_ONLY = "gw_test-search-only"
OTHER_KB = "gw_test-other-kb"
ADMIN = "gw_test-admin"

ACCESS_SOURCE = {
    "id": "kb",
    "version": "v1",
    "entries": [
        {"id": "acme.keys", "title": "Rotate keys", "summary": "rotate signing keys monthly",
         "domain": "ops", "integrations": [], "tenant": "acme"},
        {"id": "acme.payroll", "title": "Payroll keys", "summary": "rotate payroll keys quarterly",
         "domain": "ops", "integrations": [], "tenant": "acme", "acl": ["group:hr"]},
        {"id": "globex.keys", "title": "Globex keys", "summary": "rotate globex keys weekly",
         "domain": "ops", "integrations": [], "tenant": "globex"},
        {"id": "shared.keys", "title": "Keys in general", "summary": "how keys rotate",
         "domain": "ops", "integrations": []},
    ],
}  # fmt: skip


def keys_items() -> list[dict[str, Any]]:
    """The keys file's ``keys`` list of the test server."""
    return [
        {"id": "acme-hr", "sha256": hash_key(ACME_HR), "tenant": "acme", "subject": "alice",
         "groups": ["hr"], "allow": ["*"]},
        {"id": "acme-bot", "sha256": hash_key(ACME_BOT), "tenant": "acme", "subject": "bot",
         "allow": ["ground", "search", "entries", "status", "mcp"]},
        {"id": "search-only", "sha256": hash_key(SEARCH_ONLY), "tenant": "acme",
         "subject": "s", "allow": ["search"]},
        {"id": "other-kb", "sha256": hash_key(OTHER_KB), "tenant": "acme", "subject": "o",
         "allow": ["*"], "kbs": ["handbook"]},
        {"id": "admin", "sha256": hash_key(ADMIN), "tenant": "acme", "subject": "ops",
         "allow": ["*"]},
    ]  # fmt: skip


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@dataclass
class Live:
    """A running server: its base URL, state, and a client bound to it."""

    url: str
    state: ServerState
    server: uvicorn.Server
    thread: threading.Thread

    def client(self, secret: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = bearer(secret) if secret else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kwargs)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the server did not stop"


def start(state: ServerState, **app_options: Any) -> Live:
    """Run ``create_app(state)`` under uvicorn on 127.0.0.1, a free port; wait until it serves."""
    app = create_app(state, **app_options)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server failed to start")
        threading.Event().wait(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return Live(f"http://127.0.0.1:{port}", state, server, thread)
