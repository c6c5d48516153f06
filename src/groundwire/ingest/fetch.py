"""Fetch one web page or text file over HTTP(S) into a :class:`LoadedDocument`.

Guards: http/https only (every redirect hop too), at most ``max_redirects`` redirects,
one ``timeout`` for the whole fetch (connect, redirects and body), a byte cap checked
against Content-Length before reading and enforced while streaming, and text content
types only: ``text/*``, HTML/XHTML, JSON and XML (including ``+json``/``+xml`` types).
Each failure raises :class:`FetchError` naming the URL and the fix. The document's
source id is the requested URL (without its fragment); HTML goes through the HTML
loader, other types through the loader of their kind.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urldefrag

import httpx

from groundwire.config import DEFAULT_FETCH_MAX_BYTES, DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_REDIRECTS
from groundwire.errors import ConfigError, FetchError
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
    client: httpx.Client | None = None,
) -> LoadedDocument:
    """GET ``url`` within the guards above and extract it as a document.

    ``client`` lets a host share connection pools or proxies (its redirect setting is
    ignored: redirects are followed here, hop by hop). ``metadata`` of the result holds
    ``url`` (the final one after redirects), ``content_type`` and ``status``.
    """
    _positive("timeout", timeout, (int, float))
    _positive("max_bytes", max_bytes, int)
    if not isinstance(max_redirects, int) or isinstance(max_redirects, bool) or max_redirects < 0:
        raise ConfigError(f"max_redirects={max_redirects!r} is invalid: expected an integer >= 0")
    if not isinstance(url, str) or not url.strip():
        raise FetchError("no URL given; pass an http:// or https:// URL", url=str(url))
    requested = urldefrag(url.strip())[0]
    try:
        current = httpx.URL(requested)
    except (httpx.InvalidURL, TypeError) as exc:
        raise FetchError(f"{requested}: not a valid URL ({exc})", url=requested) from exc
    _check_url(current, requested)
    own = client is None
    session = client if client is not None else httpx.Client(timeout=httpx.Timeout(timeout))
    deadline = time.monotonic() + timeout
    try:
        return _fetch(
            session, current, requested, deadline, timeout, max_bytes, max_redirects, headers
        )
    finally:
        if own:
            session.close()


def _fetch(
    session: httpx.Client,
    current: httpx.URL,
    requested: str,
    deadline: float,
    timeout: float,
    max_bytes: int,
    max_redirects: int,
    headers: Mapping[str, str] | None,
) -> LoadedDocument:
    sent = {"User-Agent": _USER_AGENT, "Accept": "text/html, text/*;q=0.9, */*;q=0.1"}
    sent.update(headers or {})
    redirects = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(f"{requested}: timed out after {timeout:g} s", url=requested)
        request = session.build_request("GET", current, headers=sent, timeout=remaining)
        try:
            response = session.send(request, stream=True, follow_redirects=False)
        except httpx.TimeoutException as exc:
            raise FetchError(
                f"{requested}: timed out after {timeout:g} s ({type(exc).__name__}); "
                "check the server or raise timeout=",
                url=requested,
            ) from exc
        except httpx.HTTPError as exc:
            raise FetchError(f"{requested}: request failed ({exc})", url=requested) from exc
        try:
            if response.has_redirect_location:
                redirects += 1
                if redirects > max_redirects:
                    raise FetchError(
                        f"{requested}: more than {max_redirects} redirect(s) (last to "
                        f"{response.headers['location']}); fetch the final URL",
                        url=requested,
                        status=response.status_code,
                    )
                current = current.join(response.headers["location"])
                _check_url(current, requested)
                continue
            body = _read(response, requested, deadline, timeout, max_bytes)
        finally:
            response.close()
        media_type, _, params = response.headers.get("content-type", "").partition(";")
        document = load_bytes(
            body,
            requested,
            path=requested,
            kind=_kind(media_type.strip().lower(), current),
            encoding=_charset(params),
        )
        metadata = {
            **document.metadata,
            "url": str(current),
            "content_type": media_type.strip().lower(),
            "status": response.status_code,
        }
        return replace(document, metadata=metadata)


def _read(
    response: httpx.Response, requested: str, deadline: float, timeout: float, max_bytes: int
) -> bytes:
    status = response.status_code
    if not 200 <= status < 300:
        raise FetchError(
            f"{requested}: HTTP {status} {response.reason_phrase}".rstrip()
            + ("; check the URL" if status == 404 else ""),
            url=requested,
            status=status,
        )
    raw_type = response.headers.get("content-type", "")
    media_type = raw_type.partition(";")[0].strip().lower()
    if not media_type or not _allowed(media_type):
        shown = media_type or "none"
        raise FetchError(
            f"{requested}: content type {shown!r} is not allowed; only text/*, HTML, JSON "
            "and XML pages are fetched (download other files and load them from disk)",
            url=requested,
            status=status,
        )
    declared = response.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise FetchError(
            f"{requested}: Content-Length {int(declared):,} bytes is over max_bytes="
            f"{max_bytes:,}; raise max_bytes to fetch it",
            url=requested,
            status=status,
        )
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise FetchError(
                    f"{requested}: body passed max_bytes={max_bytes:,} while streaming; "
                    "raise max_bytes to fetch it",
                    url=requested,
                    status=status,
                )
            if time.monotonic() > deadline:
                raise FetchError(f"{requested}: timed out after {timeout:g} s", url=requested)
            chunks.append(chunk)
    except httpx.TimeoutException as exc:
        raise FetchError(
            f"{requested}: timed out after {timeout:g} s while reading the body",
            url=requested,
            status=status,
        ) from exc
    except httpx.HTTPError as exc:
        raise FetchError(f"{requested}: reading the body failed ({exc})", url=requested) from exc
    return b"".join(chunks)
