"""Gmail over its REST API: history ids as the cursor, tombstones for trash and deletion.

- **First sync / resync**: ``users.getProfile`` (its ``historyId`` becomes the cursor,
  taken *before* listing so nothing is missed), then ``users.messages.list`` (the
  label, or the query) and ``users.messages.get?format=raw`` for each message not held.
- **Delta**: ``users.history.list?startHistoryId=<cursor>``, page by page:
  ``messagesAdded`` fetch the message (unless it is in TRASH or SPAM or lacks the
  label), ``messagesDeleted`` and ``labelsAdded`` TRASH/SPAM are tombstones, a removed
  sync label is a tombstone, ``labelsRemoved`` TRASH brings a message back. The last
  page's ``historyId`` is the new cursor.
- **Expiry**: Gmail answers 404 for a history id it no longer keeps; the provider then
  lists everything again (a full resync) and says why.
- **Query sources** (``query:``): the history API cannot filter by a search query, so
  each run lists the query's message ids and reads only new ones; gone ids are removed.
- **Watch**: ``users.watch`` with the Pub/Sub topic the host's callback names.

Messages are composed into thread documents by Gmail's own ``threadId``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from groundwire.config import GOOGLE_PAGE_SIZE, SYNC_BATCH_SIZE
from groundwire.errors import ConfigError, SyncError
from groundwire.ingest.adapters._google import GoogleApi, delta_or_listing
from groundwire.ingest.adapters.base import (
    OPEN,
    Batch,
    Change,
    Item,
    Labels,
    Tombstone,
    WatchAddress,
    WatchChannel,
    WatchRequest,
)
from groundwire.ingest.adapters.mail import MailThreads

__all__ = ["GmailProvider"]

GMAIL_BASE_URL = "https://gmail.googleapis.com"
_HIDDEN = frozenset({"TRASH", "SPAM"})


def _expired_history(status: int, reason: str, location: str) -> bool:
    return status == 404


class GmailProvider(MailThreads):
    """One Gmail mailbox (``user``, default ``me``): a label's messages, or a query's."""

    kind = "gmail"

    def __init__(
        self,
        source_id: str,
        *,
        token: Callable[[], str],
        user: str = "me",
        label: str | None = None,
        query: str | None = None,
        base_url: str | None = None,
        labels: Labels = OPEN,
        account: str = "",
        batch_size: int = SYNC_BATCH_SIZE,
        acl_participants: bool = False,
        client: httpx.Client | None = None,
    ) -> None:
        if label is not None and query is not None:
            raise ConfigError(f"source {source_id!r}: give a Gmail label or a query, not both")
        self.source_id = source_id
        self.user = user
        self.label = label
        self.query = query
        self.labels = labels
        self.account = account or user
        self.batch_size = batch_size
        self.acl_participants = acl_participants
        self.api = GoogleApi(base_url or GMAIL_BASE_URL, token, source_id, client=client)
        self._prefix = f"/gmail/v1/users/{user}"

    def close(self) -> None:
        """Close the HTTP client."""
        self.api.close()

    def _item(self, message_id: str, thread_id: str) -> Item:
        return Item(
            key=message_id,
            version="immutable",  # a Gmail message never changes; labels arrive as history
            read=lambda: self._raw(message_id),
            name=f"{message_id}.eml",
            media_type="message/rfc822",
            group=thread_id,
            account=self.account,
            labels=self.labels,
            uri=f"gmail://{self.user}/messages/{message_id}",
        )

    def _raw(self, message_id: str) -> bytes:
        data = self.api.get_json(f"{self._prefix}/messages/{message_id}", {"format": "raw"})
        raw = data.get("raw")
        if not isinstance(raw, str):
            raise SyncError(f"gmail message {message_id}: no raw content", source_id=self.source_id)
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """A history delta, or a full listing (first run, expired history id, query)."""
        return delta_or_listing(
            cursor,
            "historyId",
            delta=self._history if self.query is None else None,
            start=lambda: str(self.api.get_json(f"{self._prefix}/profile").get("historyId", "")),
            listing=self._listing,
            size=self.batch_size,
            what="history id",
        )

    def _listing(self) -> Iterator[Item]:
        params: dict[str, Any] = {"maxResults": GOOGLE_PAGE_SIZE}
        if self.label:
            params["labelIds"] = self.label
        if self.query:
            params["q"] = self.query
        token = None
        while True:
            page = self.api.get_json(
                f"{self._prefix}/messages", {**params, **({"pageToken": token} if token else {})}
            )
            for message in page.get("messages") or ():
                yield self._item(str(message["id"]), str(message.get("threadId") or message["id"]))
            token = page.get("nextPageToken")
            if not token:
                return

    def _matches(self, label_ids: list[str]) -> bool:
        if _HIDDEN & set(label_ids):
            return False
        return self.label is None or self.label in label_ids

    def _history(self, start: str) -> tuple[list[Change], str]:
        """The changes after ``start`` (last action per message wins) and the new id."""
        actions: dict[str, Change] = {}
        params: dict[str, Any] = {
            "startHistoryId": start,
            "maxResults": GOOGLE_PAGE_SIZE,
            "historyTypes": ["messageAdded", "messageDeleted", "labelAdded", "labelRemoved"],
        }
        token = None
        history_id = start
        while True:
            page = self.api.get_json(
                f"{self._prefix}/history",
                {**params, **({"pageToken": token} if token else {})},
                expired=_expired_history,
            )
            for record in page.get("history") or ():
                self._apply(record, actions)
            history_id = str(page.get("historyId") or history_id)
            token = page.get("nextPageToken")
            if not token:
                break
        return [actions[key] for key in actions], history_id

    def _apply(self, record: dict[str, Any], actions: dict[str, Change]) -> None:
        for added in record.get("messagesAdded") or ():
            message = added["message"]
            if self._matches(list(message.get("labelIds") or ())):
                actions[message["id"]] = self._item(
                    message["id"], message.get("threadId") or message["id"]
                )
        for deleted in record.get("messagesDeleted") or ():
            actions[deleted["message"]["id"]] = Tombstone(
                deleted["message"]["id"], "deleted in Gmail"
            )
        for change in record.get("labelsAdded") or ():
            message, added_ids = change["message"], set(change.get("labelIds") or ())
            if added_ids & _HIDDEN:
                why = "moved to trash" if "TRASH" in added_ids else "marked as spam"
                actions[message["id"]] = Tombstone(message["id"], why)
            elif self.label in added_ids and self._matches(list(message.get("labelIds") or ())):
                actions[message["id"]] = self._item(
                    message["id"], message.get("threadId") or message["id"]
                )
        for change in record.get("labelsRemoved") or ():
            message, removed_ids = change["message"], set(change.get("labelIds") or ())
            if self.label is not None and self.label in removed_ids:
                actions[message["id"]] = Tombstone(message["id"], f"label {self.label} removed")
            elif removed_ids & _HIDDEN and self._matches(list(message.get("labelIds") or ())):
                actions[message["id"]] = self._item(
                    message["id"], message.get("threadId") or message["id"]
                )

    def watch(self, address: WatchAddress, cursor: str | None = None) -> WatchChannel:
        """``users.watch``: Gmail publishes changes to the Pub/Sub topic the host names."""
        topic = address(WatchRequest(self.source_id, self.kind, f"{self.source_id}-gmail"))
        body: dict[str, Any] = {"topicName": topic}
        if self.label:
            body.update(labelIds=[self.label], labelFilterBehavior="include")
        answer = self.api.post_json(f"{self._prefix}/watch", body)
        expiration = answer.get("expiration")
        return WatchChannel(
            source_id=self.source_id,
            kind=self.kind,
            channel_id=f"{self.source_id}-gmail",
            address=topic,
            expiration_ms=int(expiration) if expiration else None,
            history_id=str(answer.get("historyId")) if answer.get("historyId") else None,
        )

    def stop_watch(self) -> None:
        """``users.stop``: no more notifications for this mailbox."""
        self.api.request("POST", f"{self._prefix}/stop")
