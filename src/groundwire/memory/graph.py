"""The knowledge graph: writing entities, relations, mentions and attributes; the boost.

Writes run inside the store's transaction (the caller holds it). Reads for recall are
deadline-bounded: :func:`graph_boost` checks the clock after each step and, through
SQLite's progress handler, inside each query, returning what it has with
``timed_out=True``; any error returns an empty result, so recall never fails because
of the graph.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import Final

from groundwire.memory.records import (
    GraphBoost,
    MemoryAttribute,
    MemoryEntity,
    MemoryRelation,
    MemoryScope,
)

__all__ = ["canonical_name", "graph_boost", "link_memory", "name_tokens", "visible_sql"]

logger = logging.getLogger("groundwire")

_TOKEN: Final = re.compile(r"[^\W_]{2,}")
#: SQLite virtual-machine steps between two deadline checks inside one query.
_PROGRESS_STEPS: Final = 1_000


def canonical_name(name: str) -> str:
    """Lower-cased, whitespace-normalized: the identity of an entity within a scope."""
    return " ".join(name.lower().split())


def name_tokens(text: str) -> list[str]:
    """Alphanumeric runs of 2+ characters, lower-cased, in order, deduplicated."""
    return list(dict.fromkeys(_TOKEN.findall(text.lower())))


def visible_sql(
    scope: MemoryScope, alias: str = "m", *, by_scope: bool = False
) -> tuple[str, list[object]]:
    """A SQL condition (and its parameters) for live memories ``scope`` may see.

    ``by_scope=True`` lets SQLite drive the query from the (tenant, agent) index, for
    listings of a whole scope; otherwise the condition only filters rows found another
    way (by id, by a text match), which keeps the planner on those indexes.
    """
    labels = scope.labels
    marks = ", ".join("?" for _ in labels)
    acl = (
        f" AND ({alias}.acl = '' OR EXISTS (SELECT 1 FROM memory_acl a"
        f" WHERE a.memory_seq = {alias}.seq AND a.label IN ({marks})))"
        if labels
        else f" AND {alias}.acl = ''"
    )
    plus = "" if by_scope else "+"
    sql = f"{plus}{alias}.tenant = ? AND {plus}{alias}.agent = ? AND {alias}.deleted = 0{acl}"
    return sql, [scope.tenant, scope.agent, *labels]


# -- writing ---------------------------------------------------------------------------------
def _entity_id(
    conn: sqlite3.Connection, scope: MemoryScope, name: str, entity_type: str, now: float
) -> int:
    """Insert a new entity or count one more mention of a known one; its id."""
    canonical = canonical_name(name)
    row = conn.execute(
        "SELECT id FROM entities WHERE tenant = ? AND agent = ? AND canonical_name = ?",
        (scope.tenant, scope.agent, canonical),
    ).fetchone()
    if row is None:
        try:
            cursor = conn.execute(
                "INSERT INTO entities (tenant, agent, name, canonical_name, entity_type,"
                " mentions, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?)",
                (scope.tenant, scope.agent, name, canonical, entity_type, now, now),
            )
        except sqlite3.IntegrityError:
            # The written name is taken (UNIQUE): fall back to that row and count there.
            row = conn.execute(
                "SELECT id FROM entities WHERE tenant = ? AND agent = ? AND name = ?",
                (scope.tenant, scope.agent, name),
            ).fetchone()
            if row is None:
                raise
        else:
            entity = int(cursor.lastrowid or 0)
            conn.executemany(
                "INSERT OR IGNORE INTO entity_terms (term, entity_id) VALUES (?, ?)",
                [(token, entity) for token in name_tokens(canonical)],
            )
            return entity
    entity = int(row[0])
    conn.execute(
        "UPDATE entities SET mentions = mentions + 1, updated_at = ?,"
        " entity_type = CASE WHEN entity_type = '' THEN ? ELSE entity_type END WHERE id = ?",
        (now, entity_type, entity),
    )
    return entity


def _mention(
    conn: sqlite3.Connection,
    memory_id: str,
    entity: int,
    text: str,
    confidence: float,
    now: float,
) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO memory_entity_mentions"
        " (memory_id, entity_id, mention_text, confidence, created_at) VALUES (?, ?, ?, ?, ?)",
        (memory_id, entity, text, confidence, now),
    )


def _relation(
    conn: sqlite3.Connection, source: int, target: int, kind: str, confidence: float, now: float
) -> None:
    """A new relation (strength 1.0), or one more mention with a running-average confidence."""
    conn.execute(
        "INSERT INTO relations (source_entity_id, target_entity_id, relation_type, strength,"
        " mentions, confidence, created_at, updated_at) VALUES (?, ?, ?, 1.0, 1, ?, ?, ?)"
        " ON CONFLICT (source_entity_id, target_entity_id, relation_type) DO UPDATE SET"
        " confidence = (confidence * mentions + excluded.confidence) / (mentions + 1),"
        " mentions = mentions + 1, updated_at = excluded.updated_at",
        (source, target, kind, confidence, now, now),
    )


def _attribute(
    conn: sqlite3.Connection,
    memory_id: str,
    entity: int,
    claim: MemoryAttribute,
    now: float,
) -> None:
    """Store a claim; an older active claim in the same slot becomes superseded by it."""
    aspect_name = canonical_name(claim.aspect)
    conn.execute(
        "INSERT INTO aspects (entity_id, name, canonical_name, weight, created_at, updated_at)"
        " VALUES (?, ?, ?, 1.0, ?, ?) ON CONFLICT (entity_id, canonical_name) DO NOTHING",
        (entity, claim.aspect, aspect_name, now, now),
    )
    (aspect,) = conn.execute(
        "SELECT id FROM aspects WHERE entity_id = ? AND canonical_name = ?",
        (entity, aspect_name),
    ).fetchone()
    if claim.claim_key is not None:
        same = conn.execute(
            "SELECT id FROM entity_attributes WHERE aspect_id = ? AND group_key = ?"
            " AND claim_key = ? AND status = 'active' AND memory_id = ? AND value = ?",
            (aspect, claim.group_key, claim.claim_key, memory_id, claim.value),
        ).fetchone()
        if same is not None:  # re-processing the same memory: nothing changes twice
            return
    cursor = conn.execute(
        "INSERT INTO entity_attributes (entity_id, aspect_id, memory_id, group_key, claim_key,"
        " value, status, confidence, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 'active', ?, ?, ?)",
        (
            entity,
            aspect,
            memory_id,
            claim.group_key,
            claim.claim_key,
            claim.value,
            claim.confidence,
            now,
            now,
        ),
    )
    if claim.claim_key is None:
        return
    conn.execute(
        "UPDATE entity_attributes SET status = 'superseded', superseded_by = ?, updated_at = ?"
        " WHERE aspect_id = ? AND group_key = ? AND claim_key = ? AND status = 'active'"
        " AND id != ?",
        (cursor.lastrowid, now, aspect, claim.group_key, claim.claim_key, cursor.lastrowid),
    )


def link_memory(
    conn: sqlite3.Connection,
    scope: MemoryScope,
    memory_id: str,
    entities: Sequence[MemoryEntity],
    relations: Sequence[MemoryRelation],
    attributes: Sequence[MemoryAttribute],
    now: float,
) -> None:
    """Attach a memory's entities, relations and attributes (inside the caller's transaction).

    Every source and target of a relation and every attribute's entity is linked back to
    the memory as a mention; re-processing the same memory adds nothing twice.
    """
    ids: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()

    def entity(name: str, entity_type: str = "", text: str | None = None, conf: float = 1.0) -> int:
        canonical = canonical_name(name)
        if canonical not in ids:
            ids[canonical] = _entity_id(conn, scope, name.strip(), entity_type, now)
        mention = text if text is not None else name
        if (canonical, mention) not in seen:
            seen.add((canonical, mention))
            _mention(conn, memory_id, ids[canonical], mention, conf, now)
        return ids[canonical]

    for item in entities:
        entity(item.name, item.type, item.mention, item.confidence)
    for rel in relations:
        source = entity(rel.source, conf=rel.confidence)
        target = entity(rel.target, conf=rel.confidence)
        _relation(conn, source, target, rel.type.strip(), rel.confidence, now)
    for claim in attributes:
        _attribute(conn, memory_id, entity(claim.entity, conf=claim.confidence), claim, now)


# -- reading: the recall boost ---------------------------------------------------------------------
def graph_boost(
    conn: sqlite3.Connection,
    scope: MemoryScope,
    tokens: Sequence[str],
    *,
    max_entities: int,
    max_neighbours: int,
    max_memories: int,
    deadline_ms: float,
    clock: Callable[[], float],
) -> GraphBoost:
    """Memories linked to the entities a query names, one hop out; deadline-bounded.

    1. ``tokens`` matched against the words of canonical names, at most ``max_entities``
       entities by mentions; 2. one hop through relations in both directions, at most
       ``max_neighbours`` more entities; 3. at most ``max_memories`` distinct live
       memories ``scope`` may see that mention any of them. Never raises.
    """
    start = clock()
    deadline = start + deadline_ms / 1000.0
    found: list[int] = []
    neighbours: list[int] = []
    memories: list[str] = []
    conn.set_progress_handler(lambda: int(clock() > deadline), _PROGRESS_STEPS)
    try:
        if not tokens or max_entities == 0:
            return GraphBoost()
        marks = ", ".join("?" for _ in tokens)
        found = [
            row[0]
            for row in conn.execute(
                # CROSS JOIN: drive from the few matching terms, not from every entity.
                "SELECT DISTINCT e.id, e.mentions FROM entity_terms t"
                " CROSS JOIN entities e ON e.id = t.entity_id"
                f" WHERE t.term IN ({marks}) AND e.tenant = ? AND e.agent = ?"
                " ORDER BY e.mentions DESC, e.id LIMIT ?",
                (*tokens, scope.tenant, scope.agent, max_entities),
            )
        ]
        if not found or clock() > deadline:
            return GraphBoost(tuple(found), timed_out=bool(found))
        marks = ", ".join("?" for _ in found)
        if max_neighbours:
            neighbours = [
                row[0]
                for row in conn.execute(
                    "SELECT other, MAX(weight) AS w FROM ("
                    " SELECT target_entity_id AS other, strength * mentions AS weight"
                    f" FROM relations WHERE source_entity_id IN ({marks})"
                    " UNION ALL SELECT source_entity_id, strength * mentions"
                    f" FROM relations WHERE target_entity_id IN ({marks}))"
                    f" WHERE other NOT IN ({marks}) GROUP BY other ORDER BY w DESC, other LIMIT ?",
                    (*found, *found, *found, max_neighbours),
                )
            ]
        if clock() > deadline:
            return GraphBoost(tuple(found), tuple(neighbours), timed_out=True)
        condition, params = visible_sql(scope)
        seen: dict[str, None] = {}
        # Entity by entity, matched ones first, then neighbours (strongest first): each
        # read walks the (entity, memory) index in order and stops at the cap, so a hub
        # costs no more than a rare entity.
        for entity in [*found, *neighbours]:
            for (memory_id,) in conn.execute(
                "SELECT mm.memory_id FROM memory_entity_mentions mm JOIN memories m"
                f" ON m.id = mm.memory_id WHERE mm.entity_id = ? AND {condition}"
                " ORDER BY mm.memory_id LIMIT ?",
                (entity, *params, max_memories - len(seen)),
            ):
                seen[memory_id] = None
            memories = list(seen)
            if len(seen) >= max_memories:
                break
            if clock() > deadline:
                return GraphBoost(tuple(found), tuple(neighbours), frozenset(memories), True)
        timed_out = clock() > deadline
        return GraphBoost(tuple(found), tuple(neighbours), frozenset(memories), timed_out)
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):  # the progress handler stopped a query at the deadline
            return GraphBoost(tuple(found), tuple(neighbours), frozenset(memories), True)
        logger.warning("memory graph lookup failed; recall continues without it: %s", exc)
        return GraphBoost(error=str(exc))
    except Exception as exc:  # the graph is additive: any failure leaves recall intact
        logger.warning("memory graph lookup failed; recall continues without it: %s", exc)
        return GraphBoost(error=str(exc))
    finally:
        conn.set_progress_handler(None, _PROGRESS_STEPS)
