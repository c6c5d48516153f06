"""Mail: parsing, quote trimming, threads as documents, mbox and Maildir deltas."""

from __future__ import annotations

import mailbox
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import KnowledgeBase
from groundwire.ingest.adapters.mail import parse_message, render_thread, trim_quoted
from synctools import append_mbox, message, search_ids, syncer, write_config, write_mbox

REPLY = """Try the manual feed tray first.

On Mon, 2 Mar 2026 at 10:00, Alice <alice@acme.example> wrote:
> The printer on floor 3 jams with A4 paper.
> It started yesterday.
"""


def test_plain_text_is_preferred_and_quotes_are_trimmed() -> None:
    parsed = parse_message(message("2@acme", "Re: Printer", REPLY, html="<p>HTML twin</p>"), "k")
    assert parsed.text == "Try the manual feed tray first."
    assert not parsed.html_only
    assert parsed.thread == "<2@acme>"


def test_html_only_messages_are_stripped_of_markup() -> None:
    data = message(
        "h@acme",
        "Badge",
        "",
        html="<html><body><h1>Badge</h1><p>Renew at <b>desk 4</b>.</p></body></html>",
    )
    parsed = parse_message(data, "k")
    assert parsed.html_only
    assert "Renew at desk 4." in parsed.text
    assert "<" not in parsed.text


def test_signatures_forwarded_blocks_and_outlook_headers_are_trimmed() -> None:
    text = "Deploys freeze Friday.\n\n-- \nBob\nSRE"
    assert trim_quoted(text) == "Deploys freeze Friday."
    forwarded = "See below.\n\n---------- Forwarded message ---------\nFrom: x\nold text"
    assert trim_quoted(forwarded) == "See below."
    outlook = "Yes.\n\nFrom: Carol <c@x>\nSent: Monday\nTo: team\nold"
    assert trim_quoted(outlook) == "Yes."


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40), max_size=12
    )
)
def test_trimming_only_removes_lines(lines: list[str]) -> None:
    text = "\n".join(lines)
    trimmed = trim_quoted(text)
    kept = trimmed.split("\n") if trimmed else []
    assert not any(line.lstrip().startswith(">") for line in kept)
    source = iter(line for line in text.split("\n"))
    # every kept line appears in the input, in order (trimming never invents text)
    for line in kept:
        assert any(line.strip() == candidate.strip() for candidate in source)


def test_a_thread_renders_in_date_order_under_its_subject() -> None:
    first = parse_message(message("1@acme", "Printer jam", "It jams.", hour=9), "a")
    second = parse_message(
        message("2@acme", "Re: Printer jam", REPLY, references=["1@acme"], hour=11), "b"
    )
    title, text = render_thread([second, first])
    assert title == "Printer jam"
    assert text.index("It jams.") < text.index("manual feed tray")
    assert second.thread == first.thread == "<1@acme>"


def _mbox_config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        [
            {
                "id": "mail",
                "type": "mbox",
                "path": "support.mbox",
                "tenant": "acme",
                "acl": ["group:support"],
            }
        ],
    )


def test_mbox_threads_attachments_labels_and_deltas(tmp_path: Path) -> None:
    box = tmp_path / "support.mbox"
    notes = b"# VPN\n\nUse WireGuard with the config from the portal.\n"
    write_mbox(
        box,
        [
            message("1@acme", "Printer jam", "The printer on floor 3 jams with A4 paper.", hour=9),
            message("2@acme", "Re: Printer jam", REPLY, references=["1@acme"], hour=10),
            message(
                "3@acme",
                "VPN notes",
                "Attached.",
                attachments=[("vpn.md", "text/markdown", notes)],
                hour=11,
            ),
        ],
    )
    config = _mbox_config(tmp_path)
    with syncer(config) as sync:
        first = sync.run_once()
        mail = first.sources[0]
        assert mail.error is None
        assert len(mail.new) == 3  # two threads and one attachment
        assert not mail.skipped
        kb = KnowledgeBase.load(tmp_path / "kb")
        entry = kb.get(kb.search("manual feed tray", k=1)[0].id)
        assert entry is not None
        assert entry.metadata["tenant"] == "acme"
        assert tuple(entry.metadata["acl"]) == ("group:support",)
        assert "wireguard" in " ".join(
            search_ids(tmp_path / "kb", "WireGuard portal")
        ).lower() or any(
            "attachments" in d for d in search_ids(tmp_path / "kb", "WireGuard portal")
        )

        # an append is read as a delta: only the new message is parsed
        append_mbox(
            box,
            [
                message(
                    "4@acme",
                    "Re: Printer jam",
                    "Fixed by replacing the roller.",
                    references=["1@acme", "2@acme"],
                    hour=12,
                )
            ],
        )
        second = sync.run_once().sources[0]
        assert second.resync_reason is None
        assert len(second.changed) == 1
        assert not second.new
        assert second.unchanged == 0  # the three old messages were not even listed
        assert (
            "roller"
            in KnowledgeBase.load(tmp_path / "kb")
            .get(KnowledgeBase.load(tmp_path / "kb").search("roller", k=1)[0].id)
            .body
        )  # type: ignore[union-attr]

        # an edit rewrites the file: a full listing finds the changed message
        messages = list(_messages(box))
        messages[2] = message(
            "3@acme",
            "VPN notes",
            "Attached, see the new portal.",
            attachments=[("vpn.md", "text/markdown", notes)],
            hour=11,
        )
        write_mbox(box, messages)
        third = sync.run_once().sources[0]
        assert third.changed == [d for d in third.changed if "threads/" in d]
        assert len(third.changed) == 1
        assert third.unchanged == 3

        # deleting every message of a thread removes the thread and its attachment
        write_mbox(box, [data for data in _messages(box) if b"VPN notes" not in data])
        fourth = sync.run_once().sources[0]
        assert len(fourth.removed) == 2
        assert not any("attachments" in d for d in search_ids(tmp_path / "kb", "WireGuard portal"))


def _messages(path: Path) -> list[bytes]:
    box = mailbox.mbox(path)
    try:
        return [box.get_bytes(key) for key in box.keys()]  # noqa: SIM118 (a mailbox iterates messages)
    finally:
        box.close()


def test_duplicate_message_ids_are_kept_once(tmp_path: Path) -> None:
    box = tmp_path / "support.mbox"
    original = message("dup@acme", "Quota", "Quota is 50 GB.")
    forwarded_copy = original.replace(b"Quota is 50 GB.", b"Quota is 50 GB.\n(resent)")
    write_mbox(box, [original, forwarded_copy])
    with syncer(_mbox_config(tmp_path)) as sync:
        report = sync.run_once().sources[0]
    assert len(report.new) == 1
    assert len(report.skipped) == 1
    assert report.skipped[0].reason.startswith("duplicate: key ")


def test_maildir_reads_only_new_keys_and_finds_deletions(tmp_path: Path) -> None:
    folder = tmp_path / "Maildir"
    box = mailbox.Maildir(folder, create=True)
    keys = [
        box.add(message(f"{n}@acme", f"Topic {n}", f"Body about topic number {n}."))
        for n in range(3)
    ]
    config = write_config(tmp_path, [{"id": "md", "type": "maildir", "path": "Maildir"}])
    with syncer(config) as sync:
        assert len(sync.run_once().sources[0].new) == 3
        box.add(message("9@acme", "Topic 9", "A brand new topic."))
        box.remove(keys[0])
        report = sync.run_once().sources[0]
        assert len(report.new) == 1
        assert len(report.removed) == 1
        assert report.unchanged == 2
