"""HTML to text with selectolax (the ``[html]`` extra): title, headings, block boundaries.

Scripts, styles, templates, navigation and other non-content elements are dropped; block elements
end lines (paragraph-like blocks with a blank line); whitespace inside inline text
collapses as a browser would, except inside ``<pre>``; table cells are joined by `` | ``.
"""

from __future__ import annotations

import re
from typing import Any

from groundwire.errors import MissingExtraError
from groundwire.model import Section

__all__ = ["extract_html"]

_DROP = frozenset(
    {"script", "style", "noscript", "template", "head", "svg", "canvas", "iframe", "object"}
    | {"embed", "select", "input", "button", "nav"}
)
# Elements that end a paragraph (2: blank line) or a line (1).
_BLOCK = {
    **dict.fromkeys(
        ("p", "div", "section", "article", "main", "header", "footer", "nav", "aside"), 2
    ),
    **dict.fromkeys(("blockquote", "pre", "table", "ul", "ol", "dl", "figure", "form"), 2),
    **dict.fromkeys(("fieldset", "address", "details", "hr", "body", "html"), 2),
    **dict.fromkeys(("h1", "h2", "h3", "h4", "h5", "h6"), 2),
    **dict.fromkeys(("li", "tr", "dt", "dd", "caption", "figcaption", "summary", "br"), 1),
}
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_SPACES = re.compile(r"\s+")


class _Writer:
    """Accumulates text with pending line breaks and spaces, tracking the length."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.pending = 0  # line breaks owed before the next text
        self.space = False  # a collapsed space owed before the next text
        self.cell = False  # a table-cell separator owed before the next text

    def owe_break(self, lines: int) -> None:
        self.pending = max(self.pending, lines)

    def write(self, text: str, pre: bool) -> None:
        if not pre:
            text = _SPACES.sub(" ", text)
            if text.startswith(" "):
                self.space = True
                text = text[1:]
            if text.endswith(" "):
                text, trailing = text[:-1], True
            else:
                trailing = False
            if not text:
                return
        elif not text:
            return
        if self.length:
            if self.pending:
                self._put("\n" * self.pending)
            elif self.cell:
                self._put(" | ")
            elif self.space:
                self._put(" ")
        self.pending, self.cell = 0, False
        self._put(text)
        self.space = trailing if not pre else False

    def _put(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)


def extract_html(source: str) -> tuple[str, str | None, list[Section], dict[str, Any]]:
    """Text, ``<title>`` (or first ``<h1>``), h1–h6 sections and metadata of an HTML page."""
    try:
        from selectolax.lexbor import LexborHTMLParser
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("selectolax", "html", "Reading HTML") from exc
    tree = LexborHTMLParser(source)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    root = tree.body if tree.body is not None else tree.root
    out = _Writer()
    sections: list[Section] = []
    heading: tuple[int, int, int] | None = None  # level, first part index, length at open
    pre = 0
    stack: list[tuple[Any, bool]] = [(root, True)] if root is not None else []
    while stack:
        node, entering = stack.pop()
        tag = node.tag
        if tag is None:  # a processing instruction or bogus comment (<?x>): no content
            continue
        if not entering:
            if tag in _HEADINGS and heading is not None:
                level, first, _ = heading
                text = " ".join("".join(out.parts[first:]).split())
                if text:
                    start = out.length - len("".join(out.parts[first:]).lstrip("\n"))
                    sections.append(Section(start, level, text))
                heading = None
            elif tag == "pre":
                pre -= 1
            if tag in _BLOCK:
                out.owe_break(_BLOCK[tag])
            continue
        if tag == "-text":
            out.write(node.text(deep=False) or "", pre > 0)
            continue
        if tag in _DROP or tag.startswith(("-", "!")):
            continue
        if tag in _BLOCK:
            out.owe_break(_BLOCK[tag])
        if tag in ("td", "th") and out.length and not out.pending:
            out.cell = True
        if tag in _HEADINGS and heading is None:
            out.owe_break(2)
            heading = (_HEADINGS[tag], len(out.parts), out.length)
        elif tag == "pre":
            pre += 1
        stack.append((node, False))
        children = []
        child = node.child
        while child is not None:
            children.append(child)
            child = child.next
        stack.extend((c, True) for c in reversed(children))
    if not title and sections:
        title = next((s.title for s in sections if s.level == 1), "")
    return "".join(out.parts), title or None, sections, {}
