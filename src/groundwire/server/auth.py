"""API keys: a keys file hashed at rest, each key a principal and the calls it may make.

The keys file (YAML or JSON) holds no secret, only each key's SHA-256::

    keys:
      - id: support-bot                 # names the key in logs and metrics (never the secret)
        sha256: 9f86d081884c7d65...     # hex SHA-256 of the secret (groundwire keygen)
        tenant: acme                    # the principal the key acts as
        subject: support-bot
        groups: [support]
        allow: [ground, search, mcp]    # calls it may make ("*": all)
        kbs: [handbook]                 # knowledge bases it may use (omitted: all)

A request sends its key as ``Authorization: Bearer <secret>`` (or ``X-API-Key``). A
missing or unknown key is 401; a known key used for a call or a knowledge base outside
its grant is 403. Keys are random 256-bit secrets, so one SHA-256 is the right hash
(a slow password hash protects guessable secrets; these are not). ``--no-auth`` replaces
the file by one local grant of everything, and the server then binds loopback only.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from groundwire import ConfigError, Principal
from groundwire.config import SERVER_CALLS
from groundwire.server.problems import Problem

__all__ = ["Grant", "KeyRing", "hash_key", "local_grant", "new_key"]

#: Prefix of generated secrets, so a leaked one is recognizable in a scan.
KEY_PREFIX = "gw_"
_HEX = re.compile(r"^[0-9a-f]{64}$")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def hash_key(secret: str) -> str:
    """The hex SHA-256 of a secret, as the keys file stores it."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A new random secret (256 bits, URL-safe)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class Grant:
    """What one authenticated request may do: as whom, which calls, which knowledge bases.

    ``principal`` None is anonymous (only unlabeled entries are visible); ``kbs`` None
    means every knowledge base.
    """

    key_id: str
    principal: Principal | None
    calls: frozenset[str]
    kbs: frozenset[str] | None = None

    def check(self, call: str, kb: str | None = None) -> None:
        """Raise a 403 problem unless this grant covers ``call`` (on ``kb``)."""
        if call not in self.calls:
            raise Problem(
                403,
                "call-not-allowed",
                f"key {self.key_id!r} may not call {call!r}; its grant allows: "
                f"{', '.join(sorted(self.calls)) or 'nothing'}",
            )
        if kb is not None and self.kbs is not None and kb not in self.kbs:
            raise Problem(
                403,
                "kb-not-allowed",
                f"key {self.key_id!r} may not use knowledge base {kb!r}",
                field="kb",
            )

    def may_use(self, kb: str) -> bool:
        """Whether this grant reaches knowledge base ``kb``."""
        return self.kbs is None or kb in self.kbs


def local_grant(principal: Principal | None = None) -> Grant:
    """The grant of every request under ``--no-auth``: all calls, all knowledge bases."""
    return Grant("local", principal, frozenset(SERVER_CALLS))


def _where(path: str | Path, n: int, field: str) -> str:
    return f"{path}: keys[{n}].{field}"


def _strings(path: str | Path, n: int, field: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{_where(path, n, field)} must be a list of strings, got {value!r}")
    if not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{_where(path, n, field)} must hold non-empty strings, got {value!r}")
    return tuple(value)


def _grant(path: str | Path, n: int, item: object) -> tuple[str, Grant]:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{path}: keys[{n}] must be a mapping with id, sha256, tenant, subject")
    known = {"id", "sha256", "tenant", "subject", "groups", "allow", "kbs", "note"}
    unknown = sorted(set(map(str, item)) - known)
    if unknown:
        raise ConfigError(f"{_where(path, n, unknown[0])}: unknown field; expected {sorted(known)}")
    key_id = item.get("id")
    if not isinstance(key_id, str) or not _ID.match(key_id):
        raise ConfigError(f"{_where(path, n, 'id')} must be a short name ([A-Za-z0-9._:-])")
    digest = item.get("sha256")
    if not isinstance(digest, str) or not _HEX.match(digest):
        raise ConfigError(
            f"{_where(path, n, 'sha256')} must be 64 lower-case hex digits (the SHA-256 of "
            "the secret, never the secret itself); make one with 'groundwire keygen'"
        )
    try:
        principal = Principal(
            item.get("tenant"),  # type: ignore[arg-type]
            item.get("subject"),  # type: ignore[arg-type]
            _strings(path, n, "groups", item.get("groups", [])),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{_where(path, n, 'tenant/subject')}: {exc}") from exc
    allow = set(_strings(path, n, "allow", item.get("allow", [])))
    if "*" in allow:
        allow = set(SERVER_CALLS)
    bad = sorted(allow - set(SERVER_CALLS))
    if bad:
        raise ConfigError(
            f"{_where(path, n, 'allow')}: unknown call {bad[0]!r}; expected some of "
            f"{', '.join(SERVER_CALLS)} or '*'"
        )
    kbs = item.get("kbs")
    allowed_kbs = None if kbs is None else frozenset(_strings(path, n, "kbs", kbs))
    return digest, Grant(key_id, principal, frozenset(allow), allowed_kbs)


class KeyRing:
    """The API keys a server accepts, by the SHA-256 of their secret."""

    def __init__(self, grants: Mapping[str, Grant]) -> None:
        self._by_hash = dict(grants)

    @classmethod
    def load(cls, path: str | Path) -> KeyRing:
        """Read a keys file; ConfigError names the file, the key and the field at fault."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the keys file ({exc.strerror})") from exc
        try:
            data: Any = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: not valid YAML/JSON ({exc})") from exc
        items = data.get("keys") if isinstance(data, Mapping) else None
        if not isinstance(items, list):
            raise ConfigError(f"{path}: expected a mapping with a 'keys' list")
        return cls.from_items(items, path)

    @classmethod
    def from_items(cls, items: Iterable[object], where: str | Path = "keys") -> KeyRing:
        """Keys from parsed items (the ``keys`` list of a keys file)."""
        grants: dict[str, Grant] = {}
        ids: set[str] = set()
        for n, item in enumerate(items):
            digest, grant = _grant(where, n, item)
            if grant.key_id in ids:
                raise ConfigError(f"{_where(where, n, 'id')}: duplicate key id {grant.key_id!r}")
            if digest in grants:
                raise ConfigError(f"{_where(where, n, 'sha256')}: the same secret as another key")
            ids.add(grant.key_id)
            grants[digest] = grant
        return cls(grants)

    def __len__(self) -> int:
        return len(self._by_hash)

    def authenticate(self, headers: Mapping[str, str]) -> Grant:
        """The grant of the key in ``headers``; a 401 problem when it is missing or unknown."""
        secret = presented_key(headers)
        if secret is None:
            raise Problem(
                401,
                "unauthenticated",
                "no API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                headers={"WWW-Authenticate": 'Bearer realm="groundwire"'},
            )
        grant = self._by_hash.get(hash_key(secret))
        if grant is None:
            raise Problem(
                401,
                "unauthenticated",
                "the API key is not valid for this server",
                headers={"WWW-Authenticate": 'Bearer realm="groundwire", error="invalid_token"'},
            )
        return grant


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The secret a request presents (Bearer token or X-API-Key), or None."""
    authorization = headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    key = headers.get("x-api-key", "").strip()
    return key or None
