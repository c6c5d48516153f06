"""Read-only views of a store for people and tools: one memory in full, the graph,
a session's record, counts. Each runs inside the caller's read transaction."""

from __future__ import annotations

import sqlite3
from typing import Any

from groundwire.memory.graph import canonical_name
from groundwire.memory.records import MemoryScope

__all__ = [
    "FEEDBACK_COUNTERS",
    "counts",
    "entity_rows",
    "memory_links",
    "pipeline_counts",
    "session_rows",
]

#: Telemetry counters of the write pipeline's aspect feedback, per scope.
FEEDBACK_COUNTERS = (
    "aspects_updated",
    "fts_confirmations",
    "decayed_aspects",
    "propagated_attributes",
)

_SESSION_KEYS = (
    "memory_id",
    "rank",
    "was_injected",
    "fts_hit_count",
    "recall_count",
    "relevance_score",
)
_ATTRIBUTE_KEYS = (
    "id",
    "entity",
    "aspect",
    "group_key",
    "claim_key",
    "value",
    "status",
    "superseded_by",
)


def memory_links(conn: sqlite3.Connection, memory_id: str) -> dict[str, Any]:
    """A memory's entity mentions, attributes (with their status) and hints."""
    entities = conn.execute(
        "SELECT e.name, e.entity_type, mm.mention_text, mm.confidence"
        " FROM memory_entity_mentions mm JOIN entities e ON e.id = mm.entity_id"
        " WHERE mm.memory_id = ? ORDER BY e.canonical_name, mm.mention_text",
        (memory_id,),
    ).fetchall()
    attributes = conn.execute(
        "SELECT ea.id, e.name, a.name, ea.group_key, ea.claim_key, ea.value, ea.status,"
        " ea.superseded_by FROM entity_attributes ea JOIN entities e ON e.id = ea.entity_id"
        " JOIN aspects a ON a.id = ea.aspect_id WHERE ea.memory_id = ? ORDER BY ea.id",
        (memory_id,),
    ).fetchall()
    hints = conn.execute(
        "SELECT hint FROM memory_hints WHERE memory_id = ? ORDER BY id", (memory_id,)
    ).fetchall()
    return {
        "entities": [
            {"name": r[0], "type": r[1], "mention": r[2], "confidence": r[3]} for r in entities
        ],
        "attributes": [dict(zip(_ATTRIBUTE_KEYS, r, strict=True)) for r in attributes],
        "hints": [r[0] for r in hints],
    }


def session_rows(
    conn: sqlite3.Connection, scope: MemoryScope, session_id: str
) -> list[dict[str, Any]]:
    """What a session recalled, best rank first."""
    rows = conn.execute(
        "SELECT memory_id, rank, was_injected, fts_hit_count, recall_count, relevance_score"
        " FROM session_memories WHERE tenant = ? AND agent = ? AND session_id = ?"
        " ORDER BY rank, memory_id",
        (scope.tenant, scope.agent, session_id),
    ).fetchall()
    return [dict(zip(_SESSION_KEYS, row, strict=True)) for row in rows]


def entity_rows(
    conn: sqlite3.Connection, scope: MemoryScope, limit: int, name: str | None
) -> list[dict[str, Any]]:
    """Entities by mentions (or the one named), each with its relations both ways."""
    where, params = "tenant = ? AND agent = ?", [scope.tenant, scope.agent]
    if name is not None:
        where, params = f"{where} AND canonical_name = ?", [*params, canonical_name(name)]
    rows = conn.execute(
        f"SELECT id, name, entity_type, mentions FROM entities WHERE {where}"
        " ORDER BY mentions DESC, canonical_name LIMIT ?",
        (*params, limit),
    ).fetchall()
    out = []
    for entity, entity_name, kind, mentions in rows:
        links = conn.execute(
            "SELECT 'out', r.relation_type, e.name, r.mentions, r.confidence"
            " FROM relations r JOIN entities e ON e.id = r.target_entity_id"
            " WHERE r.source_entity_id = ?"
            " UNION ALL SELECT 'in', r.relation_type, e.name, r.mentions, r.confidence"
            " FROM relations r JOIN entities e ON e.id = r.source_entity_id"
            " WHERE r.target_entity_id = ? ORDER BY 1, 2, 3",
            (entity, entity),
        ).fetchall()
        relations = [
            {"direction": d, "type": t, "entity": n, "mentions": c, "confidence": f}
            for d, t, n, c, f in links
        ]
        out.append(
            {"name": entity_name, "type": kind, "mentions": mentions, "relations": relations}
        )
    return out


