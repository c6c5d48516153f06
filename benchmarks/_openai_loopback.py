"""A zero-latency OpenAI-wire server on 127.0.0.1 for benchmarks that compare memory systems.

It answers ``POST …/chat/completions`` with text from a scripted function and
``POST …/embeddings`` with deterministic hashed bag-of-words vectors, and counts every
request by kind, so two systems driven through their own OpenAI clients make the same
kind of HTTP round trips and are counted the same way. Not a test double for
correctness (``tests/llm/fake_servers.py`` is): it only has to be fast and exact.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: (system prompt, last user message) → (call kind for the counts, answer text)
Script = Callable[[str, str], tuple[str, str]]
_WORD = re.compile(r"\w+")


def hashed_vector(text: str, dims: int) -> list[float]:
    """A unit vector of hashed words: texts sharing words point the same way."""
    vector = [0.0] * dims
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "little") % dims] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class OpenAILoopback:
    """``with OpenAILoopback(script) as server:`` — ``server.base_url`` ends in ``/v1``."""

    def __init__(self, script: Script, *, dims: int = 64) -> None:
        self.script, self.dims = script, dims
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"owner": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> OpenAILoopback:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def count(self, kind: str, by: int = 1) -> None:
        with self._lock:
            self.counts[kind] += by


class _Handler(BaseHTTPRequestHandler):
    owner: OpenAILoopback
    protocol_version = "HTTP/1.1"  # keep-alive, as the real APIs

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self.path.endswith("/embeddings"):
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            self.owner.count("embedding requests")
            self.owner.count("embedded texts", len(texts))
            data = [
                {"object": "embedding", "index": n, "embedding": hashed_vector(t, self.owner.dims)}
                for n, t in enumerate(texts)
            ]
            usage = {"prompt_tokens": 1, "total_tokens": 1}
            self._send({"object": "list", "data": data, "model": body["model"], "usage": usage})
            return
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        messages = body["messages"]
        system = next((m["content"] for m in messages if m["role"] in ("system", "developer")), "")
        kind, text = self.owner.script(_text(system), _text(messages[-1]["content"]))
        self.owner.count(kind)
        message = {"role": "assistant", "content": text}
        self._send(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    def _send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))
