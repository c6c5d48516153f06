"""Fixtures of the server tests: live servers on 127.0.0.1 over small knowledge bases."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server tests need the [server] extra")
pytest.importorskip("mcp", reason="the server tests need the [server] extra")


def _load(name: str, path: Path) -> Any:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


helpers = _load("server_helpers", Path(__file__).with_name("server_helpers.py"))
ACCESS_SOURCE = helpers.ACCESS_SOURCE
HANDBOOK = helpers.HANDBOOK
Live = helpers.Live

from groundwire import MemoryStore  # noqa: E402
from groundwire.config import ServerSettings  # noqa: E402
from groundwire.server import KeyRing, Registry, ServerState, source_for  # noqa: E402


@pytest.fixture
def access_kb(tmp_path: Path) -> Path:
    path = tmp_path / "access.json"
    path.write_text(json.dumps(ACCESS_SOURCE), encoding="utf-8")
    return path


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "rotate.md").write_text(
        "# Rotating keys\n\nRotate signing keys every month. Revoke the old key after a day.\n",
        encoding="utf-8",
    )
    (folder / "backup.md").write_text(
        "# Backups\n\nBackups run nightly and are kept for thirty days. Keys are not backed up.\n",
        encoding="utf-8",
    )
    return folder


@pytest.fixture
def make_server(access_kb: Path, docs_dir: Path) -> Iterator[Callable[..., Any]]:
    """``make_server(settings=..., auth=True, provider=None, specs=None)`` → a live server."""
    running: list[Any] = []

    def make(
        *,
        settings: ServerSettings | None = None,
        auth: bool = True,
        provider: Any = None,
        specs: list[str] | None = None,
        embedder: Any = None,
        memory: Path | None = None,
        **app_options: Any,
    ) -> Any:
        chosen = specs or [f"handbook={HANDBOOK}", f"access={access_kb}", f"docs={docs_dir}"]
        registry = Registry([source_for(spec, 5_000, embedder) for spec in chosen])
        registry.open_all()
        state = ServerState(
            registry,
            # No rate limit unless a test sets one: a fast machine would trip the default
            # bucket in tests that send many requests (the limit has its own tests).
            settings or ServerSettings(port=0, rate_per_second=0),
            keys=KeyRing.from_items(helpers.keys_items()) if auth else None,
            provider=provider,
            memory=None if memory is None else MemoryStore(memory),
        )
        live = helpers.start(state, **app_options)
        running.append(live)
        return live

    yield make
    for live in running:
        live.stop()


@pytest.fixture
def live(make_server: Callable[..., Any]) -> Any:
    """The default server: handbook, a labeled knowledge base, documents; keys required."""
    return make_server()
