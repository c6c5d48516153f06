"""Google Drive over its REST API (v3): change page tokens as the cursor.

- **First sync / resync**: ``changes.getStartPageToken`` (the cursor, taken before
  listing), then ``files.list`` (``trashed = false``, and the configured query) page by
  page; files are read with ``files.get?alt=media`` (Google Docs, Sheets and Slides are
  exported as text or CSV with ``files.export``).
- **Delta**: ``changes.list?pageToken=<cursor>&includeRemoved=true``; a change that is
  ``removed`` (deleted, or no longer shared with the account) or whose file is
  ``trashed`` is a tombstone; the last page's ``newStartPageToken`` is the new cursor.
- **Expiry**: an invalid or expired page token (HTTP 400 on ``pageToken``, 404 or 410)
  starts a full resync, said in the report.
- **Query sources**: changes cannot be filtered by a Drive query, so with ``query`` each
  run lists the query's files and reads only changed ones (by version).
- **Access labels**: with ``acl_from_permissions`` (default), a file shared with users or
  groups (``permissions[].type`` user/group) adds ``user:<email>`` / ``group:<email>``
  to the source's ACL; a file shared with a domain or anyone keeps the source's labels.
- **Watch**: ``changes.watch`` opens a web-hook channel to the address the host's
  callback names; ``channels.stop`` closes it.

Declared sizes and checksums (``size``, ``sha256Checksum``, ``md5Checksum``) are
verified by custody.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from groundwire.config import GOOGLE_PAGE_SIZE, SYNC_BATCH_SIZE
from groundwire.ingest.adapters._google import GoogleApi, delta_or_listing
from groundwire.ingest.adapters.base import (
    OPEN,
    Batch,
    Change,
    Item,
    Labels,
    SingleDocuments,
    Tombstone,
    WatchAddress,
    WatchChannel,
    WatchRequest,
    acl_label,
    grant,
)

__all__ = ["DriveProvider"]

DRIVE_BASE_URL = "https://www.googleapis.com"
_FILE_FIELDS = (
    "id,name,mimeType,trashed,size,md5Checksum,sha256Checksum,modifiedTime,version,"
    "owners(emailAddress),permissions(type,emailAddress,domain,role)"
)
#: Google-native types and what they are exported as.
EXPORTS = {
    "application/vnd.google-apps.document": ("text/plain", ".txt"),
    "application/vnd.google-apps.spreadsheet": ("text/csv", ".csv"),
    "application/vnd.google-apps.presentation": ("text/plain", ".txt"),
}
_SKIPPED_TYPES = ("application/vnd.google-apps.folder", "application/vnd.google-apps.shortcut")


def _expired_token(status: int, reason: str, location: str) -> bool:
    return status in (404, 410) or (
        status == 400 and (location == "pageToken" or "pageToken" in reason)
    )


class DriveProvider(SingleDocuments):
    """The files of one Drive account (or shared drive), one document each."""

    kind = "drive"

    def __init__(
        self,
        source_id: str,
        *,
        token: Callable[[], str],
        query: str | None = None,
        base_url: str | None = None,
        drive_id: str | None = None,
        labels: Labels = OPEN,
        account: str = "",
        batch_size: int = SYNC_BATCH_SIZE,
        acl_from_permissions: bool = True,
        client: httpx.Client | None = None,
    ) -> None:
        self.source_id = source_id
        self.query = query
        self.drive_id = drive_id
        self.labels = labels
        self.account = account or "drive"
        self.batch_size = batch_size
        self.acl_from_permissions = acl_from_permissions
        self.api = GoogleApi(base_url or DRIVE_BASE_URL, token, source_id, client=client)

    def close(self) -> None:
        """Close the HTTP client."""
        self.api.close()

    def _drive_params(self) -> dict[str, Any]:
        if self.drive_id is None:
            return {}
        return {
            "driveId": self.drive_id,
            "supportsAllDrives": "true",
            "includeItemsFromAllDrives": "true",
        }

    def _labels(self, file: dict[str, Any]) -> Labels:
        if not self.acl_from_permissions:
            return self.labels
        grants = []
        for permission in file.get("permissions") or ():
            kind = permission.get("type")
            if kind in ("anyone", "domain"):
                return self.labels
            if kind in ("user", "group") and permission.get("emailAddress"):
                label = acl_label(kind, str(permission["emailAddress"]))
                if label is not None:
                    grants.append(label)
        return grant(self.labels, grants)

    def _item(self, file: dict[str, Any]) -> Item | None:
        media_type = str(file.get("mimeType") or "")
        if media_type in _SKIPPED_TYPES:
            return None
        file_id = str(file["id"])
        name = str(file.get("name") or file_id)
        export = EXPORTS.get(media_type)
        if export is not None:
            media_type, suffix = export
            name = name if name.endswith(suffix) else name + suffix
            read: Callable[[], bytes] = lambda: self._export(file_id, export[0])  # noqa: E731
            size = sha256 = md5 = None
        else:
            read = lambda: self._media(file_id)  # noqa: E731
            size = int(file["size"]) if str(file.get("size", "")).isdigit() else None
            sha256, md5 = file.get("sha256Checksum"), file.get("md5Checksum")
        version = str(
            file.get("version") or file.get("md5Checksum") or file.get("modifiedTime") or ""
        )
        return Item(
            key=file_id,
            version=f"{version}@{file.get('modifiedTime', '')}",
            read=read,
            name=name,
            media_type=media_type,
            size=size,
            sha256=sha256,
            md5=md5,
            account=self.account,
            labels=self._labels(file),
            uri=f"drive://files/{file_id}",
            meta={"modified": file.get("modifiedTime")},
        )

    def _media(self, file_id: str) -> bytes:
        params = {"alt": "media", **({"supportsAllDrives": "true"} if self.drive_id else {})}
        return self.api.request("GET", f"/drive/v3/files/{file_id}", params=params).content

    def _export(self, file_id: str, media_type: str) -> bytes:
        return self.api.request(
            "GET", f"/drive/v3/files/{file_id}/export", params={"mimeType": media_type}
        ).content

    def _start_token(self) -> str:
        answer = self.api.get_json("/drive/v3/changes/startPageToken", self._drive_params())
        return str(answer["startPageToken"])

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """A change delta, or a full listing (first run, expired token, query source)."""
        return delta_or_listing(
            cursor,
            "pageToken",
            delta=self._changes if self.query is None else None,
            start=self._start_token,
            listing=self._listing,
            size=self.batch_size,
            what="page token",
        )

    def _listing(self) -> Iterator[Item]:
        query = "trashed = false" + (f" and ({self.query})" if self.query else "")
        params = {
            "q": query,
            "pageSize": GOOGLE_PAGE_SIZE,
            "fields": f"nextPageToken,files({_FILE_FIELDS})",
            **self._drive_params(),
        }
        token = None
        while True:
            page = self.api.get_json(
                "/drive/v3/files", {**params, **({"pageToken": token} if token else {})}
            )
            for file in page.get("files") or ():
                item = self._item(file)
                if item is not None:
                    yield item
            token = page.get("nextPageToken")
            if not token:
                return

    def _changes(self, token: str) -> tuple[list[Change], str]:
        actions: dict[str, Change] = {}
        params = {
            "pageSize": GOOGLE_PAGE_SIZE,
            "includeRemoved": "true",
            "fields": "nextPageToken,newStartPageToken,"
            f"changes(changeType,removed,fileId,time,file({_FILE_FIELDS}))",
            **self._drive_params(),
        }
        while True:
            page = self.api.get_json(
                "/drive/v3/changes", {**params, "pageToken": token}, expired=_expired_token
            )
            for change in page.get("changes") or ():
                if change.get("changeType", "file") != "file":
                    continue
                file_id = str(change.get("fileId") or change.get("file", {}).get("id"))
                file = change.get("file") or {}
                if change.get("removed"):
                    actions[file_id] = Tombstone(
                        file_id, "removed from Drive (deleted or unshared)"
                    )
                elif file.get("trashed"):
                    actions[file_id] = Tombstone(file_id, "moved to the Drive trash")
                else:
                    item = self._item({"id": file_id, **file})
                    if item is not None:
                        actions[file_id] = item
            if page.get("newStartPageToken"):
                return list(actions.values()), str(page["newStartPageToken"])
            token = str(page["nextPageToken"])

    def watch(self, address: WatchAddress, cursor: str | None = None) -> WatchChannel:
        """``changes.watch``: a web-hook channel to the URL the host's callback names."""
        channel_id = str(uuid.uuid4())
        url = address(WatchRequest(self.source_id, self.kind, channel_id))
        token = json.loads(cursor)["pageToken"] if cursor else self._start_token()
        answer = self.api.post_json(
            "/drive/v3/changes/watch",
            {"id": channel_id, "type": "web_hook", "address": url, "token": self.source_id},
            params={"pageToken": token, **self._drive_params()},
        )
        expiration = answer.get("expiration")
        return WatchChannel(
            source_id=self.source_id,
            kind=self.kind,
            channel_id=str(answer.get("id") or channel_id),
            address=url,
            resource_id=str(answer.get("resourceId") or ""),
            expiration_ms=int(expiration) if expiration else None,
        )

    def stop_watch(self, channel: WatchChannel) -> None:
        """``channels.stop``: close a channel opened by :meth:`watch`."""
        self.api.post_json(
            "/drive/v3/channels/stop", {"id": channel.channel_id, "resourceId": channel.resource_id}
        )
