"""Write operations-guide.pdf deterministically (no timestamps, no random ids).

Run from the repository root: ``python examples/tools/make_docs_pdf.py``. The PDF is written
by hand (PDF 1.4, the standard Helvetica font, one content stream per page), so the
bytes depend only on the text below; ``pdf_bytes`` is also used by the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

TITLE = "Relaybird operations guide"
PAGES: tuple[tuple[str, ...], ...] = (
    (
        "Relaybird operations guide",
        "",
        "Data regions",
        "Each workspace stores its data in the region chosen when it was created:",
        "US (Virginia), EU (Frankfurt) or AU (Sydney). The region cannot be changed",
        "in the app. Enterprise customers can ask support to migrate a workspace;",
        "a migration needs a maintenance window of up to four hours.",
        "",
        "Backups are encrypted and stay in the same region as the workspace.",
    ),
    (
        "Data retention",
        "Run logs and step payloads are kept for 7 days on Free, 30 days on Team,",
        "90 days on Business and a configurable 7 to 400 days on Enterprise.",
        "Deleted workspaces are purged within 30 days, and backups roll off",
        "35 days after that. Audit log events are kept for one year on Business",
        "and Enterprise and can be streamed to a SIEM.",
    ),
    (
        "Incident handling",
        "Status updates are posted at status.relaybird.example within 15 minutes",
        "of a confirmed incident. Webhook deliveries that fail during an incident",
        "are retried up to 8 times over about 24 hours; use Redeliver all failed",
        "in the Deliveries tab for anything older. Runs that were queued during",
        "an outage start in order once service is restored.",
    ),
)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_bytes(pages: Sequence[Sequence[str]], title: str) -> bytes:
    """A minimal PDF with one page per item of ``pages``, one text line per string."""
    count = len(pages)
    kids = " ".join(f"{5 + 2 * n} 0 R" for n in range(count))
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        f"<< /Title ({_escape(title)}) /Producer (groundwire examples) >>",
    ]
    for n, lines in enumerate(pages):
        shown = " ".join(f"({_escape(line)}) Tj T*" for line in lines)
        content = f"BT /F1 11 Tf 14 TL 72 740 Td {shown} ET"
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {6 + 2 * n} 0 R >>"
        )
        data = content.encode("latin-1")
        objects.append(f"<< /Length {len(data)} >>\nstream\n{content}\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    trailer = f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info 4 0 R >>\n"
    out += f"{trailer}startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def main() -> None:
    """Write the guide next to this script."""
    target = Path(__file__).resolve().parents[1] / "docs" / "operations-guide.pdf"
    target.write_bytes(pdf_bytes(PAGES, TITLE))
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
