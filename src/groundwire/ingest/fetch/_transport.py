"""The network side of the URL fetcher: one deadline, checked addresses, bounded decoding.

- :class:`Deadline` is the fetch's single time budget. Every socket operation (DNS,
  connect, TLS handshake, each read and write) gets at most what is left of it, so a
  server that drips its headers or body a byte at a time is cut off when the budget
  ends, not when it stops dripping (httpx's own timeouts apply per operation).
- :class:`GuardedBackend` is the httpcore network backend that makes every connection:
  it resolves the host once, checks *every* address it resolves to (when the private
  address guard is on), and connects only to those checked addresses — so DNS cannot
  answer differently between the check and the connect, and each redirect hop's new
  connection is checked the same way.
- :func:`decode_body` undoes ``Content-Encoding`` layers (gzip, deflate) lazily, in
  bounded steps, so a compression bomb — however many layers deep — stops as soon as
  the decoded bytes pass the cap instead of being inflated in full first.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore

from groundwire.config import FETCH_DECODE_STEP_BYTES, MAX_CONTENT_ENCODINGS
from groundwire.errors import FetchError

__all__ = [
    "TRANSPORT_ERRORS",
    "Deadline",
    "DeadlinePassed",
    "GuardedBackend",
    "decode_body",
    "refusal",
]

#: What the transport (httpcore, h11, sockets, TLS, zlib) may raise for a hostile or
#: broken peer; the fetcher turns each into a FetchError.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    OSError,  # sockets and TLS (ssl.SSLError is an OSError)
    ValueError,  # malformed header values, bad ports, undecodable names (UnicodeError)
    zlib.error,
)


class DeadlinePassed(httpcore.TimeoutException):
    """The fetch's whole time budget is used up."""


