"""Source adapters with delta sync: mail (mbox, Maildir, IMAP, Gmail), objects (folder,
S3) and Google Drive, behind one provider protocol, with a SQLite checkpoint store.

Client libraries load on demand: IMAP needs ``imapclient`` and S3 ``boto3`` (the
``[sync]`` extra); Gmail and Drive speak their REST APIs with httpx.
"""

from groundwire.ingest.adapters.base import (
    Batch,
    Draft,
    Item,
    Labels,
    Member,
    Provider,
    Tombstone,
    WatchChannel,
    WatchRequest,
    document_id,
)
from groundwire.ingest.adapters.checkpoints import Checkpoint, CheckpointStore, StoredItem
from groundwire.ingest.adapters.mail import (
    MaildirProvider,
    MboxProvider,
    parse_message,
    trim_quoted,
)
from groundwire.ingest.adapters.objects import FolderProvider, S3Provider

__all__ = [
    "Batch",
    "Checkpoint",
    "CheckpointStore",
    "Draft",
    "FolderProvider",
    "Item",
    "Labels",
    "MaildirProvider",
    "MboxProvider",
    "Member",
    "Provider",
    "S3Provider",
    "StoredItem",
    "Tombstone",
    "WatchChannel",
    "WatchRequest",
    "document_id",
    "parse_message",
    "trim_quoted",
]
