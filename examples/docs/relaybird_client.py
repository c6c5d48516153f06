"""A small Relaybird REST API client: authentication, pagination, retries, webhook signatures.

Example::

    client = RelaybirdClient(api_key=os.environ["RELAYBIRD_API_KEY"])
    for workflow in client.list_workflows():
        print(workflow["id"], workflow["name"])
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

BASE_URL = "https://api.relaybird.example/v2"
#: Deliveries whose timestamp is further than this from our clock are rejected.
SIGNATURE_TOLERANCE_SECONDS = 300
#: Attempts for a request answered with 429 or a 5xx status.
MAX_ATTEMPTS = 5


class RelaybirdError(Exception):
    """An API error: ``status`` is the HTTP status, ``code`` the stable RB-xxxx code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


def backoff_delay(attempt: int, retry_after: float | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): Retry-After, else exponential.

    Exponential backoff starts at one second, doubles each attempt, caps at 60 seconds
    and adds up to 10% jitter so that clients do not retry in lockstep.
    """
    if retry_after is not None:
        return retry_after
    base = min(60.0, 2.0 ** (attempt - 1))
    return base + random.uniform(0, base * 0.1)


def verify_signature(raw_body: bytes, header: str, secret: str, now: float | None = None) -> bool:
    """Check a ``Relaybird-Signature`` header (``t=<timestamp>,v1=<hex>``) for a raw body.

    During a secret rotation the header carries two ``v1`` values; either may match.
    """
    parts = [item.split("=", 1) for item in header.split(",") if "=" in item]
    timestamps = [value for key, value in parts if key == "t"]
    signatures = [value for key, value in parts if key == "v1"]
    if not timestamps or not signatures:
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamps[0])) > SIGNATURE_TOLERANCE_SECONDS:
        return False
    payload = timestamps[0].encode() + b"." + raw_body
    expected = hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, signature) for signature in signatures)


class RelaybirdClient:
    """Calls the REST API with a bearer key, retrying 429 and 5xx answers."""

    def __init__(self, api_key: str, base_url: str = BASE_URL, timeout: float = 30.0) -> None:
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one request and return the decoded JSON; raises RelaybirdError on failure."""
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            request = urllib.request.Request(
                self.base_url + path,
                data=data,
                method=method,
                headers={
                    "Authorization": f"Bearer {self.api_key}",
                    "Content-Type": "application/json",
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.load(response)
            except urllib.error.HTTPError as exc:
                error = json.load(exc).get("error", {})
                retryable = exc.code == 429 or exc.code >= 500
                if not retryable or attempt == MAX_ATTEMPTS:
                    code, message = error.get("code", ""), error.get("message", "")
                    raise RelaybirdError(exc.code, code, message) from exc
                retry_after = exc.headers.get("Retry-After")
                time.sleep(backoff_delay(attempt, float(retry_after) if retry_after else None))
        raise AssertionError("unreachable")

    def list_workflows(self, limit: int = 100) -> Iterator[dict[str, Any]]:
        """Every workflow of the workspace, following pagination cursors."""
        cursor = None
        while True:
            query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
            page = self.request("GET", "/workflows" + query)
            yield from page["data"]
            if not page["has_more"]:
                return
            cursor = page["next_cursor"]

    def start_run(self, workflow_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Start a run of a workflow (at most 10 per second per workflow)."""
        result: dict[str, Any] = self.request(
            "POST", f"/workflows/{workflow_id}/runs", {"input": payload}
        )
        return result
