"""Built-in stop word lists, keyed by Snowball language name."""

from __future__ import annotations

from typing import Final

__all__ = ["STOPWORDS", "stopwords_for"]

#: English: the classic 33-word list of Lucene's EnglishAnalyzer (also bm25s' "en").
#: Short on purpose: question words such as "how" and "why" stay searchable.
_ENGLISH_WORDS = """
a an and are as at be but by for if in into is it no not of on or such that the
their then there these they this to was will with
"""
ENGLISH: Final[frozenset[str]] = frozenset(_ENGLISH_WORDS.split())

STOPWORDS: Final[dict[str, frozenset[str]]] = {"english": ENGLISH, "porter": ENGLISH}


def stopwords_for(language: str) -> frozenset[str]:
    """The built-in list for ``language``, or an empty set when none is shipped."""
    return STOPWORDS.get(language.lower(), frozenset())
