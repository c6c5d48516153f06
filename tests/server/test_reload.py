"""Reload under concurrent requests: no failed request, every response from exactly one snapshot."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from server_helpers import ADMIN, Live

ENTRY = {"id": "ops.rotate", "title": "Rotate keys", "summary": "rotate signing keys monthly",
         "domain": "ops", "integrations": []}  # fmt: skip
CLIENTS = 4
RELOADS = 6


def write_source(path: Path, version: str, **extra: Any) -> None:
    source = {"id": "ops", "version": version, "entries": [{**ENTRY, **extra}]}
    path.write_text(json.dumps(source), encoding="utf-8")


def test_reload_under_load_serves_each_response_from_one_snapshot(
    tmp_path: Path, make_server: Callable[..., Live]
) -> None:
    source = tmp_path / "ops.json"
    write_source(source, "g1")
    live = make_server(specs=[f"ops={source}"])
    version_of = {1: "g1"}
    stop = threading.Event()
    seen: list[tuple[int, str, int]] = []  # (status, snapshot, version cited)
    failures: list[str] = []

    def client() -> None:
        with live.client(ADMIN) as http:
            while not stop.is_set():
                response = http.post("/v1/ground", json={"query": "rotate signing keys"})
                if response.status_code != 200:
                    failures.append(response.text)
                    continue
                data = response.json()
                tags = data["block"]["citations"]
                cited = {re.fullmatch(r"\[KB:ops\.rotate@(.+)\]", tag).group(1) for tag in tags}  # type: ignore[union-attr]
                assert len(cited) == 1
                seen.append((response.status_code, data["snapshot"], cited.pop()))  # type: ignore[arg-type]

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        with live.client(ADMIN) as admin:
            for generation in range(2, RELOADS + 2):
                write_source(source, f"g{generation}")
                answer = admin.post("/v1/reload", json={"kb": "ops"})
                assert answer.status_code == 200, answer.text
                result = answer.json()["results"][0]
                assert result == {**result, "reloaded": True, "snapshot": f"ops@{generation}"}
                version_of[generation] = f"g{generation}"
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not failures
    assert seen
    for _, snapshot, version in seen:
        generation = int(snapshot.removeprefix("ops@"))
        assert version == version_of[generation], (snapshot, version)
    assert live.state.registry.current("ops").generation == RELOADS + 1


def test_a_failed_reload_keeps_the_current_snapshot(
    tmp_path: Path, make_server: Callable[..., Live]
) -> None:
    source = tmp_path / "ops.json"
    write_source(source, "g1")
    live = make_server(specs=[f"ops={source}"])
    write_source(source, "g2", integrations="not-a-list")  # a validation error
    with live.client(ADMIN) as admin:
        result = admin.post("/v1/reload", json={"kb": "ops"}).json()["results"][0]
        after = admin.post("/v1/ground", json={"query": "rotate signing keys"}).json()
        status = admin.get("/v1/status").json()["knowledge_bases"][0]
    assert result["reloaded"] is False
    assert result["snapshot"] == "ops@1"
    assert "integrations" in result["error"]
    assert after["snapshot"] == "ops@1"
    assert after["block"]["citations"] == ["[KB:ops.rotate@g1]"]
    assert status["last_reload_error"] == result["error"]
    source.write_text("{broken", encoding="utf-8")
    with live.client(ADMIN) as admin:
        broken = admin.post("/v1/reload", json={}).json()["results"][0]
    assert broken["reloaded"] is False
    assert broken["error"]
