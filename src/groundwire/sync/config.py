"""The sync configuration file (YAML): where state lives, the snapshot, and the sources.

::

    state: .groundwire/sync          # checkpoints.sqlite, ledger.sqlite, originals/
    snapshot: build/kb               # the snapshot every run publishes (optional)
    embed: hashing                   # also publish vectors (optional; any --embed MODEL)
    chunking: {size: 1600, overlap: 200}
    originals: {type: s3, bucket: custody, prefix: gw/, endpoint_url: http://...}
    sources:
      - id: support-mail             # stable id: document ids start with it
        type: mbox                   # mbox | maildir | imap | folder | s3 | gmail | drive
        path: mail/support.mbox
        tenant: acme                 # access labels of every document of the source
        acl: [group:support]
        owner: support@acme.example  # adds user:<owner> to the ACL

Paths are relative to the file's folder. Credentials never appear in the file: name the
environment variable that holds them (``password_env``, ``token_env``); an inline
``password:`` or ``token:`` is an error. Unknown keys are errors that suggest the key
meant.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundwire.config import (
    MAX_SOURCE_FILE_BYTES,
    SYNC_BATCH_SIZE,
    SYNC_WATCH_INTERVAL_S,
    ChunkingConfig,
)
from groundwire.errors import ConfigError, SourceError
from groundwire.ingest.adapters.base import Labels, Provider, acl_label, grant, parse_labels
from groundwire.ingest.loaders import read_bounded
from groundwire.ingest.parsing import parse_yaml

__all__ = ["SOURCE_TYPES", "SourceConfig", "SyncConfig", "build_provider", "load_sync_config"]

_TOP = ("state", "snapshot", "embed", "chunking", "originals", "sources", "interval", "batch_size")
_COMMON = ("id", "type", "tenant", "acl", "owner", "account")
#: Options of each source type (besides the common ones).
SOURCE_TYPES: dict[str, tuple[str, ...]] = {
    "mbox": ("path", "acl_participants"),
    "maildir": ("path", "acl_participants"),
    "imap": ("host", "port", "ssl", "username", "password_env", "folders", "acl_participants"),
    "folder": ("path",),
    "s3": ("bucket", "prefix", "endpoint_url", "region", "access_key_env", "secret_key_env"),
    "gmail": ("user", "label", "query", "token_env", "base_url", "acl_participants"),
    "drive": ("query", "token_env", "base_url", "drive_id", "acl_from_permissions"),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "mbox": ("path",),
    "maildir": ("path",),
    "imap": ("host", "username", "password_env"),
    "folder": ("path",),
    "s3": ("bucket",),
    "gmail": ("token_env",),
    "drive": ("token_env",),
}
#: Options that are not strings: the type each must have.
_OPTION_TYPES: dict[str, tuple[type, str]] = {
    "port": (int, "a port number 1-65535"),
    "ssl": (bool, "true or false"),
    "acl_participants": (bool, "true or false"),
    "acl_from_permissions": (bool, "true or false"),
    "folders": (list, "a list of folder names"),
}
_SECRETS = ("password", "token", "secret", "secret_key", "access_key", "aws_secret_access_key")


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One configured source: its id, type, access labels and type options."""

    id: str
    type: str
    labels: Labels
    account: str
    options: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SyncConfig:
    """A parsed sync configuration (see the module docstring)."""

    origin: Path
    state: Path
    snapshot: Path | None
    embed: str | None
    chunking: ChunkingConfig
    originals: Mapping[str, Any]
    sources: tuple[SourceConfig, ...]
    interval: float = SYNC_WATCH_INTERVAL_S
    batch_size: int = SYNC_BATCH_SIZE
    base: Path = field(default=Path("."))

    def source(self, source_id: str) -> SourceConfig:
        """The source with this id; ConfigError naming the configured ones otherwise."""
        for source in self.sources:
            if source.id == source_id:
                return source
        known = ", ".join(s.id for s in self.sources)
        raise ConfigError(f"{self.origin}: no source {source_id!r}; configured: {known}")


def _unknown(keys: object, known: tuple[str, ...], where: str) -> None:
    for key in keys:  # type: ignore[attr-defined]
        if key not in known:
            if any(str(key) == secret or str(key).endswith(f"_{secret}") for secret in _SECRETS):
                raise ConfigError(
                    f"{where}.{key}: credentials are not accepted in the file; put the value "
                    f"in an environment variable and name it with '{key}_env'"
                    if f"{key}_env" in known
                    else f"{where}.{key}: credentials are not accepted in the file; use an "
                    "environment variable (see docs/SYNC.md)"
                )
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"{where}: unknown key {key!r}; {hint}")


