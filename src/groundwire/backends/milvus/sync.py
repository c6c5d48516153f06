"""Mirror a snapshot into Milvus incrementally: create, upsert, delete, record.

:func:`sync_milvus` compares each row's content digest with what the collection holds and
writes only what changed: an edited file costs its own rows, a removed source is deleted
by ``source == ...``. The companion records the snapshot's digest last (a sync that fails
half-way leaves the previous digest, so ``stats().snapshot`` never claims a state the
collection does not hold). :func:`upsert_entries` / :func:`delete_entries` are the
building blocks for hosts that track changes themselves.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groundwire.backends.milvus.client import MilvusConnection, _pymilvus, connect
from groundwire.backends.milvus.schema import (
    SCHEMA_VERSION,
    entry_row,
    lexical_fields,
    quote,
    row_digest,
    settings_from_json,
    settings_to_json,
)
from groundwire.config import (
    MILVUS_BATCH_ROWS,
    MILVUS_CONSISTENCY,
    MILVUS_MAX_ARRAY,
    MILVUS_MAX_LIMIT,
    MILVUS_MAX_PHRASE_BYTES,
    MILVUS_MAX_VARCHAR,
    IndexSettings,
)
from groundwire.errors import BackendError
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.vectors import VectorIndex
from groundwire.model import KnowledgeEntry
from groundwire.retrieve.gate import noise_table
from groundwire.text import Analyzer

__all__ = ["MilvusSyncReport", "delete_entries", "sync_milvus", "upsert_entries"]


@dataclass(frozen=True, slots=True)
class MilvusSyncReport:
    """What one sync wrote: rows upserted, deleted and left unchanged, the snapshot digest."""

    collection: str
    upserted: int
    deleted: int
    unchanged: int
    snapshot: str
    seconds: float


def _create(
    conn: MilvusConnection,
    settings: IndexSettings,
    dimensions: int | None,
    *,
    partition_key: bool,
    dense_index: dict[str, Any] | None,
) -> None:
    pymilvus = _pymilvus()
    DataType, Function, FunctionType = (  # noqa: N806 - pymilvus's names
        pymilvus.DataType,
        pymilvus.Function,
        pymilvus.FunctionType,
    )
    client = conn.client
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=1024)
    index = client.prepare_index_params()
    params = {"bm25_k1": float(settings.k1), "bm25_b": float(settings.b)}
    for name in lexical_fields(settings):
        schema.add_field(
            f"t_{name}",
            DataType.VARCHAR,
            max_length=MILVUS_MAX_VARCHAR,
            enable_analyzer=True,
            analyzer_params={"tokenizer": "whitespace"},
        )
        schema.add_field(f"s_{name}", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name=f"bm25_{name}",
                function_type=FunctionType.BM25,
                input_field_names=[f"t_{name}"],
                output_field_names=[f"s_{name}"],
            )
        )
        index.add_index(
            f"s_{name}", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params=params
        )
    if dimensions is not None:
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dimensions)
        spec = dense_index or {"index_type": "FLAT"}
        index.add_index("dense", metric_type="IP", **spec)
    array = {"element_type": DataType.VARCHAR, "max_capacity": MILVUS_MAX_ARRAY}
    schema.add_field("status", DataType.VARCHAR, max_length=64)
    schema.add_field("domain", DataType.VARCHAR, max_length=1024)
    schema.add_field("integrations", DataType.ARRAY, max_length=512, **array)
    schema.add_field("tenant", DataType.VARCHAR, max_length=512, is_partition_key=partition_key)
    schema.add_field("acl", DataType.ARRAY, max_length=512, **array)
    schema.add_field("exact", DataType.ARRAY, max_length=MILVUS_MAX_PHRASE_BYTES, **array)
    schema.add_field("alias", DataType.ARRAY, max_length=MILVUS_MAX_PHRASE_BYTES, **array)
    schema.add_field("source", DataType.VARCHAR, max_length=4096)
    schema.add_field("digest", DataType.VARCHAR, max_length=64)
    schema.add_field("record", DataType.JSON)
    conn.call(
        "create_collection",
        client.create_collection,
        conn.collection,
        schema=schema,
        index_params=index,
        consistency_level=MILVUS_CONSISTENCY,
    )


def _phrase_keys(kb: KnowledgeBase) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    exact: dict[str, list[str]] = {}
    alias: dict[str, list[str]] = {}
    for target, index in ((exact, kb.exact_index), (alias, kb.alias_index)):
        for key, ids in index.items():
            for entry_id in ids:
                target.setdefault(entry_id, []).append(key)
    return exact, alias


def _existing(conn: MilvusConnection) -> dict[str, str]:
    """Every row's id → digest (paged on the primary key: no offset limit)."""
    out: dict[str, str] = {}
    last: str | None = None
    while True:
        expr = "" if last is None else f"id > {quote(last)}"
        rows = conn.query(
            filter=expr or 'id != ""',
            output_fields=["id", "digest"],
            limit=MILVUS_MAX_LIMIT,
            consistency_level=MILVUS_CONSISTENCY,
        )
        page = {str(row["id"]): str(row["digest"]) for row in rows}
        if not page:
            return out
        out.update(page)
        if len(page) < MILVUS_MAX_LIMIT:
            return out
        last = max(page)  # a page is some rows above ``last``; keep going above its maximum


