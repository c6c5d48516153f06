"""Exceptions raised by groundwire.

Every error groundwire raises on purpose derives from :class:`GroundwireError`,
so callers can catch one type. Messages name what was wrong, where, and the fix.

The tree::

    GroundwireError
    ├── ConfigError            an option is out of range or of the wrong type
    ├── SourceError            a knowledge source cannot be read or parsed
    │   ├── FetchError         a URL cannot be fetched: scheme, status, type, size or time
    │   └── SyncError          a source adapter failed: connection, login, protocol, lease
    │       └── CustodyError   an original cannot be stored or read back intact
    ├── ValidationFailedError  sources were read but have blocking validation issues
    ├── QueryError             a query or request is malformed or over a limit
    ├── KnowledgeIndexError    an index is not built, or a lookup is invalid
    │   └── IndexFormatError   a saved snapshot is unreadable, tampered with, or of another format
    ├── EmbeddingError         an embedder failed: model missing, server unreachable, bad vectors
    ├── MemoryStoreError       an agent memory store cannot be opened, upgraded or written
    ├── BackendError           a search backend (Milvus) is unreachable, refused a call or
    │                          holds a collection of another shape
    ├── AccessError            an access check or a governed mutation cannot proceed
    │   ├── AccessDeniedError  the knowledge access guard denied an operation
    │   └── AuditIntegrityError  an audit log was edited, reordered or had records removed
    ├── ProviderError          a model provider failed: status, transport, empty output
    │   ├── ProviderTimeoutError  one attempt took longer than its timeout
    │   └── CitationError      an answer cited ids outside the returned evidence, or none
    └── MissingExtraError      an optional dependency is not installed (also an ImportError)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from groundwire.model import ValidationIssue

__all__ = [
    "AccessDeniedError",
    "AccessError",
    "AuditIntegrityError",
    "BackendError",
    "CitationError",
    "ConfigError",
    "CustodyError",
    "EmbeddingError",
    "FetchError",
    "GroundwireError",
    "IndexFormatError",
    "KnowledgeIndexError",
    "MemoryStoreError",
    "MissingExtraError",
    "ProviderError",
    "ProviderTimeoutError",
    "QueryError",
    "SourceError",
    "SyncError",
    "ValidationFailedError",
]


class GroundwireError(Exception):
    """Base class of every error groundwire raises on purpose."""


class ConfigError(GroundwireError, ValueError):
    """A configuration value is invalid; the message names the option and the allowed range."""


class SourceError(GroundwireError):
    """A knowledge source could not be read or parsed (file, folder, front matter, JSON/YAML)."""


class FetchError(SourceError):
    """A URL could not be fetched; ``url`` is the one requested, ``status`` the HTTP status.

    Raised for a scheme other than http/https, a failed connection, a timeout, an HTTP
    error status, a content type that is not text, too many redirects, or a body over
    the byte cap (declared or streamed).
    """

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        self.url = url
        self.status = status
        super().__init__(message)


class SyncError(SourceError):
    """A source adapter could not sync: connection, login, protocol, a held lease or bad state.

    ``source_id`` names the configured source; ``retryable`` says a later run may succeed
    (network, rate limits, a lease held by another process).
    """

    def __init__(self, message: str, *, source_id: str = "", retryable: bool = False) -> None:
        self.source_id = source_id
        self.retryable = retryable
        super().__init__(message)


class CustodyError(SyncError):
    """An original could not be stored, or read back with the digest it was stored under."""


class ValidationFailedError(GroundwireError):
    """Sources were read but carry blocking validation errors; ``issues`` lists every one."""

    def __init__(self, issues: Sequence[ValidationIssue]) -> None:
        self.issues = tuple(issues)
        errors = [issue for issue in self.issues if issue.severity == "error"]
        first = errors[0].describe() if errors else "no details"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"knowledge sources have {len(errors)} error(s): {first}{more}")


class QueryError(GroundwireError, ValueError):
    """A query or retrieval request is malformed or exceeds a configured limit."""


class KnowledgeIndexError(GroundwireError, LookupError):
    """An index operation is invalid: unknown id, empty index, or an unusable snapshot."""


class IndexFormatError(KnowledgeIndexError):
    """A saved snapshot cannot be written or trusted; the message names the file and the fix.

    Raised for a symlinked or unusable path, a wrong magic, an unknown or newer format
    version, a checksum, size or bound that does not match, or a duplicate id. The fix
    is usually to rebuild it with ``groundwire index``.
    """


class EmbeddingError(GroundwireError):
    """An embedder could not produce vectors; the message names the model, the cause and the fix.

    Raised when a model cannot be found or loaded, an embeddings server is unreachable or
    keeps failing after its retries, or an answer has the wrong shape, count or values.
    ``status`` is the HTTP status of the last attempt when a server answered.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class MemoryStoreError(GroundwireError):
    """An agent memory store cannot be opened, upgraded or written; the message names the
    file and the fix (a newer schema, a file that is not a memory store, a closed store)."""


class BackendError(GroundwireError):
    """A search backend failed: unreachable, a refused call, or a collection built for
    other settings; the message names the backend, the collection and the fix."""


class AccessError(GroundwireError):
    """An access check or a governed mutation cannot proceed; the message says why."""


class AccessDeniedError(AccessError, PermissionError):
    """The knowledge access guard denied an operation; ``reason`` is its reason code."""

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class AuditIntegrityError(AccessError):
    """An audit log does not verify: a record was edited, removed, reordered or is malformed.

    ``sequence`` is the first record that fails (None when the log cannot be read at all).
    Nothing is executed against a log that does not verify.
    """

    def __init__(self, message: str, *, sequence: int | None = None) -> None:
        self.sequence = sequence
        super().__init__(message)


class MissingExtraError(GroundwireError, ImportError):
    """An optional dependency is missing; the message says which extra to install."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed; "
            f"install it with: pip install 'groundwire[{extra}]'"
        )


class ProviderError(GroundwireError):
    """A model provider failed. ``retryable`` says whether trying again may succeed
    (rate limits, 5xx, transport errors); ``status`` is the HTTP status when known."""

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        self.provider = provider
        self.status = status
        self.retryable = retryable
        super().__init__(message)


class ProviderTimeoutError(ProviderError):
    """One provider attempt took longer than its configured timeout."""

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message, provider=provider, retryable=True)


class CitationError(ProviderError):
    """A grounded answer cited ids outside the returned evidence, or cited nothing.

    ``invalid`` lists the cited ids that were not offered; the answer is not delivered.
    """

    def __init__(self, message: str, *, invalid: Sequence[str] = ()) -> None:
        self.invalid = tuple(invalid)
        super().__init__(message, retryable=False)
