"""Original bytes in custody: content-addressed by SHA-256, insert-only, verified.

:class:`Custody` admits the bytes a provider delivered: it checks the declared size and
digests (SHA-256, or MD5 where that is all a provider gives: S3 ETags, Drive), then the
declared media type against the bytes' magic numbers. Bytes that fail a size or digest
check are **rejected** (nothing stored); bytes whose type does not match are
**quarantined** (kept apart with the reason, never extracted). Admitted bytes are stored
once under their SHA-256; the same bytes delivered again from another account or item
**append provenance** instead of a second copy.

Two stores implement :class:`OriginalStore`: :class:`FolderStore` (a folder; every
object written to a private temporary file, then hard-linked into place, so an
existing object is never replaced; :meth:`Custody.flush` makes the batch's writes
durable with one ``sync(2)`` before the sync run commits its checkpoint) and
:class:`S3Store` (an S3-compatible bucket; ``PutObject`` with ``If-None-Match: *``,
durable when it answers). Layout, in both::

    objects/ab/<sha256>                   the original bytes
    provenance/ab/<sha256>/<record>.json  one record per (source, account, item)
    quarantine/ab/<sha256>                bytes whose media type did not match
    quarantine/ab/<sha256>.json           why
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from groundwire.errors import CustodyError, MissingExtraError
from groundwire.ingest.custody.media import declared_type, media_mismatch

__all__ = [
    "Admission",
    "Custody",
    "FolderStore",
    "OriginalStore",
    "Provenance",
    "S3Store",
]

RejectReason = Literal["size-mismatch", "digest-mismatch", "media-type-mismatch"]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _fanout(kind: str, digest: str) -> str:
    return f"{kind}/{digest[:2]}/{digest}"


class OriginalStore(Protocol):
    """Where originals live: insert-only objects under relative names (see the layout)."""

    location: str

    def put(self, name: str, data: bytes) -> bool:
        """Store ``data`` under ``name`` unless it exists; True when it was written."""
        ...

    def get(self, name: str) -> bytes | None:
        """The bytes stored under ``name``, or None."""
        ...

    def names(self, prefix: str) -> list[str]:
        """Names under ``prefix`` (sorted)."""
        ...

    def flush(self) -> None:
        """Make every ``put`` so far durable."""
        ...


class FolderStore:
    """Originals in a folder (created when missing); objects are never replaced."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.location = str(self.root)
        self._unsynced = False
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CustodyError(f"{self.root}: cannot create the custody folder ({exc})") from exc

    def put(self, name: str, data: bytes) -> bool:
        """Write a private temp file and hard-link it into place (refused when present).

        Not fsynced one by one: :meth:`flush` syncs once per batch (a file lost to a
        power failure before it is replayed, since the checkpoint commits after it)."""
        target = self.root / name
        if target.exists():
            return False
        try:
            try:
                fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            except FileNotFoundError:  # the first object of its fan-out folder
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.chmod(temp, 0o444)
                try:
                    os.link(temp, target)
                except FileExistsError:
                    return False
                self._unsynced = True
                return True
            finally:
                os.unlink(temp)
        except OSError as exc:
            raise CustodyError(
                f"{target}: cannot store the original ({exc.strerror or exc}); nothing was "
                "recorded for it"
            ) from exc

    def flush(self) -> None:
        """One ``sync(2)`` when anything was written since the last flush."""
        if self._unsynced:
            os.sync()
            self._unsynced = False

    def get(self, name: str) -> bytes | None:
        """The bytes under ``name``, or None."""
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CustodyError(f"{self.root / name}: cannot read ({exc.strerror or exc})") from exc

    def names(self, prefix: str) -> list[str]:
        """Names under ``prefix``, sorted (temporary files excluded)."""
        base = self.root / prefix
        if not base.is_dir():
            return []
        return sorted(
            path.relative_to(self.root).as_posix()
            for path in base.rglob("*")
            if path.is_file() and not path.name.startswith(".tmp-")
        )


