"""The hashing embedder: deterministic vectors without a model (seed 003's recipe).

For a text of ``d`` dimensions (128 by default):

* **character features**: every UTF-16 code unit ``c`` of the text adds 1 at ``c mod d``;
* **word features**: the text is lower-cased, characters other than ``a-z``, ``0-9`` and
  white space are dropped, the rest split on white space; every word of two or more
  characters adds 1 at ``FNV-1a(word) mod d`` (32-bit FNV-1a: offset basis 2166136261,
  prime 16777619, over the word's characters);
* the vector is ``0.4 x characters + 0.6 x words``, scaled to length 1 (an empty text
  gives the zero vector).

Arithmetic is float64 with a correctly rounded sum (``math.fsum``) for the length, then
float32, so the vectors are bit-identical across runs, processes and machines. The
vectors capture shared words and character mix, not meaning: a fallback and a test
double, not a substitute for a language model. Words are ASCII-only by the recipe, so
text in other scripts is represented by its character features alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from groundwire.config import HASHING_CHAR_WEIGHT, HASHING_DIMENSIONS, HASHING_WORD_WEIGHT
from groundwire.embed.base import EmbedderLocation, Matrix, check_texts, first_row
from groundwire.errors import ConfigError

__all__ = ["HashingEmbedder", "fnv1a_32"]

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619
_NOT_WORD = re.compile(r"[^a-z0-9\s]")
_SPACE = re.compile(r"\s+")
_WORD_CACHE_LIMIT = 200_000


def fnv1a_32(word: str) -> int:
    """32-bit FNV-1a of a word's characters (code units below 256, as the recipe's words)."""
    value = _FNV_OFFSET
    for char in word:
        value = ((value ^ ord(char)) * _FNV_PRIME) & 0xFFFFFFFF
    return value


class HashingEmbedder:
    """Seed 003's FNV-1a word and character-code embedding (see the module docstring).

    Local, dependency-free and deterministic; ``model_id`` is ``hashing-fnv1a-<d>``.
    """

    __slots__ = ("_dimensions", "_slots")

    def __init__(self, dimensions: int = HASHING_DIMENSIONS) -> None:
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 2:
            raise ConfigError(f"dimensions={dimensions!r} is invalid: expected an integer >= 2")
        self._dimensions = dimensions
        self._slots: dict[str, int] = {}

    @property
    def model_id(self) -> str:
        """``hashing-fnv1a-<dimensions>``."""
        return f"hashing-fnv1a-{self._dimensions}"

    @property
    def dimensions(self) -> int:
        """The vector length."""
        return self._dimensions

    @property
    def location(self) -> EmbedderLocation:
        """Always ``"local"``."""
        return "local"

    def _slot(self, word: str) -> int:
        slot = self._slots.get(word)
        if slot is None:
            if len(self._slots) >= _WORD_CACHE_LIMIT:
                self._slots.clear()
            slot = self._slots[word] = fnv1a_32(word) % self._dimensions
        return slot

    def _vector(self, text: str) -> np.ndarray:
        d = self._dimensions
        units = np.frombuffer(text.encode("utf-16-le"), dtype="<u2")
        chars = np.bincount(units % d, minlength=d).astype(np.float64)
        words = np.zeros(d, dtype=np.float64)
        cleaned = _NOT_WORD.sub("", text.lower())
        for word in _SPACE.split(cleaned):
            if len(word) > 1:
                words[self._slot(word)] += 1.0
        combined = HASHING_CHAR_WEIGHT * chars + HASHING_WORD_WEIGHT * words
        length = math.sqrt(math.fsum((combined * combined).tolist()))
        if length > 0:
            combined = combined / length
        return combined

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """One vector per text (float32 ``[n, dimensions]``)."""
        checked = check_texts(texts)
        out = np.zeros((len(checked), self._dimensions), dtype=np.float32)
        for row, text in enumerate(checked):
            out[row] = self._vector(text)
        return out

    def embed_query(self, text: str) -> Matrix:
        """The query's vector: the same recipe as a document's."""
        return first_row(self.embed_documents([text]))

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimensions={self._dimensions})"
