"""Finding structure in text: Markdown headings, LaTeX sections, JSON members, code definitions.

Each finder returns positions as code-point offsets into the text it was given. The
loaders use them to record sections; the chunkers use them when no loader did.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from collections.abc import Sequence
from itertools import pairwise
from typing import NamedTuple

from groundwire.config import JSON_SPLIT_DEPTH
from groundwire.model import Section

__all__ = [
    "LATEX_LEVELS",
    "LATEX_SECTION",
    "Unit",
    "clean_heading",
    "code_units",
    "heading_trails",
    "json_units",
    "latex_sections",
    "markdown_sections",
]


class Unit(NamedTuple):
    """A contiguous range of text that should stay whole if it fits in one chunk.

    ``symbol_starts`` (parallel to ``symbols``, optional) says where each name is defined,
    so a unit split into several chunks gives each chunk the names it defines.
    """

    start: int
    end: int
    headings: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    symbol_starts: tuple[int, ...] = ()


# --- headings -------------------------------------------------------------------------------
# Lines that may open or close a fence, be an ATX heading, or underline a setext heading.
_MD_CANDIDATE = re.compile(r"^ {0,3}(?:#{1,6}(?=[ \t]|$)|`{3,}|~{3,}|=+[ \t]*$|-{2,}[ \t]*$)", re.M)
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_EMPHASIS = re.compile(r"(\*\*|__|`)")
_NOT_SETEXT_TEXT = re.compile(r"^(?: {4}|\s*(?:[>#|]|[-*+]\s|\d+[.)]\s|$))")


def clean_heading(title: str) -> str:
    """A heading as plain words: links to their text, code and strong marks dropped."""
    title = _MD_LINK.sub(r"\1", title)
    return " ".join(_MD_EMPHASIS.sub("", title).split())


def markdown_sections(text: str) -> list[Section]:
    """ATX (``## Title``) and setext headings outside fenced code blocks, in order."""
    sections: list[Section] = []
    fence = ""
    for match in _MD_CANDIDATE.finditer(text):
        start = match.start()
        end = text.find("\n", start)
        line = text[start : end if end >= 0 else len(text)].strip()
        if fence:
            if line and line.startswith(fence) and line.strip(fence[0]) == "":
                fence = ""
            continue
        first = line[0]
        if first in "`~":
            fence = line[: len(line) - len(line.lstrip(first))]
        elif first == "#":
            hashes = len(line) - len(line.lstrip("#"))
            title = clean_heading(line[hashes:].strip().rstrip("#"))
            if title:
                sections.append(Section(start, hashes, title))
        elif start > 0:
            prev_start = text.rfind("\n", 0, start - 1) + 1
            previous = text[prev_start : start - 1]
            taken = sections and sections[-1].start == prev_start
            if not taken and not _NOT_SETEXT_TEXT.match(previous):
                title = clean_heading(previous)
                if title:
                    sections.append(Section(prev_start, 1 if first == "=" else 2, title))
    return sections


#: Sectioning commands of LaTeX and their depth (smaller is higher).
LATEX_LEVELS = {
    "part": 1,
    "chapter": 2,
    "section": 3,
    "subsection": 4,
    "subsubsection": 5,
    "paragraph": 6,
    "subparagraph": 7,
}
#: ``\section*[short]{Title}``: group 1 the command, group 2 the title (one brace level).
LATEX_SECTION = re.compile(
    r"\\(part|chapter|section|subsection|subsubsection|paragraph|subparagraph)\*?"
    r"\s*(?:\[[^\]]*\])?\s*\{((?:[^{}]|\{[^{}]*\})*)\}"
)
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+\*?|[{}]")


def latex_sections(text: str) -> list[Section]:
    """Sectioning commands of raw LaTeX, their titles stripped of commands and braces."""
    return [
        Section(
            m.start(),
            LATEX_LEVELS[m.group(1)],
            " ".join(_LATEX_COMMAND.sub("", m.group(2)).split()),
        )
        for m in LATEX_SECTION.finditer(text)
    ]


def heading_trails(sections: Sequence[Section]) -> list[tuple[str, ...]]:
    """The heading trail at each section: its title under every higher open heading."""
    stack: list[tuple[int, str]] = []
    trails: list[tuple[str, ...]] = []
    for section in sections:
        while stack and stack[-1][0] >= section.level:
            stack.pop()
        stack.append((section.level, section.title))
        trails.append(tuple(title for _, title in stack))
    return trails


# --- JSON -----------------------------------------------------------------------------------
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],]')
_JSON_KEY = re.compile(r'\s*"([^"\\]*(?:\\.[^"\\]*)*)"\s*:')


def _json_key(text: str, pos: int) -> str | None:
    match = _JSON_KEY.match(text, pos)
    if match is None:
        return None
    try:
        key = json.loads(f'"{match.group(1)}"')
    except ValueError:
        return match.group(1)
    return key if isinstance(key, str) else None