def counts(conn: sqlite3.Connection, scope: MemoryScope | None) -> dict[str, Any]:
    """Row counts of one scope (or of the whole file when ``scope`` is None)."""
    if scope is None:
        where, params = "1", []
    else:
        where, params = "tenant = ? AND agent = ?", [scope.tenant, scope.agent]

    def count(sql: str) -> int:
        return int(conn.execute(sql.format(where=where), params).fetchone()[0])

    entity_scope = f"entity_id IN (SELECT id FROM entities WHERE {where})"
    memory_scope = f"memory_id IN (SELECT id FROM memories WHERE {where})"
    live = "SELECT COUNT(*) FROM memories WHERE {where} AND deleted = 0"
    jobs = conn.execute(
        f"SELECT state, COUNT(*) FROM memory_jobs WHERE {where} GROUP BY state ORDER BY state",
        params,
    ).fetchall()
    return {
        "memories": count(live),
        "forgotten": count("SELECT COUNT(*) FROM memories WHERE {where} AND deleted = 1"),
        "pinned": count(live + " AND pinned = 1"),
        "entities": count("SELECT COUNT(*) FROM entities WHERE {where}"),
        "relations": count(f"SELECT COUNT(*) FROM relations WHERE source_{entity_scope}"),
        "mentions": count(f"SELECT COUNT(*) FROM memory_entity_mentions WHERE {entity_scope}"),
        "attributes": count(f"SELECT COUNT(*) FROM entity_attributes WHERE {entity_scope}"),
        "hints": count(f"SELECT COUNT(*) FROM memory_hints WHERE {memory_scope}"),
        "sessions": count("SELECT COUNT(*) FROM sessions WHERE {where}"),
        "jobs": dict(jobs),
        "embeddings": int(conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]),
        "pipeline": pipeline_counts(conn, scope),
    }


def pipeline_counts(conn: sqlite3.Connection, scope: MemoryScope | None) -> dict[str, Any]:
    """The write pipeline's record: model calls by outcome and kind, proposals by status,
    audited operations, and the feedback counters (of one scope or the whole file)."""
    if scope is None:
        where, params = "1", []
    else:
        where, params = "tenant = ? AND agent = ?", [scope.tenant, scope.agent]

    def grouped(sql: str) -> dict[str, int]:
        rows = conn.execute(sql.format(where=where), params).fetchall()
        return {str(key): int(n) for key, n in rows}

    counters = grouped("SELECT name, SUM(value) FROM pipeline_counters WHERE {where} GROUP BY name")
    return {
        "model_calls": grouped(
            "SELECT COALESCE(outcome, 'running'), COUNT(*) FROM model_calls WHERE {where}"
            " GROUP BY 1 ORDER BY 1"
        ),
        "model_calls_by_kind": grouped(
            "SELECT kind, COUNT(*) FROM model_calls WHERE {where} GROUP BY kind ORDER BY kind"
        ),
        "proposals": grouped(
            "SELECT status, COUNT(*) FROM memory_proposals WHERE {where} GROUP BY status"
            " ORDER BY status"
        ),
        "audited": int(
            conn.execute(f"SELECT COUNT(*) FROM memory_audit WHERE {where}", params).fetchone()[0]
        ),
        "feedback": {name: counters.get(name, 0) for name in FEEDBACK_COUNTERS},
    }