def _check_options(raw: Mapping[str, Any], where: str) -> None:
    """Each option of a known type has it; every other given option is a string."""
    for key, value in raw.items():
        if key in ("acl", "id", "type", "tenant") or value is None:
            continue  # checked on their own
        kind, expected = _OPTION_TYPES.get(key, (str, "a string"))
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if kind is int:
            ok = ok and 1 <= value <= 65535
        if kind is list:
            ok = ok and all(isinstance(v, str) and v for v in value)
        if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
            ok = True  # a number where a name is expected (an account, a bucket) reads fine
        if not ok:
            raise ConfigError(f"{where}.{key}={value!r}: expected {expected}")


def _source(raw: object, number: int, origin: Path, seen: set[str]) -> SourceConfig:
    where = f"{origin}: sources[{number}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: a source is a mapping with 'id' and 'type'")
    kind = raw.get("type")
    if kind not in SOURCE_TYPES:
        raise ConfigError(f"{where}.type={kind!r}: expected one of {', '.join(SOURCE_TYPES)}")
    _unknown(raw, (*_COMMON, *SOURCE_TYPES[kind]), where)
    source_id = raw.get("id")
    if not isinstance(source_id, str) or not source_id or any(c in source_id for c in "/#@[] \t\n"):
        raise ConfigError(
            f"{where}.id={source_id!r}: expected a short id without spaces, '/', '#', '@' or "
            "brackets (document ids start with it), e.g. support-mail"
        )
    if source_id in seen:
        raise ConfigError(f"{where}.id: {source_id!r} is configured twice; ids must be unique")
    seen.add(source_id)
    for key in _REQUIRED[kind]:
        if raw.get(key) in (None, ""):
            raise ConfigError(f"{where}: a {kind} source needs '{key}'")
    _check_options(raw, where)
    labels = parse_labels(raw.get("tenant"), raw.get("acl"), where)
    owner = raw.get("owner")
    if owner is not None:
        label = acl_label("user", str(owner))
        if label is None:
            raise ConfigError(f"{where}.owner={owner!r}: not a valid subject id")
        labels = grant(labels, [label])
    options = {k: v for k, v in raw.items() if k not in _COMMON}
    return SourceConfig(source_id, kind, labels, str(raw.get("account") or ""), options)


def load_sync_config(path: str | os.PathLike[str]) -> SyncConfig:
    """Read and check a sync configuration file; ConfigError/SourceError naming the problem."""
    origin = Path(path)
    # A regular file of bounded size (a FIFO never blocks), parsed with bounded nesting.
    raw = read_bounded(origin, MAX_SOURCE_FILE_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"{origin}: not valid UTF-8 (byte {exc.start}); save it as UTF-8"
        ) from exc
    data = parse_yaml(text, str(origin))
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: expected a mapping with 'sources'")
    _unknown(data, _TOP, str(origin))
    raw_sources = data.get("sources")
    if not isinstance(raw_sources, list) or not raw_sources:
        raise ConfigError(f"{origin}: 'sources' must list at least one source")
    base = origin.resolve().parent
    seen: set[str] = set()
    sources = tuple(_source(raw, n, origin, seen) for n, raw in enumerate(raw_sources))
    chunking_raw = data.get("chunking") or {}
    if not isinstance(chunking_raw, Mapping):
        raise ConfigError(f"{origin}: 'chunking' is a mapping with size and overlap")
    _unknown(chunking_raw, ("size", "overlap", "max_chunks"), f"{origin}: chunking")
    try:
        chunking = ChunkingConfig(**dict(chunking_raw))
    except ConfigError as exc:
        raise ConfigError(f"{origin}: chunking.{exc}") from exc
    originals = data.get("originals") or {"type": "folder"}
    if not isinstance(originals, Mapping) or originals.get("type", "folder") not in (
        "folder",
        "s3",
    ):
        raise ConfigError(
            f"{origin}: 'originals' needs type folder (with path) or s3 (with bucket)"
        )
    _unknown(
        originals,
        ("type", "path", "bucket", "prefix", "endpoint_url", "region"),
        f"{origin}: originals",
    )
    interval = data.get("interval", SYNC_WATCH_INTERVAL_S)
    if not isinstance(interval, int | float) or isinstance(interval, bool) or interval <= 0:
        raise ConfigError(f"{origin}: interval={interval!r} must be a number of seconds > 0")
    batch_size = data.get("batch_size", SYNC_BATCH_SIZE)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"{origin}: batch_size={batch_size!r} must be an integer >= 1")
    snapshot = data.get("snapshot")
    embed = data.get("embed")
    if embed is not None and not isinstance(embed, str):
        raise ConfigError(f"{origin}: embed={embed!r} must be a model name")
    return SyncConfig(
        origin=origin,
        state=base / str(data.get("state") or ".groundwire-sync"),
        snapshot=base / str(snapshot) if snapshot else None,
        embed=embed,
        chunking=chunking,
        originals=dict(originals),
        sources=sources,
        interval=float(interval),
        batch_size=batch_size,
        base=base,
    )