def json_units(
    text: str, start: int = 0, end: int | None = None, trail: tuple[str, ...] = ()
) -> list[Unit]:
    """The members of the outermost object (or elements of the array) in ``text[start:end]``.

    Cuts fall just after the commas between members, so the units tile the range.
    Each unit's heading trail ends with its key (``[n]`` for array elements).
    """
    end = len(text) if end is None else end
    depth = 0
    opener = ""
    open_at = -1
    cuts: list[int] = []
    for match in _JSON_TOKEN.finditer(text, start, end):
        char = text[match.start()]
        if char in "{[":
            depth += 1
            if depth == 1 and not opener:
                opener, open_at = char, match.start()
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 1:
            cuts.append(match.end())
    if not opener or depth != 0:
        return [Unit(start, end, trail)]
    bounds = [start, *cuts, end]
    units = []
    for n, (lo, hi) in enumerate(pairwise(bounds)):
        if opener == "{":
            key = _json_key(text, open_at + 1 if n == 0 else lo)
            units.append(Unit(lo, hi, (*trail, key) if key else trail, (key,) if key else ()))
        else:
            units.append(Unit(lo, hi, (*trail, f"[{n}]")))
    return units


def json_split(
    text: str, start: int, end: int, size: int, trail: tuple[str, ...] = ()
) -> list[Unit]:
    """JSON members, and members of members too long for ``size``, down to a few levels."""
    units = json_units(text, start, end, trail)
    if len(units) == 1 or len(trail) >= JSON_SPLIT_DEPTH:
        return units
    out: list[Unit] = []
    for unit in units:
        if unit.end - unit.start > size:
            inner = json_split(text, unit.start, unit.end, size, unit.headings)
            out.extend(inner if len(inner) > 1 else [unit])
        else:
            out.append(unit)
    return out


# --- code -----------------------------------------------------------------------------------
# A top-level definition in C-like, Rust, Go, Ruby, PHP, Kotlin, Swift... (column 0 only).
_DEFINITION = re.compile(
    r"^(?:(?:export|default|pub(?:\([^)]*\))?|public|private|protected|internal|static|abstract"
    r"|final|async|unsafe|inline|override|open|sealed|data|extern(?:\s+\"[^\"]*\")?)\s+)*"
    r"(?:function\*?|class|interface|struct|enum|trait|impl(?:<[^>]*>)?|fn|func|def|module"
    r"|namespace|type|object|record|protocol|extension|const|let|var)\s+"
    r"(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)",
    re.M,
)
# Comment, doc-comment, decorator and attribute lines that belong to the definition below.
_LEADING = re.compile(r"^[ \t]*(?:#|//|/\*|\*|@|--)")


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer("\n", text))]


def _attach_leading(text: str, starts: list[int], line: int) -> int:
    """Move a definition's first line up over the comments and decorators right above it."""
    while line > 0:
        prev = text[starts[line - 1] : starts[line]]
        if not prev.strip() or not _LEADING.match(prev):
            break
        line -= 1
    return line


class _Definition(NamedTuple):
    """A top-level definition: where it starts (comments and decorators included), the
    names it defines with where each is defined, and its heading (``class Client``)."""

    start: int
    names: tuple[str, ...]
    name_starts: tuple[int, ...]
    heading: str


def _python_definitions(text: str) -> list[_Definition] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    starts = _line_starts(text)
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        members = [node]
        if isinstance(node, ast.ClassDef):  # methods too, but not dunders like __init__
            members += [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and not (item.name.startswith("__") and item.name.endswith("__"))
            ]
        keyword = {"ClassDef": "class", "AsyncFunctionDef": "async def"}.get(
            type(node).__name__, "def"
        )
        found.append(
            _Definition(
                starts[_attach_leading(text, starts, first)],
                tuple(member.name for member in members),
                tuple(starts[member.lineno - 1] for member in members),
                f"{keyword} {node.name}",
            )
        )
    return found


def _pattern_definitions(text: str) -> list[_Definition]:
    starts = _line_starts(text)
    found = []
    for match in _DEFINITION.finditer(text):
        line = bisect.bisect_right(starts, match.start()) - 1
        heading = " ".join(match.group(0).split())
        start = starts[_attach_leading(text, starts, line)]
        found.append(_Definition(start, (match.group(1),), (match.start(),), heading))
    return found


def code_units(text: str, language: str) -> list[Unit]:
    """Top-level definitions, each with the code up to the next one; symbols are their names
    and the heading is the definition (``def verify``, ``class Client``).

    Python is parsed with :mod:`ast` (classes also list their methods); other languages
    use a column-0 definition pattern. Text before the first definition is its own unit.
    """
    found = _python_definitions(text) if language == "python" else None
    if found is None:
        found = _pattern_definitions(text)
    bounds: list[_Definition] = [_Definition(0, (), (), "")]
    for definition in found:
        if definition.start == bounds[-1].start and not bounds[-1].names:
            bounds[-1] = definition
        elif definition.start > bounds[-1].start:
            bounds.append(definition)
    units: list[Unit] = []
    for n, definition in enumerate(bounds):
        end = bounds[n + 1].start if n + 1 < len(bounds) else len(text)
        if end > definition.start:
            heading = (definition.heading,) if definition.heading else ()
            units.append(
                Unit(definition.start, end, heading, definition.names, definition.name_starts)
            )
    return units
