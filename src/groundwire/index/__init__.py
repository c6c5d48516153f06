"""Immutable snapshots: BM25 lexical index, phrase maps, relations and the build cache."""

from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import LexicalIndex, QueryScores
from groundwire.index.parts import SnapshotSection
from groundwire.index.query import Breakdown, Ranked
from groundwire.index.reading import LexicalReader

__all__ = [
    "Breakdown",
    "KnowledgeBase",
    "LexicalIndex",
    "LexicalReader",
    "QueryScores",
    "Ranked",
    "SnapshotSection",
]
