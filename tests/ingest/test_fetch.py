"""The URL fetcher against a real HTTP server on 127.0.0.1: size, time, type, redirects."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from groundwire import ConfigError, FetchError, SourceError, fetch_url

pytestmark = pytest.mark.integration

HTML = (
    b"<html><head><title>Relaybird status</title><script>track()</script></head>"
    b"<body><h1>All systems normal</h1><p>Webhooks deliver within 10 seconds.</p></body></html>"
)
RELEASE = threading.Event()


class Handler(BaseHTTPRequestHandler):
    """Routes for every guard the fetcher has."""

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass

    def _send(
        self, status: int, body: bytes, content_type: str | None, length: bool = True
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        path = self.path
        if path == "/ok.html":
            self._send(200, HTML, "text/html; charset=utf-8")
        elif path == "/notes.md":
            self._send(200, b"# Notes\n\nPlain text served markdown.", "text/plain")
        elif path == "/data.json":
            self._send(200, b'{"title": "Limits", "free": 60}', "application/json")
        elif path == "/feed":
            self._send(200, b"<feed><title>x</title></feed>", "application/atom+xml")
        elif path == "/latin":
            self._send(200, "café".encode("latin-1"), "text/plain; charset=iso-8859-1")
        elif path == "/big-declared":
            self._send(200, b"x" * 2_000, "text/plain")
        elif path == "/big-streamed":
            # No Content-Length: the body runs until the connection closes.
            self._send(200, b"y" * 5_000, "text/plain", length=False)
        elif path == "/slow":
            RELEASE.wait(10)
            self._send(200, b"late", "text/plain")
        elif path == "/slow-body":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"first part")
            self.wfile.flush()
            RELEASE.wait(10)
        elif path == "/image.png":
            self._send(200, b"\x89PNG\r\n\x1a\n", "image/png")
        elif path == "/no-type":
            self._send(200, b"who knows", None)
        elif path.startswith("/hop/"):
            left = int(path.rsplit("/", 1)[1])
            self._redirect(f"/hop/{left - 1}" if left > 1 else "/ok.html")
        elif path == "/to-ftp":
            self._redirect("ftp://127.0.0.1/file.txt")
        elif path == "/broken":
            self._send(500, b"oops", "text/plain")
        else:
            self._send(404, b"not found", "text/plain")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        RELEASE.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_html_page_is_extracted_with_the_url_as_source_id(server: str) -> None:
    url = f"{server}/ok.html#section"
    doc = fetch_url(url)
    assert doc.source_id == f"{server}/ok.html"
    assert doc.path == doc.source_id
    assert doc.kind == "html"
    assert doc.title == "Relaybird status"
    assert "track()" not in doc.text
    assert doc.text == "All systems normal\n\nWebhooks deliver within 10 seconds."
    assert doc.metadata["content_type"] == "text/html"
    assert doc.metadata["status"] == 200
    assert doc.sections is not None
    assert doc.sections[0].title == "All systems normal"


@pytest.mark.parametrize(
    ("path", "kind", "text"),
    [
        ("/notes.md", "markdown", "# Notes\n\nPlain text served markdown."),
        ("/data.json", "json", '{"title": "Limits", "free": 60}'),
        ("/feed", "xml", "<feed><title>x</title></feed>"),
        ("/latin", "text", "café"),
    ],
)
def test_text_types_are_accepted(server: str, path: str, kind: str, text: str) -> None:
    doc = fetch_url(server + path)
    assert doc.kind == kind
    assert doc.text == text


def test_declared_size_over_the_cap_is_refused_before_reading(server: str) -> None:
    with pytest.raises(FetchError, match=r"Content-Length 2,000 bytes is over max_bytes=1,000"):
        fetch_url(f"{server}/big-declared", max_bytes=1_000)
    assert fetch_url(f"{server}/big-declared", max_bytes=2_000).text == "x" * 2_000


def test_streamed_size_over_the_cap_is_refused(server: str) -> None:
    with pytest.raises(FetchError, match=r"passed max_bytes=1,000 while streaming") as info:
        fetch_url(f"{server}/big-streamed", max_bytes=1_000)
    assert info.value.status == 200
    assert len(fetch_url(f"{server}/big-streamed", max_bytes=5_000).text) == 5_000


def test_a_server_that_does_not_answer_times_out(server: str) -> None:
    with pytest.raises(FetchError, match=r"timed out after 0\.3 s") as info:
        fetch_url(f"{server}/slow", timeout=0.3)
    assert info.value.url == f"{server}/slow"


def test_a_body_that_stalls_times_out(server: str) -> None:
    with pytest.raises(FetchError, match="timed out"):
        fetch_url(f"{server}/slow-body", timeout=0.3)


@pytest.mark.parametrize(("path", "shown"), [("/image.png", "image/png"), ("/no-type", "none")])
def test_other_content_types_are_refused(server: str, path: str, shown: str) -> None:
    with pytest.raises(FetchError, match=f"content type '{shown}' is not allowed"):
        fetch_url(server + path)


def test_redirects_are_followed_within_the_bound(server: str) -> None:
    doc = fetch_url(f"{server}/hop/3", max_redirects=3)
    assert doc.source_id == f"{server}/hop/3"
    assert doc.metadata["url"] == f"{server}/ok.html"
    assert doc.title == "Relaybird status"
    with pytest.raises(FetchError, match="more than 2 redirect"):
        fetch_url(f"{server}/hop/3", max_redirects=2)


def test_a_redirect_to_another_scheme_is_refused(server: str) -> None:
    with pytest.raises(FetchError, match="scheme 'ftp' is not allowed"):
        fetch_url(f"{server}/to-ftp")


@pytest.mark.parametrize(("path", "status"), [("/missing", 404), ("/broken", 500)])
def test_http_errors_carry_the_status(server: str, path: str, status: int) -> None:
    with pytest.raises(FetchError, match=f"HTTP {status}") as info:
        fetch_url(server + path)
    assert info.value.status == status
    assert isinstance(info.value, SourceError)


@pytest.mark.parametrize("url", ["ftp://example.org/x", "file:///etc/passwd", "example.org/page"])
def test_only_http_and_https_are_fetched(url: str) -> None:
    with pytest.raises(FetchError, match=r"not allowed|no host|not a valid URL"):
        fetch_url(url)


def test_refused_connections_are_fetch_errors() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FetchError, match="request failed"):
        fetch_url(f"http://127.0.0.1:{port}/", timeout=2)


def test_bounds_are_validated() -> None:
    with pytest.raises(ConfigError, match="timeout=0"):
        fetch_url("http://127.0.0.1/", timeout=0)
    with pytest.raises(ConfigError, match="max_bytes=-1"):
        fetch_url("http://127.0.0.1/", max_bytes=-1)
    with pytest.raises(ConfigError, match="max_redirects"):
        fetch_url("http://127.0.0.1/", max_redirects=-1)
