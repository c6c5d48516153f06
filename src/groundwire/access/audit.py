"""The audit log of governed mutations: append-only, hash-chained, checked on every read.

Each record is an :class:`AuditEnvelope` stamped with its ``sequence`` (0, 1, 2, ...),
the ``previous_hash`` of the record before it (64 zeros for the first) and its own
``hash``: the SHA-256 of its canonical JSON (sorted keys, no spaces) with those two
fields included. Editing a record changes its hash; removing, inserting or reordering
records breaks the sequence or the chain. A sink checks the whole chain the first time
it reads the log and every record other writers append after that;
:meth:`AuditSink.records` and :meth:`AuditSink.verify` re-check it all. The first record
that fails raises :class:`~groundwire.AuditIntegrityError`, the sink refuses every later
operation, and nothing is executed against a log that does not verify.

Limits, stated plainly: a chain proves the log is *internally* consistent. Someone who
can rewrite the whole file can rewrite the whole chain, and cutting records off the end
leaves a shorter valid chain. Keep :meth:`AuditSink.head` somewhere the log's writer
cannot change (another system, a signed note) and pass it to :meth:`AuditSink.verify`
to detect both.

Sinks: :class:`MemoryAuditSink` (tests, one process), :class:`JsonLinesAuditSink` (one
JSON object per line, ``O_APPEND`` + ``fsync``, an exclusive ``flock`` across processes)
and :class:`~groundwire.access.audit_sqlite.SQLiteAuditSink` (a table whose triggers
refuse UPDATE and DELETE). All three also store idempotency keys: :meth:`AuditSink.claim`
finds a key's earlier execution or reserves it, atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, get_args

from groundwire.config import MAX_AUDIT_RECORD_BYTES
from groundwire.errors import AuditIntegrityError, ConfigError

__all__ = [
    "GENESIS_HASH",
    "AuditEnvelope",
    "AuditEvent",
    "AuditSink",
    "Claim",
    "JsonLinesAuditSink",
    "MemoryAuditSink",
    "canonical_json",
]

AuditEvent = Literal["dry_run", "blocked", "started", "executed", "failed", "replayed"]
_EVENTS: Final[tuple[str, ...]] = get_args(AuditEvent)
#: Events that belong to an idempotency key's history (a dry run or a block reserves nothing).
_KEYED: Final = frozenset({"started", "executed", "failed"})
#: The ``previous_hash`` of the first record.
GENESIS_HASH: Final = "0" * 64


def canonical_json(value: Any) -> str:
    """The one JSON spelling hashed and stored: sorted keys, no spaces, UTF-8 as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class AuditEnvelope:
    """One governed decision, as every result carries it and the audit log records it.

    ``event``: ``dry_run``, ``blocked``, ``started`` (an execution reserved its
    idempotency key), ``executed``, ``failed`` (the action raised) or ``replayed`` (a
    repeated key returned the first result; ``replay_of`` is that record's sequence).
    ``fingerprint`` hashes the request (operation, flags, principal, target, payload).
    ``result`` is the action's JSON result, ``error`` the failure. ``sequence``,
    ``previous_hash`` and ``hash`` are set by the sink (None when nothing was recorded).
    """

    event: AuditEvent
    operation: str
    recorded_at: str
    fingerprint: str
    principal: Mapping[str, Any] | None = None
    target: str | None = None
    idempotency_key: str | None = None
    evidence_ref: str | None = None
    approval_refs: tuple[str, ...] = ()
    send_gate: Mapping[str, Any] | None = None
    requires_approval: bool = False
    outbound_send: bool = False
    block_reasons: tuple[str, ...] = ()
    missing_evidence: tuple[str, ...] = ()
    result: Any = None
    error: str | None = None
    replay_of: int | None = None
    sequence: int | None = None
    previous_hash: str | None = None
    hash: str | None = field(default=None, compare=False)

    def body(self) -> dict[str, Any]:
        """Every field but ``hash``, as JSON values (what the hash covers)."""
        body = asdict(self)
        del body["hash"]
        body["approval_refs"] = list(self.approval_refs)
        body["block_reasons"] = list(self.block_reasons)
        body["missing_evidence"] = list(self.missing_evidence)
        return body

    def compute_hash(self) -> str:
        """SHA-256 of the canonical JSON of :meth:`body`."""
        return hashlib.sha256(canonical_json(self.body()).encode("utf-8")).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The record as stored: :meth:`body` plus ``hash``."""
        return {**self.body(), "hash": self.hash}

    @classmethod
    def from_json(cls, record: object, where: str) -> AuditEnvelope:
        """A stored record back as an envelope; AuditIntegrityError when malformed."""
        if not isinstance(record, dict) or set(record) != _FIELDS:
            raise AuditIntegrityError(f"{where}: not an audit record (unexpected fields)")
        if record["event"] not in _EVENTS or not isinstance(record["sequence"], int):
            raise AuditIntegrityError(f"{where}: not an audit record (event or sequence)")
        try:
            return cls(
                **{
                    **record,
                    "approval_refs": tuple(record["approval_refs"]),
                    "block_reasons": tuple(record["block_reasons"]),
                    "missing_evidence": tuple(record["missing_evidence"]),
                }
            )
        except TypeError as exc:
            raise AuditIntegrityError(f"{where}: not an audit record ({exc})") from exc


_FIELDS: Final = frozenset(AuditEnvelope.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Claim:
    """What :meth:`AuditSink.claim` found for an idempotency key.

    ``new``: reserved now (``record`` is the ``started`` record); ``done``: executed or
    failed before (``record`` is that outcome); ``running``: reserved by an execution
    that has not recorded its outcome; ``conflict``: used for a different request.
    """

    status: Literal["new", "done", "running", "conflict"]
    record: AuditEnvelope


class AuditSink(ABC):
    """An append-only, hash-chained audit log (see the module docstring).

    Subclasses store lines of canonical JSON: :meth:`_exclusive` holds a lock across
    threads and processes, :meth:`_read_from` returns the stored lines from a sequence
    on, :meth:`_write` persists one line durably. Thread-safe.
    """

    def __init__(self) -> None:
        self._thread_lock = threading.RLock()
        self._records: list[AuditEnvelope] = []
        self._keys: dict[str, list[int]] = {}
        self._broken: AuditIntegrityError | None = None  # once broken, every use fails

    # -- storage, per backend -------------------------------------------------------------
    @abstractmethod
    def _exclusive(self) -> AbstractContextManager[None]:
        """A context holding the log's lock across processes."""

    @abstractmethod
    def _read_from(self, sequence: int, *, refresh: bool) -> list[str]:
        """The stored lines of records ``sequence`` onwards, in order. ``refresh``: the
        lines are about to become known records (``sequence`` is how many are known)."""

    @abstractmethod
    def _write(self, line: str, record: AuditEnvelope) -> None:
        """Persist one record's line durably (called under :meth:`_exclusive`)."""

    def close(self) -> None:  # noqa: B027 - most sinks hold nothing to release
        """Release the backend's resources."""

    def __enter__(self) -> AuditSink:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- reading and verifying ------------------------------------------------------------
    def _parse(self, lines: list[str], start: int, previous: str) -> list[AuditEnvelope]:
        out: list[AuditEnvelope] = []
        for offset, line in enumerate(lines):
            sequence = start + offset
            where = f"audit record {sequence}"
            if len(line.encode("utf-8")) > MAX_AUDIT_RECORD_BYTES:
                raise AuditIntegrityError(
                    f"{where}: over {MAX_AUDIT_RECORD_BYTES} bytes", sequence=sequence
                )
            try:
                raw = json.loads(line)
            except ValueError as exc:
                raise AuditIntegrityError(f"{where}: not JSON ({exc})", sequence=sequence) from exc
            try:
                record = AuditEnvelope.from_json(raw, where)
            except AuditIntegrityError as exc:
                raise AuditIntegrityError(str(exc), sequence=sequence) from exc
            if record.sequence != sequence:
                raise AuditIntegrityError(
                    f"{where}: holds sequence {record.sequence}; a record was removed, "
                    "inserted or reordered",
                    sequence=sequence,
                )
            if record.previous_hash != previous:
                raise AuditIntegrityError(
                    f"{where}: its previous_hash does not match the record before it; the "
                    "chain is broken (a record was edited, removed or reordered)",
                    sequence=sequence,
                )
            if record.hash != record.compute_hash():
                raise AuditIntegrityError(
                    f"{where}: its content does not match its hash; it was edited",
                    sequence=sequence,
                )
            out.append(record)
            previous = record.hash
        return out

    def _refresh(self) -> None:
        """Read records other writers appended since the last read, checking the chain.

        A log that failed once stays failed for this sink: its cached state is no longer
        trusted, so every later operation raises the same error.
        """
        if self._broken is not None:
            raise self._broken
        start = len(self._records)
        previous = self._records[-1].hash if self._records else GENESIS_HASH
        assert previous is not None
        try:
            fresh = self._parse(self._read_from(start, refresh=True), start, previous)
        except AuditIntegrityError as exc:
            self._broken = exc
            raise
        for record in fresh:
            self._index(record)

    def _index(self, record: AuditEnvelope) -> None:
        self._records.append(record)
        if record.idempotency_key is not None and record.event in _KEYED:
            assert record.sequence is not None
            self._keys.setdefault(record.idempotency_key, []).append(record.sequence)

    def records(self) -> list[AuditEnvelope]:
        """Every record, oldest first, re-read from storage and verified."""
        with self._thread_lock, self._exclusive():
            return self._parse(self._read_from(0, refresh=False), 0, GENESIS_HASH)

    def verify(self, expected_head: str | None = None) -> int:
        """Re-read and check the whole log; the number of records. Raises
        AuditIntegrityError on any break, or when ``expected_head`` (a :meth:`head` kept
        elsewhere) is not the hash of a record in the log (records were cut off the end)."""
        records = self.records()
        if expected_head is not None and expected_head not in {r.hash for r in records}:
            raise AuditIntegrityError(
                f"the expected head {expected_head[:12]}… is not in the log: records after it "
                "were removed, or the log was replaced"
            )
        return len(records)

    def head(self) -> str:
        """The hash of the newest record (:data:`GENESIS_HASH` for an empty log)."""
        records = self.records()
        last = records[-1].hash if records else GENESIS_HASH
        assert last is not None
        return last

    # -- writing --------------------------------------------------------------------------
    def _append_locked(self, envelope: AuditEnvelope) -> AuditEnvelope:
        previous = self._records[-1].hash if self._records else GENESIS_HASH
        stamped = replace(envelope, sequence=len(self._records), previous_hash=previous, hash=None)
        stamped = replace(stamped, hash=stamped.compute_hash())
        line = canonical_json(stamped.to_json())
        if len(line.encode("utf-8")) > MAX_AUDIT_RECORD_BYTES:
            raise ConfigError(
                f"the audit record is over {MAX_AUDIT_RECORD_BYTES} bytes; keep results and "
                "payloads small (store large data elsewhere and record a reference)"
            )
        self._write(line, stamped)
        self._index(stamped)
        return stamped

    def append(self, envelope: AuditEnvelope) -> AuditEnvelope:
        """Record ``envelope`` after every record so far; returns it stamped and hashed."""
        with self._thread_lock, self._exclusive():
            self._refresh()
            return self._append_locked(envelope)

    def claim(self, started: AuditEnvelope) -> Claim:
        """Find the earlier execution of ``started.idempotency_key`` or reserve the key.

        Atomic across threads and processes: of two executions with one key, exactly one
        gets ``new``. See :class:`Claim` for the outcomes.
        """
        key = started.idempotency_key
        if key is None or started.event != "started":
            raise ConfigError("claim() needs a 'started' record with an idempotency key")
        with self._thread_lock, self._exclusive():
            self._refresh()
            history = [self._records[n] for n in self._keys.get(key, ())]
            if not history:
                return Claim("new", self._append_locked(started))
            if history[0].fingerprint != started.fingerprint:
                return Claim("conflict", history[0])
            outcome = next((r for r in history if r.event in ("executed", "failed")), None)
            return Claim("done", outcome) if outcome is not None else Claim("running", history[-1])


