"""A scriptable, hostile HTTP server on 127.0.0.1 for the URL fetcher's tests and fuzzing.

It speaks raw bytes over TCP, so it can do what a well-behaved server library never
would: drip the status line and headers one byte at a time, lie in Content-Length,
stack encodings, send malformed heads, redirect anywhere, or close mid-body. Each
connection is recorded (path, bytes sent, whether the client hung up first), so a test
can assert what the *server* saw — e.g. that the fetch gave up long before the drip
would have finished — instead of timing anything.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Script:
    """What to send for one request: ``head`` (status line and headers, raw) then ``body``.

    ``drip`` > 0 sends the head (and the body too with ``drip_body``) one byte at a time,
    ``drip`` seconds apart. ``linger`` keeps the connection open (silent) after sending.
    """

    head: bytes
    body: bytes = b""
    drip: float = 0.0
    drip_body: bool = False
    linger: float = 0.0


def response(
    status: int = 200,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    length: bool = True,
    **options: float | bool,
) -> Script:
    """A well-formed HTTP/1.1 response script (``Connection: close``)."""
    lines = [f"HTTP/1.1 {status} Reason"]
    sent = {"Content-Type": "text/plain; charset=utf-8", **(headers or {})}
    if length:
        sent.setdefault("Content-Length", str(len(body)))
    sent["Connection"] = "close"
    lines += [f"{name}: {value}" for name, value in sent.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return Script(head, body, **options)  # type: ignore[arg-type]


@dataclass
class Connection:
    """One served connection, as the server saw it."""

    path: str
    planned: int  # bytes the script would send in full
    sent: int = 0
    hung_up: bool = False  # the client closed before the script was done
    done: threading.Event = field(default_factory=threading.Event)


Route = Script | Callable[[str], Script]


class HostileServer:
    """Serves ``routes`` (path → script, or a function of the path); records connections.

    An unknown path gets a 404. ``url(path)`` is the address of a path on this server.
    """

    def __init__(self, routes: dict[str, Route] | None = None) -> None:
        self.routes: dict[str, Route] = dict(routes or {})
        self.connections: list[Connection] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                server._serve(self.request)

        self._tcp = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._tcp.daemon_threads = True
        self.port = self._tcp.server_address[1]
        self._thread = threading.Thread(target=self._tcp.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def last(self, path: str) -> Connection:
        """The latest connection to ``path``, once the server is done with it.

        The client may give up before the server's thread has read the request (a loaded
        machine), so this waits (bounded) for the connection to be recorded.
        """
        found: list[Connection] = []
        for _ in range(300):
            with self._lock:
                found = [c for c in self.connections if c.path == path]
            if found or self.stopping.wait(0.1):
                break
        assert found, f"no request for {path}"
        assert found[-1].done.wait(30), f"the server is still sending {path}"
        return found[-1]

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(10)
        request = b""
        try:
            while b"\r\n\r\n" not in request and len(request) < 65536:
                data = sock.recv(4096)
                if not data:
                    return
                request += data
        except OSError:
            return
        parts = request.split(b" ", 2)
        path = parts[1].decode("latin-1") if len(parts) > 1 else "/"
        route = self.routes.get(path.split("?", 1)[0])
        if route is None:
            script = response(404, b"not found")
        else:
            script = route(path) if callable(route) else route
        record = Connection(path, len(script.head) + len(script.body))
        with self._lock:
            self.connections.append(record)
        try:
            self._send(sock, script.head, script.drip, record)
            self._send(sock, script.body, script.drip if script.drip_body else 0.0, record)
            if script.linger:
                self.stopping.wait(script.linger)
        except OSError:
            record.hung_up = True
        finally:
            record.done.set()

    def _send(self, sock: socket.socket, data: bytes, drip: float, record: Connection) -> None:
        if not drip:
            sock.sendall(data)
            record.sent += len(data)
            return
        for at in range(len(data)):
            if self.stopping.wait(drip):
                raise OSError("server stopping")
            sock.sendall(data[at : at + 1])
            record.sent += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._tcp.shutdown()
        self._tcp.server_close()


@contextmanager
def serving(routes: dict[str, Route] | None = None) -> Iterator[HostileServer]:
    """A started :class:`HostileServer`, stopped on exit."""
    server = HostileServer(routes)
    server.start()
    try:
        yield server
    finally:
        server.stop()
