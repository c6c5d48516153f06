"""The evidence ledger (SQLite): what was ingested, from which originals, with which plan.

Every **run** that produces new evidence records its scope (the access labels), its
source, the extractor plan, and the evidence: the document's version and digest, its
readability, the originals it derives from, and every **fragment** (chunk) with its
span and SHA-256 fingerprint, plus the extracted text.

- **Replay.** Recording a document whose current evidence has the same bytes (digest),
  plan and labels adds nothing: the outcome is ``replayed``.
- **Supersession.** New bytes, a new plan or new labels make new evidence ``current``;
  the previous one becomes ``superseded`` (it stays, for citations to be judged).
- **Deletion.** A document gone from its source is ``deleted``.
- **Withdrawal.** :meth:`EvidenceLedger.withdraw` marks every version of a document (or
  every document of a source) ``withdrawn`` *first* and erases its text and fragment
  text in the same transaction; the next snapshot is built without it. A withdrawn
  document stays withdrawn: syncing it again records nothing until it is reinstated.

:meth:`EvidenceLedger.current_chunks` is the document set snapshots are built from.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from groundwire.errors import CustodyError
from groundwire.ingest._sqlite import open_database, transaction
from groundwire.ingest.adapters.base import Labels
from groundwire.model import Chunk

__all__ = ["EvidenceInput", "EvidenceLedger", "EvidenceRecord", "FragmentRecord", "RecordOutcome"]

EvidenceState = Literal["current", "superseded", "deleted", "withdrawn"]
OutcomeKind = Literal["new", "changed", "replayed", "withdrawn"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, source TEXT NOT NULL, document_id TEXT NOT NULL,
    scope TEXT NOT NULL, plan TEXT NOT NULL, started_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS evidence (
    id INTEGER PRIMARY KEY, run INTEGER NOT NULL, document_id TEXT NOT NULL,
    source TEXT NOT NULL, version TEXT NOT NULL, digest TEXT NOT NULL, plan TEXT NOT NULL,
    labels TEXT NOT NULL, tenant TEXT, state TEXT NOT NULL, superseded_by INTEGER,
    readability TEXT NOT NULL, reasons TEXT NOT NULL, title TEXT NOT NULL, path TEXT NOT NULL,
    uri TEXT NOT NULL, media_type TEXT NOT NULL, kind TEXT NOT NULL, text_sha256 TEXT NOT NULL,
    text TEXT, created_at REAL NOT NULL, changed_at REAL NOT NULL, note TEXT);
CREATE INDEX IF NOT EXISTS evidence_by_document ON evidence (document_id, state);
CREATE INDEX IF NOT EXISTS evidence_by_source ON evidence (source, state);
CREATE TABLE IF NOT EXISTS originals (
    evidence INTEGER NOT NULL, sha256 TEXT NOT NULL, media_type TEXT NOT NULL,
    size INTEGER NOT NULL, PRIMARY KEY (evidence, sha256));
CREATE TABLE IF NOT EXISTS fragments (
    evidence INTEGER NOT NULL, number INTEGER NOT NULL, chunk_id TEXT NOT NULL,
    start INTEGER NOT NULL, end INTEGER NOT NULL, sha256 TEXT NOT NULL, text TEXT,
    headings TEXT NOT NULL, symbols TEXT NOT NULL, meta TEXT NOT NULL,
    PRIMARY KEY (evidence, number));
CREATE TABLE IF NOT EXISTS withdrawals (
    document_id TEXT PRIMARY KEY, source TEXT NOT NULL, reason TEXT NOT NULL,
    withdrawn_at REAL NOT NULL);
"""
_TUPLE_META = ("acl", "pages")


@dataclass(frozen=True, slots=True)
class EvidenceInput:
    """One extracted, chunked document to record, and where it came from."""

    source_id: str
    document_id: str
    digest: str
    plan: str
    labels: Labels
    title: str
    path: str
    uri: str
    media_type: str
    kind: str
    readability: str
    reasons: tuple[tuple[str, str], ...]
    text: str
    text_sha256: str
    version: str
    originals: tuple[tuple[str, str, int], ...]
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """What recording did: ``new``/``changed`` evidence, a ``replayed`` one, or refused
    because the document is ``withdrawn``. ``replaced`` lists the chunk ids it superseded."""

    kind: OutcomeKind
    evidence_id: int | None
    chunk_ids: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    """One piece of evidence: a document at one version, and its state."""

    id: int
    document_id: str
    source_id: str
    version: str
    digest: str
    plan: str
    labels: Labels
    state: EvidenceState
    readability: str
    text_sha256: str
    text: str | None
    originals: tuple[tuple[str, str, int], ...]
    note: str | None


