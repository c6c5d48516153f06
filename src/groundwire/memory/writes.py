"""Writing memories: checking what a host asks to store (sizes, types, ranges, one clear
error each), then the rows — memory, labels, graph links, hints, vectors — inside the
store's transaction."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from groundwire.config import (
    MEMORY_DEFAULT_IMPORTANCE,
    MEMORY_MAX_ATTRIBUTES,
    MEMORY_MAX_CONTENT_CHARS,
    MEMORY_MAX_ENTITIES,
    MEMORY_MAX_HINTS,
    MEMORY_MAX_LABELS,
    MEMORY_MAX_METADATA_BYTES,
    MEMORY_MAX_NAME_CHARS,
    MEMORY_MAX_RELATIONS,
    MEMORY_MAX_SOURCES,
    MEMORY_TYPES,
)
from groundwire.embed import Embedder
from groundwire.errors import QueryError
from groundwire.memory.graph import link_memory
from groundwire.memory.records import (
    MemoryAttribute,
    MemoryEntity,
    MemoryRelation,
    MemoryScope,
    MemoryType,
    check_key,
)
from groundwire.text import Analyzer

__all__ = [
    "MemoryInput",
    "check_hints",
    "forget_memory",
    "memory_id_for",
    "prepare",
    "write_hints",
    "write_memory",
    "write_vectors",
]

_R = TypeVar("_R", MemoryEntity, MemoryRelation, MemoryAttribute)
#: The fields remember() and remember_many() items accept.
FIELDS = frozenset(
    {
        "content",
        "type",
        "importance",
        "pinned",
        "sources",
        "metadata",
        "acl",
        "entities",
        "relations",
        "attributes",
        "hints",
        "created_at",
        "id",
    }
)


@dataclass(frozen=True, slots=True)
class MemoryInput:
    """One checked write: everything remember() stores for a memory."""

    id: str
    content: str
    content_hash: str
    type: MemoryType
    importance: float
    pinned: bool
    sources: tuple[str, ...]
    metadata: str  # JSON
    acl: tuple[str, ...]
    entities: tuple[MemoryEntity, ...]
    relations: tuple[MemoryRelation, ...]
    attributes: tuple[MemoryAttribute, ...]
    hints: tuple[str, ...]
    created_at: float | None


def memory_id_for(scope: MemoryScope, content: str) -> str:
    """The deterministic id of ``content`` in ``scope``'s memory: 32 hex digits."""
    key = "\x1f".join((scope.tenant, scope.agent, content)).encode("utf-8")
    return hashlib.sha256(key).hexdigest()[:32]


def _text(option: str, value: object, limit: int = MEMORY_MAX_NAME_CHARS) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QueryError(f"{option}={value!r} is invalid: expected a non-empty string")
    if len(value) > limit:
        raise QueryError(f"{option} has {len(value)} characters, over the limit of {limit}")
    return value


def _unit(option: str, value: object) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or not 0.0 <= float(value) <= 1.0:  # type: ignore[arg-type]
        raise QueryError(f"{option}={value!r} is invalid: expected a number between 0 and 1")
    return float(value)  # type: ignore[arg-type]


def _items(option: str, value: object, limit: int) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise QueryError(f"{option} must be a list, got {type(value).__name__}")
    if len(value) > limit:
        raise QueryError(f"{option} has {len(value)} items, over the limit of {limit}")
    return list(value)


def _record(option: str, cls: type[_R], item: object) -> _R:
    if isinstance(item, cls):
        record = item
    elif isinstance(item, Mapping):
        try:
            record = cls(**item)
        except TypeError as exc:
            raise QueryError(f"{option}: {exc}; expected the fields of {cls.__name__}") from exc
    else:
        raise QueryError(f"{option} is {type(item).__name__}: expected a {cls.__name__} or dict")
    return record


def _entity(option: str, item: object) -> MemoryEntity:
    entity = _record(option, MemoryEntity, item)
    _text(f"{option}.name", entity.name)
    if not isinstance(entity.type, str) or len(entity.type) > MEMORY_MAX_NAME_CHARS:
        raise QueryError(f"{option}.type={entity.type!r} is invalid: expected a short string")
    if entity.mention is not None:
        _text(f"{option}.mention", entity.mention)
    _unit(f"{option}.confidence", entity.confidence)
    return entity


def _relation(option: str, item: object) -> MemoryRelation:
    relation = _record(option, MemoryRelation, item)
    for name in ("source", "type", "target"):
        _text(f"{option}.{name}", getattr(relation, name))
    _unit(f"{option}.confidence", relation.confidence)
    return relation


