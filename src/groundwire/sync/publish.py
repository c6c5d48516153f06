"""Publish the synced document set as a snapshot (and its vectors), after each sync.

:func:`updated_knowledge_base` is the one place a snapshot is derived from the evidence
ledger. Until incremental index updates land (issue 11: add, replace and delete
entries by id into a new immutable snapshot), it rebuilds the knowledge base from the
ledger's current chunks of the configured sources: correct, and slower than an update
on large sets. The :class:`SnapshotChanges` it receives already name what an
incremental update needs (the documents whose evidence is new, the chunk ids that left,
withdrawals included). Changes made by another process that never published (a
withdrawal followed by a crash) reach a later run only through the ledger: the update
must therefore also delete the previous snapshot's chunk ids that the ledger no longer
holds current (a set difference of ids, cheap next to a rebuild), so the ledger stays
the record and a missed change can never keep withdrawn text published.

Withdrawn, deleted and superseded evidence is never current, so its text, chunks and
vectors are absent from the published snapshot. Publishing writes atomically
(``KnowledgeBase.save``); vectors are rebuilt beside it with the embedder (cached by
content hash, so only changed chunks are embedded), and a stale vector file is removed
rather than left to serve withdrawn text.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from groundwire.config import chunk_settings
from groundwire.embed.base import Embedder
from groundwire.errors import GroundwireError
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.vectors import VectorIndex
from groundwire.ingest.chunking import chunks_to_documents
from groundwire.ingest.custody.ledger import EvidenceLedger

__all__ = ["PublishReport", "SnapshotChanges", "publish_snapshot", "updated_knowledge_base"]


@dataclass(frozen=True, slots=True)
class SnapshotChanges:
    """What changed since the last snapshot: documents with new current evidence, and the
    chunk ids that left it (superseded, deleted or withdrawn)."""

    upserted: tuple[str, ...] = ()
    removed_chunks: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.upserted or self.removed_chunks)


@dataclass(frozen=True, slots=True)
class PublishReport:
    """A published snapshot: where, how many chunks and documents, and how long it took."""

    path: str
    chunks: int
    documents: int
    vectors: str | None
    seconds: float
    rebuilt: bool


def updated_knowledge_base(
    previous: KnowledgeBase | None,
    ledger: EvidenceLedger,
    sources: Sequence[str],
    changes: SnapshotChanges,
) -> KnowledgeBase:
    """The knowledge base after ``changes``: today rebuilt from the ledger's current chunks
    of ``sources``. This is the function the incremental index update (issue 11) replaces
    with ``previous.update(upserts=ledger.chunks_of(changes.upserted),
    deletes={*changes.removed_chunks, *(previous ids not current in the ledger)})``,
    keeping the rebuild when ``previous`` is None (missing or damaged).
    """
    chunks = ledger.current_chunks(sources)
    return KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())


def publish_snapshot(
    ledger: EvidenceLedger,
    path: str | os.PathLike[str],
    sources: Sequence[str],
    changes: SnapshotChanges,
    *,
    vectors_path: str | os.PathLike[str] | None = None,
    embedder: Embedder | None = None,
    marker: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> PublishReport | None:
    """Write the snapshot at ``path`` unless it already shows the ledger's current state.

    ``marker`` (a small JSON file in the sync state folder) remembers which ledger
    generation, sources and vector setting the snapshot was published from: when they
    are unchanged (and not ``force``) nothing is written and None is returned; a publish
    that failed is therefore retried by the next run. With ``embedder``, vectors are saved
    at ``vectors_path``; without one, a vector file there is deleted (it would no longer
    match, and may hold the vectors of withdrawn text). A failed write leaves the
    previous snapshot as it was.
    """
    target = Path(path)
    exists = KnowledgeBase.is_snapshot(target)
    stamp = {
        "snapshot": str(target.resolve()),
        "generation": ledger.generation(),
        "sources": sorted(sources),
        "vectors": None if embedder is None else embedder.model_id,
    }
    mark = Path(marker) if marker is not None else None
    if exists and mark is not None and not force and not changes:
        try:
            if json.loads(mark.read_text(encoding="utf-8")) == stamp:
                return None
        except (OSError, ValueError):
            pass
    started = time.perf_counter()
    previous = None
    if exists:
        try:
            previous = KnowledgeBase.load(target, verify="manifest")
        except GroundwireError:
            previous = None  # damaged: rebuilt from the ledger below
    kb = updated_knowledge_base(previous, ledger, sources, changes)
    kb.save(target)
    saved_vectors = None
    if vectors_path is not None:
        side = Path(vectors_path)
        if embedder is not None:
            VectorIndex.build(kb, embedder).save(side)
            saved_vectors = str(side)
        elif side.exists():
            side.unlink()
    if mark is not None:
        temp = mark.with_name(mark.name + ".tmp")
        temp.write_text(json.dumps(stamp, sort_keys=True), encoding="utf-8")
        os.replace(temp, mark)
    documents = len({str(entry.metadata.get("source_id")) for entry in kb})
    return PublishReport(
        path=str(target),
        chunks=len(kb),
        documents=documents,
        vectors=saved_vectors,
        seconds=time.perf_counter() - started,
        rebuilt=True,
    )
