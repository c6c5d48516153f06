"""Mail: messages become thread documents; mbox and Maildir sources (stdlib ``mailbox``).

Parsing (:func:`parse_message`) uses the standard library's ``email`` package with the
modern policy. A message's **thread** is the first Message-ID of its ``References``
(else ``In-Reply-To``, else its own Message-ID); a thread's messages, in date order,
become one document (:func:`render_thread`): each message's sender, date and its own
text — the ``text/plain`` body when there is one, else the HTML body with its markup
stripped by the HTML loader — with **quoted history trimmed** (``>`` lines, the
attribution line before them, forwarded/original-message blocks, signatures after
``-- ``). Attachments are handed to the document loaders as documents of their own
(``<thread>/attachments/<n>-<name>``), with the thread's labels.

Sources:

- :class:`MboxProvider`: one mbox file. The cursor holds the size, message count and
  SHA-256 of the file as last read: when the file only grew (the common append), only
  the new messages are read; otherwise every message is listed and compared by digest
  (edits and deletions are found by that listing).
- :class:`MaildirProvider`: a Maildir folder; message keys are stable and messages
  immutable, so only new keys are read and missing keys are deletions.
"""

from __future__ import annotations

import email
import email.header
import email.parser
import email.policy
import hashlib
import json
import mailbox
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from email.utils import getaddresses, parsedate_to_datetime
from functools import partial
from pathlib import Path
from typing import Any

from groundwire.config import MAIL_MAX_ATTACHMENTS, MAIL_QUOTE_MARKERS, SYNC_BATCH_SIZE
from groundwire.errors import MissingExtraError, SourceError, SyncError
from groundwire.ingest.adapters.base import (
    OPEN,
    Batch,
    Draft,
    Item,
    Labels,
    Member,
    acl_label,
    batched,
    constant,
    document_id,
    grant,
    regular_file,
)
from groundwire.ingest.loaders import load_bytes

__all__ = [
    "MailMessage",
    "MailThreads",
    "MaildirProvider",
    "MboxProvider",
    "parse_message",
    "render_thread",
    "thread_key",
    "trim_quoted",
]

