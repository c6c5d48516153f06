"""Fetch one web page or text file over HTTP(S) into a :class:`LoadedDocument`.

Guards: http/https only (every redirect hop too), at most ``max_redirects`` redirects,
one ``timeout`` as a *total* deadline for the whole fetch (DNS, connect, TLS, headers,
redirects and body, however slowly the server drips them), a byte cap checked against
Content-Length before reading and enforced on the raw and on the decoded bytes while
streaming (gzip/deflate layers are undone in bounded steps, so a compression bomb stops
at the cap), and text content types only: ``text/*``, HTML/XHTML, JSON and XML
(including ``+json``/``+xml`` types). With ``block_private_addresses=True`` a host that
resolves to a loopback, private, link-local or otherwise non-public address is refused;
the check covers every address the name resolves to, and the connection goes to a
checked address (no second lookup), on every redirect hop.

Every failure — of the guards, of the network, or of a hostile server's bytes — raises
:class:`FetchError` naming the URL and the fix; no exception of httpx, httpcore, h11,
zlib or the socket layer escapes. The document's source id is the requested URL
(without its fragment); HTML goes through the HTML loader, other types through the
loader of their kind. No proxy is used (the environment's proxy settings are ignored:
the address guard must see the real destination).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urldefrag

import httpcore
import httpx

from groundwire.config import DEFAULT_FETCH_MAX_BYTES, DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_REDIRECTS
from groundwire.errors import ConfigError, FetchError, GroundwireError
from groundwire.ingest.fetch._transport import (
    TRANSPORT_ERRORS,
    Deadline,
    GuardedBackend,
    decode_body,
)
from groundwire.ingest.loaders import load_bytes
from groundwire.ingest.loaders._kinds import resolve_kind
from groundwire.model import LoadedDocument

__all__ = ["ALLOWED_CONTENT_TYPES", "fetch_url"]

#: Media types accepted besides ``text/*`` and the ``+json``/``+xml`` suffixes.
ALLOWED_CONTENT_TYPES = frozenset({"application/json", "application/xml", "application/xhtml+xml"})
_KIND_OF_TYPE = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/json": "json",
    "application/xml": "xml",
    "text/xml": "xml",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/csv": "csv",
    "text/tab-separated-values": "csv",
    "text/yaml": "yaml",
    "text/x-yaml": "yaml",
    "text/x-tex": "latex",
}
_SCHEMES = ("http", "https")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Everything a fetch converts to FetchError at the boundary.
_FAILURES: tuple[type[Exception], ...] = (*TRANSPORT_ERRORS, httpx.HTTPError, httpx.InvalidURL)
_USER_AGENT = "groundwire (+https://pypi.org/project/groundwire/)"


def _allowed(media_type: str) -> bool:
    return (
        media_type.startswith("text/")
        or media_type in ALLOWED_CONTENT_TYPES
        or media_type.endswith(("+json", "+xml"))
    )


def _kind(media_type: str, url: httpx.URL) -> str:
    if media_type in _KIND_OF_TYPE:
        return _KIND_OF_TYPE[media_type]
    if media_type.endswith("+json"):
        return "json"
    if media_type.endswith("+xml"):
        return "xml"
    # text/plain and other text types: trust a known extension (raw files are text/plain).
    resolved = resolve_kind(url.path)
    if resolved is None or resolved[0] == "pdf":
        return "text"
    return resolved[1] or resolved[0]


def _charset(params: str) -> str | None:
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"').strip("'")
    return None


def _check_url(url: httpx.URL, requested: str) -> None:
    if url.scheme not in _SCHEMES:
        raise FetchError(
            f"{url}: scheme {url.scheme!r} is not allowed; fetch http:// or https:// URLs",
            url=requested,
        )
    if not url.host:
        raise FetchError(f"{url}: no host in the URL", url=requested)


def _positive(option: str, value: object, types: type | tuple[type, ...]) -> None:
    ok = isinstance(value, types) and not isinstance(value, bool) and value > 0  # type: ignore[operator]
    if not ok:
        raise ConfigError(f"{option}={value!r} is invalid: expected a number > 0")


def fetch_url(
    url: str,
    *,
    timeout: float = DEFAULT_FETCH_TIMEOUT,
    max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    headers: Mapping[str, str] | None = None,
    block_private_addresses: bool = False,
) -> LoadedDocument:
    """GET ``url`` within the guards above and extract it as a document.

    ``timeout`` (seconds) bounds the whole fetch; ``max_bytes`` the body, raw and
    decoded. ``block_private_addresses`` turns on the address guard: use it whenever
    the URL comes from someone you do not fully trust (the CLI turns it on by default).
    ``metadata`` of the result holds ``url`` (the final one after redirects),
    ``content_type`` and ``status``. Raises :class:`FetchError`, or
    :class:`~groundwire.SourceError` when the body cannot be extracted.
    """
    _positive("timeout", timeout, (int, float))
    _positive("max_bytes", max_bytes, int)
    if not isinstance(max_redirects, int) or isinstance(max_redirects, bool) or max_redirects < 0:
        raise ConfigError(f"max_redirects={max_redirects!r} is invalid: expected an integer >= 0")
    if not isinstance(url, str) or not url.strip():
        raise FetchError("no URL given; pass an http:// or https:// URL", url=str(url))
    requested = urldefrag(url.strip())[0]
    current = _parse_url(requested, requested)
    deadline = Deadline(float(timeout))
    backend = GuardedBackend(deadline, block_private=block_private_addresses, requested=requested)
    sent = {
        "User-Agent": _USER_AGENT,
        "Accept": "text/html, text/*;q=0.9, */*;q=0.1",
        "Accept-Encoding": "gzip, deflate",
    }
    sent.update(headers or {})
    with httpcore.ConnectionPool(
        ssl_context=ssl.create_default_context(), network_backend=backend, retries=0
    ) as pool:
        try:
            fetched = _follow(pool, current, requested, sent, deadline, max_bytes, max_redirects)
        except GroundwireError:
            raise
        except _FAILURES as exc:
            if isinstance(exc, httpcore.TimeoutException | httpx.TimeoutException):
                raise FetchError(
                    f"{requested}: timed out after {timeout:g} s (the whole fetch: connect, "
                    "headers and body); check the server or raise timeout=",
                    url=requested,
                ) from exc
            raise FetchError(
                f"{requested}: request failed ({type(exc).__name__}: {exc})", url=requested
            ) from exc
    document = load_bytes(
        fetched.body,
        requested,
        path=requested,
        kind=_kind(fetched.media_type, fetched.url),
        encoding=fetched.charset,
    )
    metadata = {
        **document.metadata,
        "url": str(fetched.url),
        "content_type": fetched.media_type,
        "status": fetched.status,
    }
    return replace(document, metadata=metadata)


@dataclass(frozen=True, slots=True)
class _Fetched:
    url: httpx.URL
    status: int
    media_type: str
    charset: str | None
    body: bytes


def _parse_url(text: str, requested: str) -> httpx.URL:
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise FetchError(f"{text}: not a valid URL ({exc})", url=requested) from exc
    _check_url(url, requested)
    return url


def _follow(
    pool: httpcore.ConnectionPool,
    current: httpx.URL,
    requested: str,
    sent: Mapping[str, str],
    deadline: Deadline,
    max_bytes: int,
    max_redirects: int,
) -> _Fetched:
    """GET ``current``, following redirects hop by hop, and read the final body."""
    redirects = 0
    while True:
        deadline.left()
        request = httpx.Request("GET", current, headers=sent)
        response = pool.handle_request(
            httpcore.Request(
                method=b"GET",
                url=httpcore.URL(
                    scheme=current.raw_scheme,
                    host=current.raw_host,
                    port=current.port,
                    target=current.raw_path,
                ),
                headers=request.headers.raw,
            )
        )
        try:
            received = httpx.Headers(response.headers)
            status = response.status
            if status in _REDIRECTS and "location" in received:
                redirects += 1
                location = received["location"]
                if redirects > max_redirects:
                    raise FetchError(
                        f"{requested}: more than {max_redirects} redirect(s) (last to "
                        f"{location}); fetch the final URL",
                        url=requested,
                        status=status,
                    )
                try:
                    current = current.join(location)
                except (httpx.InvalidURL, TypeError, ValueError) as exc:
                    raise FetchError(
                        f"{requested}: redirected to {location!r}, which is not a valid URL "
                        f"({exc})",
                        url=requested,
                        status=status,
                    ) from exc
                _check_url(current, requested)
                continue
            reason = response.extensions.get("reason_phrase", b"")
            media_type, _, params = received.get("content-type", "").partition(";")
            media_type = media_type.strip().lower()
            _check_response(requested, status, bytes(reason), media_type, received, max_bytes)
            chunks = _raw_chunks(response.stream, requested, status, max_bytes)
            encoding = received.get("content-encoding", "")
            body = _read(decode_body(chunks, encoding, requested), requested, status, max_bytes)
            return _Fetched(current, status, media_type, _charset(params), body)
        finally:
            response.close()


def _check_response(
    requested: str,
    status: int,
    reason: bytes,
    media_type: str,
    received: httpx.Headers,
    max_bytes: int,
) -> None:
    """Refuse an error status, a content type that is not text, or a declared oversize."""
    if not 200 <= status < 300:
        phrase = reason.decode("ascii", "replace")
        raise FetchError(
            f"{requested}: HTTP {status} {phrase}".rstrip()
            + ("; check the URL" if status == 404 else ""),
            url=requested,
            status=status,
        )
    if not media_type or not _allowed(media_type):
        shown = media_type or "none"
        raise FetchError(
            f"{requested}: content type {shown!r} is not allowed; only text/*, HTML, JSON "
            "and XML pages are fetched (download other files and load them from disk)",
            url=requested,
            status=status,
        )
    declared = received.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise FetchError(
            f"{requested}: Content-Length {int(declared):,} bytes is over max_bytes="
            f"{max_bytes:,}; raise max_bytes to fetch it",
            url=requested,
            status=status,
        )


def _raw_chunks(stream: object, requested: str, status: int, max_bytes: int) -> Iterator[bytes]:
    """The body as it arrives, refused once more than ``max_bytes`` arrived."""
    size = 0
    for chunk in stream:  # type: ignore[attr-defined]
        size += len(chunk)
        if size > max_bytes:
            raise _too_big(requested, status, max_bytes)
        yield bytes(chunk)


def _too_big(requested: str, status: int, max_bytes: int) -> FetchError:
    return FetchError(
        f"{requested}: body passed max_bytes={max_bytes:,} while streaming; "
        "raise max_bytes to fetch it",
        url=requested,
        status=status,
    )


def _read(decoded: Iterator[bytes], requested: str, status: int, max_bytes: int) -> bytes:
    """The decoded body, refused as soon as it passes ``max_bytes``."""
    parts: list[bytes] = []
    size = 0
    for part in decoded:
        size += len(part)
        if size > max_bytes:
            raise _too_big(requested, status, max_bytes)
        parts.append(part)
    return b"".join(parts)
