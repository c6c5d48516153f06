"""A sync killed between recording a batch and committing it replays without duplicates.

For every adapter: six items, two per batch; a subprocess is SIGKILLed right after batch 2
is recorded in the ledger (custody written, evidence recorded) and before the checkpoint
commit. The next run resumes from the last committed cursor, replays batch 2 and goes on;
afterwards the ledger holds exactly one piece of evidence (and one run) per document,
custody one copy per original, and the snapshot each document once.
"""

from __future__ import annotations

import mailbox
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from synctools import message, syncer, write_config, write_mbox

sys.path.insert(0, str(Path(__file__).parents[1] / "ingest" / "adapters"))
from google_fakes import TOKEN, GoogleFake

from groundwire import KnowledgeBase

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).with_name("crash_sync.py")
TOPICS = ["billing", "badges", "parking", "printers", "laptops", "travel"]


def _body(n: int) -> str:
    return f"Everything about {TOPICS[n]}: policy number {n} applies."


@pytest.fixture
def google() -> Iterator[GoogleFake]:
    fake = GoogleFake()
    yield fake
    fake.close()


def _mbox(tmp_path: Path, **_: Any) -> dict[str, Any]:
    write_mbox(tmp_path / "box.mbox", [message(f"{n}@acme", TOPICS[n], _body(n)) for n in range(6)])
    return {"id": "src", "type": "mbox", "path": "box.mbox"}


def _maildir(tmp_path: Path, **_: Any) -> dict[str, Any]:
    box = mailbox.Maildir(tmp_path / "Maildir", create=True)
    for n in range(6):
        box.add(message(f"{n}@acme", TOPICS[n], _body(n)))
    return {"id": "src", "type": "maildir", "path": "Maildir"}


def _folder(tmp_path: Path, **_: Any) -> dict[str, Any]:
    (tmp_path / "docs").mkdir()
    for n in range(6):
        (tmp_path / "docs" / f"{TOPICS[n]}.txt").write_text(_body(n) + "\n")
    return {"id": "src", "type": "folder", "path": "docs"}


def _s3(tmp_path: Path, moto_s3: Any, **_: Any) -> dict[str, Any]:
    bucket = moto_s3.bucket()
    for n in range(6):
        moto_s3.client().put_object(
            Bucket=bucket, Key=f"{TOPICS[n]}.txt", Body=(_body(n) + "\n").encode()
        )
    return {
        "id": "src",
        "type": "s3",
        "bucket": bucket,
        "endpoint_url": moto_s3.endpoint,
        "region": "us-east-1",
    }


def _imap(tmp_path: Path, dovecot: Any, **_: Any) -> dict[str, Any]:
    user = dovecot.user()
    client = dovecot.client(user)
    for n in range(6):
        client.append("INBOX", message(f"{n}@acme", TOPICS[n], _body(n)))
    client.logout()
    return {
        "id": "src",
        "type": "imap",
        "host": "127.0.0.1",
        "port": dovecot.port,
        "ssl": False,
        "username": user,
        "password_env": "GW_TEST_PASSWORD",
    }


def _gmail(tmp_path: Path, google: GoogleFake, **_: Any) -> dict[str, Any]:
    for n in range(6):
        google.add_message(message(f"{n}@acme", TOPICS[n], _body(n)), labels=("Label_kb",))
    return {
        "id": "src",
        "type": "gmail",
        "label": "Label_kb",
        "token_env": "GW_TEST_TOKEN",
        "base_url": google.base_url,
    }


def _drive(tmp_path: Path, google: GoogleFake, **_: Any) -> dict[str, Any]:
    for n in range(6):
        google.put_file(f"file{n}", f"{TOPICS[n]}.txt", (_body(n) + "\n").encode())
    return {"id": "src", "type": "drive", "token_env": "GW_TEST_TOKEN", "base_url": google.base_url}


SOURCES: dict[str, Callable[..., dict[str, Any]]] = {
    "mbox": _mbox,
    "maildir": _maildir,
    "folder": _folder,
    "s3": _s3,
    "imap": _imap,
    "gmail": _gmail,
    "drive": _drive,
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_killed_sync_replays_its_batch_without_duplicates(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers: dict[str, Any] = {}
    if kind == "s3":
        servers["moto_s3"] = request.getfixturevalue("moto_s3")
    if kind == "imap":
        servers["dovecot"] = request.getfixturevalue("dovecot")
        monkeypatch.setenv("GW_TEST_PASSWORD", servers["dovecot"].password)
    if kind in ("gmail", "drive"):
        servers["google"] = request.getfixturevalue("google")
        monkeypatch.setenv("GW_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    source = SOURCES[kind](tmp_path, **servers)
    config = write_config(tmp_path, [source], batch_size=2)

    killed = subprocess.run(
        [sys.executable, str(SCRIPT), str(config), "2"],
        capture_output=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]

    with syncer(config) as sync:
        checkpoint = sync.checkpoints.load("src")
        assert checkpoint.replay is not None  # batch 2 was begun and never committed
        before = sync.ledger.counts()
        assert before["evidence"] == 4  # batches 1 and 2 were recorded before the kill
        report = sync.run_once()
        source_report = report.sources[0]
        assert source_report.error is None, source_report.error
        assert source_report.replayed_batch == checkpoint.replay.batch
        assert len(source_report.new) == 2  # batch 3
        assert len(source_report.replayed) == 2  # batch 2, recorded before the kill
        counts = sync.ledger.counts()
        assert counts["evidence"] == 6
        assert counts["runs"] == 6
        assert counts["evidence.current"] == 6
        assert len(sync.custody.store.names("objects/")) == 6
        assert sync.checkpoints.load("src").replay is None
        again = sync.run_once().sources[0]
        assert not (again.new)
        assert not (again.changed)
        assert not (again.removed)
    kb = KnowledgeBase.load(tmp_path / "kb")
    documents = sorted({str(entry.metadata["source_id"]) for entry in kb})
    assert len(documents) == 6
    assert len(kb) == 6
