"""The provider protocol every source adapter implements, and the records it exchanges.

A provider turns one configured source (a mailbox, a bucket, a drive) into **batches of
changes** since a cursor: :class:`Item` (an original to add or replace, read on demand)
and :class:`Tombstone` (an original that is gone: deleted, trashed, expunged, unshared).
Each batch carries the cursor to resume from once it is committed; a provider whose
cursor expired (Gmail's 404 on an old history id, a changed IMAP UIDVALIDITY, an invalid
Drive page token) starts a **full listing** instead (``Batch.full``): every current item
is listed, and whatever the listing did not name is removed.

Items sharing a ``group`` (the messages of a mail thread) are **composed** into
documents together (:meth:`Provider.compose`); an item without one is its own document.
Composition returns :class:`Draft` documents: bytes to extract, their media type, the
originals they derive from and the access labels they carry.

Labels are the access model's (:class:`groundwire.access.labels.Labels`): ``tenant``
(one id, or none: shared by every tenant) and ``acl`` (``user:<subject>`` /
``group:<group>`` labels, or none: every principal of the tenant), stored in chunk
metadata under ``tenant`` and ``acl``, where every store reads them.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

from groundwire.access.labels import Labels, parse_acl, parse_tenant
from groundwire.errors import ConfigError, SyncError
from groundwire.ingest.loaders import file_type
from groundwire.model import SkippedSource, is_label_id

__all__ = [
    "OPEN",
    "Batch",
    "Change",
    "Draft",
    "Item",
    "Labels",
    "Member",
    "Provider",
    "Tombstone",
    "WatchChannel",
    "WatchRequest",
    "batched",
    "constant",
    "document_id",
    "grant",
    "parse_labels",
    "regular_file",
]


def parse_labels(tenant: object, acl: object, where: str) -> Labels:
    """Configured labels, checked by the access model: ConfigError naming ``where``."""
    try:
        parsed_tenant = parse_tenant(tenant)
    except ValueError as exc:
        raise ConfigError(f"{where}.tenant: {exc}") from exc
    try:
        parsed_acl = parse_acl(acl)
    except ValueError as exc:
        raise ConfigError(f"{where}.acl: {exc}") from exc
    return Labels(parsed_tenant, parsed_acl)


#: No labels: shared by every tenant, open to every principal of it.
OPEN = Labels()


def grant(labels: Labels, acl: Sequence[str]) -> Labels:
    """``labels`` with ``acl`` labels added (an item's own sharing on top of the source's)."""
    if not acl:
        return labels
    return Labels(labels.tenant, tuple(sorted({*labels.acl, *acl})))


def acl_label(kind: str, name: str) -> str | None:
    """``user:<name>`` / ``group:<name>`` when ``name`` is a valid label id, else None."""
    name = name.strip()
    return f"{kind}:{name}" if is_label_id(name) else None


@dataclass(frozen=True, slots=True)
class Item:
    """One original to add or replace: a message, an object, a file.

    ``key`` is stable within the source; ``version`` changes whenever the bytes may have
    (an ETag, a content digest, a Drive version): an item whose key and version were
    committed before is not read again. ``read()`` returns the bytes (fetched on demand).
    ``size``/``sha256``/``md5`` are what the provider declares; custody checks them.
    ``group`` composes items into one document (a thread); ``dedupe`` names the same
    original delivered twice (a Message-ID). ``meta`` holds what composition needs.
    """

    key: str
    version: str
    read: Callable[[], bytes] = field(repr=False, compare=False)
    name: str
    media_type: str
    group: str | None = None
    size: int | None = None
    sha256: str | None = None
    md5: str | None = None
    account: str = ""
    labels: Labels = OPEN
    uri: str = ""
    dedupe: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """An original that is gone from the source, and why (deleted, trashed, expunged...)."""

    key: str
    reason: str


Change = Item | Tombstone


@dataclass(frozen=True, slots=True)
class Batch:
    """Changes to commit together, and the cursor to resume from once they are.

    ``watermark`` says in words how far the cursor reaches (a time, a UID, a history id).
    ``full``: part of a full listing (a first sync, or a resync after ``resync_reason``);
    every current item is listed, and when the last batch of the listing (``more`` False)
    is committed, items it did not list are removed. ``skipped`` is reported by the run.
    """

    changes: tuple[Change, ...]
    cursor: str | None
    watermark: str | None = None
    full: bool = False
    more: bool = False
    resync_reason: str | None = None
    #: What the provider saw but cannot offer (a FIFO in a folder, a symlink), and why.
    skipped: tuple[SkippedSource, ...] = ()


@dataclass(frozen=True, slots=True)
class Member:
    """A committed (or pending) item of a group, as composition sees it."""

    key: str
    version: str
    digest: str
    name: str
    media_type: str
    account: str
    uri: str
    labels: Labels
    meta: Mapping[str, Any]
    read: Callable[[], bytes] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Draft:
    """A document composed from originals, ready to extract, chunk and record.

    ``data`` is what the extractors read (an object's bytes; a thread rendered as text);
    ``originals`` the SHA-256 digests it derives from (kept in custody).
    """

    document_id: str
    title: str
    media_type: str
    name: str
    data: bytes = field(repr=False)
    originals: tuple[tuple[str, str, int], ...]  # (sha256, media type, size)
    labels: Labels
    uri: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WatchRequest:
    """A push channel a provider is about to open; the host says where notifications go."""

    source_id: str
    kind: str
    channel_id: str


@dataclass(frozen=True, slots=True)
class WatchChannel:
    """An open push channel: Drive's web-hook channel or Gmail's Pub/Sub watch."""

    source_id: str
    kind: str
    channel_id: str
    address: str
    resource_id: str = ""
    expiration_ms: int | None = None
    history_id: str | None = None


#: The host's callback: given the request, the web-hook URL or Pub/Sub topic to use.
WatchAddress = Callable[[WatchRequest], str]


@runtime_checkable
class Provider(Protocol):
    """A source adapter: batches of changes since a cursor, and documents from items."""

    source_id: str
    kind: str

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """Batches of changes after ``cursor`` (None: a first, full listing), in order."""
        ...

    def compose(self, group: str, members: Sequence[Member]) -> list[Draft]:
        """The documents of one group (or one ungrouped item) from its current members."""
        ...

    def acknowledge(self, batch: Batch) -> None:
        """Called after ``batch`` is committed (providers that need no ack do nothing)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def constant(data: bytes) -> Callable[[], bytes]:
    """A reader of bytes already in memory."""

    def read() -> bytes:
        return data

    return read


def batched(
    items: Iterator[Change],
    *,
    cursor: str | None,
    resume: str | None,
    full: bool,
    size: int,
    watermark: str | None = None,
    resync_reason: str | None = None,
    skipped: Sequence[SkippedSource] = (),
) -> Iterator[Batch]:
    """Items in batches of ``size``. The last batch carries ``cursor``; earlier ones carry
    ``resume`` (the cursor the run started from), so a run cut short starts over and
    skips what it already committed. The first batch carries ``resync_reason`` and
    ``skipped``."""
    chunk: list[Change] = []
    first = True

    def once() -> tuple[str | None, tuple[SkippedSource, ...]]:
        return (resync_reason, tuple(skipped)) if first else (None, ())

    for item in items:
        if len(chunk) >= size:
            yield Batch(tuple(chunk), resume, watermark, full, True, *once())
            chunk, first = [], False
        chunk.append(item)
    yield Batch(tuple(chunk), cursor, watermark, full, False, *once())


def regular_file(path: Path, source_id: str, what: str) -> None:
    """SyncError unless ``path`` is a regular file (a FIFO would block its reader)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise SyncError(
            f"{path}: no such {what} ({exc.strerror or exc}); check the source's path",
            source_id=source_id,
        ) from exc
    if not stat.S_ISREG(mode):
        raise SyncError(
            f"{path}: not a regular file ({file_type(mode)}); point the source at the {what}",
            source_id=source_id,
        )


def document_id(source_id: str, key: str) -> str:
    """``<source id>/<key>`` with characters a citation cannot hold percent-encoded."""
    return f"{source_id}/{quote(key, safe='/._-~+=,:')}"


class SingleDocuments:
    """Composition for sources whose every item is one document (objects, files)."""

    source_id: str

    def compose(self, group: str, members: Sequence[Member]) -> list[Draft]:
        """The item as one document, its bytes extracted as they are."""
        drafts = []
        for member in members:
            data = member.read()
            drafts.append(
                Draft(
                    document_id=document_id(self.source_id, member.key),
                    title="",
                    media_type=member.media_type,
                    name=member.name,
                    data=data,
                    originals=((member.digest, member.media_type, len(data)),),
                    labels=member.labels,
                    uri=member.uri,
                    metadata={"modified": member.meta.get("modified")}
                    if member.meta.get("modified")
                    else {},
                )
            )
        return drafts

    def acknowledge(self, batch: Batch) -> None:
        """Nothing to acknowledge: listings are pulled."""

    def close(self) -> None:
        """Nothing to release."""
