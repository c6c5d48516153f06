"""A real HTTP server on 127.0.0.1 speaking OpenAI's ``POST /v1/embeddings``, scripted.

By default it answers every request as OpenAI does: ``{"object": "list", "data":
[{"object": "embedding", "index": i, "embedding": [...]}], "model", "usage"}``, the
vectors made by a :class:`~groundwire.HashingEmbedder` of ``dimensions`` (honouring a
``dimensions`` field like text-embedding-3 models), with data in *reverse* index order
so clients must sort by index. Queued replies (``enqueue(status, body, headers)`` or
``enqueue_disconnect()``) are served first, in order. Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from groundwire.embed import HashingEmbedder


@dataclass
class Scripted:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    disconnect: bool = False


class EmbeddingsServer:
    def __init__(self, dimensions: int = 32) -> None:
        self.dimensions = dimensions
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.queue: deque[Scripted] = deque()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    scripted = server.queue.popleft() if server.queue else None
                if self.path != "/v1/embeddings":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if scripted is None:
                    self._send(200, server.answer(body))
                elif scripted.disconnect:
                    self.close_connection = True
                    self.connection.shutdown(2)
                else:
                    self._send(scripted.status, scripted.body, scripted.headers)

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body["input"]
        dims = int(body.get("dimensions", self.dimensions))
        vectors = HashingEmbedder(dims).embed_documents(inputs) * 3.0  # not normalized
        data = [
            {"object": "embedding", "index": n, "embedding": vectors[n].tolist()}
            for n in range(len(inputs))
        ]
        return {
            "object": "list",
            "data": data[::-1],
            "model": body["model"],
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        }

    def enqueue(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.queue.append(Scripted(status, body, headers or {}))

    def enqueue_disconnect(self) -> None:
        self.queue.append(Scripted(disconnect=True))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def embeddings_server() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer()
    yield server
    server.close()
