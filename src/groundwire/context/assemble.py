"""Token-bounded knowledge context: opening, entries in relevance order, citations.

Each entry is rendered in full when it fits the remaining budget, else as title,
kind and summary when that fits; otherwise assembly stops and the rest are dropped.
The whole block, wrapper included, stays within ``max_tokens`` as the configured
estimator counts them.
"""

from __future__ import annotations

from collections.abc import Sequence

from groundwire.config import ContextConfig
from groundwire.i18n import DEFAULT_LOCALE, message
from groundwire.model import Citation, ContextResult, KnowledgeEntry

__all__ = ["OPENING", "assemble_context", "render_entry"]

TAG = "knowledge_context"
#: The block's opening in English; ``ContextConfig.locale`` picks the catalog's translation.
OPENING = message("context.opening", DEFAULT_LOCALE)
CITE_HINT = message("context.cite_hint", DEFAULT_LOCALE, example="{example}")


def _neutralize(text: str) -> str:
    """Keep entry text from closing or reopening the wrapper tag."""
    return text.replace(f"</{TAG}", f"&lt;/{TAG}").replace(f"<{TAG}", f"&lt;{TAG}")


def render_entry(
    entry: KnowledgeEntry, *, full: bool, citations: bool, locale: str = DEFAULT_LOCALE
) -> str:
    """One entry as it appears in context: heading line, summary and (if full) body."""
    heading = f"## {entry.title} ({entry.kind})"
    if citations:
        heading += f" {entry.citation.tag}"
    lines = [heading, entry.summary]
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
