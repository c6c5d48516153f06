"""IMAP mailboxes with ``imapclient``: polling, no IDLE, UIDVALIDITY + UIDs as the cursor.

Per folder the cursor keeps the UIDVALIDITY and the set of UIDs seen (as compact IMAP
ranges, ``1:500,502:900``), whose maximum is the highest UID. A poll selects each folder
read-only, runs ``UID SEARCH ALL``, and:

- fetches (``BODY.PEEK[]``, so nothing is marked read) only UIDs above the highest seen;
- turns UIDs that disappeared into tombstones (expunged messages);
- when UIDVALIDITY changed (the folder was recreated or renumbered), the cursor has
  expired: every old UID is removed and every current message listed again, a full
  resync of that folder. Threads whose text did not change replay in the ledger.

Messages are keyed ``<folder>/<uidvalidity>/<uid>`` and deduplicated by Message-ID (the
same message in two folders is kept once). Threads and attachments are composed as for
every mail source (:mod:`groundwire.ingest.adapters.mail`).
"""

from __future__ import annotations

import hashlib
import json
import socket
import ssl as ssl_module
from collections.abc import Iterator, Sequence
from typing import Any

from groundwire.config import IMAP_FETCH_CHUNK, SYNC_BATCH_SIZE, SYNC_REQUEST_TIMEOUT_S
from groundwire.errors import MissingExtraError, SyncError
from groundwire.ingest.adapters.base import OPEN, Batch, Change, Item, Labels, Tombstone, constant
from groundwire.ingest.adapters.mail import MailThreads

__all__ = ["ImapProvider", "format_uids", "parse_uids"]


def format_uids(uids: Sequence[int]) -> str:
    """UIDs as IMAP ranges: ``[1, 2, 3, 7]`` → ``"1:3,7"``."""
    ordered = sorted(set(uids))
    parts: list[str] = []
    start = previous = None
    for uid in ordered:
        if previous is not None and uid == previous + 1:
            previous = uid
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}:{previous}")
        start = previous = uid
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}:{previous}")
    return ",".join(parts)


def parse_uids(text: str) -> list[int]:
    """IMAP ranges back to UIDs (the inverse of :func:`format_uids`)."""
    uids: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition(":")
        uids.extend(range(int(low), int(high or low) + 1))
    return uids


