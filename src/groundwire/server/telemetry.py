"""What a server tells its operator: Prometheus metrics and a JSON-lines access log.

Metrics (``GET /v1/metrics``, Prometheus text format), each on the app's own registry:

- ``groundwire_requests_total{route,method,status}`` and
  ``groundwire_request_duration_seconds{route}`` (a histogram);
- ``groundwire_grounding_failures_total{kb,reason}``: turns that returned no block, by
  ``failure_reason`` (evidence reasons for documents);
- ``groundwire_snapshot_age_seconds{kb}`` and ``groundwire_snapshot_generation{kb}``.

The access log writes one JSON object per request to the ``groundwire.server.access``
logger: time, method, route, status, duration, bytes sent, key id, knowledge base and
snapshot. The query text appears only when ``log_queries`` is on; the key's secret never.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from groundwire.server.registry import Registry

__all__ = ["AccessLog", "Telemetry", "note"]

access_logger = logging.getLogger("groundwire.server.access")

#: Request latency buckets in seconds: a lexical turn takes about a millisecond, a
#: generated answer seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: Where handlers leave facts for the access log (``scope["state"]`` keys).
STATE_KEY = "groundwire.log"


def note(scope: MutableMapping[str, Any], **facts: Any) -> None:
    """Record facts about this request (``request.scope``) for its access-log line."""
    state = scope.setdefault("state", {})
    if isinstance(state, dict):
        state.setdefault(STATE_KEY, {}).update(facts)


class _Snapshots(Collector):
    """Snapshot age and generation of every served knowledge base, read at scrape time."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        age = GaugeMetricFamily(
            "groundwire_snapshot_age_seconds",
            "Seconds since the served snapshot was installed",
            labels=["kb"],
        )
        generation = GaugeMetricFamily(
            "groundwire_snapshot_generation",
            "Generation of the served snapshot (1 at start, +1 per reload)",
            labels=["kb"],
        )
        now = time.time()
        for name in self._registry.names:
            try:
                served = self._registry.current(name)
            except Exception:  # not open yet
                continue
            age.add_metric([name], served.age(now))
            generation.add_metric([name], served.generation)
        yield age
        yield generation


class Telemetry:
    """The metrics of one app (its own Prometheus registry, so apps never share counts)."""

    def __init__(self, registry: Registry) -> None:
        self.prometheus = CollectorRegistry()
        self.requests = Counter(
            "groundwire_requests",
            "HTTP requests answered",
            ["route", "method", "status"],
            registry=self.prometheus,
        )
        self.latency = Histogram(
            "groundwire_request_duration_seconds",
            "Time to answer a request (to the end of its body)",
            ["route"],
            buckets=_BUCKETS,
            registry=self.prometheus,
        )
        self.failures = Counter(
            "groundwire_grounding_failures",
            "Turns that returned no block, by failure reason",
            ["kb", "reason"],
            registry=self.prometheus,
        )
        self.prometheus.register(_Snapshots(registry))

    def failure(self, kb: str, reason: str | None) -> None:
        """Count a turn that returned no block."""
        if reason:
            self.failures.labels(kb, reason).inc()

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.prometheus)


def _route(scope: Scope) -> str:
    """The route template (``/v1/entries/{entry_id}``): a bounded label, never raw text."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    raw = str(scope.get("path", ""))
    if raw.startswith("/static/"):
        return "/static"
    return "unmatched"


class AccessLog:
    """ASGI middleware: one JSON access-log line and the request metrics per request."""

    def __init__(self, app: ASGIApp, telemetry: Telemetry, log_queries: bool = False) -> None:
        self.app = app
        self.telemetry = telemetry
        self.log_queries = log_queries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        sent = 0

        async def counting_send(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        state = scope.setdefault("state", {})
        try:
            await self.app(scope, receive, counting_send)
        finally:
            elapsed = time.perf_counter() - started
            route = _route(scope)
            self.telemetry.requests.labels(route, scope.get("method", ""), str(status)).inc()
            self.telemetry.latency.labels(route).observe(elapsed)
            facts = dict(state.get(STATE_KEY, {})) if isinstance(state, dict) else {}
            if not self.log_queries:
                facts.pop("query", None)
            line = {
                "ts": round(time.time(), 3),
                "method": scope.get("method"),
                "route": route,
                "status": status,
                "duration_ms": round(elapsed * 1000, 3),
                "bytes": sent,
                "client": (scope.get("client") or ("", 0))[0],
                **facts,
            }
            access_logger.info(json.dumps(line, ensure_ascii=False, sort_keys=True))
