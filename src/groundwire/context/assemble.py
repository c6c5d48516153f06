"""Token-bounded knowledge context: opening, entries in relevance order, citations.

Each entry is rendered in full when it fits the remaining budget, else as title,
kind and summary when that fits; otherwise assembly stops and the rest are dropped.
The whole block, wrapper included, stays within ``max_tokens`` as the configured
estimator counts them.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

from groundwire.config import ContextConfig
from groundwire.i18n import DEFAULT_LOCALE, message
from groundwire.model import Citation, ContextResult, KnowledgeEntry

__all__ = ["OPENING", "assemble_context", "render_entry"]

TAG = "knowledge_context"
#: The block's opening in English; ``ContextConfig.locale`` picks the catalog's translation.
OPENING = message("context.opening", DEFAULT_LOCALE)
CITE_HINT = message("context.cite_hint", DEFAULT_LOCALE, example="{example}")


# "<" and "/" and the characters that look like them (Unicode TR39 confusables).
_LESS_THAN = "<\uff1c\ufe64\u2039\u276e\u02c2\u1438\u16b2\u3008\u27e8\u2329\U0001d236"
_SLASHES = frozenset("/\\\uff0f\u2044\u2215\u29f8\u2571\u3033\u30ce\u4e3f\u2cc6\u1735")
_OPENER = re.compile(f"[{_LESS_THAN}]")
# Letters of other scripts that look like the Latin letters of the tag name.
_LOOKALIKES = {
    **dict.fromkeys("\u0441\u03f2\u1d04\u2ca5", "c"),
    **dict.fromkeys("\u0501", "d"),
    **dict.fromkeys("\u0435\u04bd\u212e", "e"),
    **dict.fromkeys("\u0261\u0581", "g"),
    **dict.fromkeys("\u043a\u03ba\u0138", "k"),
    **dict.fromkeys("\u04cf\u01c01|", "l"),
    **dict.fromkeys("\u0578", "n"),
    **dict.fromkeys("\u043e\u03bf\u0585\u09e6\u1d0f0", "o"),
    **dict.fromkeys("\u0442\u03c4", "t"),
    **dict.fromkeys("\u051d\u0461\u03c9", "w"),
    **dict.fromkeys("\u0445\u03c7\u00d7", "x"),
}
_NAME = re.sub("[^a-z]", "", TAG)


@functools.lru_cache(maxsize=4096)
def _skeleton(char: str) -> str | None:
    """The Latin letters a character reads as, "" for a separator, None for anything else.

    Separators are what may sit inside or before the tag name without changing how a
    reader takes it: blanks, "_" and "-", invisible format characters, combining marks.
    """
    folded = unicodedata.normalize("NFKC", char).casefold()
    letters = "".join(_LOOKALIKES.get(c, c) for c in folded)
    if letters and all("a" <= c <= "z" for c in letters):
        return letters
    if char in _SLASHES or char.isspace() or char in "_-" or folded in ("_", "-", ""):
        return ""
    if unicodedata.category(char) in ("Cf", "Mn", "Me", "Zs"):
        return ""
    return None


def _names_wrapper(text: str, at: int) -> bool:
    """Whether ``text[at:]`` spells the tag name, in any case, spacing or look-alike form.

    Reads at most the name's letters and the separators around them, stopping at the
    first other character, so the scans of all openers together stay linear.
    """
    letters = ""
    for index in range(at, len(text)):
        piece = _skeleton(text[index])
        if piece is None:
            break
        letters += piece
        if len(letters) >= len(_NAME):
            break
    return letters.startswith(_NAME)


def _neutralize(text: str) -> str:
    """Keep entry text from closing or reopening the wrapper tag, in any disguise.

    Every "<" (or look-alike) that begins the tag name — ``</knowledge_context``,
    ``< /Knowledge-Context``, full-width, zero-width-split or other-script forms —
    becomes ``&lt;``; other text is left exactly as written.
    """
    if _OPENER.search(text) is None:
        return text
    parts: list[str] = []
    last = 0
    for match in _OPENER.finditer(text):
        if _names_wrapper(text, match.end()):
            parts += [text[last : match.start()], "&lt;"]
            last = match.end()
    return "".join([*parts, text[last:]])


def _one_line(text: str) -> str:
    """A heading or summary field on one line: whitespace and control characters collapsed."""
    return " ".join("".join(" " if unicodedata.category(c) == "Cc" else c for c in text).split())


def render_entry(
    entry: KnowledgeEntry, *, full: bool, citations: bool, locale: str = DEFAULT_LOCALE
) -> str:
    """One entry as it appears in context: heading line, summary and (if full) body.

    The heading and summary are always one line each (validation already refuses line
    breaks there; this holds for entries built without validation too), so no field can
    forge another entry's heading or citation tag.
    """
    heading = f"## {_one_line(entry.title)} ({_one_line(entry.kind)})"
    if citations:
        heading += f" {_one_line(entry.citation.tag)}"
    lines = [heading, _one_line(entry.summary)]
    if full and entry.body:
        lines += ["", entry.body]
    elif not full and entry.body:
        lines.append(message("context.summary_only", locale))
    return _neutralize("\n".join(lines))


def _wrap(opening: str, parts: Sequence[str]) -> str:
    return "\n\n".join([f"<{TAG}>\n{opening}", *parts]) + f"\n</{TAG}>"


def assemble_context(
    primary: Sequence[KnowledgeEntry],
    expanded: Sequence[KnowledgeEntry],
    config: ContextConfig,
) -> ContextResult:
    """Fit primary then expanded entries into ``config.max_tokens`` (see module docstring)."""
    primary_ids = {entry.id for entry in primary}
    entries = [*primary, *(entry for entry in expanded if entry.id not in primary_ids)]
    opening = message("context.opening", config.locale)
    if config.include_citations and entries:
        example = _neutralize(entries[0].citation.tag)
        opening += " " + message("context.cite_hint", config.locale, example=example)
    estimate = config.token_estimator
    parts: list[str] = []
    included: list[str] = []
    summary_ids: list[str] = []
    cited: list[Citation] = []
    dropped: list[str] = []
    tokens = 0
    for n, entry in enumerate(entries):
        placed = False
        for full in (True, False):
            candidate = render_entry(
                entry, full=full, citations=config.include_citations, locale=config.locale
            )
            cost = int(estimate(_wrap(opening, [*parts, candidate])))
            if cost <= config.max_tokens:
                parts.append(candidate)
                included.append(entry.id)
                if not full:
                    summary_ids.append(entry.id)
                cited.append(entry.citation)
                tokens, placed = cost, True
                break
        if not placed:
            dropped = [e.id for e in entries[n:]]
            break
    if not parts:
        return ContextResult("", (), (), (), tuple(dropped), 0, truncated=bool(entries))
    text = _wrap(opening, parts)
    return ContextResult(
        text=text,
        citations=tuple(cited) if config.include_citations else (),
        included_ids=tuple(included),
        summary_ids=tuple(summary_ids),
        dropped_ids=tuple(dropped),
        tokens=tokens,
        truncated=bool(summary_ids or dropped),
    )
