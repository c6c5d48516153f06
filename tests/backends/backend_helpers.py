"""Helpers of the backend tests: the conformance suite and a Milvus Lite fixture factory."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import groundwire as gw

#: Why the Milvus tests are skipped when the extra is missing (CI installs it via [test]).
MILVUS_MISSING = "pymilvus/milvus-lite not installed: pip install 'groundwire[milvus]'"
HAVE_MILVUS = importlib.util.find_spec("pymilvus") is not None and (
    importlib.util.find_spec("milvus_lite") is not None
)


class LiteServer:
    """One Milvus Lite file for a test class; every collection exported to it is closed and
    the file's server process stops when the class is done."""

    def __init__(self, folder: Path) -> None:
        self.uri = str(folder / "milvus.db")
        self.backends: list[gw.MilvusBackend] = []
        self._n = 0

    def export(
        self, kb: gw.KnowledgeBase, vectors: gw.VectorIndex | None = None, **kwargs: object
    ) -> gw.MilvusBackend:
        self._n += 1
        name = f"kb{self._n}_{os.getpid()}"
        gw.sync_milvus(kb, self.uri, name, vectors=vectors, **kwargs)  # type: ignore[arg-type]
        backend = gw.MilvusBackend(self.uri, name)
        self.backends.append(backend)
        return backend

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


def lite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    server = LiteServer(tmp_path_factory.mktemp("milvus"))
    try:
        yield server
    finally:
        server.close()