def _env(source: SourceConfig, key: str) -> str:
    name = source.options.get(key)
    value = os.environ.get(str(name)) if name else None
    if not value:
        raise ConfigError(
            f"source {source.id!r}: the environment variable {name!r} ({key}) is not set; "
            "export it before running sync"
        )
    return value


def _path(source: SourceConfig, base: Path) -> Path:
    return base / str(source.options["path"])


def build_provider(source: SourceConfig, config: SyncConfig) -> Provider:
    """The provider of one configured source (imports its client library on demand)."""
    builders: dict[str, Callable[[SourceConfig, SyncConfig], Provider]] = {
        "mbox": _mbox,
        "maildir": _maildir,
        "folder": _folder,
        "imap": _imap,
        "s3": _s3,
        "gmail": _gmail,
        "drive": _drive,
    }
    return builders[source.type](source, config)


def _mbox(source: SourceConfig, config: SyncConfig) -> Provider:
    from groundwire.ingest.adapters.mail import MboxProvider

    return _mailbox(MboxProvider, source, config)


def _maildir(source: SourceConfig, config: SyncConfig) -> Provider:
    from groundwire.ingest.adapters.mail import MaildirProvider

    return _mailbox(MaildirProvider, source, config)


def _mailbox(kind: Any, source: SourceConfig, config: SyncConfig) -> Provider:
    provider: Provider = kind(
        source.id,
        _path(source, config.base),
        labels=source.labels,
        account=source.account,
        batch_size=config.batch_size,
        acl_participants=bool(source.options.get("acl_participants", False)),
    )
    return provider


def _folder(source: SourceConfig, config: SyncConfig) -> Provider:
    from groundwire.ingest.adapters.objects import FolderProvider

    return FolderProvider(
        source.id,
        _path(source, config.base),
        labels=source.labels,
        account=source.account,
        batch_size=config.batch_size,
    )


def _imap(source: SourceConfig, config: SyncConfig) -> Provider:
    from groundwire.ingest.adapters.imap import ImapProvider

    options = source.options
    folders = options.get("folders") or ["INBOX"]
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise ConfigError(f"source {source.id!r}: folders must be a list of folder names")
    return ImapProvider(
        source.id,
        host=str(options["host"]),
        port=int(options.get("port") or (993 if options.get("ssl", True) else 143)),
        ssl=bool(options.get("ssl", True)),
        username=str(options["username"]),
        password=_env(source, "password_env"),
        folders=tuple(folders),
        labels=source.labels,
        account=source.account,
        batch_size=config.batch_size,
        acl_participants=bool(options.get("acl_participants", False)),
    )


def _s3(source: SourceConfig, config: SyncConfig) -> Provider:
    from groundwire.ingest.adapters.objects import S3Provider

    return S3Provider(
        source.id,
        str(source.options["bucket"]),
        prefix=str(source.options.get("prefix") or ""),
        labels=source.labels,
        batch_size=config.batch_size,
        **s3_options(source.options, source),
    )


def s3_options(options: Mapping[str, Any], source: SourceConfig | None = None) -> dict[str, Any]:
    """boto3 client options from a source's (or the custody store's) configuration."""
    out: dict[str, Any] = {}
    if options.get("endpoint_url"):
        out["endpoint_url"] = str(options["endpoint_url"])
    if options.get("region"):
        out["region_name"] = str(options["region"])
    if source is not None and options.get("access_key_env"):
        out["aws_access_key_id"] = _env(source, "access_key_env")
        out["aws_secret_access_key"] = _env(source, "secret_key_env")
    return out


def _gmail(source: SourceConfig, config: SyncConfig) -> Provider:
    from groundwire.ingest.adapters.gmail import GmailProvider

    options = source.options
    return GmailProvider(
        source.id,
        token=lambda: _env(source, "token_env"),
        user=str(options.get("user") or "me"),
        label=options.get("label"),
        query=options.get("query"),
        base_url=options.get("base_url"),
        labels=source.labels,
        account=source.account,
        batch_size=config.batch_size,
        acl_participants=bool(options.get("acl_participants", False)),
    )


def _drive(source: SourceConfig, config: SyncConfig) -> Provider:
    from groundwire.ingest.adapters.drive import DriveProvider

    options = source.options
    return DriveProvider(
        source.id,
        token=lambda: _env(source, "token_env"),
        query=options.get("query"),
        base_url=options.get("base_url"),
        drive_id=options.get("drive_id"),
        labels=source.labels,
        account=source.account,
        batch_size=config.batch_size,
        acl_from_permissions=bool(options.get("acl_from_permissions", True)),
    )
