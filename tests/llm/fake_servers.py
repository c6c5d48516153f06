"""Real HTTP servers on 127.0.0.1 that speak the OpenAI and Anthropic wire formats, scripted.

One :class:`FakeLLMServer` (a threaded ``http.server`` on port 0) serves both APIs:

- OpenAI chat completions: ``POST {fake.openai.base_url}/chat/completions`` (any path
  ending in ``/chat/completions``, so Azure-style paths work too), JSON or SSE
  (``data: {...}`` chunks, ``data: [DONE]``), tool calls in the message and as streamed
  argument deltas, errors as ``{"error": {...}}``.
- Anthropic messages: ``POST {fake.anthropic.base_url}/v1/messages``, JSON or SSE
  (``message_start``, ``content_block_start/delta/stop``, ``message_delta``,
  ``message_stop``), ``tool_use`` blocks with ``input_json_delta`` s, errors as
  ``{"type": "error", "error": {...}}``.

Each endpoint answers from a queue of scripted replies, in order; the request body says
whether to stream. Every request is recorded (``.requests``) before it is answered, so a
test can assert what the client sent. A request with nothing left in the queue gets the
``default`` reply if one is set, else HTTP 400 "no scripted reply" (not retryable, so the
test fails fast and says why).

In tests under tests/llm use the fixtures of ``tests/llm/conftest.py``::

    def test_answer(fake):                         # fake: FakeLLMServer
        fake.openai.enqueue_text("Refunds take 5 days.")
        provider = OpenAIProvider("gpt-test", api_key="k", base_url=fake.openai.base_url)
        assert provider.complete(request).text == "Refunds take 5 days."
        sent = fake.openai.requests[0].json        # the body the SDK sent
        assert sent["messages"][0] == {"role": "system", "content": "..."}

Scripting (every ``enqueue_*`` takes ``times=`` to queue the same reply again, and
``wait=`` a :class:`threading.Event` the server blocks on before answering — set it to
release; never sleep)::

    fake.openai.enqueue_text("Hello there", chunks=["Hel", "lo there"])
    fake.openai.enqueue_tool_call("search_knowledge_base", {"query": "refunds"})
    fake.openai.enqueue_tool_calls([ToolCallSpec("a", {}), ToolCallSpec("b", {"x": 1})])
    fake.openai.enqueue_error(429, "slow down", headers={"retry-after": "0"})
    fake.openai.enqueue_empty()                   # 200 with no text and no tool calls
    fake.openai.enqueue_disconnect(after_chunks=1)  # stream: 1 text chunk, then the
                                                  # connection drops; JSON: no response
    fake.openai.enqueue_stream_error("overloaded", after_chunks=0)  # an error event
    fake.openai.enqueue_text("late", wait=gate)   # blocks until gate.set()
    fake.openai.default = Reply(text="ok")        # answer any extra request

Blocked handlers are released when the server closes (the fixture closes it), and never
wait longer than :data:`WAIT_LIMIT_S`.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = [
    "WAIT_LIMIT_S",
    "FakeLLMServer",
    "RecordedRequest",
    "Reply",
    "ScriptedEndpoint",
    "ToolCallSpec",
]

#: Longest a scripted reply blocks on its ``wait`` event, so a forgotten event cannot hang CI.
WAIT_LIMIT_S = 30.0

Kind = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ToolCallSpec:
    """A tool call the fake model makes: ``arguments`` is sent as JSON (or ``raw_arguments``)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    raw_arguments: str | None = None  # sent verbatim instead of json.dumps(arguments)

    def arguments_json(self) -> str:
        return self.raw_arguments if self.raw_arguments is not None else json.dumps(self.arguments)


