"""Immutable snapshots: BM25 lexical index, phrase maps, relations and the build cache."""

from groundwire.index.knowledge_base import Breakdown, KnowledgeBase, Ranked
from groundwire.index.lexical import LexicalIndex, QueryScores

__all__ = ["Breakdown", "KnowledgeBase", "LexicalIndex", "QueryScores", "Ranked"]