def _attribute(option: str, item: object) -> MemoryAttribute:
    claim = _record(option, MemoryAttribute, item)
    for name in ("entity", "aspect", "value"):
        _text(f"{option}.{name}", getattr(claim, name))
    if claim.claim_key is not None:
        _text(f"{option}.claim_key", claim.claim_key)
    if not isinstance(claim.group_key, str) or len(claim.group_key) > MEMORY_MAX_NAME_CHARS:
        raise QueryError(f"{option}.group_key={claim.group_key!r} is invalid: a short string")
    _unit(f"{option}.confidence", claim.confidence)
    return claim


def _label(option: str, value: object) -> str:
    label = check_key(option, value)
    kind, _, name = label.partition(":")
    if kind not in ("user", "group") or not name.strip():
        raise QueryError(
            f"{option}={label!r} is invalid: ACL labels are 'user:<subject>' or 'group:<name>'"
        )
    return label


def check_hints(value: object) -> tuple[str, ...]:
    """Hints (questions a memory answers): distinct, non-empty, short, bounded in number."""
    hints = _items("hints", value, MEMORY_MAX_HINTS)
    return tuple(dict.fromkeys(_text(f"hints[{i}]", h).strip() for i, h in enumerate(hints)))


def _metadata(value: object) -> str:
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise QueryError(f"metadata must be a dict, got {type(value).__name__}")
    try:
        text = json.dumps(dict(value), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"metadata is not JSON data ({exc}): use strings, numbers, lists") from exc
    if len(text.encode("utf-8")) > MEMORY_MAX_METADATA_BYTES:
        raise QueryError(
            f"metadata is {len(text.encode('utf-8'))} bytes as JSON, over the limit of "
            f"{MEMORY_MAX_METADATA_BYTES}: keep metadata to labels and dates"
        )
    return text


def prepare(scope: MemoryScope, fields: Mapping[str, Any], where: str = "") -> MemoryInput:
    """Check one write's fields (``where`` prefixes error messages, e.g. ``items[3]: ``)."""
    unknown = sorted(set(fields) - FIELDS)
    try:
        if unknown:
            raise QueryError(f"unknown field(s) {unknown}: expected some of {sorted(FIELDS)}")
        content = _text("content", fields.get("content"), MEMORY_MAX_CONTENT_CHARS)
        kind = fields.get("type", "fact")
        if kind not in MEMORY_TYPES:
            raise QueryError(f"type={kind!r} is invalid: expected one of {', '.join(MEMORY_TYPES)}")
        importance = fields.get("importance")
        importance = MEMORY_DEFAULT_IMPORTANCE if importance is None else importance
        pinned = fields.get("pinned", False)
        if not isinstance(pinned, bool):
            raise QueryError(f"pinned={pinned!r} is invalid: expected True or False")
        sources = _items("sources", fields.get("sources"), MEMORY_MAX_SOURCES)
        labels = _items("acl", fields.get("acl"), MEMORY_MAX_LABELS)
        created = fields.get("created_at")
        if created is not None and (
            isinstance(created, bool)
            or not isinstance(created, int | float)
            or not math.isfinite(float(created))
            or created < 0
        ):
            raise QueryError(f"created_at={created!r} is invalid: expected Unix seconds >= 0")
        given = fields.get("id")
        entities = _items("entities", fields.get("entities"), MEMORY_MAX_ENTITIES)
        relations = _items("relations", fields.get("relations"), MEMORY_MAX_RELATIONS)
        attributes = _items("attributes", fields.get("attributes"), MEMORY_MAX_ATTRIBUTES)
        return MemoryInput(
            id=check_key("id", given) if given is not None else memory_id_for(scope, content),
            content=content,
            content_hash=hashlib.sha256(content.encode("utf-8")).hexdigest(),
            type=cast(MemoryType, kind),
            importance=_unit("importance", importance),
            pinned=pinned,
            sources=tuple(
                dict.fromkeys(check_key(f"sources[{i}]", s) for i, s in enumerate(sources))
            ),
            metadata=_metadata(fields.get("metadata")),
            acl=tuple(sorted({_label(f"acl[{i}]", label) for i, label in enumerate(labels)})),
            entities=tuple(_entity(f"entities[{i}]", e) for i, e in enumerate(entities)),
            relations=tuple(_relation(f"relations[{i}]", r) for i, r in enumerate(relations)),
            attributes=tuple(_attribute(f"attributes[{i}]", a) for i, a in enumerate(attributes)),
            hints=check_hints(fields.get("hints")),
            created_at=None if created is None else float(created),
        )
    except QueryError as exc:
        if not where:
            raise
        raise QueryError(f"{where}{exc}") from exc


