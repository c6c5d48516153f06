"""Load on loopback: ``groundwire serve`` vs the same calls in-process.

- **Data:** the example handbook (80 entries) and the 40 questions of
  ``examples/handbook-eval/queries.jsonl``, cycled.
- **Measures:** for ``POST /v1/ground`` and ``POST /v1/search`` (limit 10), at 1, 8 and
  32 concurrent clients (an asyncio httpx client, one keep-alive connection each):
  requests/s, latency p50/p99, errors (any non-200 counts); each level runs for
  ``--seconds`` or ``--requests``, whichever ends first. Then the same turns in-process
  (``engine.ground``, ``kb.reader(None).search``), one at a time, and the server's
  overhead at 1 client: p50 over HTTP minus p50 in-process, and their ratio.
- **Server:** a separate process (``groundwire serve --no-auth --rate 0``, so the client
  and the server do not share a GIL), access log to /dev/null. Both run on this machine.
- **Run:** ``.venv/bin/python benchmarks/bench_server.py`` — about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

import groundwire as gw
from _common import percentile, print_table, source_state, versions
from groundwire.payloads import hit_json, outcome_json

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = ROOT / "examples" / "handbook"
QUERIES = ROOT / "examples" / "handbook-eval" / "queries.jsonl"
GROUNDWIRE = str(Path(sys.executable).with_name("groundwire"))


def _queries() -> list[str]:
    lines = QUERIES.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_server(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [GROUNDWIRE, "serve", str(HANDBOOK), "--no-auth", "--rate", "0", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/healthz"
    for _ in range(1200):
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            if process.poll() is not None:
                raise SystemExit("the server exited at start-up") from None
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the server did not start in 120 s")


async def _get_floor(url: str, seconds: float) -> float:
    """p50 ms of ``GET /healthz`` at 1 client: the cost of any request on this machine."""
    latencies = []
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while time.perf_counter() < deadline and len(latencies) < 2_000:
            started = time.perf_counter()
            await client.get("/healthz")
            latencies.append(time.perf_counter() - started)
    return percentile(latencies, 50) * 1000


async def _load(
    url: str, path: str, bodies: list[dict[str, Any]], clients: int, seconds: float, limit: int
) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    sent = 0
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    # Clients (and their connections) are made before the clock starts: making 32 httpx
    # clients takes seconds on a busy machine, which is the client's cost, not the server's.
    http = [httpx.AsyncClient(base_url=url, timeout=60, limits=limits) for _ in range(clients)]
    await asyncio.gather(*(client.get("/healthz") for client in http))

    async def worker(n: int) -> None:
        nonlocal errors, sent
        client = http[n]
        i = n
        while time.perf_counter() < deadline and sent < limit:
            sent += 1
            body = bodies[i % len(bodies)]
            i += clients
            began = time.perf_counter()
            response = await client.post(path, json=body)
            latencies.append(time.perf_counter() - began)
            if response.status_code != 200:
                errors += 1

    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(*(worker(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    await asyncio.gather(*(client.aclose() for client in http))
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50": percentile(latencies, 50) * 1000,
        "p99": percentile(latencies, 99) * 1000,
        "errors": errors,
    }


def _in_process(queries: list[str], passes: int) -> dict[str, float]:
    """p50 ms of the same calls made directly on the library, one at a time.

    Each builds the same answer the server sends (``outcome_json``; hits with their
    per-field breakdown, which the library computes lazily), so the difference is HTTP,
    JSON and the server's own work, not a cheaper call.
    """
    config = gw.GroundingConfig(sources=gw.load_sources(HANDBOOK), timeout_ms=5_000)
    with gw.GroundingEngine(config) as engine:
        engine.ready()
        kb = engine.knowledge_base
        assert kb is not None
        for query in queries:  # warm the caches as the server's first requests do
            engine.ground(query)
        timings: dict[str, list[float]] = {"ground": [], "search": []}
        for _ in range(passes):
            for query in queries:
                started = time.perf_counter()
                outcome_json(engine.ground(query, scope=gw.Scope(())))
                timings["ground"].append(time.perf_counter() - started)
                started = time.perf_counter()
                reader = kb.reader(None)
                hits = reader.search(query, k=10)
                [(hit_json(hit), reader.get(hit.id)) for hit in hits]
                timings["search"].append(time.perf_counter() - started)
    return {name: percentile(values, 50) * 1000 for name, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per endpoint and level")
    parser.add_argument("--requests", type=int, default=5_000, help="most per level")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--passes", type=int, default=5, help="in-process passes of 40 turns")
    args = parser.parse_args()
    print(versions(["groundwire", "fastapi", "uvicorn", "httpx", "mcp"]))
    print(f"cpus: {os.cpu_count()}  {source_state(ROOT)}")
    queries = _queries()
    bodies = {
        "/v1/ground": [{"query": query} for query in queries],
        "/v1/search": [{"query": query, "limit": 10} for query in queries],
    }
    port = _free_port()
    server = _start_server(port)
    url = f"http://127.0.0.1:{port}"
    try:
        for path, items in bodies.items():  # warm-up, not measured
            asyncio.run(_load(url, path, items, 1, 2.0, len(items)))
        floor = asyncio.run(_get_floor(url, args.seconds))
        results = {
            (path, clients): asyncio.run(
                _load(url, path, bodies[path], clients, args.seconds, args.requests)
            )
            for path in bodies
            for clients in args.clients
        }
    finally:
        server.terminate()
        server.wait(timeout=60)
    direct = _in_process(queries, args.passes)
    rows = [
        [path, clients, r["requests"], f"{r['rps']:.0f}", f"{r['p50']:.2f}", f"{r['p99']:.2f}",
         r["errors"]]
        for (path, clients), r in results.items()
    ]  # fmt: skip
    print_table(["endpoint", "clients", "requests", "req/s", "p50 ms", "p99 ms", "errors"], rows)
    overhead = []
    for name in ("ground", "search"):
        one = results.get((f"/v1/{name}", 1))
        if one is None:
            continue
        http = one["p50"]
        overhead.append(
            [name, f"{direct[name]:.2f}", f"{http:.2f}", f"{http - direct[name]:.2f}",
             f"{http / direct[name]:.1f}x"]
        )  # fmt: skip
    print_table(
        ["call", "in-process p50 ms", "HTTP p50 ms (1 client)", "overhead ms", "ratio"], overhead
    )
    print(f"floor: GET /healthz p50 {floor:.2f} ms at 1 client (framework + loopback)")
    total_errors = sum(r["errors"] for r in results.values())
    print(f"errors: {total_errors}")
    if total_errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
