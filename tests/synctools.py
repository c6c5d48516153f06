"""Builders for the sync tests: messages, mailboxes, configurations and syncers."""

from __future__ import annotations

import email.message
import email.utils
import mailbox
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from groundwire import KnowledgeBase, Syncer, load_sync_config


def message(
    message_id: str,
    subject: str,
    body: str,
    *,
    sender: str = "Alice <alice@acme.example>",
    to: str = "support@acme.example",
    references: Sequence[str] = (),
    hour: int = 10,
    html: str | None = None,
    attachments: Sequence[tuple[str, str, bytes]] = (),
) -> bytes:
    """An RFC 5322 message as bytes (plain text, optional HTML, attachments)."""
    msg = email.message.EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Message-ID"] = f"<{message_id}>"
    msg["Date"] = email.utils.format_datetime(
        email.utils.parsedate_to_datetime(f"Mon, 02 Mar 2026 {hour:02d}:00:00 +0000")
    )
    if references:
        msg["References"] = " ".join(f"<{r}>" for r in references)
        msg["In-Reply-To"] = f"<{references[-1]}>"
    if body:
        msg.set_content(body)
        if html is not None:
            msg.add_alternative(html, subtype="html")
    elif html is not None:
        msg.set_content(html, subtype="html")
    for name, media_type, data in attachments:
        main, sub = media_type.split("/", 1)
        msg.add_attachment(data, maintype=main, subtype=sub, filename=name)
    return bytes(msg)


def write_mbox(path: Path, messages: Sequence[bytes]) -> None:
    """A new mbox file holding ``messages`` in order."""
    if path.exists():
        path.unlink()
    box = mailbox.mbox(path)
    for data in messages:
        box.add(data)
    box.flush()
    box.close()


def append_mbox(path: Path, messages: Sequence[bytes]) -> None:
    box = mailbox.mbox(path)
    for data in messages:
        box.add(data)
    box.flush()
    box.close()


def write_config(folder: Path, sources: list[dict[str, Any]], **top: Any) -> Path:
    """A sync configuration in ``folder`` (state and snapshot beside it by default)."""
    data = {"state": "state", "snapshot": "kb", **top, "sources": sources}
    path = folder / "sync.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def syncer(config: Path, **options: Any) -> Syncer:
    return Syncer(load_sync_config(config), **options)


def search_ids(snapshot: Path, query: str, k: int = 10) -> list[str]:
    """Source ids (documents) of the top hits of ``query`` in the published snapshot."""
    kb = KnowledgeBase.load(snapshot)
    return [str(kb.get(hit.id).metadata["source_id"]) for hit in kb.search(query, k=k)]  # type: ignore[union-attr]


#: A tiny JPEG stream (SOI, APP0, a quantization table, EOI): a stand-in scanned page.
JPEG = (
    bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffdb004300")
    + b"\x08" * 64
    + bytes.fromhex("ffd9")
)


def pdf_with_pages(pages: Sequence[tuple[str | None, bool]]) -> bytes:
    """A PDF whose pages each draw an optional text line and an optional JPEG image."""
    objects: list[str] = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        "<< /Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceGray "
        f"/BitsPerComponent 8 /Filter /DCTDecode /Length {len(JPEG)} >>",
    ]
    streams = {4: JPEG}
    kids = []
    for text, image in pages:
        ops = (["q 600 0 0 800 0 0 cm /Im0 Do Q"] if image else []) + (
            [f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"] if text else []
        )
        content = "\n".join(ops).encode()
        objects.append(f"<< /Length {len(content)} >>")
        streams[len(objects)] = content
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            "/Resources << /Font << /F1 3 0 R >> "
            f"/XObject << /Im0 4 0 R >> >> /Contents {len(objects)} 0 R >>"
        )
        kids.append(len(objects))
    objects[1] = (
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>"
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\n".encode()
        if number in streams:
            out += b"stream\n" + streams[number] + b"\nendstream\n"
        out += b"endobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)
