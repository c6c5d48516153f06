"""Agent memory: a SQLite store of memories with a knowledge graph and hybrid recall.

Not to be confused with *conversation memory* (:mod:`groundwire.llm.memory`), which
keeps the raw user/assistant turns of a chat session: agent memory holds facts,
preferences, decisions and episodes an agent should remember across sessions, with
entities and relations, and recalls the few that one turn needs.

Modules: ``schema`` (layout and migrations), ``writes`` (checking and writing a
memory), ``store`` (:class:`MemoryStore`), ``graph`` (entities, relations, attributes;
the graph boost), ``recall`` (channels and fusion), ``bookkeeping`` (the access counts
and session rows a recall writes), ``shaping`` (evidence shaping and dampening),
``vectors`` (stored embeddings), ``views`` (read-only reports), ``block`` (the
recalled-memory prompt block).
"""

from groundwire.memory.block import MemoryBlock, MemoryContext, render_memory_block
from groundwire.memory.records import (
    GraphBoost,
    Memory,
    MemoryAttribute,
    MemoryEntity,
    MemoryRecall,
    MemoryRelation,
    MemoryScope,
    RecalledMemory,
)
from groundwire.memory.schema import LATEST_VERSION
from groundwire.memory.store import MemoryStore

__all__ = [
    "LATEST_VERSION",
    "GraphBoost",
    "Memory",
    "MemoryAttribute",
    "MemoryBlock",
    "MemoryContext",
    "MemoryEntity",
    "MemoryRecall",
    "MemoryRelation",
    "MemoryScope",
    "MemoryStore",
    "RecalledMemory",
    "render_memory_block",
]
