"""LaTeX to text: sections kept as headings, comments and markup stripped reasonably.

Not a TeX engine: comments go, the preamble goes (``\\title`` is kept as the title),
sectioning commands become heading lines, formatting commands keep their text,
references, citations, labels and includes are dropped, escaped specials are unescaped.
Math is kept as written.
"""

from __future__ import annotations

import re
from typing import Any

from groundwire.ingest._structure import LATEX_LEVELS, LATEX_SECTION
from groundwire.model import Section

__all__ = ["extract_latex", "latex_to_text"]

_COMMENT = re.compile(r"(?<!\\)%.*")
_TITLE = re.compile(r"\\title\s*(?:\[[^\]]*\])?\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_BEGIN_DOCUMENT = re.compile(r"\\begin\s*\{document\}")
_END_DOCUMENT = re.compile(r"\\end\s*\{document\}")
_DROPPED = re.compile(
    r"\\(?:label|ref|eqref|pageref|autoref|cref|Cref|cite[a-zA-Z]*|input|include|usepackage"
    r"|documentclass|includegraphics|bibliography|bibliographystyle|vspace|hspace|newcommand"
    r"|renewcommand|setlength|maketitle|tableofcontents|newpage|clearpage|noindent)\*?"
    r"(?:\s*\[[^\]]*\])*(?:\s*\{(?:[^{}]|\{[^{}]*\})*\})*"
)
_HREF = re.compile(r"\\href\s*\{[^{}]*\}\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_ITEM = re.compile(r"\s*\\item\s*(?:\[([^\]]*)\])?\s*")
_FOOTNOTE = re.compile(r"\\footnote\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_ENVIRONMENT = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}(?:\s*\[[^\]]*\])?(?:\s*\{[^{}]*\})?")
_LINE_BREAK = re.compile(r"\\\\(?:\s*\[[^\]]*\])?")
_ESCAPED = re.compile(r"\\([&%$#_{}])")
_COMMAND = re.compile(r"\\[A-Za-z]+\*?(?:\s*\[[^\]]*\])?")
# Inline and display math, kept verbatim: $..$, $$..$$, \(..\), \[..\].
_MATH = re.compile(r"\$\$.+?\$\$|(?<!\\)\$.+?(?<!\\)\$|\\\(.+?\\\)|(?<!\\)\\\[.+?\\\]", re.S)
_HELD = re.compile("\x03(\\d+)\x03")
_UNESCAPE = {"\x01": "{", "\x02": "}"}


def latex_to_text(source: str) -> str:
    """LaTeX markup (without sectioning commands) as plain text; math kept as written."""
    maths: list[str] = []

    def hold(match: re.Match[str]) -> str:
        maths.append(match.group())
        return f"\x03{len(maths) - 1}\x03"

    text = _MATH.sub(hold, source)
    text = _DROPPED.sub("", text)
    text = _HREF.sub(r"\1", text)
    text = _FOOTNOTE.sub(r" (\1)", text)
    text = _ITEM.sub(lambda m: f"\n- {m.group(1) + ' ' if m.group(1) else ''}", text)
    text = _ENVIRONMENT.sub("\n", text)
    text = _LINE_BREAK.sub("\n", text)
    text = _ESCAPED.sub(lambda m: {"{": "\x01", "}": "\x02"}.get(m.group(1), m.group(1)), text)
    text = _COMMAND.sub("", text)
    text = text.replace("{", "").replace("}", "").replace("~", " ")
    for placeholder, char in _UNESCAPE.items():
        text = text.replace(placeholder, char)
    text = _HELD.sub(lambda m: maths[int(m.group(1))], text)
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


def extract_latex(source: str) -> tuple[str, str | None, list[Section], dict[str, Any]]:
    """Text, ``\\title`` and section headings of a LaTeX document."""
    source = _COMMENT.sub("", source)
    title_match = _TITLE.search(source)
    title = " ".join(latex_to_text(title_match.group(1)).split()) if title_match else ""
    begin = _BEGIN_DOCUMENT.search(source)
    if begin is not None:
        end = _END_DOCUMENT.search(source, begin.end())
        source = source[begin.end() : end.start() if end else len(source)]
    parts: list[str] = []
    length = 0
    sections: list[Section] = []
    position = 0

    def put(text: str) -> None:
        nonlocal length
        if text:
            if length:
                parts.append("\n\n")
                length += 2
            parts.append(text)
            length += len(text)

    for match in LATEX_SECTION.finditer(source):
        put(latex_to_text(source[position : match.start()]))
        heading = " ".join(latex_to_text(match.group(2)).split())
        if heading:
            put(heading)
            sections.append(Section(length - len(heading), LATEX_LEVELS[match.group(1)], heading))
        position = match.end()
    put(latex_to_text(source[position:]))
    return "".join(parts), title or None, sections, {}
