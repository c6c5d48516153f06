"""The evidence block: excerpts of documents as quoted, untrusted data inside the prompt.

The block is one labelled section::

    <untrusted_evidence>
    <opening: what the excerpts are, that they are data not instructions, how to cite>
    question: "<the question as a JSON string>"
    {"id": "guide.md#3", "source": "guide.md", "path": "docs/guide.md", "heading": ..., ...}
    ...
    </untrusted_evidence>

Every excerpt is one line holding one JSON object (``json.dumps``) with the keys
``id``, ``source``, ``path``, ``heading``, ``span`` (``[start, end]`` code points into
the source's extracted text), ``version`` and ``text``. JSON escapes quotes, backslashes,
newlines and control characters; ``<``, U+0085, U+2028 and U+2029 are written as ``\\u``
escapes too, so no excerpt can end a line early (for ``str.splitlines`` either), forge
another excerpt or open or close a tag. Parsing a line with
:func:`json.loads` gives back the exact strings. Quoting reduces delimiter confusion; it
does not make a model immune to instructions written inside documents.

:func:`pack_evidence` budgets the block: it keeps the longest prefix of the ordered
excerpts holding at most ``limit`` excerpts whose whole rendered block the
``token_estimator`` counts at no more than ``max_total_tokens``. When that prefix holds
fewer than ``min_sources`` distinct sources (no excerpt at all, say) the budget is
exhausted: the packing carries the reason ``budget-exhausted`` and no excerpts or block.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from groundwire.config import EvidenceSettings
from groundwire.errors import ConfigError
from groundwire.i18n import DEFAULT_LOCALE, message
from groundwire.model import Excerpt

__all__ = [
    "EVIDENCE_OPENING",
    "EVIDENCE_TAG",
    "BudgetReason",
    "PackedEvidence",
    "excerpt_json",
    "pack_evidence",
    "render_evidence",
]

#: Why packed evidence is insufficient: the budget left too few sources.
BudgetReason = Literal["budget-exhausted"]

EVIDENCE_TAG = "untrusted_evidence"
#: The block's opening in English; ``EvidenceSettings.locale`` picks the translation.
EVIDENCE_OPENING = message("evidence.opening", DEFAULT_LOCALE)
CITE_HINT = message("evidence.cite_hint", DEFAULT_LOCALE, example="{example}")
# Besides what JSON escapes: "<" (no tag can open or close) and the characters other than
# "\n" that str.splitlines() breaks on (no excerpt can spill onto a line of its own).
_ESCAPES = str.maketrans(
    {"<": "\\u003c", "\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _quoted(value: Any) -> str:
    """JSON on one line that no tag or line break inside the value can escape from."""
    return json.dumps(value, ensure_ascii=False).translate(_ESCAPES)


def excerpt_json(excerpt: Excerpt) -> str:
    """One excerpt as the single JSON line it has in the block."""
    return _quoted(
        {
            "id": excerpt.id,
            "source": excerpt.source_id,
            "path": excerpt.path,
            "heading": excerpt.heading,
            "span": [excerpt.start, excerpt.end],
            "version": excerpt.version,
            "text": excerpt.text,
        }
    )


def render_evidence(
    question: str, excerpts: Sequence[Excerpt], locale: str = DEFAULT_LOCALE
) -> str:
    """The evidence block for ``question`` holding ``excerpts`` in order (module docstring);
    its own words (opening, citation hint) in ``locale``."""
    opening = message("evidence.opening", locale)
    if excerpts:
        example = _quoted(excerpts[0].citation.tag)[1:-1]
        opening += " " + message("evidence.cite_hint", locale, example=example)
    lines = [
        f"<{EVIDENCE_TAG}>",
        opening,
        f"question: {_quoted(question)}",
        *(excerpt_json(excerpt) for excerpt in excerpts),
        f"</{EVIDENCE_TAG}>",
    ]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class PackedEvidence:
    """The excerpts that fit the budget, their rendered block and its estimated tokens.

    ``truncated`` says offered excerpts were left out by ``limit`` or the token budget.
    With ``reason`` set (``budget-exhausted``) ``excerpts`` is empty, ``text`` is ``""``
    and ``tokens`` is 0.
    """

    reason: BudgetReason | None
    excerpts: tuple[Excerpt, ...]
    text: str
    tokens: int
    truncated: bool


def _count(estimator: Callable[[str], int], text: str) -> int:
    value = estimator(text)
    try:
        tokens = operator.index(value)
    except TypeError:
        tokens = -1
    if isinstance(value, bool) or tokens < 0:
        raise ConfigError(
            f"token_estimator returned {value!r}; it must return an integer >= 0 for any text"
        )
    return tokens


def pack_evidence(
    question: str, excerpts: Sequence[Excerpt], settings: EvidenceSettings
) -> PackedEvidence:
    """The longest prefix of ``excerpts`` whose block fits ``settings`` (module docstring).

    Uses ``limit``, ``max_total_tokens``, ``min_sources`` and ``token_estimator`` of
    ``settings``; the estimator counts the whole rendered block, wrapper and question
    included. Raises :class:`ConfigError` when the estimator returns anything but an
    integer >= 0.
    """
    estimate = settings.token_estimator
    packed: list[Excerpt] = []
    text, used = "", 0
    for excerpt in excerpts[: settings.limit]:
        candidate = render_evidence(question, [*packed, excerpt], settings.locale)
        cost = _count(estimate, candidate)
        if cost > settings.max_total_tokens:
            break
        packed.append(excerpt)
        text, used = candidate, cost
    cut_short = len(packed) < len(excerpts)
    if len({excerpt.source_id for excerpt in packed}) < settings.min_sources:
        return PackedEvidence("budget-exhausted", (), "", 0, cut_short)
    return PackedEvidence(None, tuple(packed), text, used, cut_short)
