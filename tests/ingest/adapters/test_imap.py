"""IMAP against Debian's dovecot on 127.0.0.1: deltas, expunges, UIDVALIDITY resync."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groundwire.ingest.adapters.imap import format_uids, parse_uids
from synctools import message, search_ids, syncer, write_config

pytestmark = pytest.mark.integration


def test_uid_ranges_round_trip() -> None:
    assert format_uids([7, 1, 2, 3, 9, 10]) == "1:3,7,9:10"
    assert parse_uids("1:3,7,9:10") == [1, 2, 3, 7, 9, 10]
    assert format_uids([]) == ""
    assert parse_uids("") == []


def _config(tmp_path: Path, dovecot: Any, user: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GW_TEST_IMAP_PASSWORD", dovecot.password)
    return write_config(
        tmp_path,
        [
            {
                "id": "imap",
                "type": "imap",
                "host": "127.0.0.1",
                "port": dovecot.port,
                "ssl": False,
                "username": user,
                "password_env": "GW_TEST_IMAP_PASSWORD",
                "folders": ["INBOX", "Support"],
                "tenant": "acme",
            }
        ],
    )


def test_imap_polls_new_messages_expunges_and_uidvalidity_changes(
    tmp_path: Path, dovecot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = dovecot.user()
    imap = dovecot.client(user)
    imap.create_folder("Support")
    imap.append(
        "INBOX",
        message("1@acme", "Expense policy", "Expenses over 500 EUR need a manager approval."),
    )
    imap.append(
        "Support", message("2@acme", "Laptop refresh", "Laptops are refreshed every three years.")
    )
    imap.append("Support", message("5@acme", "Printer toner", "Toner cartridges are in cabinet B."))
    config = _config(tmp_path, dovecot, user, monkeypatch)
    with syncer(config) as sync:
        first = sync.run_once().sources[0]
        assert first.error is None, first.error
        assert len(first.new) == 3
        assert len(search_ids(tmp_path / "kb", "laptops refreshed")) == 1

        # a new message in a thread: only it is fetched (highest UID), the thread changes
        imap.append(
            "INBOX",
            message(
                "3@acme",
                "Re: Expense policy",
                "Travel is approved by the team lead.",
                references=["1@acme"],
                hour=11,
            ),
        )
        second = sync.run_once().sources[0]
        assert len(second.changed) == 1
        assert not second.new
        assert second.unchanged == 0

        # nothing new: nothing fetched, nothing recorded
        idle = sync.run_once().sources[0]
        assert not (idle.new)
        assert not (idle.changed)
        assert not (idle.removed)
        assert idle.unchanged == 0

        # an expunged message is a tombstone: its thread is removed
        imap.select_folder("Support")
        uids = imap.search(["SUBJECT", "Laptop"])
        imap.delete_messages(uids)
        imap.expunge()
        third = sync.run_once().sources[0]
        assert len(third.removed) == 1
        assert not search_ids(tmp_path / "kb", "laptops refreshed")

        # UIDVALIDITY changes when the folder is recreated: the cursor expired, full resync
        before = imap.folder_status("Support", ["UIDVALIDITY"])[b"UIDVALIDITY"]
        raw = [
            data[b"BODY[]"] for data in imap.fetch(imap.search(["ALL"]), ["BODY.PEEK[]"]).values()
        ]
        imap.unselect_folder()
        imap.delete_folder("Support")
        imap.create_folder("Support")
        assert imap.folder_status("Support", ["UIDVALIDITY"])[b"UIDVALIDITY"] != before
        for data in raw:
            imap.append("Support", data)
        fourth = sync.run_once().sources[0]
        assert fourth.resync_reason is not None
        assert "UIDVALIDITY of Support changed" in fourth.resync_reason
        assert not fourth.new
        assert not fourth.removed
        assert not fourth.changed
        assert len(fourth.replayed) == 1
        assert search_ids(tmp_path / "kb", "toner cabinet")
    imap.logout()


def test_a_wrong_password_is_a_clear_source_error(
    tmp_path: Path, dovecot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = dovecot.user()
    config = _config(tmp_path, dovecot, user, monkeypatch)
    monkeypatch.setenv("GW_TEST_IMAP_PASSWORD", "wrong")
    with syncer(config) as sync:
        report = sync.run_once().sources[0]
    assert report.error is not None
    assert "login refused" in report.error
    assert "wrong" not in report.error