class S3Store:
    """Originals in an S3-compatible bucket under ``prefix`` (boto3, the ``[s3]`` extra)."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None, **options: Any) -> None:
        if client is None:
            try:
                import boto3
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise MissingExtraError("boto3", "s3", "An S3 custody store") from exc
            client = boto3.client("s3", **options)
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.location = f"s3://{bucket}/{self.prefix}"

    def put(self, name: str, data: bytes) -> bool:
        """``PutObject`` with ``If-None-Match: *``: refused (False) when the name exists."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.prefix + name, Body=data, IfNoneMatch="*"
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412"):
                return False
            raise CustodyError(
                f"{self.location}{name}: cannot store the original ({code})"
            ) from exc
        except BotoCoreError as exc:
            raise CustodyError(f"{self.location}{name}: cannot store the original ({exc})") from exc
        return True

    def get(self, name: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)
            return bytes(response["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise CustodyError(f"{self.location}{name}: cannot read ({exc})") from exc
        except BotoCoreError as exc:
            raise CustodyError(f"{self.location}{name}: cannot read ({exc})") from exc

    def flush(self) -> None:
        """Nothing to do: a PutObject that answered is durable."""

    def names(self, prefix: str) -> list[str]:
        """Names under ``prefix``, sorted."""
        paginator = self.client.get_paginator("list_objects_v2")
        found: list[str] = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            found.extend(item["Key"][len(self.prefix) :] for item in page.get("Contents", ()))
        return sorted(found)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Who delivered an original: the source, the account (mailbox, drive owner), the item."""

    source_id: str
    account: str
    key: str
    uri: str = ""

    def record(self) -> dict[str, str]:
        """The provenance record as stored (no timestamp: records are content-addressed)."""
        return {"source": self.source_id, "account": self.account, "key": self.key, "uri": self.uri}


@dataclass(frozen=True, slots=True)
class Admission:
    """What custody did with one original.

    ``accepted`` originals are stored (``stored`` False: the same bytes were already in
    custody) and ``provenance_added`` says this delivery was new. A rejected one carries
    ``reason`` and ``detail``; ``quarantined`` when its bytes were kept apart.
    """

    sha256: str
    size: int
    media_type: str
    accepted: bool
    stored: bool = False
    provenance_added: bool = False
    reason: RejectReason | None = None
    detail: str = ""

    @property
    def quarantined(self) -> bool:
        """Whether the bytes were kept in quarantine (a media-type mismatch)."""
        return self.reason == "media-type-mismatch"


class Custody:
    """Verify, store and account for original bytes in one :class:`OriginalStore`."""

    def __init__(self, store: OriginalStore, *, check_media: bool = True) -> None:
        self.store = store
        self.check_media = check_media

    def admit(
        self,
        data: bytes,
        *,
        provenance: Provenance,
        media_type: str | None = None,
        name: str = "",
        size: int | None = None,
        sha256: str | None = None,
        md5: str | None = None,
    ) -> Admission:
        """Check ``data`` against what was declared, then store it (or quarantine it)."""
        digest = _sha256(data)
        kind = declared_type(media_type, name or provenance.key)

        def reject(reason: RejectReason, detail: str) -> Admission:
            return Admission(digest, len(data), kind, False, reason=reason, detail=detail)

        if size is not None and size != len(data):
            return reject(
                "size-mismatch", f"declared {size:,} bytes but {len(data):,} were delivered"
            )
        if sha256 is not None and sha256.lower() != digest:
            return reject(
                "digest-mismatch",
                f"declared SHA-256 {sha256[:12]}… but the bytes hash to {digest[:12]}…",
            )
        if md5 is not None and md5.lower() != hashlib.md5(data, usedforsecurity=False).hexdigest():
            return reject("digest-mismatch", f"declared MD5 {md5} does not match the bytes")
        if self.check_media:
            problem = media_mismatch(kind, data)
            if problem is not None:
                self.store.put(_fanout("quarantine", digest), data)
                reason = {"reason": "media-type-mismatch", "detail": problem, **provenance.record()}
                self.store.put(_fanout("quarantine", digest) + ".json", _canonical(reason))
                return reject("media-type-mismatch", problem)
        stored = self.store.put(_fanout("objects", digest), data)
        record = _canonical(provenance.record())
        added = self.store.put(
            f"{_fanout('provenance', digest)}/{_sha256(record)[:16]}.json", record
        )
        return Admission(digest, len(data), kind, True, stored, added)

    def flush(self) -> None:
        """Make the originals admitted so far durable (before a checkpoint commits)."""
        self.store.flush()

    def read(self, digest: str) -> bytes:
        """The original stored under ``digest``, verified; CustodyError when missing or altered."""
        data = self.store.get(_fanout("objects", digest))
        if data is None:
            raise CustodyError(
                f"original {digest[:12]}… is not in custody at {self.store.location}"
            )
        if _sha256(data) != digest:
            raise CustodyError(
                f"original {digest[:12]}… in {self.store.location} was altered: its bytes hash "
                "to another digest"
            )
        return data

    def verify(self, digest: str) -> str | None:
        """Why the original under ``digest`` cannot be trusted (missing, altered), or None."""
        try:
            self.read(digest)
        except CustodyError as exc:
            return str(exc)
        return None

    def provenance(self, digest: str) -> list[dict[str, str]]:
        """Every delivery of the original ``digest`` (source, account, item), sorted."""
        records = []
        for name in self.store.names(_fanout("provenance", digest) + "/"):
            data = self.store.get(name)
            if data is not None:
                records.append(json.loads(data))
        return sorted(records, key=lambda r: (r["source"], r["account"], r["key"]))

    def quarantined(self) -> list[dict[str, str]]:
        """Why each quarantined original was kept apart (with its digest)."""
        out = []
        for name in self.store.names("quarantine/"):
            if name.endswith(".json"):
                data = self.store.get(name)
                if data is not None:
                    record = json.loads(data)
                    record["sha256"] = name.rsplit("/", 1)[-1].removesuffix(".json")
                    out.append(record)
        return sorted(out, key=lambda r: r["sha256"])
