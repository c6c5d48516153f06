"""Publish the synced document set as a snapshot (and its vectors), after each sync.

:func:`updated_knowledge_base` is the one place a snapshot is derived from the evidence
ledger. When the last publish left a sound snapshot, it is updated in place of a rebuild
(``KnowledgeBase.update``: exact, the same entries and scores as a rebuild): the
publish record (``published.json`` in the state folder) keeps, beside the snapshot's
content hash, the id of the current evidence of every document published; the documents
whose current evidence id differs now (new, changed, relabeled, deleted, withdrawn,
sources added or removed) are the whole update — their current chunks upserted, their
old chunks deleted. The ledger is the record, not the run: a process that withdrew a
document or committed a batch and died before publishing left no ``SnapshotChanges``,
and the next publish still finds the difference. The snapshot is rebuilt from the
ledger's current chunks instead when there is no snapshot or publish record, when the
snapshot fails full verification or is not the one recorded (damaged, or written by
something else), or when it was built with other index settings.

Withdrawn, deleted and superseded evidence is never current, so its text, chunks and
vectors are absent from the published snapshot. With an embedder, the vectors are in
the snapshot (its ``vectors`` section, written in the same atomic ``KnowledgeBase.save``):
an update keeps the rows of unchanged chunks from the previous snapshot's section and
embeds only new and changed chunks (through the embedder, so a ``CachedEmbedder`` also
serves texts it saw before); a rebuild embeds through the embedder. A legacy
``<snapshot>.vectors`` file beside it is removed rather than left to serve withdrawn text.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from groundwire.config import chunk_settings
from groundwire.embed.base import Embedder
from groundwire.errors import GroundwireError
from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.vector_files import remove_side_file, with_vectors
from groundwire.index.vectors import VectorIndex
from groundwire.ingest.chunking import chunks_to_documents
from groundwire.ingest.custody.ledger import EvidenceLedger
from groundwire.model import Document

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
    """A published snapshot: where, how many chunks and documents, the model of the
    vectors it holds (None: no vectors), how long it took, and how: ``mode``
    ``"update"`` (incremental) or ``"rebuild"`` (``reason`` says why)."""

    path: str
    chunks: int
    documents: int
    vectors: str | None
    seconds: float
    rebuilt: bool
    mode: Literal["update", "rebuild"] = "rebuild"
    reason: str | None = None


def updated_knowledge_base(
    previous: KnowledgeBase | None,
    ledger: EvidenceLedger,
    sources: Sequence[str],
    changes: SnapshotChanges,
    published: Mapping[str, int] | None = None,
) -> KnowledgeBase:
    """The knowledge base of the ledger's current chunks of ``sources``.

    With ``previous`` (the snapshot of the last publish, verified) and ``published``
    (document id → evidence id it was built from), ``previous`` is updated with the
    documents whose current evidence differs; otherwise it is rebuilt. ``changes`` (what
    this run saw) is not needed for either: the ledger holds every change, including
    those of a run that died before publishing.
    """
    if previous is None or published is None:
        chunks = ledger.current_chunks(sources)
        return KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())
    upserts, deletes = _update_of(previous, ledger, sources, published)
    return previous.update(upserts, deletes)


def _update_of(
    previous: KnowledgeBase,
    ledger: EvidenceLedger,
    sources: Sequence[str],
    published: Mapping[str, int],
) -> tuple[list[Document], list[str]]:
    current = ledger.current_evidence(sources)
    fresh = [doc for doc, evidence in current.items() if published.get(doc) != evidence]
    stale = [evidence for doc, evidence in published.items() if current.get(doc) != evidence]
    upserts = chunks_to_documents(ledger.chunks_of(fresh))
    kept = {document.id for document in upserts}
    deletes = sorted(i for i in ledger.chunk_ids_of(stale) if i not in kept and i in previous)
    return upserts, deletes


def _previous(
    target: Path, record: Mapping[str, Any] | None, stamp: Mapping[str, Any]
) -> tuple[KnowledgeBase | None, str | None]:
    """The snapshot of the last publish, fit to update, or None and why it is rebuilt."""
    if not KnowledgeBase.is_snapshot(target):
        return None, "no snapshot yet"
    published = None if record is None else record.get("evidence")
    if (
        record is None
        or record.get("snapshot") != stamp["snapshot"]
        or not isinstance(published, dict)
    ):
        return None, "no record of the last publish"
    try:
        previous = KnowledgeBase.load(target, str(record.get("content_hash")), verify="full")
    except GroundwireError:
        return None, "the snapshot is damaged or not the one last published"
    if previous.settings != chunk_settings() or previous.phrase_keys != (False, False):
        return None, "the snapshot was built with other index settings"
    return previous, None


def _read_record(mark: Path | None) -> dict[str, Any] | None:
    if mark is None:
        return None
    try:
        record = json.loads(mark.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def publish_snapshot(
    ledger: EvidenceLedger,
    path: str | os.PathLike[str],
    sources: Sequence[str],
    changes: SnapshotChanges,
    *,
    embedder: Embedder | None = None,
    marker: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> PublishReport | None:
    """Write the snapshot at ``path`` unless it already shows the ledger's current state.

    ``marker`` (a small JSON file in the sync state folder) remembers which ledger
    generation, sources and vector setting the snapshot was published from: when they
    are unchanged (and not ``force``) nothing is written and None is returned; a publish
    that failed is therefore retried by the next run. With ``embedder``, the snapshot
    holds the vectors (see the module docstring); a legacy ``<path>.vectors`` file is
    deleted (it would no longer match, and may hold the vectors of withdrawn text). A
    failed embedding or write leaves the previous snapshot as it was.
    """
    target = Path(path)
    stamp = {
        "snapshot": str(target.resolve()),
        "generation": ledger.generation(),
        "sources": sorted(sources),
        "vectors": None if embedder is None else embedder.model_id,
    }
    mark = Path(marker) if marker is not None else None
    record = _read_record(mark)
    if (
        record is not None
        and not force
        and not changes
        and KnowledgeBase.is_snapshot(target)
        and all(record.get(key) == value for key, value in stamp.items())
    ):
        return None
    started = time.perf_counter()
    previous, reason = _previous(target, record, stamp)
    published = None if previous is None or record is None else record["evidence"]
    evidence = ledger.current_evidence(sources)
    kb = updated_knowledge_base(previous, ledger, sources, changes, published)
    vectors = None
    if embedder is not None:
        held = None if previous is None else VectorIndex.from_section(previous)
        vectors = (
            VectorIndex.build(kb, embedder)
            if held is None or previous is None
            else held.updated(previous, kb, embedder)
        )
    with_vectors(kb, vectors).save(target)
    remove_side_file(target)
    if mark is not None:
        content_hash = KnowledgeBase.describe_snapshot(target)["source_manifest_hash"]
        written = {**stamp, "content_hash": content_hash, "evidence": evidence}
        temp = mark.with_name(mark.name + ".tmp")
        temp.write_text(json.dumps(written, sort_keys=True), encoding="utf-8")
        os.replace(temp, mark)
    documents = len({str(entry.metadata.get("source_id")) for entry in kb})
    updated = published is not None
    return PublishReport(
        path=str(target),
        chunks=len(kb),
        documents=documents,
        vectors=None if vectors is None else vectors.model_id,
        seconds=time.perf_counter() - started,
        rebuilt=not updated,
        mode="update" if updated else "rebuild",
        reason=reason,
    )