class Deadline:
    """A monotonic end time shared by every operation of one fetch."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self, timeout: float | None = None) -> float:
        """Seconds the next operation may take: ``timeout`` capped by what is left.

        Raises :class:`DeadlinePassed` when nothing is left.
        """
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise DeadlinePassed(f"the {self.seconds:g} s deadline passed")
        return remaining if timeout is None else min(timeout, remaining)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries: mapped, 6to4, Teredo client, NAT64."""
    found = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [address for address in found if address is not None]


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def refusal(address: str) -> str | None:
    """Why the private address guard refuses ``address`` (an IP literal), or None.

    Only globally routable unicast addresses pass: loopback, private (RFC 1918, ULA),
    link-local, carrier-grade NAT, multicast, unspecified, reserved and documentation
    ranges are refused, and so are IPv6 forms that embed such an IPv4 address.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        candidates = [*_embedded_ipv4(ip), ip]  # the embedded address says more
    for candidate in candidates:
        if candidate.is_loopback:
            return "a loopback address"
        if candidate.is_link_local:
            return "a link-local address"
        if candidate.is_multicast:
            return "a multicast address"
        if not candidate.is_global:
            return "a private or reserved address"
    return None


def _resolve(host: str, port: int, deadline: Deadline) -> list[str]:
    """Every address ``host`` resolves to (in resolver order), within the deadline."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return [host]
    except ValueError:
        pass
    answer: dict[str, Any] = {}

    def lookup() -> None:
        try:
            answer["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            answer["error"] = exc

    # getaddrinfo has no timeout of its own: wait for it at most what the deadline leaves
    # (a resolver that hangs is left behind in its daemon thread, which it outlives).
    worker = threading.Thread(target=lookup, name="groundwire-dns", daemon=True)
    worker.start()
    worker.join(deadline.left())
    if worker.is_alive():
        raise DeadlinePassed(f"resolving {host} took longer than the deadline")
    if "error" in answer:
        raise httpcore.ConnectError(f"cannot resolve {host} ({answer['error']})")
    addresses = [str(info[4][0]) for info in answer["infos"]]
    return list(dict.fromkeys(addresses))


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and handshake is capped by the deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        upgraded = self._inner.start_tls(ssl_context, server_hostname, self._deadline.left(timeout))
        return _DeadlineStream(upgraded, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class GuardedBackend(httpcore.NetworkBackend):
    """Connections for one fetch: resolved once, checked, and bound to its deadline.

    With ``block_private`` on, a host any of whose addresses :func:`refusal` refuses
    raises :class:`FetchError` before any connection is made.
    """

    def __init__(self, deadline: Deadline, *, block_private: bool, requested: str) -> None:
        self._deadline = deadline
        self._block_private = block_private
        self._requested = requested
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = _resolve(host, port, self._deadline)
        if self._block_private:
            for address in addresses:
                why = refusal(address)
                if why is not None:
                    shown = host if host == address else f"{host} ({address})"
                    raise FetchError(
                        f"{self._requested}: {shown} is {why}; fetching private, loopback and "
                        "link-local addresses is refused (allow them only for hosts you "
                        "trust: block_private_addresses=False, or --allow-private-addresses)",
                        url=self._requested,
                    )
        failure: Exception = httpcore.ConnectError(f"no address to connect to for {host}")
        for address in addresses:
            try:
                stream = self._inner.connect_tcp(
                    address,
                    port,
                    timeout=self._deadline.left(timeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return _DeadlineStream(stream, self._deadline)
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:  # pragma: no cover - the fetcher never asks for one
        raise httpcore.ConnectError("unix sockets are not fetched")

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self._deadline.left()))


def _encodings(header: str, where: str) -> list[str]:
    """The ``Content-Encoding`` layers to undo, outermost first; refuses unknown ones."""
    layers = [item.strip().lower() for item in header.split(",") if item.strip()]
    layers = [layer for layer in layers if layer != "identity"]
    for layer in layers:
        if layer not in ("gzip", "x-gzip", "deflate"):
            raise FetchError(
                f"{where}: content encoding {layer!r} is not supported (gzip and deflate are)",
                url=where,
            )
    if len(layers) > MAX_CONTENT_ENCODINGS:
        raise FetchError(
            f"{where}: {len(layers)} content encodings stacked, over the limit of "
            f"{MAX_CONTENT_ENCODINGS}",
            url=where,
        )
    return layers[::-1]


def _inflate(chunks: Iterable[bytes], layer: str, where: str) -> Iterator[bytes]:
    """One encoding layer undone lazily, at most FETCH_DECODE_STEP_BYTES per step."""
    decoder: Any = None
    ended = False
    for chunk in chunks:
        data = chunk
        while data:
            if decoder is None or ended:
                if layer == "deflate":  # RFC 9110 says zlib-wrapped; some servers send raw
                    zlib_header = len(data) >= 2 and (data[0] * 256 + data[1]) % 31 == 0
                    wbits = zlib.MAX_WBITS if zlib_header and data[0] & 0x0F == 8 else -15
                else:
                    wbits = zlib.MAX_WBITS | 16
                decoder, ended = zlib.decompressobj(wbits), False
            out = decoder.decompress(data, FETCH_DECODE_STEP_BYTES)
            if out:
                yield out
            if decoder.eof:  # a gzip member ended; what follows may be another member
                ended, data = True, decoder.unused_data
            else:
                data = decoder.unconsumed_tail
    if decoder is None:
        return
    if not decoder.eof and not ended:
        rest = decoder.flush(FETCH_DECODE_STEP_BYTES)
        if rest:
            yield rest
        if not decoder.eof:
            raise FetchError(f"{where}: the {layer} body ends early (truncated)", url=where)


def decode_body(chunks: Iterable[bytes], content_encoding: str, where: str) -> Iterator[bytes]:
    """The decoded body, lazily: pull only as many bytes as you mean to accept."""
    stream: Iterable[bytes] = chunks
    for layer in _encodings(content_encoding, where):
        stream = _inflate(stream, layer, where)
    return iter(stream)
