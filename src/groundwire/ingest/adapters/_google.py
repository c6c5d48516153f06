"""A small client for Google's REST APIs (Gmail, Drive) over httpx: auth, errors, retries.

Requests carry ``Authorization: Bearer <token>``, the token asked of the host's callback
on every request (it may refresh it). Errors are Google's JSON error bodies
(``{"error": {"code", "message", "errors": [{"reason", "location"}]}}``), mapped to
:class:`~groundwire.errors.SyncError`; a 429 or 5xx is retried with backoff (honouring
``Retry-After``). :class:`CursorExpiredError` is raised where a delta cursor is no longer
accepted (Gmail's 404 on an old history id; Drive's invalid or expired page token), so
the provider can fall back to a full listing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from groundwire.config import SYNC_MAX_ORIGINAL_BYTES, SYNC_REQUEST_TIMEOUT_S
from groundwire.errors import SyncError
from groundwire.ingest.adapters.base import Batch, Change, batched

__all__ = ["CursorExpiredError", "GoogleApi", "delta_or_listing"]

_ATTEMPTS = 4
_BACKOFF_S = 0.5
_MAX_WAIT_S = 8.0


class CursorExpiredError(Exception):
    """The delta cursor (history id, page token) is no longer valid: list everything."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


def _problem(response: httpx.Response) -> tuple[str, str, str]:
    """``(message, reason, location)`` of a Google error body (best effort)."""
    try:
        error = response.json().get("error", {})
    except ValueError:
        return response.text[:200], "", ""
    if not isinstance(error, Mapping):
        return str(error)[:200], "", ""
    first = (error.get("errors") or [{}])[0]
    return (
        str(error.get("message", "")),
        str(first.get("reason", "")),
        str(first.get("location", "")),
    )


class GoogleApi:
    """Authorized JSON and media requests to one Google API base URL."""

    def __init__(
        self,
        base_url: str,
        token: Callable[[], str],
        source_id: str,
        *,
        client: httpx.Client | None = None,
        timeout: float = SYNC_REQUEST_TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.source_id = source_id
        self._own = client is None
        self.client = client or httpx.Client(timeout=httpx.Timeout(timeout))
        self.sleep = sleep

    def close(self) -> None:
        """Close the connection pool (when this client made it)."""
        if self._own:
            self.client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = None,
        expired: Callable[[int, str, str], bool] | None = None,
        max_bytes: int = SYNC_MAX_ORIGINAL_BYTES,
    ) -> httpx.Response:
        """One call, retried on 429/5xx; CursorExpiredError when ``expired(status, reason,
        location)`` says so; SyncError for every other failure."""
        url = f"{self.base_url}{path}"
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                headers = {"Authorization": f"Bearer {self.token()}"}
                with self.client.stream(
                    method, url, params=params, json=json, headers=headers
                ) as response:
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > max_bytes:
                        raise SyncError(
                            f"{url}: {int(declared):,} bytes is over the {max_bytes:,}-byte limit",
                            source_id=self.source_id,
                        )
                    body = bytearray()
                    for block in response.iter_bytes():
                        body.extend(block)
                        if len(body) > max_bytes:
                            raise SyncError(
                                f"{url}: the body passed the {max_bytes:,}-byte limit",
                                source_id=self.source_id,
                            )
                    done = httpx.Response(
                        response.status_code,
                        headers=response.headers,
                        content=bytes(body),
                        request=response.request,
                    )
            except httpx.HTTPError as exc:
                if attempt == _ATTEMPTS:
                    raise SyncError(
                        f"{url}: request failed ({type(exc).__name__}: {exc})",
                        source_id=self.source_id,
                        retryable=True,
                    ) from exc
                self.sleep(min(_MAX_WAIT_S, _BACKOFF_S * 2 ** (attempt - 1)))
                continue
            status = done.status_code
            if status < 400:
                return done
            message, reason, location = _problem(done)
            if expired is not None and expired(status, reason, location):
                raise CursorExpiredError(f"HTTP {status} {reason or message}".strip())
            if (status == 429 or status >= 500) and attempt < _ATTEMPTS:
                wait = done.headers.get("retry-after", "")
                delay = (
                    float(wait)
                    if wait.replace(".", "", 1).isdigit()
                    else _BACKOFF_S * 2 ** (attempt - 1)
                )
                self.sleep(min(_MAX_WAIT_S, delay))
                continue
            hint = "; check the token the source's token_env names" if status in (401, 403) else ""
            raise SyncError(
                f"{url}: HTTP {status} {message or done.reason_phrase}{hint}",
                source_id=self.source_id,
                retryable=status == 429 or status >= 500,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def get_json(self, path: str, params: Any = None, **options: Any) -> dict[str, Any]:
        """GET a JSON object."""
        response = self.request("GET", path, params=params, **options)
        try:
            data = response.json()
        except ValueError as exc:
            raise SyncError(
                f"{self.base_url}{path}: the answer is not JSON", source_id=self.source_id
            ) from exc
        if not isinstance(data, dict):
            raise SyncError(
                f"{self.base_url}{path}: expected a JSON object", source_id=self.source_id
            )
        return data

    def post_json(self, path: str, body: Any, params: Any = None) -> dict[str, Any]:
        """POST a JSON body; the JSON answer (empty for 204)."""
        response = self.request("POST", path, params=params, json=body)
        if not response.content:
            return {}
        data = response.json()
        return data if isinstance(data, dict) else {}


def delta_or_listing(
    cursor: str | None,
    field: str,
    *,
    delta: Callable[[str], tuple[list[Change], str]] | None,
    start: Callable[[], str],
    listing: Callable[[], Iterator[Change]],
    size: int,
    what: str,
) -> Iterator[Batch]:
    """The batches of a Google source: a delta from the cursor's ``field`` (a history id,
    a page token) when ``delta`` is given and the cursor holds one, else a full listing.

    The listing's cursor is ``start()``, taken before listing so nothing is missed; a
    delta that raises :class:`CursorExpiredError` falls back to it, saying why.
    """
    state = json.loads(cursor) if cursor else {}
    reason = None
    if state.get(field) and delta is not None:
        try:
            changes, position = delta(str(state[field]))
        except CursorExpiredError as exc:
            reason = f"{what} {state[field]} is no longer valid ({exc.detail}): full resync"
        else:
            yield from batched(
                iter(changes),
                cursor=json.dumps({field: position}),
                resume=cursor,
                full=False,
                size=size,
                watermark=f"{what} {position}",
            )
            return
    position = start()
    yield from batched(
        listing(),
        cursor=json.dumps({field: position}),
        resume=cursor,
        full=True,
        size=size,
        watermark=f"{what} {position}",
        resync_reason=reason,
    )
