"""Fuzz: the URL fetcher against a hostile server on 127.0.0.1 never crashes or hangs.

Each example scripts one response: any status, a Content-Type, a Content-Encoding chain
(with real or fake compressed bodies), a true, false or garbage Content-Length,
redirects anywhere, chunked bodies, raw garbage, a slow drip. ``fetch_url`` returns a
document or raises SourceError (FetchError) / MissingExtraError, within its deadline.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest
from fuzz_support import FUZZ, NASTY, ran
from hostile_server import HostileServer, Script, serving
from hypothesis import given
from hypothesis import strategies as st

from groundwire import MissingExtraError, SourceError, fetch_url

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

TYPES = [
    "text/html; charset=utf-8",
    "text/plain",
    "application/json",
    "text/markdown",
    "application/xml",
    "image/png",
    "text/plain; charset=x-nope",
    "text/csv; charset=",
    "",
    "application/ld+json",
    "text/html; charset=utf-16",
]
ENCODINGS = [
    "",
    "gzip",
    "deflate",
    "gzip, gzip",
    "br",
    "identity",
    "x-gzip",
    "gzip,deflate",
    "zstd",
    ", ,",
    "gzip, gzip, gzip, gzip, gzip",
]
LOCATIONS = [
    "/fuzz",
    "/ok",
    "javascript:alert(1)",
    "data:text/plain,x",
    "ftp://127.0.0.1/",
    "http://",
    "//127.0.0.1:1/x",
    "http://[::1",
    "\x00",
    "/%zz",
    "http://127.0.0.1:0/",
    "https://127.0.0.1:1/",
    " ",
    "?q=1",
    "#frag",
    "http://user:pw@127.0.0.1:1/",
]
BODIES = (
    st.binary(max_size=400)
    | st.sampled_from(NASTY)
    | st.sampled_from(
        [
            b"<html><title>T</title><h1>A</h1><p>text</p></html>",
            b'{"title": "x", "a": [1, 2]}',
            b"# Heading\n\nMarkdown text.",
            b"[" * 5_000,
            bytes(20_000),
        ]
    )
)


def _encode(body: bytes, chain: str) -> bytes:
    for layer in [part.strip() for part in chain.split(",") if part.strip()]:
        if layer in ("gzip", "x-gzip"):
            body = zlib.compress(body, wbits=31)
        elif layer == "deflate":
            body = zlib.compress(body)
    return body


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    if draw(st.integers(0, 9)) == 0:  # raw garbage instead of a response head
        return Script(draw(st.binary(max_size=200) | st.sampled_from(NASTY)))
    status = draw(
        st.sampled_from([200, 200, 200, 204, 301, 302, 303, 307, 308, 404, 500])
        | st.integers(100, 999)
    )
    body = draw(BODIES)
    encoding = draw(st.sampled_from(ENCODINGS))
    if draw(st.booleans()):
        body = _encode(body, encoding)
    headers = [("Content-Type", draw(st.sampled_from(TYPES)))]
    if encoding:
        headers.append(("Content-Encoding", encoding))
    if status in (301, 302, 303, 307, 308) or draw(st.integers(0, 5)) == 0:
        headers.append(("Location", draw(st.sampled_from(LOCATIONS) | st.text(max_size=20))))
    chunked = draw(st.integers(0, 4)) == 0
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
        size = draw(st.integers(1, 64))
        parts = [body[i : i + size] for i in range(0, len(body), size)]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + draw(
            st.sampled_from([b"0\r\n\r\n", b"", b"zz\r\n", b"5\r\nab"])
        )
    else:
        length = draw(st.sampled_from(["true", "true", "none", "short", "long", "garbage"]))
        value = {
            "true": str(len(body)),
            "short": str(max(len(body) - 3, 0)),
            "long": str(len(body) + 50),
            "garbage": "-1, 7",
        }.get(length)
        if value is not None:
            headers.append(("Content-Length", value))
    extra = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["X-A", "Set-Cookie", "Content-Length", "Connection", "\x00Bad"]),
                st.text(max_size=10),
            ),
            max_size=2,
        )
    )
    lines = [f"HTTP/1.1 {status} Hostile"] + [f"{k}: {v}" for k, v in [*headers, *extra]]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    drip = draw(st.sampled_from([0.0, 0.0, 0.0, 0.002]))
    return Script(head, body, drip=drip, drip_body=drip > 0 and len(body) < 300)


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with serving({"/ok": Script(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")}) as hostile:
        yield hostile


@FUZZ
@given(scripts())
def test_fetch_against_a_hostile_server(server: HostileServer, script: Script) -> None:
    ran("fetch_url: hostile loopback server")
    server.routes["/fuzz"] = script
    try:
        document = fetch_url(server.url("/fuzz"), timeout=2, max_bytes=10_000, max_redirects=2)
    except (SourceError, MissingExtraError):
        return
    assert isinstance(document.text, str)
    assert len(document.text.encode("utf-8", "surrogatepass")) <= 4 * 10_000
