"""groundwire inside LangChain, LlamaIndex and Haystack: retrievers, a node postprocessor.

The framework adapters live in their own modules, each behind an optional extra, and are
imported from there (``groundwire.integrations.langchain``, ``.llamaindex``, ``.haystack``).
This package holds the framework-free seam they share (see :mod:`.search`) and the
embedded index's two searchers; importing it needs no framework.
"""

from groundwire.integrations.search import ACCESS_FIELDS, Access, Passage, Passages, Searcher
from groundwire.integrations.searchers import EntrySearcher, EvidenceSearcher

__all__ = [
    "ACCESS_FIELDS",
    "Access",
    "EntrySearcher",
    "EvidenceSearcher",
    "Passage",
    "Passages",
    "Searcher",
]