class ImapProvider(MailThreads):
    """One IMAP account: the configured folders, polled."""

    kind = "imap"

    def __init__(
        self,
        source_id: str,
        *,
        host: str,
        username: str,
        password: str,
        port: int = 993,
        ssl: bool = True,
        folders: Sequence[str] = ("INBOX",),
        labels: Labels = OPEN,
        account: str = "",
        batch_size: int = SYNC_BATCH_SIZE,
        acl_participants: bool = False,
        timeout: float = SYNC_REQUEST_TIMEOUT_S,
        ssl_context: ssl_module.SSLContext | None = None,
    ) -> None:
        self.source_id = source_id
        self.host = host
        self.port = port
        self.ssl = ssl
        self.username = username
        self._password = password
        self.folders = tuple(folders)
        self.labels = labels
        self.account = account or f"{username}@{host}"
        self.batch_size = batch_size
        self.acl_participants = acl_participants
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._client: Any = None

    def _where(self) -> str:
        return f"imap{'s' if self.ssl else ''}://{self.username}@{self.host}:{self.port}"

    def _error(self, exc: Exception, what: str) -> SyncError:
        retryable = isinstance(exc, OSError | socket.timeout)
        return SyncError(
            f"{self._where()}: {what} failed ({type(exc).__name__}: {exc})",
            source_id=self.source_id,
            retryable=retryable,
        )

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            from imapclient import IMAPClient
            from imapclient.exceptions import IMAPClientError, LoginError
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise MissingExtraError("imapclient", "sync", "Syncing IMAP mailboxes") from exc
        try:
            client = IMAPClient(
                self.host,
                port=self.port,
                ssl=self.ssl,
                ssl_context=self.ssl_context,
                timeout=self.timeout,
            )
        except (OSError, IMAPClientError) as exc:
            raise self._error(exc, "connecting") from exc
        try:
            client.login(self.username, self._password)
        except LoginError as exc:
            client.shutdown()
            raise SyncError(
                f"{self._where()}: login refused ({exc}); check the user name and the password "
                "variable",
                source_id=self.source_id,
            ) from exc
        except (OSError, IMAPClientError) as exc:
            raise self._error(exc, "logging in") from exc
        self._client = client
        return client

    def close(self) -> None:
        """Log out."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.logout()
            except Exception:  # already gone: nothing to release
                client.shutdown()

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """New messages, expunged ones as tombstones, resyncs after a UIDVALIDITY change."""
        from imapclient.exceptions import IMAPClientError

        state: dict[str, Any] = json.loads(cursor)["folders"] if cursor else {}
        client = self._connect()
        after: dict[str, Any] = {}
        changes: list[tuple[str, Sequence[int], list[Change]]] = []
        reasons = []
        try:
            for folder in self.folders:
                info = client.select_folder(folder, readonly=True)
                validity = int(info[b"UIDVALIDITY"])
                current = sorted(int(uid) for uid in client.search(["ALL"]))
                known = state.get(folder)
                gone: list[Change] = []
                if known is None or known["uidvalidity"] != validity:
                    if known is not None:
                        reasons.append(
                            f"UIDVALIDITY of {folder} changed ({known['uidvalidity']} → {validity})"
                        )
                        old = known["uidvalidity"]
                        gone = [
                            Tombstone(f"{folder}/{old}/{uid}", "UIDVALIDITY changed")
                            for uid in parse_uids(known["uids"])
                        ]
                    fetch = current
                else:
                    seen = parse_uids(known["uids"])
                    highest = max(seen, default=0)
                    fetch = [uid for uid in current if uid > highest]
                    alive = set(current)
                    gone = [
                        Tombstone(f"{folder}/{validity}/{uid}", "expunged from the mailbox")
                        for uid in seen
                        if uid not in alive
                    ]
                after[folder] = {"uidvalidity": validity, "uids": format_uids(current)}
                changes.append((folder, fetch, gone))
        except (OSError, IMAPClientError) as exc:
            raise self._error(exc, "listing folders") from exc
        final = json.dumps({"folders": after}, sort_keys=True)
        watermark = ", ".join(
            f"{folder}: UID {max(parse_uids(data['uids']), default=0)}"
            for folder, data in after.items()
        )
        reason = "; ".join(reasons) + ": full resync" if reasons else None
        yield from self._batched(client, changes, cursor, final, watermark, reason)

    def _batched(
        self,
        client: Any,
        changes: list[tuple[str, Sequence[int], list[Change]]],
        resume: str | None,
        final: str,
        watermark: str,
        reason: str | None,
    ) -> Iterator[Batch]:
        pending: list[Change] = []
        first = True
        for folder, fetch, gone in changes:
            for change in [*gone, *self._fetch(client, folder, fetch)]:
                if len(pending) >= self.batch_size:
                    yield Batch(
                        tuple(pending), resume, watermark, False, True, reason if first else None
                    )
                    pending, first = [], False
                pending.append(change)
        yield Batch(tuple(pending), final, watermark, False, False, reason if first else None)

    def _fetch(self, client: Any, folder: str, uids: Sequence[int]) -> Iterator[Item]:
        from imapclient.exceptions import IMAPClientError

        if not uids:
            return
        try:
            info = client.select_folder(folder, readonly=True)
            validity = int(info[b"UIDVALIDITY"])
            for at in range(0, len(uids), IMAP_FETCH_CHUNK):
                chunk = list(uids[at : at + IMAP_FETCH_CHUNK])
                found = client.fetch(chunk, ["BODY.PEEK[]", "RFC822.SIZE"])
                for uid in chunk:
                    data = found.get(uid)
                    if data is None:
                        continue  # expunged between SEARCH and FETCH: the next poll sees it gone
                    raw = bytes(data.get(b"BODY[]") or b"")
                    digest = hashlib.sha256(raw).hexdigest()
                    size = data.get(b"RFC822.SIZE")
                    yield Item(
                        key=f"{folder}/{validity}/{uid}",
                        version=digest,
                        read=constant(raw),
                        name=f"{folder}-{uid}.eml",
                        media_type="message/rfc822",
                        size=int(size) if size is not None else None,
                        sha256=None,
                        account=self.account,
                        labels=self.labels,
                        uri=f"{self._where()}/{folder};UIDVALIDITY={validity}/;UID={uid}",
                    )
        except (OSError, IMAPClientError) as exc:
            raise self._error(exc, f"fetching from {folder}") from exc
