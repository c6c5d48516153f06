"""The sync service: every configured source once (or on a schedule), then the snapshot.

:class:`Syncer` opens the state folder of a :class:`SyncConfig` — the checkpoint store,
the evidence ledger and custody — runs each source (:class:`SourceSync`), publishes the
snapshot when anything changed, and answers the host's events: withdrawals, push
notifications (deduplicated by their event id) and watch channels.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from groundwire.embed.base import Embedder
from groundwire.errors import ConfigError, GroundwireError, SyncError
from groundwire.ingest.adapters.base import Provider, WatchAddress, WatchChannel
from groundwire.ingest.adapters.checkpoints import CheckpointStore
from groundwire.ingest.custody.extract import ExtractorRegistry
from groundwire.ingest.custody.ledger import EvidenceLedger
from groundwire.ingest.custody.originals import Custody, FolderStore, OriginalStore, S3Store
from groundwire.ingest.custody.resolve import EvidenceResolver
from groundwire.sync.config import SyncConfig, build_provider, s3_options
from groundwire.sync.publish import PublishReport, SnapshotChanges, publish_snapshot
from groundwire.sync.runner import SourceReport, SourceSync, SyncEvent

__all__ = ["SyncReport", "Syncer"]


@dataclass(slots=True)
class SyncReport:
    """One run over the configured sources: a report per source, then the publish
    (``publish_error`` says why the snapshot could not be written; the next run retries)."""

    sources: list[SourceReport] = field(default_factory=list)
    published: PublishReport | None = None
    publish_error: str | None = None
    withdrawn: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[SourceReport]:
        """Sources that could not be synced."""
        return [report for report in self.sources if report.error is not None]

    def totals(self) -> dict[str, int]:
        """Documents new, changed, removed; items skipped and unchanged, over sources."""
        reports = self.sources
        return {
            "new": sum(len(r.new) for r in reports),
            "changed": sum(len(r.changed) for r in reports),
            "removed": sum(len(r.removed) for r in reports) + len(self.withdrawn),
            "skipped": sum(len(r.skipped) for r in reports),
            "unchanged": sum(r.unchanged + len(r.replayed) for r in reports),
        }


def _store(config: SyncConfig) -> OriginalStore:
    options = config.originals
    if options.get("type", "folder") == "s3":
        if not options.get("bucket"):
            raise ConfigError(f"{config.origin}: originals of type s3 need 'bucket'")
        return S3Store(
            str(options["bucket"]), str(options.get("prefix") or ""), **s3_options(options)
        )
    path = options.get("path")
    return FolderStore(config.base / str(path) if path else config.state / "originals")


class Syncer:
    """Runs the sources of one configuration into one state folder and one snapshot.

    ``providers`` replaces the provider built for a source id (a host's own client);
    ``registry`` the extractor registry (to plug an OCR engine); ``embedder`` makes every
    publish rebuild the snapshot's vectors.
    """

    def __init__(
        self,
        config: SyncConfig,
        *,
        providers: Mapping[str, Provider] | None = None,
        registry: ExtractorRegistry | None = None,
        embedder: Embedder | None = None,
        store: OriginalStore | None = None,
    ) -> None:
        self.config = config
        self.checkpoints = CheckpointStore(config.state / "checkpoints.sqlite")
        self.ledger = EvidenceLedger(config.state / "ledger.sqlite")
        self.custody = Custody(store or _store(config))
        self.registry = registry or ExtractorRegistry()
        self.embedder = embedder
        self._providers = dict(providers or {})
        self._withdrawn_chunks: list[str] = []  # left by withdraw(): named in the next publish

    def close(self) -> None:
        """Close the stores and every provider."""
        for provider in self._providers.values():
            provider.close()
        self.checkpoints.close()
        self.ledger.close()

    def __enter__(self) -> Syncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def provider(self, source_id: str) -> Provider:
        """The provider of a configured source (built once)."""
        if source_id not in self._providers:
            self._providers[source_id] = build_provider(self.config.source(source_id), self.config)
        return self._providers[source_id]

    def sync_source(
        self, source_id: str, progress: Callable[[SyncEvent], None] | None = None
    ) -> SourceReport:
        """Sync one source (no publish); a failure is reported in ``error``, not raised."""
        source = self.config.source(source_id)
        try:
            runner = SourceSync(
                self.provider(source_id),
                self.checkpoints,
                self.ledger,
                self.custody,
                self.registry,
                self.config.chunking,
            )
            return runner.run(progress)
        except GroundwireError as exc:
            report = SourceReport(source.id, source.type)
            report.error = str(exc)
            return report

    def run_once(
        self,
        only: Iterable[str] | None = None,
        progress: Callable[[SyncEvent], None] | None = None,
        *,
        publish: bool = True,
    ) -> SyncReport:
        """Sync every source (or ``only`` these), then publish the snapshot if configured."""
        started = time.perf_counter()
        wanted = list(only) if only is not None else [s.id for s in self.config.sources]
        report = SyncReport()
        for source_id in wanted:
            report.sources.append(self.sync_source(source_id, progress))
        if publish:
            changes = SnapshotChanges(
                tuple(d for r in report.sources for d in r.upserted),
                (*self._withdrawn_chunks, *(c for r in report.sources for c in r.removed_chunks)),
            )
            try:
                report.published = self.publish(changes)
                self._withdrawn_chunks.clear()
            except GroundwireError as exc:  # the ledger is committed: the next run publishes
                report.publish_error = str(exc)
        report.seconds = time.perf_counter() - started
        return report

    def publish(
        self, changes: SnapshotChanges | None = None, *, force: bool = False
    ) -> PublishReport | None:
        """Write the configured snapshot from the ledger (None: no snapshot, or unchanged)."""
        snapshot = self.config.snapshot
        if snapshot is None:
            return None
        return publish_snapshot(
            self.ledger,
            snapshot,
            [s.id for s in self.config.sources],
            changes or SnapshotChanges(),
            embedder=self.embedder,
            marker=self.config.state / "published.json",
            force=force,
        )

    def withdraw(self, target: str, reason: str) -> dict[str, tuple[str, ...]]:
        """Withdraw a document id, or every document of a configured source id.

        The evidence is marked withdrawn (and its text erased) first; call
        :meth:`publish` (``run_once`` does) to remove it from the snapshot.
        """
        if any(source.id == target for source in self.config.sources):
            withdrawn = self.ledger.withdraw(reason, source_id=target)
        elif self.ledger.evidence(target):
            withdrawn = self.ledger.withdraw(reason, document_id=target)
        else:
            raise ConfigError(
                f"{target!r} is neither a configured source nor a synced document id; "
                "document ids look like <source>/<key>"
            )
        self._withdrawn_chunks.extend(c for chunks in withdrawn.values() for c in chunks)
        return withdrawn

    def notify(
        self, source_id: str, event: str, progress: Callable[[SyncEvent], None] | None = None
    ) -> SyncReport | None:
        """A push notification for a source: sync it and publish, once per ``event`` id
        (a redelivered notification returns None and does nothing)."""
        self.config.source(source_id)
        if not self.checkpoints.claim_event(source_id, event):
            return None
        return self.run_once([source_id], progress)

    def open_watches(self, address: WatchAddress) -> list[WatchChannel]:
        """Open a push channel for every source that has one; the host's ``address(request)``
        says where notifications go. Channels are remembered in the checkpoint store."""
        channels = []
        for source in self.config.sources:
            provider: Any = self.provider(source.id)
            watch = getattr(provider, "watch", None)
            if watch is None:
                continue
            try:
                channel = watch(address, self.checkpoints.load(source.id).cursor)
            except GroundwireError as exc:
                raise SyncError(
                    f"source {source.id!r}: cannot open a watch ({exc})", source_id=source.id
                ) from exc
            self.checkpoints.save_channel(channel, source.id)
            channels.append(channel)
        return channels

    def resolver(self, tenant: str | None) -> EvidenceResolver:
        """A citation resolver for one tenant over this ledger and custody."""
        return EvidenceResolver(self.ledger, tenant=tenant, custody=self.custody)
