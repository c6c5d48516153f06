"""PDF to text with pypdf (the ``[pdf]`` extra), one section per page."""

from __future__ import annotations

import io
from typing import Any

from groundwire.errors import MissingExtraError, SourceError
from groundwire.model import Section

__all__ = ["extract_pdf"]


def extract_pdf(data: bytes, where: str) -> tuple[str, str | None, list[Section], dict[str, Any]]:
    """Text of every page (pages joined by a blank line), the title, page sections.

    Sections are ``page N`` (level 1), so chunks never straddle a page and carry their
    page in the heading trail; ``metadata["page_starts"]`` holds each page's offset.
    """
    try:
        import pypdf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("pypdf", "pdf", "Reading PDF files") from exc
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise SourceError(f"{where}: the PDF is encrypted; save an unencrypted copy")
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        title = info.title if info is not None and isinstance(info.title, str) else None
    except SourceError:
        raise
    except Exception as exc:  # pypdf raises many types for malformed files
        raise SourceError(
            f"{where}: cannot read the PDF ({type(exc).__name__}: {exc}); check the file "
            "opens in a PDF viewer"
        ) from exc
    parts: list[str] = []
    sections: list[Section] = []
    length = 0
    for number, page in enumerate(pages, start=1):
        lines = page.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").split("\n")
        text = "\n".join(line.rstrip() for line in lines).strip("\n")
        if parts:
            parts.append("\n\n")
            length += 2
        sections.append(Section(length, 1, f"page {number}"))
        parts.append(text)
        length += len(text)
    starts = tuple(section.start for section in sections)
    metadata = {"pages": len(pages), "page_starts": starts}
    return "".join(parts), (title or "").strip() or None, sections, metadata
