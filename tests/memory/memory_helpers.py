"""Helpers for agent-memory tests: scopes, a settable clock, a small real embedder.

Loaded by tests/conftest.py as ``memory_helpers`` so test modules can import from it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from groundwire import MemoryRecallConfig
from groundwire.memory import MemoryScope

#: Every recall stage off: what is left is the fused channel score.
BARE = MemoryRecallConfig(
    facets=False,
    gravity=False,
    hub=False,
    resolution=False,
    freshness=False,
    currentness=False,
    importance=False,
)
ACME = MemoryScope("acme", "support-bot")
GLOBEX = MemoryScope("globex", "support-bot")
OTHER_AGENT = MemoryScope("acme", "sales-bot")
T0 = 1_700_000_000.0
DAY = 86_400.0


class Clock:
    """A settable clock (Unix seconds) for decay and freshness."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class WordEmbedder:
    """A real, deterministic embedder: bag of words hashed into 64 dimensions, normalized.

    Words listed in ``synonyms`` share a dimension, so "car" and "automobile" are close
    while sharing no letters: enough to exercise a semantic path without a model.
    """

    model_id = "test-words-64"
    dimensions = 64
    location = "local"

    def __init__(self, synonyms: Sequence[Sequence[str]] = ()) -> None:
        self.groups = {w: group[0] for group in synonyms for w in group}
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimensions, np.float32)
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            word = self.groups.get(word, word)
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dimensions] += 1.0
        norm = np.linalg.norm(vector)
        return vector / norm if norm else vector

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.vstack([self._vector(t) for t in texts]) if texts else np.zeros((0, 64))

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)


def scripted(replies: dict[str, list[str]]) -> object:
    """A zero-latency scripted model: a function of a ChatRequest answering, per pipeline
    call kind (``extract``, ``decision``, ``contradiction``, ``prospective_index``,
    ``continuity_score``, ``summary``), the next reply queued for that kind."""

    def answer(request: object) -> str:
        kind = request.metadata["groundwire"].removeprefix("memory-")  # type: ignore[attr-defined]
        queue = replies.get(kind)
        assert queue, f"no scripted reply left for a {kind} call"
        return queue.pop(0)

    return answer