class MemoryAuditSink(AuditSink):
    """An audit log held in memory (one process): for tests and short-lived tools."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []  # the stored form, exposed so tests can tamper with it

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        yield

    def _read_from(self, sequence: int, *, refresh: bool) -> list[str]:
        return self.lines[sequence:]

    def _write(self, line: str, record: AuditEnvelope) -> None:
        self.lines.append(line)


class JsonLinesAuditSink(AuditSink):
    """An audit log in a JSON-lines file: one record per line, appended and fsynced.

    The file is created with mode 0600; a symbolic link is refused. Writers in several
    processes serialize on an exclusive ``flock`` of the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        try:
            self._fd = os.open(
                self.path,
                os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            raise ConfigError(
                f"{self.path}: cannot open the audit log ({exc.strerror or exc}); pass a "
                "writable regular file (symbolic links are refused)"
            ) from exc
        self._end = 0  # byte offset after the last record read by _refresh

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read_from(self, sequence: int, *, refresh: bool) -> list[str]:
        start = self._end if refresh else 0
        if not refresh and sequence != 0:
            raise ValueError("a JSON-lines log is read whole or from the last refresh")
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size - start, start) if size > start else b""
        if data and not data.endswith(b"\n"):
            raise AuditIntegrityError(
                f"{self.path}: the last record is incomplete (no newline); the log was cut "
                "or a write was interrupted"
            )
        if refresh:  # these lines become known records (or the sink is broken)
            self._end = start + len(data)
        try:
            return [raw.decode("utf-8") for raw in data.split(b"\n")[:-1]]
        except UnicodeDecodeError as exc:
            raise AuditIntegrityError(f"{self.path}: a record is not UTF-8") from exc

    def _write(self, line: str, record: AuditEnvelope) -> None:
        data = (line + "\n").encode("utf-8")
        if os.write(self._fd, data) != len(data):
            raise AuditIntegrityError(f"{self.path}: short write of an audit record")
        os.fsync(self._fd)
        self._end += len(data)

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
