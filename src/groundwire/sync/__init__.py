"""Sync configured sources into custody, the evidence ledger and a published snapshot.

See docs/SYNC.md. :class:`Syncer` runs a :class:`SyncConfig` (``load_sync_config``);
:class:`SourceSync` runs one provider; :func:`publish_snapshot` derives the snapshot.
"""

from groundwire.sync.config import SourceConfig, SyncConfig, build_provider, load_sync_config
from groundwire.sync.publish import (
    PublishReport,
    SnapshotChanges,
    publish_snapshot,
    updated_knowledge_base,
)
from groundwire.sync.runner import SourceReport, SourceSync, SyncEvent
from groundwire.sync.service import Syncer, SyncReport

__all__ = [
    "PublishReport",
    "SnapshotChanges",
    "SourceConfig",
    "SourceReport",
    "SourceSync",
    "SyncConfig",
    "SyncEvent",
    "SyncReport",
    "Syncer",
    "build_provider",
    "load_sync_config",
    "publish_snapshot",
    "updated_knowledge_base",
]