@dataclass(frozen=True, slots=True)
class FragmentRecord:
    """One fragment (chunk) of a piece of evidence: its locator and fingerprint."""

    evidence_id: int
    number: int
    chunk_id: str
    start: int
    end: int
    sha256: str
    text: str | None


def _labels_json(labels: Labels) -> str:
    return json.dumps({"tenant": labels.tenant, "acl": list(labels.acl)}, sort_keys=True)


def _labels_of(text: str) -> Labels:
    data = json.loads(text)
    return Labels(data["tenant"], tuple(data["acl"]))


def _meta_of(text: str) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(text)
    for key in _TUPLE_META:
        if isinstance(meta.get(key), list):
            meta[key] = tuple(meta[key])
    return meta


class EvidenceLedger:
    """The evidence ledger in the SQLite file at ``path`` (created when missing)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._db = open_database(self.path, _SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise CustodyError(f"{self.path}: cannot open the evidence ledger ({exc})") from exc

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction (records of a batch commit together)."""
        return transaction(self._db)

    # -- writing -------------------------------------------------------------------------------
    def _current(self, document_id: str) -> tuple[int, str, str, str] | None:
        row = self._db.execute(
            "SELECT id, digest, plan, labels FROM evidence WHERE document_id = ? AND "
            "state = 'current'",
            (document_id,),
        ).fetchone()
        return (row[0], row[1], row[2], row[3]) if row else None

    def _chunk_ids(self, evidence_id: int) -> tuple[str, ...]:
        rows = self._db.execute(
            "SELECT chunk_id FROM fragments WHERE evidence = ? ORDER BY number", (evidence_id,)
        )
        return tuple(row[0] for row in rows.fetchall())

    def is_current(self, document_id: str, digest: str, plan: str, labels: Labels) -> bool:
        """Whether recording these bytes, plan and labels would be a replay."""
        current = self._current(document_id)
        return current is not None and current[1:] == (digest, plan, _labels_json(labels))

    def withdrawal(self, document_id: str) -> str | None:
        """Why ``document_id`` was withdrawn, or None."""
        row = self._db.execute(
            "SELECT reason FROM withdrawals WHERE document_id = ?", (document_id,)
        ).fetchone()
        return row[0] if row else None

    def record(self, item: EvidenceInput) -> RecordOutcome:
        """Record one document's evidence: new, changed (superseding), or a replay."""
        chunk_ids = tuple(chunk.id for chunk in item.chunks)
        reason = self.withdrawal(item.document_id)
        if reason is not None:
            return RecordOutcome("withdrawn", None, note=f"withdrawn: {reason}")
        labels = _labels_json(item.labels)
        with self.transaction() as db:
            current = self._current(item.document_id)
            if current is not None and current[1:] == (item.digest, item.plan, labels):
                return RecordOutcome("replayed", current[0], chunk_ids)
            now = time.time()
            run = db.execute(
                "INSERT INTO runs (source, document_id, scope, plan, started_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (item.source_id, item.document_id, labels, item.plan, now),
            ).lastrowid
            evidence = db.execute(
                "INSERT INTO evidence (run, document_id, source, version, digest, plan, labels, "
                "tenant, state, readability, reasons, title, path, uri, media_type, kind, "
                "text_sha256, text, created_at, changed_at) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, 'current', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run,
                    item.document_id,
                    item.source_id,
                    item.version,
                    item.digest,
                    item.plan,
                    labels,
                    item.labels.tenant,
                    item.readability,
                    json.dumps(item.reasons),
                    item.title,
                    item.path,
                    item.uri,
                    item.media_type,
                    item.kind,
                    item.text_sha256,
                    item.text,
                    now,
                    now,
                ),
            ).lastrowid
            assert evidence is not None
            db.executemany(
                "INSERT OR IGNORE INTO originals VALUES (?, ?, ?, ?)",
                [(evidence, *original) for original in item.originals],
            )
            db.executemany(
                "INSERT INTO fragments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        evidence,
                        chunk.number,
                        chunk.id,
                        chunk.start,
                        chunk.end,
                        chunk.sha256,
                        chunk.text,
                        json.dumps(chunk.headings),
                        json.dumps(chunk.symbols),
                        json.dumps(dict(chunk.metadata), sort_keys=True),
                    )
                    for chunk in item.chunks
                ],
            )
            replaced: tuple[str, ...] = ()
            if current is not None:
                replaced = self._chunk_ids(current[0])
                db.execute(
                    "UPDATE evidence SET state = 'superseded', superseded_by = ?, changed_at = ? "
                    "WHERE id = ?",
                    (evidence, now, current[0]),
                )
        kind: OutcomeKind = "changed" if current is not None else "new"
        return RecordOutcome(kind, evidence, chunk_ids, replaced)

    def delete(self, document_id: str, reason: str) -> tuple[str, ...]:
        """Mark the current evidence of a document gone from its source; its chunk ids."""
        with self.transaction() as db:
            current = self._current(document_id)
            if current is None:
                return ()
            db.execute(
                "UPDATE evidence SET state = 'deleted', note = ?, changed_at = ? WHERE id = ?",
                (reason, time.time(), current[0]),
            )
            return self._chunk_ids(current[0])

    def withdraw(
        self, reason: str, *, document_id: str | None = None, source_id: str | None = None
    ) -> dict[str, tuple[str, ...]]:
        """Withdraw a document (or every document of a source): every version is marked
        ``withdrawn`` and its text erased, in one transaction. Returns each withdrawn
        document → the chunk ids it had in the current snapshot."""
        if (document_id is None) == (source_id is None):
            raise ValueError("withdraw one document_id or one source_id")
        if not reason.strip():
            raise ValueError("a withdrawal needs a reason (it is kept in the ledger)")
        now = time.time()
        column, value = ("document_id", document_id) if document_id else ("source", source_id)
        with self.transaction() as db:
            rows = db.execute(
                f"SELECT id, document_id, source, state FROM evidence WHERE {column} = ?",
                (value,),
            ).fetchall()
            removed: dict[str, tuple[str, ...]] = {}
            for evidence, doc, source, state in rows:
                if state == "current":
                    removed[doc] = self._chunk_ids(evidence)
                removed.setdefault(doc, ())
                db.execute(
                    "INSERT OR IGNORE INTO withdrawals VALUES (?, ?, ?, ?)",
                    (doc, source, reason, now),
                )
            ids = [row[0] for row in rows]
            db.executemany(
                "UPDATE evidence SET state = 'withdrawn', text = NULL, note = ?, changed_at = ? "
                "WHERE id = ?",
                [(reason, now, evidence) for evidence in ids],
            )
            db.executemany(
                "UPDATE fragments SET text = NULL WHERE evidence = ?", [(e,) for e in ids]
            )
            if document_id is not None and not rows:
                db.execute(
                    "INSERT OR IGNORE INTO withdrawals VALUES (?, ?, ?, ?)",
                    (document_id, "", reason, now),
                )
        return removed

    def reinstate(self, document_id: str) -> bool:
        """Lift a withdrawal: the document's next sync records it again (its text is gone)."""
        with self.transaction() as db:
            return (
                db.execute("DELETE FROM withdrawals WHERE document_id = ?", (document_id,)).rowcount
                == 1
            )

    # -- reading -------------------------------------------------------------------------------
    def current_chunks(self, sources: Iterable[str] | None = None) -> list[Chunk]:
        """Every chunk of current evidence (of ``sources``, or all), in chunk-id order."""
        return self._chunks("e.source", None if sources is None else sorted(set(sources)))

    def chunks_of(self, document_ids: Iterable[str]) -> list[Chunk]:
        """The current chunks of these documents (what an incremental snapshot update adds)."""
        return self._chunks("e.document_id", sorted(set(document_ids)))

    def _chunks(self, column: str, wanted: list[str] | None) -> list[Chunk]:
        query = (
            "SELECT f.chunk_id, e.document_id, f.number, f.text, f.start, f.end, e.version, "
            "f.sha256, e.path, e.title, e.kind, f.headings, f.symbols, f.meta "
            "FROM fragments f JOIN evidence e ON e.id = f.evidence WHERE e.state = 'current'"
        )
        rows: list[Any] = []
        if wanted is None:
            rows = self._db.execute(query).fetchall()
        else:
            for at in range(0, len(wanted), 500):  # SQLite's bound on parameters
                part = wanted[at : at + 500]
                clause = f" AND {column} IN ({', '.join('?' * len(part))})"
                rows.extend(self._db.execute(query + clause, part).fetchall())
        chunks = [
            Chunk(
                id=row[0],
                source_id=row[1],
                number=row[2],
                text=row[3],
                start=row[4],
                end=row[5],
                version=row[6],
                sha256=row[7],
                path=row[8],
                title=row[9],
                kind=row[10],
                headings=tuple(json.loads(row[11])),
                symbols=tuple(json.loads(row[12])),
                metadata=_meta_of(row[13]),
            )
            for row in rows
        ]
        chunks.sort(key=lambda chunk: chunk.id)
        return chunks

    def current_evidence(self, sources: Iterable[str]) -> dict[str, int]:
        """Document id → the id of its current evidence, for ``sources`` (a new id means
        new chunks: what an incremental publish compares with the last one)."""
        wanted = sorted(set(sources))
        found: dict[str, int] = {}
        for at in range(0, len(wanted), 500):  # SQLite's bound on parameters
            part = wanted[at : at + 500]
            rows = self._db.execute(
                "SELECT document_id, id FROM evidence WHERE state = 'current' "
                f"AND source IN ({', '.join('?' * len(part))})",
                part,
            )
            found.update((row[0], row[1]) for row in rows.fetchall())
        return found

    def chunk_ids_of(self, evidence_ids: Iterable[int]) -> set[str]:
        """The chunk ids recorded for these pieces of evidence (in any state)."""
        wanted = sorted(set(evidence_ids))
        found: set[str] = set()
        for at in range(0, len(wanted), 500):
            part = wanted[at : at + 500]
            rows = self._db.execute(
                f"SELECT chunk_id FROM fragments WHERE evidence IN ({', '.join('?' * len(part))})",
                part,
            )
            found.update(row[0] for row in rows.fetchall())
        return found

    def current_documents(self, source_id: str) -> list[str]:
        """Ids of the current documents of one source, sorted."""
        rows = self._db.execute(
            "SELECT document_id FROM evidence WHERE source = ? AND state = 'current' "
            "ORDER BY document_id",
            (source_id,),
        )
        return [row[0] for row in rows.fetchall()]

    def evidence(self, document_id: str, version: str | None = None) -> list[EvidenceRecord]:
        """Every piece of evidence of a document (at ``version``), newest first."""
        query = (
            "SELECT id, document_id, source, version, digest, plan, labels, state, readability, "
            "text_sha256, text, note FROM evidence WHERE document_id = ?"
        )
        params: list[str] = [document_id]
        if version is not None:
            query += " AND version = ?"
            params.append(version)
        records = []
        for row in self._db.execute(query + " ORDER BY id DESC", params).fetchall():
            originals = self._db.execute(
                "SELECT sha256, media_type, size FROM originals WHERE evidence = ? ORDER BY sha256",
                (row[0],),
            ).fetchall()
            records.append(
                EvidenceRecord(
                    id=row[0],
                    document_id=row[1],
                    source_id=row[2],
                    version=row[3],
                    digest=row[4],
                    plan=row[5],
                    labels=_labels_of(row[6]),
                    state=row[7],
                    readability=row[8],
                    text_sha256=row[9],
                    text=row[10],
                    originals=tuple((o[0], o[1], o[2]) for o in originals),
                    note=row[11],
                )
            )
        return records

    def fragment(self, evidence_id: int, number: int) -> FragmentRecord | None:
        """Fragment ``number`` of a piece of evidence, or None."""
        row = self._db.execute(
            "SELECT evidence, number, chunk_id, start, end, sha256, text FROM fragments "
            "WHERE evidence = ? AND number = ?",
            (evidence_id, number),
        ).fetchone()
        return FragmentRecord(*row) if row else None

    def generation(self) -> str:
        """Changes whenever evidence is recorded, superseded, deleted or withdrawn."""
        row = self._db.execute(
            "SELECT COUNT(*), COALESCE(MAX(changed_at), 0), "
            "(SELECT COUNT(*) FROM withdrawals) FROM evidence"
        ).fetchone()
        return f"{row[0]}:{row[1]!r}:{row[2]}"

    def counts(self) -> dict[str, int]:
        """Records per table and evidence per state (for reports and tests)."""
        db = self._db
        out = {
            table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("runs", "evidence", "originals", "fragments", "withdrawals")
        }
        for state, count in db.execute("SELECT state, COUNT(*) FROM evidence GROUP BY state"):
            out[f"evidence.{state}"] = count
        return out
