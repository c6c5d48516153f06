"""Run one source: checkpoint → provider → custody → extraction → ledger → commit → ack.

For each batch the provider hands over, :class:`SourceSync`:

1. records the **replay checkpoint** (the batch and the cursor before it);
2. skips items whose key and version were committed before (idempotency), and
   duplicates of an original already held under another key (dedupe keys);
3. admits each new original into **custody** (size, digests, media type; rejected or
   quarantined ones are skipped with the reason);
4. **composes** every touched group (a thread, or the item itself) into documents,
   extracts them (readability), chunks them and **records** them in the evidence
   ledger (new, changed, replayed); documents a group no longer yields are deleted;
5. **commits** the batch to the checkpoint store (cursor, items, tombstones, documents)
   in one transaction, and only then **acknowledges** it to the provider.

A process killed anywhere before step 5 leaves the previous cursor: the next run pulls
the batch again, custody finds the same bytes, the ledger replays the same evidence,
and nothing is recorded twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from groundwire.config import SYNC_LEASE_SECONDS, SYNC_MAX_ORIGINAL_BYTES, ChunkingConfig
from groundwire.errors import SourceError, SyncError
from groundwire.ingest.adapters.base import Batch, Draft, Item, Member, Provider, Tombstone
from groundwire.ingest.adapters.checkpoints import CheckpointStore, StoredItem
from groundwire.ingest.chunking import chunk_document
from groundwire.ingest.custody.extract import ExtractorRegistry
from groundwire.ingest.custody.ledger import EvidenceInput, EvidenceLedger
from groundwire.ingest.custody.originals import Custody, Provenance
from groundwire.ingest.safety import find_secret
from groundwire.model import SkippedSource

__all__ = ["SourceReport", "SourceSync", "SyncEvent"]


@dataclass(frozen=True, slots=True)
class SyncEvent:
    """Progress of a run: ``stage`` is ``batch``, ``item``, ``recorded`` or ``committed``."""

    source_id: str
    stage: str
    batch: int
    done: int = 0
    total: int = 0


@dataclass(slots=True)
class SourceReport:
    """What one run of one source did. Lists hold document ids (skipped: key or id + why)."""

    source_id: str
    kind: str
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    skipped: list[SkippedSource] = field(default_factory=list)
    unchanged: int = 0
    batches: int = 0
    originals_stored: int = 0
    provenance_added: int = 0
    quarantined: int = 0
    resync_reason: str | None = None
    replayed_batch: str | None = None
    removed_chunks: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def upserted(self) -> list[str]:
        """Documents with new current evidence (new and changed)."""
        return [*self.new, *self.changed]

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (for ``--json``)."""
        return {
            "source": self.source_id,
            "kind": self.kind,
            "new": self.new,
            "changed": self.changed,
            "removed": self.removed,
            "replayed": len(self.replayed),
            "unchanged": self.unchanged,
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "batches": self.batches,
            "originals_stored": self.originals_stored,
            "provenance_added": self.provenance_added,
            "quarantined": self.quarantined,
            "resync_reason": self.resync_reason,
            "replayed_batch": self.replayed_batch,
            "error": self.error,
        }


def _batch_key(source_id: str, cursor: str | None, batch: Batch) -> str:
    """A stable key of a batch: the cursor it starts from and what it changes."""
    digest = hashlib.sha256(json.dumps([source_id, cursor, batch.full]).encode())
    for change in batch.changes:
        version = change.version if isinstance(change, Item) else f"-{change.reason}"
        digest.update(f"\0{change.key}\0{version}".encode())
    return digest.hexdigest()[:24]


