"""Fixtures for agent-memory tests: a store on a real file with a settable clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memory_helpers import Clock

from groundwire.memory import MemoryStore


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[MemoryStore]:
    with MemoryStore(tmp_path / "memory.db", clock=clock) as opened:
        yield opened
