"""The audit log: append-only, hash-chained, and every kind of tampering detected."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import groundwire as gw
from groundwire.access.audit import GENESIS_HASH

Lines = list[str]


def envelope(n: int) -> gw.AuditEnvelope:
    return gw.AuditEnvelope(
        event="executed",
        operation=f"ticket.close.{n}",
        recorded_at="2026-12-01T09:30:00+00:00",
        fingerprint=f"{n:064x}",
        idempotency_key=f"key-{n}",
        result={"n": n},
    )


class Store:
    """One sink kind: how to open it, and how to rewrite its stored lines behind its back."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.memory = gw.MemoryAuditSink()
        self.path = folder / ("audit.jsonl" if kind == "jsonl" else "audit.sqlite")

    def open(self) -> gw.AuditSink:
        if self.kind == "memory":
            return self.memory
        if self.kind == "jsonl":
            return gw.JsonLinesAuditSink(self.path)
        return gw.SQLiteAuditSink(self.path)

    def rewrite(self, change: Callable[[Lines], Lines]) -> None:
        if self.kind == "memory":
            self.memory.lines[:] = change(list(self.memory.lines))
        elif self.kind == "jsonl":
            lines = self.path.read_text(encoding="utf-8").splitlines()
            self.path.write_text("".join(f"{line}\n" for line in change(lines)), encoding="utf-8")
        else:
            db = sqlite3.connect(self.path)
            db.executescript("DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete;")
            rows = [row[0] for row in db.execute("SELECT record FROM audit_log ORDER BY sequence")]
            db.execute("DELETE FROM audit_log")
            for sequence, line in enumerate(change(rows)):
                db.execute("INSERT INTO audit_log VALUES (?, ?)", (sequence, line))
            db.commit()
            db.close()


