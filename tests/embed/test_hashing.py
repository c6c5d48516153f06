"""The hashing embedder: seed 003's recipe, bit-identical across runs and processes."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire.embed import HashingEmbedder, create_embedder
from groundwire.embed.hashing import fnv1a_32

TEXTS = ["Rotate an API key", "Webhook deliveries failing with 401", "", "café — 日本語 ok"]


def _reference(text: str, d: int = 128) -> list[float]:
    """The recipe written out plainly (seed 003), independent of the implementation."""
    chars = [0.0] * d
    for unit in range(0, len(text.encode("utf-16-le")), 2):
        code = int.from_bytes(text.encode("utf-16-le")[unit : unit + 2], "little")
        chars[code % d] += 1
    words = [0.0] * d
    cleaned = "".join(
        c for c in text.lower() if c in "abcdefghijklmnopqrstuvwxyz0123456789" or c.isspace()
    )
    for word in cleaned.split():
        if len(word) > 1:
            h = 2166136261
            for c in word:
                h = ((h ^ ord(c)) * 16777619) % 2**32
            words[h % d] += 1
    combined = [0.4 * c + 0.6 * w for c, w in zip(chars, words, strict=True)]
    norm = math.sqrt(math.fsum(v * v for v in combined))
    return [v / norm for v in combined] if norm else combined


def test_fnv1a_known_values() -> None:
    assert fnv1a_32("") == 2166136261
    assert fnv1a_32("a") == 0xE40C292C  # the published FNV-1a 32-bit test vector
    assert fnv1a_32("foobar") == 0xBF9CF968


def test_matches_the_recipe_and_is_unit_length() -> None:
    embedder = HashingEmbedder()
    vectors = embedder.embed_documents(TEXTS)
    assert vectors.dtype == np.float32
    assert vectors.shape == (4, 128)
    for text, vector in zip(TEXTS, vectors, strict=True):
        np.testing.assert_array_equal(vector, np.array(_reference(text), dtype=np.float32))
    norms = np.linalg.norm(vectors, axis=1)
    np.testing.assert_allclose(norms[[0, 1, 3]], 1.0, atol=1e-6)
    assert norms[2] == 0.0  # the empty text
    assert embedder.model_id == "hashing-fnv1a-128"
    assert embedder.location == "local"
    np.testing.assert_array_equal(embedder.embed_query(TEXTS[0]), vectors[0])


def test_bit_identical_in_another_process() -> None:
    code = (
        "import sys, groundwire.embed as e;"
        f"sys.stdout.write(e.HashingEmbedder().embed_documents({TEXTS!r}).tobytes().hex())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    here = HashingEmbedder().embed_documents(TEXTS).tobytes().hex()
    assert out == here


def test_similar_texts_are_closer() -> None:
    e = create_embedder("hashing:64")
    a, b, c = e.embed_documents(["rotate the api key", "api key rotation", "quarterly tax filing"])
    assert float(a @ b) > float(a @ c)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_a_finite_unit_or_zero_vector(text: str) -> None:
    vector = HashingEmbedder(32).embed_query(text)
    norm = float(np.linalg.norm(vector))
    assert np.isfinite(vector).all()
    assert norm == 0.0 or abs(norm - 1.0) < 1e-5
