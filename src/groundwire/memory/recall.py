"""Hybrid recall over one scope's memories: channels, fusion, shaping, deterministic order.

Channels, each over memories the scope may see only (eligibility is part of every
query, so it precedes every top-k):

- ``content``: FTS5 BM25 over the analyzed content, divided by the best score (0-1];
- ``hint``: FTS5 BM25 over prospective hints, per memory the best hint, normalized the
  same way. The text score is ``max(content, hint)``, never their sum; a memory matched
  by hints only is capped at ``hint_only_cap``;
- ``vector``: cosine similarity to the query embedding (when the store has an
  embedder), rescaled over the candidates to [0, 1]; fused as
  ``text_weight * text + (1 - text_weight) * vector``;
- ``graph``: ``+graph_boost`` for memories linked to entities the query names (one hop
  out), deadline-bounded; memories found only this way are traversal-only.

Then :mod:`~groundwire.memory.shaping` runs its stages and the list is sorted by
score, ties broken on id.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from groundwire.config import MemoryRecallConfig
from groundwire.errors import QueryError
from groundwire.memory import shaping
from groundwire.memory.graph import graph_boost, name_tokens, visible_sql
from groundwire.memory.records import GraphBoost, MemoryRecall, MemoryScope, RecalledMemory
from groundwire.memory.shaping import Candidate, shown
from groundwire.memory.vectors import decode, query_vector

if TYPE_CHECKING:
    from groundwire.memory.store import MemoryStore

__all__ = ["Ranked", "RecallCaches", "finish", "run", "with_limit"]


#: What ranking reads of a candidate; the full row is loaded for the returned ones only.
_RANK_COLUMNS = (
    "m.id, m.content, m.type, m.importance, m.pinned, m.created_at, ma.accessed_at, m.terms, m.seq"
)
#: Joins a memory row (alias ``m``) to its access row, which holds ``accessed_at``.
_ACCESS = " JOIN memory_access ma ON ma.seq = m.seq"
#: The rest of a returned memory's row (by ``seq``), completing it to ``_COLUMNS``.
_REST_COLUMNS = (
    "m.seq, m.tenant, m.agent, m.updated_at, ma.access_count, m.deleted, m.sources, m.metadata,"
    " m.acl, m.content_hash"
)
#: What the hub stage reads of a candidate: the fewest mentions among its entities.
_FEWEST_MENTIONS = (
    "(SELECT MIN(e.mentions) FROM memory_entity_mentions mm"
    " JOIN entities e ON e.id = mm.entity_id WHERE mm.memory_id = m.id)"
)
#: Whether a candidate has a superseded attribute (of an entity and aspect on file: the
#: rows its currentness note is made of): the penalty needs no more; the note is read
#: for the returned memories only.
_SUPERSEDED = (
    "EXISTS (SELECT 1 FROM entity_attributes ea JOIN entities e ON e.id = ea.entity_id"
    " JOIN aspects a ON a.id = ea.aspect_id WHERE ea.memory_id = m.id"
    " AND ea.status = 'superseded')"
)
#: A candidate row: ``_RANK_COLUMNS``, the two graph facts (see :func:`_columns`) and
#: (from the content and hint queries) its score.
Row = tuple[Any, ...]
_FEWEST, _HAS_SUPERSEDED, _SCORE = 9, 10, 11


def _columns(cfg: MemoryRecallConfig) -> str:
    """A candidate's columns: what ranking reads, and the graph facts the hub and
    currentness stages need when they are on (read with the row: no statement of their
    own over the candidates' ids)."""
    hub = _FEWEST_MENTIONS if cfg.hub and cfg.graph else "NULL"
    superseded = _SUPERSEDED if cfg.currentness else "0"
    return f"{_RANK_COLUMNS}, {hub}, {superseded}"


@dataclass(slots=True)
class RecallCaches:
    """Per-store caches derived from the file, keyed by its change counter."""

    hubs: dict[tuple[str, str], tuple[tuple[int, int], float]] = field(default_factory=dict)
    vectors: dict[tuple[str, str, str], tuple[tuple[int, int], Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ranked:
    """A recall before its bookkeeping: the ranked memories and how the graph went."""

    query: str
    memories: tuple[RecalledMemory, ...]
    graph: GraphBoost
    freshness: bool
    seqs: tuple[int, ...] = ()  # the row numbers of ``memories``, in order (for bookkeeping)


def with_limit(cfg: MemoryRecallConfig, limit: object) -> MemoryRecallConfig:
    """``cfg`` returning ``limit`` memories (checked like the config's own limit)."""
    return replace(cfg, limit=limit)  # type: ignore[arg-type]


def _match(terms: Sequence[str]) -> str:
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _time_sql(since: float | None, until: float | None) -> tuple[str, list[object]]:
    sql, params = "", list[object]()
    if since is not None:
        sql, params = sql + " AND m.created_at >= ?", [*params, float(since)]
    if until is not None:
        sql, params = sql + " AND m.created_at <= ?", [*params, float(until)]
    return sql, params


def _normalized(rows: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Scores divided by the best one (first wins per id): (0, 1]."""
    best = max((score for _, score in rows), default=0.0)
    out: dict[str, float] = {}
    for key, score in rows:
        if key not in out and best > 0:
            out[key] = score / best
    return out


@dataclass(frozen=True, slots=True)
class _Text:
    """What the two text channels ask: the match expression, the scope's condition (and
    time bounds) with their parameters, how many memories, which columns."""

    match: str
    where: str
    params: list[object]
    k: int
    columns: str


def _content(conn: sqlite3.Connection, q: _Text) -> tuple[dict[str, float], dict[str, Row]]:
    """The top ``k`` content matches the scope may see, normalized, with their rows.

    First the best ``2k`` matches of the whole index, checked for the scope: that is the
    answer when it provably holds every visible match scoring at least the k-th visible
    one (all matches fetched, or the k-th scores above the last fetched). Otherwise —
    many matches the scope may not see, or ties at the edge — the scope check runs over
    every match. Rows are read for the chosen ``k`` only (in no particular order).
    """
    match, where, params, k, fetch = q.match, q.where, q.params, q.k, 2 * q.k
    rows = conn.execute(
        "WITH top AS MATERIALIZED (SELECT rowid AS seq, -bm25(memories_fts) AS s"
        " FROM memories_fts WHERE memories_fts MATCH ? ORDER BY s DESC LIMIT ?),"
        " picked AS MATERIALIZED (SELECT top.seq AS seq, top.s AS s FROM top"
        f" JOIN memories m ON m.seq = top.seq WHERE {where} ORDER BY top.s DESC, m.id LIMIT ?)"
        f" SELECT {q.columns}, picked.s, (SELECT COUNT(*) FROM top), (SELECT MIN(s) FROM top)"
        f" FROM picked JOIN memories m ON m.seq = picked.seq{_ACCESS}",
        (match, fetch, *params, k),
    ).fetchall()
    exact = rows and (
        rows[0][-2] < fetch or (len(rows) == k and min(r[_SCORE] for r in rows) > rows[0][-1])
    )
    if not exact:
        rows = conn.execute(
            "WITH hits AS MATERIALIZED (SELECT m.seq AS seq, -bm25(memories_fts) AS s"
            " FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid"
            f" WHERE memories_fts MATCH ? AND {where} ORDER BY s DESC, m.id LIMIT ?)"
            f" SELECT {q.columns}, hits.s FROM hits JOIN memories m"
            f" ON m.seq = hits.seq{_ACCESS} ORDER BY hits.s DESC, m.id",
            (match, *params, k),
        ).fetchall()
    return _normalized([(r[0], r[_SCORE]) for r in rows]), {r[0]: r for r in rows}


def _hints(conn: sqlite3.Connection, q: _Text) -> tuple[dict[str, float], dict[str, Row]]:
    """The top ``k`` memories by their best hint match, normalized, with their rows."""
    rows = conn.execute(
        "WITH x AS MATERIALIZED (SELECT h.memory_id AS memory_id, -bm25(memory_hints_fts) AS s"
        " FROM memory_hints_fts JOIN memory_hints h ON h.id = memory_hints_fts.rowid"
        " WHERE memory_hints_fts MATCH ?)"
        f" SELECT {q.columns}, MAX(x.s) AS s FROM x JOIN memories m ON m.id = x.memory_id"
        f"{_ACCESS} WHERE {q.where} GROUP BY x.memory_id ORDER BY s DESC, x.memory_id LIMIT ?",
        (q.match, *q.params, q.k),
    ).fetchall()
    return _normalized([(r[0], r[_SCORE]) for r in rows]), {r[0]: r for r in rows}


def _vectors(
    store: MemoryStore,
    conn: sqlite3.Connection,
    scope: MemoryScope,
    query: str,
    where: str,
    params: list[object],
    k: int,
) -> dict[str, float]:
    embedder = store.embedder
    if embedder is None:
        return {}
    key = (scope.tenant, scope.agent, "\n".join(scope.labels) + "|" + where + repr(params))
    version = store.cache_key(conn)
    cached = store.caches.vectors.get(key)
    if cached is None or cached[0] != version:
        rows = conn.execute(
            "SELECT m.id, v.vector FROM memories m JOIN embeddings v ON v.content_hash ="
            f" m.content_hash AND v.model_id = ? WHERE {where} ORDER BY m.id",
            (embedder.model_id, *params),
        ).fetchall()
        dims = embedder.dimensions
        ids = [row[0] for row in rows]
        matrix = (
            np.vstack([decode(row[1], dims) for row in rows])
            if rows
            else np.zeros((0, dims), np.float32)
        )
        store.caches.vectors = {key: (version, (ids, matrix))}  # one scope cached at a time
        cached = store.caches.vectors[key]
    ids, matrix = cached[1]
    if not ids:
        return {}
    sims = matrix @ query_vector(embedder, query)
    top = min(k, len(ids))
    chosen = np.argpartition(-sims, top - 1)[:top] if top < len(ids) else np.arange(len(ids))
    picked = sorted(((float(sims[i]), ids[i]) for i in chosen), key=lambda p: (-p[0], p[1]))
    high, low = picked[0][0], picked[-1][0]
    spread = high - low
    return {mid: (sim - low) / spread if spread > 0 else 1.0 for sim, mid in picked if sim > 0}


def _hub_threshold(
    store: MemoryStore, conn: sqlite3.Connection, scope: MemoryScope, cfg: MemoryRecallConfig
) -> float:
    key = (scope.tenant, scope.agent)
    version = store.cache_key(conn)
    cached = store.caches.hubs.get(key)
    if cached is None or cached[0] != version:
        counts = [
            int(row[0])
            for row in conn.execute(
                "SELECT mentions FROM entities WHERE tenant = ? AND agent = ?",
                (scope.tenant, scope.agent),
            )
        ]
        store.caches.hubs[key] = cached = (version, shaping.percentile(counts, cfg.hub_percentile))
    return cached[1]


def _load(conn: sqlite3.Connection, ids: Sequence[str], columns: str) -> dict[str, Row]:
    """Rows of ``columns`` by id (one statement whatever the number of ids)."""
    rows = conn.execute(
        f"SELECT {columns} FROM memories m{_ACCESS} WHERE m.id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)),),
    )
    return {r[0]: r for r in rows}


def _candidate(r: Row) -> Candidate:
    c = Candidate(r[0], r[1], r[7], r[2], float(r[3]), bool(r[4]), float(r[5]), float(r[6]), r[8])
    c.superseded = bool(r[_HAS_SUPERSEDED])  # always 0 with the currentness stage off
    return c


def _currentness(
    conn: sqlite3.Connection, scope: MemoryScope, candidates: dict[str, Candidate]
) -> None:
    """The notes of returned memories with superseded attributes, naming the current claim.

    Supersession is scoped to a slot (entity aspect, group key, claim key) and leaves one
    active claim in it, so the current value is the slot's (newest) active attribute —
    named only when its memory is visible to ``scope``. One statement.
    """
    if not candidates:
        return
    condition, params = visible_sql(scope)
    rows = conn.execute(
        "SELECT ea.memory_id, e.name, a.name, ea.value, now.value, now.memory_id"
        " FROM entity_attributes ea JOIN entities e ON e.id = ea.entity_id"
        " JOIN aspects a ON a.id = ea.aspect_id"
        " LEFT JOIN entity_attributes now ON now.id = (SELECT c.id FROM entity_attributes c"
        " JOIN memories m ON m.id = c.memory_id WHERE c.aspect_id = ea.aspect_id"
        " AND c.group_key = ea.group_key AND c.claim_key = ea.claim_key"
        f" AND c.status = 'active' AND {condition} ORDER BY c.id DESC LIMIT 1)"
        " WHERE ea.status = 'superseded' AND ea.memory_id IN (SELECT value FROM json_each(?))"
        " ORDER BY ea.id",
        [*params, json.dumps(list(candidates))],
    )
    for memory_id, entity, aspect, value, now_value, now_memory in rows:
        if now_memory is None:  # withdrawn, or not visible to this scope: say only that
            text = f"{entity} {aspect} {value!r} was replaced by a newer fact"
        else:
            text = f"{entity} {aspect} is now {now_value!r} (was {value!r}; memory {now_memory})"
        candidates[memory_id].superseded_by.append(text)


def run(
    store: MemoryStore,
    conn: sqlite3.Connection,
    scope: MemoryScope,
    query: str,
    cfg: MemoryRecallConfig,
    since: float | None,
    until: float | None,
) -> Ranked:
    """Rank the scope's memories for ``query`` (inside the caller's read transaction)."""
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    if len(query) > cfg.max_query_chars:
        raise QueryError(
            f"query has {len(query)} characters, over the limit of {cfg.max_query_chars}"
        )
    for name, bound in (("since", since), ("until", until)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            raise QueryError(f"{name}={bound!r} is invalid: expected Unix seconds")
    analyzer = store.analyzer
    terms = list(dict.fromkeys(analyzer.tokens(query)))
    query_terms = frozenset(terms)
    freshness = cfg.freshness and since is None and until is None
    freshness = freshness and shaping.has_freshness_words(query)
    if not query.strip():
        return Ranked(query, (), GraphBoost(), freshness)
    condition, params = visible_sql(scope)
    time_sql, time_params = _time_sql(since, until)
    where, params = condition + time_sql, [*params, *time_params]
    k, columns = cfg.candidates, _columns(cfg)
    asked = _Text(_match(terms), where, params, k, columns)
    content, rows = _content(conn, asked) if terms else ({}, {})
    hints, hint_rows = _hints(conn, asked) if terms and cfg.hints else ({}, {})
    rows = {**hint_rows, **rows}
    vectors: dict[str, float] = {}
    if cfg.vectors and store.embedder is not None:
        whole, whole_params = visible_sql(scope, by_scope=True)
        vectors = _vectors(
            store, conn, scope, query, whole + time_sql, [*whole_params, *time_params], k
        )
    graph = GraphBoost()
    if cfg.graph:
        stop = store.stopwords
        tokens = [t for t in name_tokens(query) if t not in stop]
        graph = graph_boost(
            conn,
            scope,
            tokens,
            max_entities=cfg.graph_max_entities,
            max_neighbours=cfg.graph_max_neighbours,
            max_memories=cfg.graph_max_memories,
            deadline_ms=cfg.graph_deadline_ms,
            clock=store.timer,
        )
    anchored = set(content) | set(hints) | set(vectors)
    linked = set(graph.memory_ids)
    if len(anchored) >= cfg.limit:
        # Traversal-only memories stay below every anchored one: they cannot make the list.
        linked &= anchored
    elif time_sql:  # the graph lookup knows no time bounds: apply them to what it found
        linked = (linked & anchored) | _in_time(conn, linked - anchored, time_sql, time_params)
    ids = sorted(anchored | linked)
    if not ids:
        return Ranked(query, (), graph, freshness)
    missing = [mid for mid in ids if mid not in rows]  # text rows came with the match
    if missing:
        rows.update(_load(conn, missing, columns))
    candidates = {mid: _candidate(rows[mid]) for mid in ids if mid in rows}
    use_vectors = bool(vectors)
    for mid, c in candidates.items():
        text = content.get(mid, 0.0)
        if mid in content:
            c.channels["content"] = text
        if mid in hints:
            hint = hints[mid] if mid in content else min(hints[mid], cfg.hint_only_cap)
            c.channels["hint"] = hint
            text = max(text, hint)
        fused = text
        if use_vectors:
            vec = vectors.get(mid, 0.0)
            if mid in vectors:
                c.channels["vector"] = vec
            fused = cfg.text_weight * text + (1.0 - cfg.text_weight) * vec
        c.anchored = mid in content or mid in hints or mid in vectors
        if mid in linked:
            c.channels["graph"] = cfg.graph_boost
            fused += cfg.graph_boost
        c.score = fused
        c.stages["fused"] = fused
    ranked = sorted(candidates.values(), key=lambda c: (-c.score, c.id))
    if cfg.facets:
        parts = [analyzer.tokens(part) for part in shaping.split_facets(query)]
        shaping.apply_facets(ranked, [frozenset(p) for p in parts if p], cfg)
    if cfg.gravity:
        shaping.apply_gravity(ranked, query_terms, cfg)
    if cfg.hub and cfg.graph:
        threshold = _hub_threshold(store, conn, scope, cfg)
        for mid, c in candidates.items():
            fewest = rows[mid][_FEWEST]  # the hub stage needs it only above the threshold
            if fewest is not None and fewest > threshold:
                c.entity_mentions.append(int(fewest))
        shaping.apply_hub(ranked, threshold, cfg)
    if cfg.resolution:
        shaping.apply_resolution(ranked, cfg)
    now = store.now()
    if freshness:
        shaping.apply_freshness(ranked, now, cfg)
    if cfg.currentness:
        shaping.apply_currentness(ranked, cfg)
    if cfg.importance:
        shaping.apply_importance(ranked, now, cfg)
    shaping.cap_traversal_only(ranked, cfg)
    ranked.sort(key=lambda c: (-c.score, c.id))
    top = ranked[: cfg.limit]
    if cfg.currentness:
        _currentness(conn, scope, {c.id: c for c in top if c.superseded})
        shaping.note_currentness(top)
    return Ranked(query, _memories(conn, top), graph, freshness, tuple(c.seq for c in top))


def _in_time(
    conn: sqlite3.Connection, ids: set[str], time_sql: str, params: list[object]
) -> set[str]:
    if not ids:
        return set()
    rows = conn.execute(
        f"SELECT m.id FROM memories m WHERE m.id IN (SELECT value FROM json_each(?)){time_sql}",
        [json.dumps(sorted(ids)), *params],
    )
    return {row[0] for row in rows}


def _memories(conn: sqlite3.Connection, top: Sequence[Candidate]) -> tuple[RecalledMemory, ...]:
    """The returned memories, their rows completed by one statement."""
    from groundwire.memory.store import row_memory

    if not top:
        return ()
    rest = {
        r[0]: r
        for r in conn.execute(
            f"SELECT {_REST_COLUMNS} FROM memories m{_ACCESS}"
            " WHERE m.seq IN (SELECT value FROM json_each(?))",
            (json.dumps([c.seq for c in top]),),
        )
    }
    out = []
    for rank, c in enumerate(top, start=1):
        _, tenant, agent, updated, count, deleted, sources, metadata, acl, digest = rest[c.seq]
        row = (
            c.id, tenant, agent, c.content, c.type, c.importance, c.created_at, updated,
            c.accessed_at, count, c.pinned, deleted, sources, metadata, acl, digest,
        )  # fmt: skip
        memory = row_memory(row)
        # As shown: 6 decimals, the graph channel the configured boost as it is.
        channels = {k: v if k == "graph" else shown(v) for k, v in c.channels.items()}
        stages = {k: shown(v) for k, v in c.stages.items()}
        out.append(RecalledMemory(memory, shown(c.score), rank, channels, stages, c.note))
    return tuple(out)


def finish(
    result: Ranked, session_id: str | None, tracked: bool, duration_ms: float
) -> MemoryRecall:
    """The public result of a recall."""
    return MemoryRecall(
        query=result.query,
        memories=result.memories,
        timed_out=result.graph.timed_out,
        freshness=result.freshness,
        graph=result.graph,
        session_id=session_id,
        tracked=tracked,
        duration_ms=duration_ms,
    )
