"""Immutable snapshots: BM25 lexical index, phrase maps, relations and the build cache."""

from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import LexicalIndex, QueryScores
from groundwire.index.parts import SnapshotSection
from groundwire.index.query import Breakdown, Ranked

__all__ = ["Breakdown", "KnowledgeBase", "LexicalIndex", "QueryScores", "Ranked", "SnapshotSection"]