class SourceSync:
    """Syncs one provider into custody and the evidence ledger, checkpointed per batch."""

    def __init__(
        self,
        provider: Provider,
        checkpoints: CheckpointStore,
        ledger: EvidenceLedger,
        custody: Custody,
        registry: ExtractorRegistry,
        chunking: ChunkingConfig | None = None,
        *,
        max_bytes: int = SYNC_MAX_ORIGINAL_BYTES,
        lease_seconds: float = SYNC_LEASE_SECONDS,
    ) -> None:
        self.provider = provider
        self.source_id = provider.source_id
        self.checkpoints = checkpoints
        self.ledger = ledger
        self.custody = custody
        self.registry = registry
        self.chunking = chunking or ChunkingConfig()
        self.max_bytes = max_bytes
        self.lease_seconds = lease_seconds

    def run(self, progress: Callable[[SyncEvent], None] | None = None) -> SourceReport:
        """Pull and commit every batch the provider has; SyncError when it fails.

        A failure after some batches leaves those committed (the next run resumes).
        """
        report = SourceReport(self.source_id, self.provider.kind)
        emit = progress or (lambda event: None)
        with self.checkpoints.lease(self.source_id, self.lease_seconds):
            checkpoint = self.checkpoints.load(self.source_id)
            if checkpoint.replay is not None:
                report.replayed_batch = checkpoint.replay.batch
            cursor = checkpoint.cursor
            listed: set[str] = set()
            for number, batch in enumerate(self.provider.batches(cursor), start=1):
                if batch.resync_reason and report.resync_reason is None:
                    report.resync_reason = batch.resync_reason
                report.skipped.extend(batch.skipped)
                key = _batch_key(self.source_id, cursor, batch)
                self.checkpoints.begin(self.source_id, key, cursor, len(batch.changes))
                emit(SyncEvent(self.source_id, "batch", number, 0, len(batch.changes)))
                pending, removed, documents = self._process(batch, number, report, listed, emit)
                emit(SyncEvent(self.source_id, "recorded", number))
                self.custody.flush()
                self.checkpoints.commit(
                    self.source_id,
                    cursor=batch.cursor,
                    watermark=batch.watermark,
                    upserts=pending.values(),
                    removed=removed,
                    documents=documents,
                )
                emit(SyncEvent(self.source_id, "committed", number))
                self.provider.acknowledge(batch)
                report.batches += 1
                cursor = batch.cursor
                if not batch.more:
                    listed = set()
        return report

    # -- one batch -----------------------------------------------------------------------------
    def _process(
        self,
        batch: Batch,
        number: int,
        report: SourceReport,
        listed: set[str],
        emit: Callable[[SyncEvent], None],
    ) -> tuple[dict[str, StoredItem], dict[str, str], dict[str, list[str]]]:
        """Admit, compose and record one batch; what to commit."""
        source = self.source_id
        store = self.checkpoints
        pending: dict[str, StoredItem] = {}
        removed: dict[str, str] = {}
        touched: set[str] = set()
        fresh: dict[str, bytes] = {}
        for done, change in enumerate(batch.changes, start=1):
            emit(SyncEvent(source, "item", number, done, len(batch.changes)))
            if isinstance(change, Tombstone):
                old = pending.pop(change.key, None) or store.item(source, change.key)
                if old is not None:
                    removed[change.key] = change.reason
                    touched.add(old.group)
                continue
            if batch.full:
                if change.key in listed:
                    report.skipped.append(
                        SkippedSource(
                            change.uri or change.key,
                            f"duplicate: key {change.key} is listed twice (the same "
                            "Message-ID or name); the first is kept",
                        )
                    )
                    continue
                listed.add(change.key)
            stored = self._admit(change, pending, removed, report, fresh)
            if stored is None:
                continue
            old = store.item(source, change.key)
            if old is not None and old.group != stored.group:
                touched.add(old.group)
            pending[change.key] = stored
            removed.pop(change.key, None)
            touched.add(stored.group)
        if batch.full and not batch.more:
            for key in sorted(set(store.versions(source)) - listed - set(removed)):
                item = store.item(source, key)
                if item is not None:
                    removed[key] = "no longer listed by the source"
                    touched.add(item.group)
        documents = {}
        with self.ledger.transaction():
            for group in sorted(touched):
                documents[group] = self._compose(group, pending, removed, fresh, report)
        return pending, removed, documents

    def _admit(
        self,
        change: Item,
        pending: dict[str, StoredItem],
        removed: dict[str, str],
        report: SourceReport,
        fresh: dict[str, bytes],
    ) -> StoredItem | None:
        """The item to commit for ``change``, or None (unchanged, duplicate, or rejected)."""
        source = self.source_id
        old = pending.get(change.key) or self.checkpoints.item(source, change.key)
        if old is not None and old.version == change.version and old.labels == change.labels:
            report.unchanged += 1
            return None
        if change.size is not None and change.size > self.max_bytes:
            report.skipped.append(
                SkippedSource(change.uri or change.key, self._too_large(change.size))
            )
            return None
        try:
            data = change.read()
        except SyncError as exc:
            report.skipped.append(SkippedSource(change.uri or change.key, str(exc)))
            return None
        describe = getattr(self.provider, "describe", None)
        if change.group is None and describe is not None:
            group, dedupe, meta = describe(change, data)
            change = replace(
                change, group=group, dedupe=change.dedupe or dedupe, meta={**change.meta, **meta}
            )
        if change.dedupe:
            owner = self.checkpoints.dedupe_owner(source, change.dedupe)
            owner = owner or next(
                (k for k, v in pending.items() if v.dedupe == change.dedupe), None
            )
            if owner is not None and owner != change.key and owner not in removed:
                report.skipped.append(
                    SkippedSource(
                        change.uri or change.key, f"duplicate of {owner} ({change.dedupe})"
                    )
                )
                return None
        secret = find_secret(data)
        if secret is not None:  # never into custody: reported again on every run
            report.skipped.append(SkippedSource(change.uri or change.key, secret))
            return None
        if len(data) > self.max_bytes:
            report.skipped.append(
                SkippedSource(change.uri or change.key, self._too_large(len(data)))
            )
            return None
        admission = self.custody.admit(
            data,
            provenance=Provenance(source, change.account, change.key, change.uri),
            media_type=change.media_type,
            name=change.name,
            size=change.size,
            sha256=change.sha256,
            md5=change.md5,
        )
        if not admission.accepted:
            what = "quarantined" if admission.quarantined else "rejected"
            report.quarantined += admission.quarantined
            report.skipped.append(
                SkippedSource(
                    change.uri or change.key, f"{what}: {admission.reason}: {admission.detail}"
                )
            )
            return None
        report.originals_stored += admission.stored
        report.provenance_added += admission.provenance_added
        fresh[admission.sha256] = data
        return StoredItem(
            key=change.key,
            group=change.group or change.key,
            version=change.version,
            digest=admission.sha256,
            size=admission.size,
            media_type=admission.media_type,
            name=change.name,
            account=change.account,
            uri=change.uri,
            labels=change.labels,
            meta=dict(change.meta),
            dedupe=change.dedupe,
        )

    def _too_large(self, size: int) -> str:
        return f"{size:,} bytes is over the {self.max_bytes:,}-byte limit for one original"

    def _members(
        self, group: str, pending: dict[str, StoredItem], removed: dict[str, str]
    ) -> list[StoredItem]:
        current = {item.key: item for item in self.checkpoints.members(self.source_id, group)}
        for key in removed:
            current.pop(key, None)
        for key, item in pending.items():
            if item.group == group:
                current[key] = item
            else:
                current.pop(key, None)
        return [current[key] for key in sorted(current)]

    def _reader(self, digest: str, fresh: dict[str, bytes]) -> Callable[[], bytes]:
        def read() -> bytes:
            data = fresh.get(digest)
            return data if data is not None else self.custody.read(digest)

        return read

    def _compose(
        self,
        group: str,
        pending: dict[str, StoredItem],
        removed: dict[str, str],
        fresh: dict[str, bytes],
        report: SourceReport,
    ) -> list[str]:
        """Record the documents of one group; delete those it no longer yields."""
        members = self._members(group, pending, removed)
        previous = self.checkpoints.documents(self.source_id, group)
        drafts: list[Draft] = []
        if members:
            drafts = self.provider.compose(
                group,
                [
                    Member(
                        item.key,
                        item.version,
                        item.digest,
                        item.name,
                        item.media_type,
                        item.account,
                        item.uri,
                        item.labels,
                        item.meta,
                        self._reader(item.digest, fresh),
                    )
                    for item in members
                ],
            )
        kept = [draft.document_id for draft in drafts if self._record(draft, report)]
        why = next(iter(removed.values()), "removed at the source") if removed else "not composed"
        for document in sorted(set(previous) - set(kept)):
            chunk_ids = self.ledger.delete(document, why)
            if chunk_ids or document in previous:
                report.removed.append(document)
                report.removed_chunks.extend(chunk_ids)
        return kept

    def _plan(self, draft: Draft) -> str:
        chunking = self.chunking
        return (
            f"{self.registry.plan(draft.media_type, draft.name)}"
            f"|chunks:{chunking.size}/{chunking.overlap}/{chunking.max_chunks}"
            f"|compose:{self.provider.kind}"
        )

    def _record(self, draft: Draft, report: SourceReport) -> bool:
        """Extract, chunk and record one draft; whether it is current evidence afterwards."""
        digest = hashlib.sha256(draft.data).hexdigest()
        plan = self._plan(draft)
        where = draft.uri or draft.document_id
        if self.ledger.is_current(draft.document_id, digest, plan, draft.labels):
            report.replayed.append(draft.document_id)
            return True
        extraction = self.registry.extract(
            draft.data, media_type=draft.media_type, name=draft.name, source_id=draft.document_id
        )
        if not extraction.usable or extraction.document is None:
            action = f"; next: {extraction.next_action}" if extraction.next_action else ""
            report.skipped.append(SkippedSource(where, f"{extraction.describe()}{action}"))
            return False
        document = replace(
            extraction.document,
            source_id=draft.document_id,
            path=draft.uri or draft.name,
            title=draft.title or extraction.document.title,
        )
        secret = find_secret(document.text.encode("utf-8"), document.text)
        if secret is not None:
            report.skipped.append(SkippedSource(where, secret))
            return False
        try:
            chunks = chunk_document(document, self.chunking)
        except SourceError as exc:
            report.skipped.append(SkippedSource(where, str(exc)))
            return False
        extra = {**draft.labels.as_metadata(), "sync_source": self.source_id}
        if draft.uri:
            extra["uri"] = draft.uri
        chunks = tuple(replace(c, metadata={**c.metadata, **extra}) for c in chunks)
        outcome = self.ledger.record(
            EvidenceInput(
                source_id=self.source_id,
                document_id=draft.document_id,
                digest=digest,
                plan=plan,
                labels=draft.labels,
                title=document.title,
                path=document.path,
                uri=draft.uri,
                media_type=draft.media_type,
                kind=document.kind,
                readability=extraction.state,
                reasons=tuple((r.code, r.detail) for r in extraction.reasons),
                text=document.text,
                text_sha256=document.text_sha256,
                version=document.version,
                originals=draft.originals,
                chunks=chunks,
            )
        )
        if outcome.kind == "withdrawn":
            report.skipped.append(SkippedSource(where, outcome.note))
            return False
        {"new": report.new, "changed": report.changed, "replayed": report.replayed}[
            outcome.kind
        ].append(draft.document_id)
        report.removed_chunks.extend(outcome.replaced)
        if extraction.state == "partial":
            reasons = "; ".join(f"{r.code}: {r.detail}" for r in extraction.reasons)
            report.skipped.append(SkippedSource(where, f"indexed partially ({reasons})"))
        return True


def summary_counts(reports: Sequence[SourceReport]) -> dict[str, int]:
    """Totals over sources: new, changed, removed, skipped, unchanged."""
    return {
        "new": sum(len(r.new) for r in reports),
        "changed": sum(len(r.changed) for r in reports),
        "removed": sum(len(r.removed) for r in reports),
        "skipped": sum(len(r.skipped) for r in reports),
        "unchanged": sum(r.unchanged for r in reports),
    }