def upsert_entries(
    conn: MilvusConnection, rows: Sequence[dict[str, Any]], *, new: bool = False
) -> int:
    """Write rows (from :func:`entries_rows`) in batches; ``new``: none of their ids is in
    the collection yet (a plain insert, cheaper than an upsert's delete-then-insert)."""
    write = conn.client.insert if new else conn.client.upsert
    for start in range(0, len(rows), MILVUS_BATCH_ROWS):
        conn.call(
            "insert" if new else "upsert",
            write,
            conn.collection,
            list(rows[start : start + MILVUS_BATCH_ROWS]),
        )
    return len(rows)


def delete_entries(
    conn: MilvusConnection, *, ids: Iterable[str] = (), sources: Iterable[str] = ()
) -> None:
    """Delete rows by entry/chunk id and by source (every row of those sources)."""
    ids = sorted(set(ids))
    for start in range(0, len(ids), MILVUS_BATCH_ROWS):
        part = ids[start : start + MILVUS_BATCH_ROWS]
        conn.call(
            "delete",
            conn.client.delete,
            conn.collection,
            filter=f"id in [{', '.join(quote(i) for i in part)}]",
        )
    for source in sorted(set(sources)):
        conn.call(
            "delete", conn.client.delete, conn.collection, filter=f"source == {quote(source)}"
        )


def snapshot_digest(kb: KnowledgeBase, rows: Iterable[dict[str, Any]]) -> str:
    """A digest of what a collection mirroring ``kb`` holds: settings plus every row digest."""
    digest = hashlib.sha256(json.dumps(settings_to_json(kb.settings), sort_keys=True).encode())
    for row in rows:
        digest.update(row["id"].encode() + b"\0" + row["digest"].encode() + b"\n")
    return digest.hexdigest()


def sync_milvus(
    kb: KnowledgeBase,
    uri: str,
    collection: str = "groundwire",
    *,
    vectors: VectorIndex | None = None,
    token: str = "",
    db_name: str = "",
    recreate: bool = False,
    partition_key: bool = False,
    dense_index: dict[str, Any] | None = None,
    client_options: Mapping[str, Any] | None = None,
    connection: MilvusConnection | None = None,
) -> MilvusSyncReport:
    """Make collection ``collection`` at ``uri`` mirror ``kb`` (and ``vectors``).

    Creates it on first use; afterwards writes only the rows whose digest changed and
    deletes rows no longer in ``kb``. A collection built for other index settings or
    another vector model is refused unless ``recreate=True`` (drop and rebuild).
    ``partition_key`` makes ``tenant`` Milvus's partition key (a server feature; Milvus
    Lite 2.5 breaks filters on such collections, docs/MILVUS.md).
    """
    started = time.perf_counter()
    if vectors is not None:
        vectors = vectors.check_for(kb)
    conn = connection or connect(
        uri, collection, token=token, db_name=db_name, client_options=client_options
    )
    try:
        return _sync(conn, kb, vectors, recreate, partition_key, dense_index, started)
    finally:
        if connection is None:
            conn.close()


