"""Gmail and Drive clients against a loopback server speaking their REST wire formats."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from synctools import message, search_ids, syncer, write_config

sys.path.insert(0, str(Path(__file__).parent))
from google_fakes import TOKEN, GoogleFake

from groundwire import KnowledgeBase
from groundwire.ingest.adapters.base import WatchRequest


@pytest.fixture
def google() -> Iterator[GoogleFake]:
    fake = GoogleFake()
    yield fake
    fake.close()


def _config(
    tmp_path: Path, google: GoogleFake, monkeypatch: pytest.MonkeyPatch, **source: Any
) -> Path:
    monkeypatch.setenv("GW_TEST_GOOGLE_TOKEN", TOKEN)
    return write_config(
        tmp_path,
        [
            {
                "token_env": "GW_TEST_GOOGLE_TOKEN",
                "base_url": google.base_url,
                "tenant": "acme",
                **source,
            }
        ],
        batch_size=2,
    )


def test_gmail_history_deltas_tombstones_and_expiry(
    tmp_path: Path, google: GoogleFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_id = google.add_message(
        message("1@acme", "Badge access", "Badges are renewed at the front desk."),
        thread="t1",
        labels=("INBOX", "Label_support"),
    )
    google.add_message(
        message("2@acme", "Lunch", "Pizza on Friday."), thread="t2", labels=("INBOX",)
    )  # not labelled
    config = _config(tmp_path, google, monkeypatch, id="gmail", type="gmail", label="Label_support")
    with syncer(config) as sync:
        first = sync.run_once().sources[0]
        assert first.error is None, first.error
        assert len(first.new) == 1
        assert search_ids(tmp_path / "kb", "badges renewed front desk")
        assert any(path.endswith("/messages") for _, path, _ in google.requests)

        # a reply in the thread and a new labelled thread arrive through history
        reply = google.add_message(
            message(
                "3@acme",
                "Re: Badge access",
                "Also at the side entrance.",
                references=["1@acme"],
                hour=11,
            ),
            thread="t1",
            labels=("INBOX", "Label_support"),
        )
        other = google.add_message(
            message("4@acme", "Parking", "Parking permits are issued monthly."),
            thread="t4",
            labels=("Label_support",),
        )
        second = sync.run_once().sources[0]
        assert second.resync_reason is None
        assert len(second.changed) == 1
        assert len(second.new) == 1
        history_calls = [q for _, path, q in google.requests if path.endswith("/history")]
        assert history_calls
        assert history_calls[-1]["startHistoryId"]

        # trash, deletion and a removed label are tombstones
        google.add_labels(other, "TRASH")
        google.delete_message(reply)
        third = sync.run_once().sources[0]
        assert len(third.removed) == 1
        assert len(third.changed) == 1
        assert not search_ids(tmp_path / "kb", "parking permits monthly")
        google.remove_labels(first_id, "Label_support")
        fourth = sync.run_once().sources[0]
        assert len(fourth.removed) == 1

        # an untrashed message comes back
        google.remove_labels(other, "TRASH")
        assert len(sync.run_once().sources[0].new) == 1

        # history expired: 404, then a full resync that replays what did not change
        google.expire_history()
        google.add_message(
            message("5@acme", "Holidays", "The office closes on 24 December."),
            thread="t5",
            labels=("Label_support",),
        )
        fifth = sync.run_once().sources[0]
        assert fifth.resync_reason is not None
        assert "404" in fifth.resync_reason
        assert len(fifth.new) == 1
        assert not fifth.removed
        assert search_ids(tmp_path / "kb", "office closes December")


def test_gmail_watch_uses_the_hosts_topic(
    tmp_path: Path, google: GoogleFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, google, monkeypatch, id="gmail", type="gmail", label="Label_support")
    asked: list[WatchRequest] = []

    def topic(request: WatchRequest) -> str:
        asked.append(request)
        return "projects/acme/topics/gmail-sync"

    with syncer(config) as sync:
        channels = sync.open_watches(topic)
        assert channels[0].address == "projects/acme/topics/gmail-sync"
        assert channels[0].expiration_ms == 1893456000000
        assert sync.checkpoints.load("gmail").channel == channels[0]
        # a notification is handled once, whatever Pub/Sub redelivers
        google.add_message(
            message("9@acme", "Fire drill", "The fire drill is on Tuesday."),
            labels=("Label_support",),
        )
        assert sync.notify("gmail", "pubsub-message-1") is not None
        assert sync.notify("gmail", "pubsub-message-1") is None
    assert google.watches == [
        {
            "topicName": "projects/acme/topics/gmail-sync",
            "labelIds": ["Label_support"],
            "labelFilterBehavior": "include",
        }
    ]
    assert asked[0].kind == "gmail"


def test_a_bad_token_is_a_clear_error(
    tmp_path: Path, google: GoogleFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, google, monkeypatch, id="gmail", type="gmail")
    monkeypatch.setenv("GW_TEST_GOOGLE_TOKEN", "expired-token")
    with syncer(config) as sync:
        report = sync.run_once().sources[0]
    assert report.error is not None
    assert "HTTP 401" in report.error
    assert "token_env" in report.error


def test_drive_changes_tombstones_exports_permissions_and_expiry(
    tmp_path: Path, google: GoogleFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    google.put_file(
        "f1",
        "travel.md",
        b"# Travel\n\nBook trains for trips under 600 km.\n",
        "text/markdown",
        permissions=[{"type": "user", "emailAddress": "bob@acme.example", "role": "reader"}],
    )
    google.put_file(
        "f2",
        "Security policy",
        b"Rotate passwords every 90 days.",
        "application/vnd.google-apps.document",
    )
    google.put_file("f3", "photos", b"", "application/vnd.google-apps.folder")
    google.put_file(
        "f4",
        "public.txt",
        b"Visitors sign in at reception.\n",
        permissions=[{"type": "anyone", "role": "reader"}],
    )
    google.put_file("f5", "liar.txt", b"Declared size is wrong.\n", declared_size=999)
    config = _config(tmp_path, google, monkeypatch, id="drive", type="drive", acl=["group:staff"])
    with syncer(config) as sync:
        first = sync.run_once().sources[0]
        assert first.error is None, first.error
        assert sorted(first.new) == ["drive/f1", "drive/f2", "drive/f4"]
        assert [s.path for s in first.skipped] == ["drive://files/f5"]
        assert "size-mismatch" in first.skipped[0].reason
        kb = KnowledgeBase.load(tmp_path / "kb")
        travel = kb.get(kb.search("trains trips", k=1)[0].id)
        assert travel is not None
        assert tuple(travel.metadata["acl"]) == (
            "group:staff",
            "user:bob@acme.example",
        )
        public = kb.get(kb.search("visitors reception", k=1)[0].id)
        assert public is not None
        assert tuple(public.metadata["acl"]) == ("group:staff",)
        assert search_ids(tmp_path / "kb", "rotate passwords") == ["drive/f2"]  # exported as text

        google.put_file(
            "f1", "travel.md", b"# Travel\n\nBook trains for trips under 800 km.\n", "text/markdown"
        )
        google.trash_file("f4")
        google.remove_file("f2")
        google.put_file("f6", "new.txt", b"The canteen opens at 8.\n")
        second = sync.run_once().sources[0]
        assert second.resync_reason is None
        assert second.changed == ["drive/f1"]
        assert second.new == ["drive/f6"]
        assert sorted(second.removed) == ["drive/f2", "drive/f4"]
        assert any(path == "/drive/v3/changes" for _, path, _ in google.requests)

        google.expire_page_tokens()
        google.put_file("f7", "late.txt", b"Late arrivals sign the book.\n")
        third = sync.run_once().sources[0]
        assert third.resync_reason is not None
        assert "400" in third.resync_reason
        assert third.new == ["drive/f7"]
        assert not third.removed
        assert not third.changed


def test_drive_watch_opens_and_stops_a_web_hook_channel(
    tmp_path: Path, google: GoogleFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    google.put_file("f1", "a.txt", b"alpha\n")
    config = _config(tmp_path, google, monkeypatch, id="drive", type="drive")
    with syncer(config) as sync:
        sync.run_once()
        channels = sync.open_watches(
            lambda request: f"https://hooks.acme.example/drive/{request.channel_id}"
        )
        channel = channels[0]
        assert channel.resource_id == "res-1"
        assert channel.address.endswith(channel.channel_id)
        assert google.channels[0]["address"] == channel.address
        watch_query = next(q for _, path, q in google.requests if path == "/drive/v3/changes/watch")
        assert watch_query["pageToken"] == [str(len(google.changes) + 1)]
        sync.provider("drive").stop_watch(channel)  # type: ignore[attr-defined]
    assert google.stopped == [{"id": channel.channel_id, "resourceId": "res-1"}]
