"""Object storage: a local folder, and S3-compatible buckets (boto3, the ``[s3]`` extra).

Both list every object on each run — that is how deletions are found — and read only
objects whose version changed since the last commit:

- :class:`FolderProvider`: files under a folder (hidden entries, symlinks and
  dependency/VCS folders are left out, as by the document loaders); the version is the
  size and modification time in nanoseconds.
- :class:`S3Provider`: ``ListObjectsV2`` pages under a prefix; the version is the ETag
  and last-modified time, and the cursor records the newest last-modified seen (the
  watermark). A single-part ETag is the MD5 of the bytes, so custody verifies it,
  together with the listed size. Works with any S3-compatible endpoint
  (``endpoint_url``), which is how the tests run against moto's server.
"""

from __future__ import annotations

import json
import mimetypes
import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from groundwire.config import SYNC_BATCH_SIZE, SYNC_REQUEST_TIMEOUT_S
from groundwire.errors import MissingExtraError, SyncError
from groundwire.ingest.adapters.base import OPEN, Batch, Item, Labels, SingleDocuments, batched
from groundwire.ingest.loaders import read_bounded, walk_folder

__all__ = ["FolderProvider", "S3Provider"]


class FolderProvider(SingleDocuments):
    """Every file under a folder, one document each."""

    kind = "folder"

    def __init__(
        self,
        source_id: str,
        path: str | os.PathLike[str],
        *,
        labels: Labels = OPEN,
        account: str = "",
        batch_size: int = SYNC_BATCH_SIZE,
        max_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        self.source_id = source_id
        self.path = Path(path)
        self.labels = labels
        self.account = account or str(self.path)
        self.batch_size = batch_size
        self.max_bytes = max_bytes

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """A full listing of the folder."""
        if not self.path.is_dir():
            what = "not a folder" if self.path.exists() else "no such folder"
            raise SyncError(
                f"{self.path}: {what}; point the source at a folder", source_id=self.source_id
            )
        files, left_out = walk_folder(self.path, report_excluded=False)
        # hidden files are left out quietly (as by the loaders); the rest is said each run
        skipped = [s for s in left_out if s.reason != "hidden file"]
        newest = 0

        def items() -> Iterator[Item]:
            nonlocal newest
            for full, rel in files:
                try:
                    info = full.stat()
                except OSError:
                    continue  # vanished while listing: the next run sees it gone
                newest = max(newest, info.st_mtime_ns)
                yield Item(
                    key=rel,
                    version=f"{info.st_size}:{info.st_mtime_ns}",
                    read=partial(self._read, full),
                    name=rel,
                    media_type=mimetypes.guess_type(rel, strict=False)[0] or "",
                    account=self.account,
                    labels=self.labels,
                    uri=rel,
                    meta={"modified": info.st_mtime_ns},
                )

        yield from batched(
            items(),
            cursor=json.dumps({"files": len(files)}),
            resume=cursor,
            full=True,
            size=self.batch_size,
            watermark=f"{len(files):,} files",
            skipped=skipped,
        )

    def _read(self, path: Path) -> bytes:
        try:
            return read_bounded(path, self.max_bytes, follow_symlinks=False)
        except Exception as exc:  # SourceError from the loader: report, keep going
            raise SyncError(str(exc), source_id=self.source_id) from exc


class S3Provider(SingleDocuments):
    """Objects of an S3-compatible bucket under a prefix, one document each."""

    kind = "s3"

    def __init__(
        self,
        source_id: str,
        bucket: str,
        *,
        prefix: str = "",
        labels: Labels = OPEN,
        client: Any = None,
        batch_size: int = SYNC_BATCH_SIZE,
        **options: Any,
    ) -> None:
        if client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise MissingExtraError("boto3", "s3", "Syncing S3 buckets") from exc
            timeout = Config(
                connect_timeout=SYNC_REQUEST_TIMEOUT_S,
                read_timeout=SYNC_REQUEST_TIMEOUT_S,
                retries={"max_attempts": 3, "mode": "standard"},
            )
            client = boto3.client("s3", config=timeout, **options)
        self.source_id = source_id
        self.bucket = bucket
        self.prefix = prefix
        self.labels = labels
        self.client = client
        self.batch_size = min(batch_size, 1000)

    def _error(self, exc: Exception, what: str) -> SyncError:
        detail = getattr(exc, "response", {}).get("Error", {}) if hasattr(exc, "response") else {}
        code = detail.get("Code") or type(exc).__name__
        retryable = code in ("SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable")
        return SyncError(
            f"s3://{self.bucket}/{self.prefix}: {what} failed "
            f"({code}: {detail.get('Message') or exc})",
            source_id=self.source_id,
            retryable=retryable,
        )

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """Every object under the prefix, page by page; the last page carries the cursor."""
        from botocore.exceptions import BotoCoreError, ClientError

        previous = json.loads(cursor) if cursor else {}
        newest = previous.get("watermark", "")
        paginator = self.client.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": self.batch_size}
        )
        try:
            count = 0
            page_items: list[Item] = []
            held: list[Item] | None = None
            for page in pages:
                page_items = []
                for entry in page.get("Contents", ()):
                    key = entry["Key"]
                    if key.endswith("/"):
                        continue  # a folder marker
                    modified = entry["LastModified"].isoformat()
                    newest = max(newest, modified)
                    etag = entry["ETag"].strip('"')
                    page_items.append(
                        Item(
                            key=key,
                            version=f"{etag}@{modified}",
                            read=partial(self._get, key),
                            name=key,
                            media_type="",
                            size=int(entry["Size"]),
                            md5=etag if "-" not in etag else None,
                            account=f"s3://{self.bucket}",
                            labels=self.labels,
                            uri=f"s3://{self.bucket}/{key}",
                            meta={"modified": modified},
                        )
                    )
                count += len(page_items)
                if held is not None:
                    yield Batch(tuple(held), cursor, full=True, more=True)
                held = page_items
            after = json.dumps({"objects": count, "watermark": newest})
            yield Batch(
                tuple(held or ()), after, f"{count:,} objects, newest {newest or '-'}", True, False
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "listing") from exc

    def _get(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            return bytes(response["Body"].read())
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, f"reading {key}") from exc