def write_memory(
    conn: sqlite3.Connection,
    analyzer: Analyzer,
    scope: MemoryScope,
    item: MemoryInput,
    now: float,
) -> None:
    """Insert, merge into or revive the memory ``item`` names, with its labels and links."""
    existing = conn.execute(
        "SELECT seq, tenant, agent, deleted, sources, content FROM memories WHERE id = ?",
        (item.id,),
    ).fetchone()
    created = item.created_at if item.created_at is not None else now
    if existing is not None and (existing[1], existing[2]) != (scope.tenant, scope.agent):
        raise QueryError(f"id={item.id!r} is taken by another scope's memory: choose another id")
    if existing is not None and existing[5] != item.content:
        raise QueryError(f"id={item.id!r} already holds other content: choose another id")
    terms = " ".join(analyzer.tokens(item.content))
    if existing is None:
        cursor = conn.execute(
            "INSERT INTO memories (id, tenant, agent, content, terms, type, importance,"
            " created_at, updated_at, pinned, sources, metadata, acl,"
            " content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item.id,
                scope.tenant,
                scope.agent,
                item.content,
                terms,
                item.type,
                item.importance,
                created,
                now,
                int(item.pinned),
                json.dumps(list(item.sources)),
                item.metadata,
                "\n".join(item.acl),
                item.content_hash,
            ),
        )
        seq = int(cursor.lastrowid or 0)
    else:
        seq, deleted = int(existing[0]), bool(existing[3])
        sources = list(dict.fromkeys([*json.loads(existing[4]), *item.sources]))
        if deleted:  # remembered again after being forgotten: it comes back as written now
            conn.execute(
                "UPDATE memories SET deleted = 0, deleted_at = NULL, type = ?, importance = ?,"
                " pinned = ?, metadata = ?, acl = ?, created_at = ?,"
                " updated_at = ?, sources = ? WHERE seq = ?",
                (
                    item.type,
                    item.importance,
                    int(item.pinned),
                    item.metadata,
                    "\n".join(item.acl),
                    created,
                    now,
                    json.dumps(sources),
                    seq,
                ),
            )
            # Its decay starts again from its new creation time; its access count stays.
            conn.execute("UPDATE memory_access SET accessed_at = ? WHERE seq = ?", (created, seq))
            conn.execute("DELETE FROM memory_acl WHERE memory_seq = ?", (seq,))
        else:
            conn.execute(
                "UPDATE memories SET sources = ?, updated_at = ?,"
                " pinned = MAX(pinned, ?), importance = MAX(importance, ?) WHERE seq = ?",
                (json.dumps(sources), now, int(item.pinned), item.importance, seq),
            )
            item = replace(item, acl=())  # a live memory keeps its labels: none are widened
    conn.executemany(
        "INSERT OR IGNORE INTO memory_acl (memory_seq, label) VALUES (?, ?)",
        [(seq, label) for label in item.acl],
    )
    link_memory(conn, scope, item.id, item.entities, item.relations, item.attributes, now)
    write_hints(conn, analyzer, item.id, item.hints, now)


def write_hints(
    conn: sqlite3.Connection, analyzer: Analyzer, memory_id: str, hints: Sequence[str], now: float
) -> int:
    """Add hints (deduplicated per memory); returns how many were new."""
    added = 0
    for hint in hints:  # rowcount per row: total_changes would count the FTS triggers too
        cursor = conn.execute(
            "INSERT OR IGNORE INTO memory_hints (memory_id, hint, terms, created_at)"
            " VALUES (?, ?, ?, ?)",
            (memory_id, hint, " ".join(analyzer.tokens(hint)), now),
        )
        added += cursor.rowcount
    return added


def write_vectors(
    conn: sqlite3.Connection,
    embedder: Embedder | None,
    vectors: Mapping[str, bytes],
    now: float,
) -> None:
    """Cache vectors by (content hash, model id); a known pair is left as it is."""
    if not vectors or embedder is None:
        return
    model, dims = embedder.model_id, embedder.dimensions
    conn.executemany(
        "INSERT OR IGNORE INTO embeddings (content_hash, model_id, dimensions, vector,"
        " created_at) VALUES (?, ?, ?, ?, ?)",
        [(h, model, dims, blob, now) for h, blob in vectors.items()],
    )


def forget_memory(conn: sqlite3.Connection, seq: int, now: float) -> None:
    """Soft-delete the memory at ``seq``: its triggers take it out of text search, hints
    and the graph in the same statement (inside the caller's transaction)."""
    conn.execute(
        "UPDATE memories SET deleted = 1, deleted_at = ?, updated_at = ? WHERE seq = ?",
        (now, now, seq),
    )