_QUOTE_MARKERS = [re.compile(pattern, re.MULTILINE) for pattern in MAIL_QUOTE_MARKERS]
_MESSAGE_ID = re.compile(r"<[^<>\s]+>")
_SUBJECT_PREFIX = re.compile(r"^\s*((re|fwd?|aw|sv|antw)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)
_PARSED_CACHE = 4096


@dataclass(frozen=True, slots=True)
class Attachment:
    """One attachment: its file name, declared media type and decoded bytes."""

    name: str
    media_type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class MailMessage:
    """A parsed message: ids, thread, people, date, its own text and its attachments."""

    message_id: str | None
    thread: str
    subject: str
    sender: str
    recipients: tuple[str, ...]
    date: datetime | None
    text: str
    html_only: bool
    attachments: tuple[Attachment, ...]


def _ids(value: object) -> list[str]:
    return _MESSAGE_ID.findall(str(value or ""))


def thread_key(message: Message, fallback: str) -> str:
    """The root Message-ID of the message's thread (or ``fallback`` without any id)."""
    for header in ("References", "In-Reply-To", "Message-ID"):
        found = _ids(message.get(header))
        if found:
            return found[0]
    return fallback


def trim_quoted(text: str) -> str:
    """A reply's own text: quoted lines, quote attributions and signatures removed."""
    cut = len(text)
    for marker in _QUOTE_MARKERS:
        match = marker.search(text)
        if match is not None and match.start() > 0:
            cut = min(cut, match.start())
    signature = re.search(r"^-- ?$", text, re.MULTILINE)
    if signature is not None and signature.start() > 0:
        cut = min(cut, signature.start())
    lines = [line for line in text[:cut].split("\n") if not line.lstrip().startswith(">")]
    return "\n".join(lines).strip()


def _decoded(part: Message) -> str:
    """A text part's content: transfer-decoded, then decoded from its charset."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, "replace")
    except LookupError:  # an unknown charset name
        return payload.decode("utf-8", "replace")


def _header(message: Message, name: str) -> str:
    """A header decoded from RFC 2047 encoded words, on one line."""
    value = message.get(name)
    if value is None:
        return ""
    try:
        text = str(email.header.make_header(email.header.decode_header(str(value))))
    except (LookupError, UnicodeDecodeError, ValueError):
        text = str(value)
    return " ".join(text.split())


def _html_text(html: str, where: str) -> str:
    try:
        return load_bytes(html.encode("utf-8"), where, kind="html").text
    except MissingExtraError:
        raise
    except SourceError:
        return ""


def _date(message: Message) -> datetime | None:
    value = message.get("Date")
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _is_attachment(part: Message) -> bool:
    disposition = str(part.get("Content-Disposition", "")).split(";")[0].strip().lower()
    if disposition == "attachment":
        return True
    named = part.get_filename() is not None
    return named and part.get_content_type() not in ("text/plain", "text/html")


def parse_message(data: bytes, fallback_id: str) -> MailMessage:
    """Parse one RFC 5322 message (its own text trimmed of quotes, attachments decoded).

    The ``compat32`` policy is used for speed (the modern one parses every header into
    objects, several times slower); headers are decoded from RFC 2047 by hand.
    """
    message = email.message_from_bytes(data, policy=email.policy.compat32)
    plain: str | None = None
    html: str | None = None
    attachments: list[Attachment] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        if _is_attachment(part):
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes) and payload and len(attachments) < MAIL_MAX_ATTACHMENTS:
                name = part.get_filename() or f"attachment-{len(attachments) + 1}"
                attachments.append(Attachment(name, part.get_content_type(), payload))
        elif part.get_content_type() == "text/plain" and plain is None:
            plain = _decoded(part)
        elif part.get_content_type() == "text/html" and html is None:
            html = _decoded(part)
    html_only = plain is None and html is not None
    content = plain if plain is not None else _html_text(html, fallback_id) if html else ""
    ids = _ids(message.get("Message-ID"))
    people = getaddresses([_header(message, h) for h in ("To", "Cc")])
    return MailMessage(
        message_id=ids[0] if ids else None,
        thread=thread_key(message, fallback_id),
        subject=_header(message, "Subject"),
        sender=_header(message, "From"),
        recipients=tuple(sorted({address for _, address in people if address})),
        date=_date(message),
        text=trim_quoted(content.replace("\r\n", "\n")),
        html_only=html_only,
        attachments=tuple(attachments),
    )


def render_thread(messages: Sequence[MailMessage]) -> tuple[str, str]:
    """``(title, text)`` of a thread: its subject, then each message in date order."""
    ordered = sorted(
        messages,
        key=lambda m: (m.date or datetime.min.replace(tzinfo=UTC), m.message_id or ""),
    )
    subject = next((m.subject for m in ordered if m.subject), "(no subject)")
    title = _SUBJECT_PREFIX.sub("", subject).strip() or subject
    parts = [f"# {title}"]
    for message in ordered:
        when = message.date.isoformat() if message.date else "date unknown"
        parts.append(f"## {message.sender or 'unknown sender'} — {when}\n\n{message.text}".rstrip())
    return title, "\n\n".join(parts) + "\n"


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return cleaned[:80] or "attachment"


class MailThreads:
    """Composition shared by every mail source: a thread document plus its attachments."""

    source_id: str
    kind: str
    #: Add each participant's address as a ``user:`` ACL label (mail shared with whoever
    #: was on the thread); off by default: mailbox owners decide in the source's labels.
    acl_participants: bool = False

    def _parsed(self, member: Member) -> MailMessage:
        cache: OrderedDict[str, MailMessage] = self.__dict__.setdefault("_cache", OrderedDict())
        found = cache.get(member.digest)
        if found is None:
            found = parse_message(member.read(), member.key)
            cache[member.digest] = found
            if len(cache) > _PARSED_CACHE:
                cache.popitem(last=False)
        return found

    def describe(self, item: Item, data: bytes) -> tuple[str, str | None, dict[str, Any]]:
        """``(thread, Message-ID, meta)`` of a raw message: read only when it is new."""
        return self.describe_bytes(data, item.key)

    def describe_bytes(self, data: bytes, fallback: str) -> tuple[str, str | None, dict[str, Any]]:
        """``(thread, Message-ID, meta)`` from the headers of a raw message."""
        message = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(data)
        ids = _ids(message.get("Message-ID"))
        meta = {"date": str(message.get("Date", ""))}
        return thread_key(message, fallback), ids[0] if ids else None, meta

    def compose(self, group: str, members: Sequence[Member]) -> list[Draft]:
        """The thread as one text document, and each attachment as its own."""
        messages = [self._parsed(member) for member in members]
        title, text = render_thread(messages)
        labels = members[0].labels
        if self.acl_participants:
            people = {m.sender for m in messages} | {r for m in messages for r in m.recipients}
            addresses = {address for _, address in getaddresses(sorted(people)) if address}
            labels = grant(labels, [a for a in (acl_label("user", x) for x in addresses) if a])
        thread_id = document_id(
            self.source_id, "threads/" + hashlib.sha256(group.encode()).hexdigest()[:20]
        )
        originals = tuple(sorted({(m.digest, m.media_type, -1) for m in members}))
        data = text.encode("utf-8")
        drafts = [
            Draft(
                document_id=thread_id,
                title=title,
                media_type="text/markdown",
                name=f"{title}.md",
                data=data,
                originals=tuple((d, t, 0) for d, t, _ in originals),
                labels=labels,
                uri=members[0].uri.rsplit("/", 1)[0] if "/" in members[0].uri else members[0].uri,
                metadata={"messages": len(messages)},
            )
        ]
        number = 0
        for message in messages:
            for attachment in message.attachments:
                number += 1
                drafts.append(
                    Draft(
                        document_id=f"{thread_id}/attachments/{number}-{_safe_name(attachment.name)}",
                        title=f"{attachment.name} ({title})",
                        media_type=attachment.media_type,
                        name=attachment.name,
                        data=attachment.data,
                        originals=(
                            (
                                hashlib.sha256(attachment.data).hexdigest(),
                                attachment.media_type,
                                len(attachment.data),
                            ),
                        ),
                        labels=labels,
                        uri="",
                    )
                )
        return drafts

    def acknowledge(self, batch: Batch) -> None:
        """Nothing to acknowledge: mailboxes are read, never changed."""

    def close(self) -> None:
        """Nothing to release."""


class _LocalMailbox(MailThreads):
    """A mailbox in a local file or folder."""

    def __init__(
        self,
        source_id: str,
        path: str | Path,
        *,
        labels: Labels = OPEN,
        account: str = "",
        batch_size: int = SYNC_BATCH_SIZE,
        acl_participants: bool = False,
    ) -> None:
        self.source_id = source_id
        self.path = Path(path)
        self.labels = labels
        self.account = account or self.path.name
        self.batch_size = batch_size
        self.acl_participants = acl_participants


class MboxProvider(_LocalMailbox):
    """An mbox file; appended messages are read as a delta (see the module docstring)."""

    kind = "mbox"

    def _digest(self, limit: int | None = None) -> tuple[int, str]:
        """Size and SHA-256 of the file (or of its first ``limit`` bytes)."""
        digest = hashlib.sha256()
        size = 0
        with self.path.open("rb") as handle:
            while limit is None or size < limit:
                want = 1 << 20 if limit is None else min(1 << 20, limit - size)
                block = handle.read(want)
                if not block:
                    break
                digest.update(block)
                size += len(block)
        return size, digest.hexdigest()

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """New messages after an append, else every message (a full listing)."""
        regular_file(self.path, self.source_id, "mbox file")
        size, whole = self._digest()
        previous: dict[str, Any] = json.loads(cursor) if cursor else {}
        if previous.get("size") == size and previous.get("sha256") == whole:
            yield Batch((), cursor, f"{previous.get('count', 0):,} messages")
            return
        box = mailbox.mbox(self.path, create=False)
        try:
            keys = list(box.keys())
            start, full = 0, True
            grew = bool(previous) and size > previous["size"] and "count" in previous
            if grew and self._digest(previous["size"]) == (previous["size"], previous["sha256"]):
                start, full = int(previous["count"]), False
            after = json.dumps({"size": size, "sha256": whole, "count": len(keys)})

            def items() -> Iterator[Item]:
                for number in keys[start:]:
                    data = box.get_bytes(number)
                    digest = hashlib.sha256(data).hexdigest()
                    group, message_id, meta = self.describe_bytes(data, digest[:24])
                    # keyed by Message-ID, so an edited message is a new version of itself
                    key = (
                        hashlib.sha256(message_id.encode()).hexdigest()[:24]
                        if message_id
                        else digest[:24]
                    )
                    yield Item(
                        key=key,
                        version=digest,
                        read=constant(data),
                        name=f"message-{number}.eml",
                        media_type="message/rfc822",
                        group=group,
                        size=len(data),
                        sha256=digest,
                        account=self.account,
                        labels=self.labels,
                        uri=f"{self.path.name}#{number}",
                        meta=meta,
                    )

            yield from batched(
                items(),
                cursor=after,
                resume=cursor,
                full=full,
                size=self.batch_size,
                watermark=f"{len(keys):,} messages",
            )
        finally:
            box.close()


class MaildirProvider(_LocalMailbox):
    """A Maildir folder (``cur``/``new``); keys are Maildir's unique, stable names."""

    kind = "maildir"

    def batches(self, cursor: str | None) -> Iterator[Batch]:
        """Every key is listed (cheap); the runner reads only keys it has not committed."""
        if not (self.path / "cur").is_dir():
            raise SyncError(
                f"{self.path}: not a Maildir (no cur/ folder)", source_id=self.source_id
            )
        box = mailbox.Maildir(self.path, factory=None, create=False)
        keys = sorted(box.keys())
        items = (
            Item(
                key=key,
                version="immutable",  # a Maildir message never changes under its key
                read=partial(box.get_bytes, key),
                name=f"{key}.eml",
                media_type="message/rfc822",
                account=self.account,
                labels=self.labels,
                uri=f"{self.path.name}/{key}",
            )
            for key in keys
        )
        yield from batched(
            items,
            cursor=json.dumps({"messages": len(keys)}),
            resume=cursor,
            full=True,
            size=self.batch_size,
            watermark=f"{len(keys):,} messages",
        )
