"""Markdown and MDX: YAML front matter becomes metadata; headings become sections."""

from __future__ import annotations

import re
from typing import Any

from groundwire.ingest._structure import markdown_sections
from groundwire.ingest.parsing import parse_yaml
from groundwire.model import Section

__all__ = ["extract_markdown"]

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)


def extract_markdown(
    text: str, where: str
) -> tuple[str, str | None, list[Section], dict[str, Any]]:
    """Body, title (front matter ``title``, else the first ``#`` heading), sections, metadata.

    A leading ``---`` block that parses as a YAML mapping is front matter: it is removed
    from the text and kept as ``metadata["front_matter"]``. Invalid YAML there (or YAML
    nested too deep) is an error naming the line; a block that is not a mapping is left
    in the text.
    """
    metadata: dict[str, Any] = {}
    match = _FRONT_MATTER.match(text)
    if match is not None:
        data = parse_yaml(
            match.group(1) or "",
            where,
            line_offset=1,
            what="front matter is not valid YAML",
            fix="fix it or remove the leading '---' block",
        )
        if isinstance(data, dict):
            metadata["front_matter"] = data
            text = text[match.end() :]
    sections = markdown_sections(text)
    title = metadata.get("front_matter", {}).get("title")
    if not isinstance(title, str) or not title.strip():
        title = next((s.title for s in sections if s.level == 1), None)
    return text, title.strip() if title else None, sections, metadata