@dataclass
class Reply:
    """One scripted answer. ``status`` != 200 sends an error body instead of an answer.

    ``chunks`` splits the streamed text (default: word by word). ``disconnect_after``
    drops the connection after that many streamed text chunks (a JSON request gets no
    response at all). ``stream_error`` sends an error event after ``disconnect_after``
    chunks (or 0) instead of dropping. ``wait`` blocks before anything is sent.
    """

    text: str = ""
    tool_calls: Sequence[ToolCallSpec] = ()
    status: int = 200
    error_message: str | None = None
    error_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    chunks: Sequence[str] | None = None
    finish_reason: str | None = None
    usage: tuple[int, int] = (12, 7)
    model: str | None = None
    wait: threading.Event | None = None
    disconnect_after: int | None = None
    stream_error: str | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received: path, lower-cased headers, raw and parsed body."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON (None when it is not JSON)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def stream(self) -> bool:
        """Whether the client asked for a streamed answer."""
        body = self.json
        return isinstance(body, dict) and body.get("stream") is True


class ScriptedEndpoint:
    """The script and the record of one API (``fake.openai`` or ``fake.anthropic``)."""

    def __init__(self, server: FakeLLMServer, kind: Kind) -> None:
        self._server = server
        self.kind: Kind = kind
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self.default: Reply | None = None

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url`` (OpenAI's includes ``/v1``)."""
        root = self._server.url
        return f"{root}/v1" if self.kind == "openai" else root

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        """How many requests arrived (retries included)."""
        with self._lock:
            return len(self._requests)

    @property
    def last_request(self) -> RecordedRequest:
        """The latest request (AssertionError when none came)."""
        with self._lock:
            assert self._requests, f"the fake {self.kind} server received no request"
            return self._requests[-1]

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._queue)

    # --- scripting ---------------------------------------------------------------------------
    def enqueue(self, reply: Reply, *, times: int = 1) -> Reply:
        """Queue ``reply`` (``times`` times); returns it."""
        with self._lock:
            self._queue.extend([reply] * times)
        if reply.wait is not None:
            self._server.track(reply.wait)
        return reply

    def enqueue_text(
        self,
        text: str,
        *,
        chunks: Sequence[str] | None = None,
        finish_reason: str | None = None,
        usage: tuple[int, int] = (12, 7),
        model: str | None = None,
        wait: threading.Event | None = None,
        times: int = 1,
    ) -> Reply:
        """Answer with ``text`` (streamed as ``chunks``, default word by word)."""
        reply = Reply(
            text=text,
            chunks=chunks,
            finish_reason=finish_reason,
            usage=usage,
            model=model,
            wait=wait,
        )
        return self.enqueue(reply, times=times)

    def enqueue_tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        id: str | None = None,
        text: str = "",
        wait: threading.Event | None = None,
        times: int = 1,
    ) -> Reply:
        """Answer with one call of tool ``name`` (and optional ``text`` before it)."""
        call = ToolCallSpec(name, dict(arguments or {}), id=id)
        return self.enqueue_tool_calls([call], text=text, wait=wait, times=times)

    def enqueue_tool_calls(
        self,
        calls: Iterable[ToolCallSpec],
        *,
        text: str = "",
        wait: threading.Event | None = None,
        times: int = 1,
    ) -> Reply:
        """Answer with several tool calls at once."""
        return self.enqueue(Reply(text=text, tool_calls=tuple(calls), wait=wait), times=times)

    def enqueue_error(
        self,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        wait: threading.Event | None = None,
        times: int = 1,
    ) -> Reply:
        """Answer with HTTP ``status`` and the API's error body."""
        reply = Reply(
            status=status,
            error_message=message or f"fake error {status}",
            error_type=error_type,
            headers=dict(headers or {}),
            wait=wait,
        )
        return self.enqueue(reply, times=times)

    def enqueue_empty(self, *, times: int = 1) -> Reply:
        """A successful answer with no text and no tool calls."""
        return self.enqueue(Reply(text=""), times=times)

    def enqueue_disconnect(
        self, *, after_chunks: int = 0, text: str = "partial answer that never ends", times: int = 1
    ) -> Reply:
        """Drop the connection: after ``after_chunks`` streamed chunks of ``text`` (a
        JSON request gets no response)."""
        return self.enqueue(Reply(text=text, disconnect_after=after_chunks), times=times)

    def enqueue_stream_error(
        self,
        message: str = "overloaded",
        *,
        after_chunks: int = 0,
        text: str = "partial answer that never ends",
        error_type: str = "overloaded_error",
        times: int = 1,
    ) -> Reply:
        """Send an error event inside a 200 stream after ``after_chunks`` text chunks."""
        reply = Reply(
            text=text, disconnect_after=after_chunks, stream_error=message, error_type=error_type
        )
        return self.enqueue(reply, times=times)

    def clear(self) -> None:
        """Forget queued replies and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()

    # --- serving (called by the handler thread) ------------------------------------------------
    def _take(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._requests.append(request)
            if self._queue:
                return self._queue.popleft()
            if self.default is not None:
                return self.default
            count = len(self._requests)
        return Reply(
            status=400,
            error_message=f"fake {self.kind} server: no scripted reply left for request {count}",
            error_type="invalid_request_error",
        )


class FakeLLMServer:
    """A threaded HTTP server on 127.0.0.1 serving scripted OpenAI and Anthropic APIs.

    Starts on construction; :meth:`close` (or ``with``) releases blocked replies and stops it.
    """

    def __init__(self) -> None:
        self.openai = ScriptedEndpoint(self, "openai")
        self.anthropic = ScriptedEndpoint(self, "anthropic")
        self._events: list[threading.Event] = []
        #: Unexpected exceptions raised while handling a request (a bug in the fake itself).
        self.handler_errors: list[BaseException | None] = []
        self._closed = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll interval
            name="fake-llm-server",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def track(self, event: threading.Event) -> None:
        """Remember ``event`` so :meth:`close` can release a handler blocked on it."""
        self._events.append(event)

    def close(self) -> None:
        """Release every blocked reply, stop serving, close the socket."""
        if self._closed.is_set():
            return
        self._closed.set()
        for event in self._events:
            event.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            return  # a client that went away mid-request (a timeout or a dropped stream test)
        self.fake.handler_errors.append(error)  # a bug in the fake: shown by the report too
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked streams, so a dropped connection is an error
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        fake = self.server.fake
        if path.endswith("/chat/completions"):
            endpoint = fake.openai
        elif path.endswith("/messages"):
            endpoint = fake.anthropic
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        recorded = RecordedRequest("POST", self.path, headers, body)
        reply = endpoint._take(recorded)
        if reply.wait is not None:
            reply.wait.wait(WAIT_LIMIT_S)
        with contextlib.suppress(OSError):  # the client gave up (a timeout test)
            self._answer(endpoint.kind, reply, recorded)

    # --- answers -----------------------------------------------------------------------------
    def _answer(self, kind: Kind, reply: Reply, request: RecordedRequest) -> None:
        requested = request.json if isinstance(request.json, dict) else {}
        model = reply.model or requested.get("model") or "fake-model"
        if reply.status != 200:
            self._json(reply.status, _error_body(kind, reply), reply.headers)
            return
        if not request.stream:
            if reply.disconnect_after is not None and reply.stream_error is None:
                self._drop()
                return
            body = _openai_json(reply, model) if kind == "openai" else _anthropic_json(reply, model)
            self._json(200, body, reply.headers)
            return
        events, preamble = (_openai_sse if kind == "openai" else _anthropic_sse)(reply, model)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        if reply.disconnect_after is not None:
            events = events[: preamble + reply.disconnect_after]
        for event in events:
            self._chunk(event)
        if reply.stream_error is not None:
            self._chunk(_stream_error_event(kind, reply))
        elif reply.disconnect_after is not None:
            self._drop()
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _json(self, status: int, body: object, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        """Close the connection at once, mid-message."""
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


# --- wire formats --------------------------------------------------------------------------------
def _pieces(reply: Reply) -> list[str]:
    if reply.chunks is not None:
        return [c for c in reply.chunks if c]
    return re.findall(r"\s*\S+\s*", reply.text) or ([reply.text] if reply.text else [])


def _call_id(call: ToolCallSpec, index: int, kind: Kind) -> str:
    return call.id or (f"call_{index}" if kind == "openai" else f"toolu_{index}")


def _error_body(kind: Kind, reply: Reply) -> dict[str, Any]:
    message = reply.error_message or f"fake error {reply.status}"
    if kind == "openai":
        return {
            "error": {
                "message": message,
                "type": reply.error_type or _openai_error_type(reply.status),
                "param": None,
                "code": None,
            }
        }
    return {
        "type": "error",
        "error": {
            "type": reply.error_type or _anthropic_error_type(reply.status),
            "message": message,
        },
    }


def _openai_error_type(status: int) -> str:
    return {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )


def _anthropic_error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")


def _stream_error_event(kind: Kind, reply: Reply) -> bytes:
    error = {"type": reply.error_type or "server_error", "message": reply.stream_error}
    if kind == "openai":
        return f"data: {json.dumps({'error': error})}\n\n".encode()
    body = json.dumps({"type": "error", "error": error})
    return f"event: error\ndata: {body}\n\n".encode()


def _openai_json(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(call, n, "openai"),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for n, call in enumerate(reply.tool_calls)
        ]
    prompt, completion = reply.usage
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish_reason
                or ("tool_calls" if reply.tool_calls else "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _openai_sse(reply: Reply, model: str) -> tuple[list[bytes], int]:
    """The chunks of a streamed chat completion, and how many come before the text."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }
        return f"data: {json.dumps(body)}\n\n".encode()

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(reply)]
    for n, call in enumerate(reply.tool_calls):
        head = {
            "index": n,
            "id": _call_id(call, n, "openai"),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        arguments = call.arguments_json()
        half = len(arguments) // 2  # two argument deltas, so the client must join them
        for part in (arguments[:half], arguments[half:]):
            if part:
                events.append(
                    chunk({"tool_calls": [{"index": n, "function": {"arguments": part}}]})
                )
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    prompt, completion = reply.usage
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    events.append(chunk({}, finish, usage=usage))
    events.append(b"data: [DONE]\n\n")
    return events, 1


def _anthropic_json(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for n, call in enumerate(reply.tool_calls):
        content.append(
            {
                "type": "tool_use",
                "id": _call_id(call, n, "anthropic"),
                "name": call.name,
                "input": json.loads(call.arguments_json()),
            }
        )
    prompt, completion = reply.usage
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def _anthropic_sse(reply: Reply, model: str) -> tuple[list[bytes], int]:
    """The events of a streamed message, and how many come before the text deltas."""

    def event(name: str, body: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **body})}\n\n".encode()

    prompt, completion = reply.usage
    start = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1},
    }
    events = [event("message_start", {"message": start})]
    index = 0
    pieces = _pieces(reply)
    if pieces or not reply.tool_calls:
        events.append(
            event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            )
        )
        events.append(b'event: ping\ndata: {"type": "ping"}\n\n')
    preamble = len(events)
    if pieces or not reply.tool_calls:
        events += [
            event(
                "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}}
            )
            for piece in pieces
        ]
        events.append(event("content_block_stop", {"index": 0}))
        index = 1
    for n, call in enumerate(reply.tool_calls):
        block = {
            "type": "tool_use",
            "id": _call_id(call, n, "anthropic"),
            "name": call.name,
            "input": {},
        }
        events.append(event("content_block_start", {"index": index, "content_block": block}))
        arguments = call.arguments_json()
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            if part:
                delta = {"type": "input_json_delta", "partial_json": part}
                events.append(event("content_block_delta", {"index": index, "delta": delta}))
        events.append(event("content_block_stop", {"index": index}))
        index += 1
    stop = reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")
    events.append(
        event(
            "message_delta",
            {
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
        )
    )
    events.append(event("message_stop", {}))
    return events, preamble