@pytest.fixture(params=["memory", "jsonl", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(request.param, tmp_path)


def filled(store: Store, count: int = 4) -> gw.AuditSink:
    sink = store.open()
    for n in range(count):
        sink.append(envelope(n))
    return sink


def test_records_are_chained_from_the_genesis_hash(store: Store) -> None:
    sink = filled(store)
    records = sink.records()
    assert [r.sequence for r in records] == [0, 1, 2, 3]
    assert records[0].previous_hash == GENESIS_HASH
    for before, after in itertools.pairwise(records):
        assert after.previous_hash == before.hash
    assert all(r.hash == r.compute_hash() for r in records)
    assert sink.verify() == 4
    assert sink.head() == records[-1].hash
    assert sink.verify(expected_head=records[1].hash) == 4  # an older head is still in the log


def test_an_empty_log_verifies(store: Store) -> None:
    sink = store.open()
    assert sink.verify() == 0
    assert sink.head() == GENESIS_HASH


def _edit(lines: Lines) -> Lines:
    record = json.loads(lines[1])
    record["result"] = {"n": 999}
    return [lines[0], json.dumps(record), *lines[2:]]


def _edit_and_rehash(lines: Lines) -> Lines:
    """A forger who recomputes the edited record's own hash still breaks the next link."""
    record = json.loads(lines[1])
    record["result"] = {"n": 999}
    forged = gw.AuditEnvelope.from_json(record, "forged")
    record["hash"] = forged.compute_hash()
    return [lines[0], json.dumps(record), *lines[2:]]


TAMPERING: dict[str, tuple[Callable[[Lines], Lines], int | None, str]] = {
    "edited": (_edit, 1, "does not match its hash"),
    "edited-and-rehashed": (_edit_and_rehash, 2, "previous_hash does not match"),
    "removed": (lambda lines: [lines[0], *lines[2:]], 1, "holds sequence 2"),
    "reordered": (lambda lines: [lines[0], lines[2], lines[1], lines[3]], 1, "holds sequence 2"),
    "duplicated": (lambda lines: [*lines[:2], lines[1], *lines[2:]], 2, "holds sequence 1"),
    "garbled": (lambda lines: [lines[0], "{not json", *lines[2:]], 1, "not JSON"),
    "foreign": (lambda lines: [lines[0], '{"a": 1}', *lines[2:]], 1, "not an audit record"),
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_tampering_is_detected_with_the_first_bad_record(store: Store, how: str) -> None:
    change, sequence, fragment = TAMPERING[how]
    filled(store).close()
    store.rewrite(change)
    sink = store.open()
    with pytest.raises(gw.AuditIntegrityError, match=fragment) as info:
        sink.verify()
    assert info.value.sequence == sequence


@pytest.mark.parametrize("how", ["edited", "removed"])
def test_nothing_executes_against_a_tampered_log(store: Store, how: str) -> None:
    filled(store).close()
    store.rewrite(TAMPERING[how][0])
    sink = store.open()
    if isinstance(sink, gw.MemoryAuditSink):  # a fresh sink reading the tampered lines
        tampered, sink = sink.lines, gw.MemoryAuditSink()
        sink.lines[:] = tampered
    ran: list[int] = []
    request = gw.MutationRequest("x", gw.Governance(idempotency_key="new", evidence_ref="e"))
    with pytest.raises(gw.AuditIntegrityError):
        gw.execute_mutation(request, lambda: ran.append(1), audit=sink)
    assert ran == []
    with pytest.raises(gw.AuditIntegrityError):  # and the sink stays refused
        sink.append(envelope(9))


def test_cutting_records_off_the_end_is_detected_with_a_kept_head(store: Store) -> None:
    sink = filled(store)
    head = sink.head()
    sink.close()
    store.rewrite(lambda lines: lines[:2])
    reopened = store.open()
    assert reopened.verify() == 2  # the shorter chain is consistent on its own
    with pytest.raises(gw.AuditIntegrityError, match="expected head"):
        reopened.verify(expected_head=head)


def test_a_torn_last_line_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with gw.JsonLinesAuditSink(path) as sink:
        sink.append(envelope(0))
    with path.open("a", encoding="utf-8") as out:
        out.write('{"event": "exec')  # a write cut short
    with (
        gw.JsonLinesAuditSink(path) as sink,
        pytest.raises(gw.AuditIntegrityError, match="incomplete"),
    ):
        sink.append(envelope(1))


def test_sqlite_refuses_updates_and_deletes_through_sql(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    with gw.SQLiteAuditSink(path) as sink:
        sink.append(envelope(0))
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE audit_log SET record = '{}'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("DELETE FROM audit_log")
    db.close()
    with gw.SQLiteAuditSink(path) as sink:
        assert sink.verify() == 1


def test_writers_appending_through_two_sinks_keep_one_chain(store: Store) -> None:
    if store.kind == "memory":
        pytest.skip("a memory log has one writer")
    first, second = store.open(), store.open()
    first.append(envelope(0))
    second.append(envelope(1))  # sees the record the first sink wrote
    first.append(envelope(2))
    assert [r.operation for r in second.records()] == [
        "ticket.close.0",
        "ticket.close.1",
        "ticket.close.2",
    ]
    assert first.verify() == 3
    first.close()
    second.close()


def test_the_jsonl_log_is_private_and_refuses_symlinks(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with gw.JsonLinesAuditSink(path) as sink:
        sink.append(envelope(0))
    assert (path.stat().st_mode & 0o777) == 0o600
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    with pytest.raises(gw.ConfigError, match="symbolic links are refused"):
        gw.JsonLinesAuditSink(link)
    sqlite_link = tmp_path / "link.sqlite"
    sqlite_link.symlink_to(tmp_path / "real.sqlite")
    with pytest.raises(gw.ConfigError, match="symbolic link"):
        gw.SQLiteAuditSink(sqlite_link)


def test_an_unwritable_log_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(gw.ConfigError, match="cannot open the audit log"):
        gw.JsonLinesAuditSink(tmp_path / "missing-folder" / "audit.jsonl")
    folder = tmp_path / "a-folder"
    os.mkdir(folder)
    with pytest.raises(gw.ConfigError, match="cannot open the audit log"):
        gw.SQLiteAuditSink(folder)


def test_an_oversized_record_is_refused_before_it_is_written() -> None:
    sink = gw.MemoryAuditSink()
    big = gw.AuditEnvelope(
        event="executed",
        operation="x",
        recorded_at="t",
        fingerprint="f",
        result="x" * (2 * 1024 * 1024),
    )
    with pytest.raises(gw.ConfigError, match="over"):
        sink.append(big)
    assert sink.lines == []