def _sync(
    conn: MilvusConnection,
    kb: KnowledgeBase,
    vectors: VectorIndex | None,
    recreate: bool,
    partition_key: bool,
    dense_index: dict[str, Any] | None,
    started: float,
) -> MilvusSyncReport:
    settings = kb.settings
    dimensions = None if vectors is None else vectors.dimensions
    model_id = None if vectors is None else vectors.model_id
    meta = conn.read_meta()
    if meta is not None and not recreate:
        stored = settings_from_json(meta["settings"])
        if (
            meta.get("schema") != SCHEMA_VERSION
            or stored.key() != settings.key()
            or meta.get("dimensions") != dimensions
            or meta.get("model_id") != model_id
        ):
            raise BackendError(
                f"collection {conn.collection!r} was built for other index settings or another "
                f"vector model ({meta.get('model_id')}, {meta.get('dimensions')} dims); pass "
                "recreate=True (CLI: --recreate) to drop and rebuild it"
            )
    if meta is None or recreate:
        conn.drop()
        _create(conn, settings, dimensions, partition_key=partition_key, dense_index=dense_index)
    digests = entries_digests(kb, vectors)
    existing = _existing(conn) if meta is not None and not recreate else {}
    # Only entries whose digest changed are analyzed and written: an edited file costs
    # its own rows.
    changed = entries_rows(
        kb, [e for e in kb.entries if existing.get(e.id) != digests[e.id]], vectors
    )
    stale = [i for i in existing if i not in digests]
    delete_entries(conn, ids=stale)
    upsert_entries(conn, changed, new=not existing)
    rows = [{"id": entry.id, "digest": digests[entry.id]} for entry in kb.entries]
    digest = snapshot_digest(kb, rows)
    longest = max((k.count(" ") + 1 for k in (*kb.exact_index, *kb.alias_index)), default=1)
    conn.write_meta(
        {
            "schema": SCHEMA_VERSION,
            "settings": settings_to_json(settings),
            "dimensions": dimensions,
            "model_id": model_id,
            "snapshot": digest,
            "max_phrase_terms": longest,
            "count": len(rows),
            "noise": noise_table(kb),
        }
    )
    return MilvusSyncReport(
        collection=conn.collection,
        upserted=len(changed),
        deleted=len(stale),
        unchanged=len(digests) - len(changed),
        snapshot=digest,
        seconds=time.perf_counter() - started,
    )


def entries_digests(kb: KnowledgeBase, vectors: VectorIndex | None = None) -> dict[str, str]:
    """Every entry's row digest (:func:`~groundwire.backends.milvus.schema.row_digest`),
    computed without analyzing any text."""
    exact, alias = _phrase_keys(kb)
    matrix = None if vectors is None else vectors.check_for(kb).matrix()
    return {
        entry.id: row_digest(
            entry,
            exact.get(entry.id, ()),
            alias.get(entry.id, ()),
            None if matrix is None else matrix[doc].tolist(),
        )
        for doc, entry in enumerate(kb.entries)
    }


def entries_rows(
    kb: KnowledgeBase, entries: Sequence[KnowledgeEntry], vectors: VectorIndex | None = None
) -> list[dict[str, Any]]:
    """Rows for some of ``kb``'s entries (for :func:`upsert_entries`)."""
    analyzer = Analyzer(kb.settings.analyzer)
    fields = lexical_fields(kb.settings)
    exact, alias = _phrase_keys(kb)
    matrix = None if vectors is None else vectors.check_for(kb).matrix()
    out = []
    for entry in entries:
        position = kb.position(entry.id)
        vector = None
        if matrix is not None and position is not None:
            vector = matrix[position].tolist()
        keys = exact.get(entry.id, ()), alias.get(entry.id, ())
        out.append(entry_row(entry, analyzer, fields, *keys, vector))
    return out
