"""Query-side stop words: words that never make a document relevant to a question.

An index keeps words such as "how", "can" or "what" when its analyzer's stop list is
short (curated entries use Lucene's 33 words, so titles and aliases stay whole phrases).
In a question they only frame it: "how do I", "what is the", "can I". The relevance gate
ignores them. For English that is the extended function-word list
(:data:`~groundwire.text.stopwords.EXTENDED_ENGLISH`); other languages have no built-in
list, so only the analyzer's own stop words apply.
"""

from __future__ import annotations

from typing import Any

from groundwire.text.analyzer import Analyzer
from groundwire.text.stopwords import EXTENDED_ENGLISH

__all__ = ["QUERY_STOPWORDS", "query_stopwords"]

#: Query-side stop words per Snowball language.
QUERY_STOPWORDS = {"english": EXTENDED_ENGLISH, "porter": EXTENDED_ENGLISH}


# Normalized lists per analyzer configuration (a handful of configurations per process).
_cache: dict[tuple[Any, ...], frozenset[str]] = {}


def query_stopwords(analyzer: Analyzer) -> frozenset[str]:
    """The query-side stop words of ``analyzer``'s language, normalized as its words are."""
    key = analyzer.config.key()
    found = _cache.get(key)
    if found is None:
        words = QUERY_STOPWORDS.get(analyzer.config.language.lower(), frozenset())
        found = frozenset(analyzer.normalize(word) for word in words)
        if len(_cache) >= 64:
            _cache.clear()
        _cache[key] = found
    return found
