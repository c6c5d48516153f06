"""Post-fusion shaping of recall candidates: evidence shaping, dampening, freshness, decay.

Each stage multiplies (or caps) a candidate's score and writes its factor into the
candidate's ``stages``, so ``explain`` shows exactly what moved it. Channel scores and
factors are kept as computed; recall rounds them (:func:`shown`) for the memories it
returns only. Stages run in a
fixed order — facet coverage, gravity, hub, resolution, freshness, currentness,
importance — then traversal-only candidates are capped below every directly anchored
one and the list is sorted by score, ties on id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from groundwire.config import MemoryRecallConfig

__all__ = [
    "Candidate",
    "apply_currentness",
    "apply_facets",
    "apply_freshness",
    "apply_gravity",
    "apply_hub",
    "apply_importance",
    "apply_resolution",
    "cap_traversal_only",
    "facets_of",
    "has_freshness_words",
    "note_currentness",
    "percentile",
    "shown",
]

_DAY: Final = 86_400.0
#: Explicit freshness words; bare "now" is deliberately not one (it is mostly idiom).
_FRESHNESS: Final = re.compile(
    r"\b(?:current(?:ly)?|latest|recent(?:ly)?|today|this\s+week|this\s+month)\b", re.IGNORECASE
)
_ISO_DATE: Final = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
#: Month names and abbreviations as the store's analyzer writes them (English stems).
MONTH_TERMS: Final = frozenset(
    [
        "januari",
        "februari",
        "march",
        "april",
        "may",
        "june",
        "juli",
        "august",
        "septemb",
        "octob",
        "novemb",
        "decemb",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)
# Where a multi-part question splits into facets: conjunctions and clause punctuation.
_FACET_SPLIT: Final = re.compile(r"\band\b|\bor\b|\bas well as\b|\bboth\b|[,;?]|\balso\b", re.I)


@dataclass(slots=True, init=False)
class Candidate:
    """One memory on its way through recall (internal; becomes a RecalledMemory)."""

    id: str
    content: str
    term_text: str  # the analyzed content, terms joined by spaces
    type: str
    importance: float
    pinned: bool
    created_at: float
    accessed_at: float
    score: float
    anchored: bool  # matched by content, hint or vector (not only by traversal)
    channels: dict[str, float]
    stages: dict[str, float]
    entity_mentions: list[int]  # of its entities (recall: the fewest)
    superseded: bool  # has a superseded attribute (the currentness stage)
    superseded_by: list[str]  # what replaced it (its currentness note, when returned)
    note: str | None
    seq: int  # its row's rowid
    _term_set: frozenset[str] | None

    def __init__(
        self,
        id: str,
        content: str,
        term_text: str,
        type: str,
        importance: float,
        pinned: bool,
        created_at: float,
        accessed_at: float,
        seq: int = 0,
        score: float = 0.0,
    ) -> None:
        # Written out, positional (no dataclass defaults, factories or keyword arguments:
        # each costs a call): recall builds ~50 per call.
        self.id = id
        self.content = content
        self.term_text = term_text
        self.type = type
        self.importance = importance
        self.pinned = pinned
        self.created_at = created_at
        self.accessed_at = accessed_at
        self.score = score
        self.anchored = False
        self.channels = {}
        self.stages = {}
        self.entity_mentions = []
        self.superseded = False
        self.superseded_by = []
        self.note = None
        self.seq = seq
        self._term_set = None

    @property
    def terms(self) -> frozenset[str]:
        """The analyzed content's terms (split on first use: most candidates never need it)."""
        if self._term_set is None:
            self._term_set = frozenset(self.term_text.split())
        return self._term_set

    def mentions_any(self, terms: frozenset[str]) -> bool:
        """Whether the content has one of ``terms`` (without building the term set)."""
        if self._term_set is not None:
            return not self._term_set.isdisjoint(terms)
        return not terms.isdisjoint(self.term_text.split())

    def scale(self, stage: str, factor: float) -> None:
        self.score *= factor
        self.stages[stage] = factor


def shown(value: float) -> float:
    """A channel score or stage factor as ``explain`` shows it: ``round(value, 6)``.

    ``round`` converts to decimal digits and back (~3,400 instructions a call). Scaling
    by 10**6 and rounding to an integer gives the same float unless the scaled value is
    within 1e-6 of a half (where its own rounding error could decide the direction):
    the scaled product is within 6e-8 of the exact one below 10**9, the integer and
    10**6 are exact, and the division is correctly rounded. Near a half, and for
    negative, tiny, huge or non-finite values, ``round`` itself decides.
    """
    scaled = value * 1e6
    if 1e-3 < scaled < 1e9:  # positive: no signed zero to keep
        fraction = scaled % 1.0  # exact, as is ``scaled - fraction``
        if abs(fraction - 0.5) > 1e-6:
            return (scaled - fraction + (fraction > 0.5)) / 1e6
    return round(value, 6)


def _shows_positive(value: float | None) -> bool:
    return value is not None and shown(value) > 0


def has_freshness_words(query: str) -> bool:
    """Whether the query asks for recent facts in so many words."""
    return _FRESHNESS.search(query) is not None


def facets_of(query_terms_by_part: Sequence[Sequence[str]]) -> list[frozenset[str]]:
    """The non-empty term sets of a query's parts (see :func:`split_facets`)."""
    return [frozenset(part) for part in query_terms_by_part if part]


def split_facets(query: str) -> list[str]:
    """The parts of a multi-part query, split at conjunctions and clause punctuation."""
    return [part for part in _FACET_SPLIT.split(query) if part.strip()]


def _near(
    terms: frozenset[str], size: int, other: frozenset[str], other_size: int, t: float
) -> bool:
    """Whether the Jaccard similarity of two term sets (with their sizes) reaches ``t``."""
    small, large = (size, other_size) if size <= other_size else (other_size, size)
    if not large or small < t * large:  # |a & b| / |a | b| <= small / large
        return False
    common = len(terms & other)
    return common >= t * (size + other_size - common)  # |a | b| = |a| + |b| - |a & b|


class _NearDuplicates:
    """Kept term sets, and whether a new one is near-identical (Jaccard >= ``t``) to one.

    Prefix filtering (as in set-similarity joins) skips the pairs that cannot reach
    ``t``: a set of ``n`` terms shares at least ``o = ceil(t * n)`` terms with any set
    that close to it, so two such sets share one of their first ``n - o + 1`` terms in
    any fixed order. Only kept sets sharing a prefix term are compared; the answer is
    the same as comparing every pair.
    """

    def __init__(self, t: float) -> None:
        self.t = t
        self.kept: list[tuple[frozenset[str], int]] = []
        self.by_term: dict[str, list[int]] = {}

    def _prefix(self, terms: frozenset[str]) -> list[str] | None:
        """The prefix to index and probe (None: too short to filter, compare every pair)."""
        overlap = math.ceil(self.t * len(terms) - 1e-9)  # a margin for float rounding
        return None if overlap <= 0 else sorted(terms)[: len(terms) - overlap + 1]

    def _probe(self, terms: frozenset[str], prefix: list[str] | None) -> bool:
        size, t, kept = len(terms), self.t, self.kept
        if prefix is None:
            return any(_near(terms, size, other, n, t) for other, n in kept)
        seen: set[int] = set()
        for term in prefix:
            for index in self.by_term.get(term, ()):
                if index not in seen:
                    seen.add(index)
                    other, n = kept[index]
                    if _near(terms, size, other, n, t):
                        return True
        return False

    def _add(self, terms: frozenset[str], prefix: list[str] | None) -> None:
        index = len(self.kept)
        self.kept.append((terms, len(terms)))
        for term in sorted(terms) if prefix is None else prefix:
            self.by_term.setdefault(term, []).append(index)

    def near(self, terms: frozenset[str]) -> bool:
        return self._probe(terms, self._prefix(terms))

    def add(self, terms: frozenset[str]) -> None:
        self._add(terms, self._prefix(terms))

    def near_or_add(self, terms: frozenset[str]) -> bool:
        """:meth:`near`, and :meth:`add` when not near (the prefix computed once)."""
        prefix = self._prefix(terms)
        if self._probe(terms, prefix):
            return True
        self._add(terms, prefix)
        return False


def _shared(sets: Sequence[frozenset[str]]) -> set[str]:
    """The terms found in at least two of ``sets``."""
    seen: set[str] = set()
    shared: set[str] = set()
    for terms in sets:
        shared |= seen & terms
        seen |= terms
    return shared


def apply_facets(
    ranked: list[Candidate], facets: Sequence[frozenset[str]], cfg: MemoryRecallConfig
) -> None:
    """Prefer top candidates covering new facets of the query over near-duplicates.

    Greedy over the top ``facet_window`` (best first): a candidate covering a facet no
    better one covered gets ``1 + facet_bonus`` (only for queries of 2+ facets); one
    whose terms are near-identical (Jaccard >= threshold) to a better one's gets
    ``near_duplicate_penalty``.
    """
    window = ranked[: cfg.facet_window]
    sets = [candidate.terms for candidate in window]
    t = cfg.near_duplicate_jaccard
    shared = _shared(sets)
    covered: set[int] = set()
    kept = _NearDuplicates(t)
    multi = len(facets) >= 2
    for candidate, terms in zip(window, sets, strict=True):
        factor = 1.0
        # A set with fewer than t * |set| terms found in any other set of the window is
        # near no other (their Jaccard is below t), and no other is near it: it needs no
        # comparison, and leaving it out of ``kept`` changes no later answer.
        if len(terms & shared) >= t * len(terms) and kept.near_or_add(terms):
            factor *= cfg.near_duplicate_penalty
        if multi:
            new = {i for i, facet in enumerate(facets) if facet & terms} - covered
            if new and factor == 1.0:
                factor *= 1.0 + cfg.facet_bonus
                covered |= new
        if factor != 1.0:
            candidate.scale("facets", factor)


def apply_gravity(
    candidates: Sequence[Candidate], query_terms: frozenset[str], cfg: MemoryRecallConfig
) -> None:
    """Halve semantic-path results above the threshold that share no word with the query.

    Channels count as their shown (rounded) scores: a content score that shows as 0 is no
    lexical match. The graph channel is the configured boost, shown as it is.
    """
    for c in candidates:
        if c.score <= cfg.gravity_threshold:
            continue
        channels = c.channels
        semantic = channels.get("graph", 0.0) > 0 or _shows_positive(channels.get("vector"))
        if not semantic:
            continue
        lexical = _shows_positive(channels.get("content")) or _shows_positive(channels.get("hint"))
        if not lexical and not c.mentions_any(query_terms):
            c.scale("gravity", cfg.gravity_penalty)


def percentile(values: Sequence[int], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = max(0, math.ceil(fraction * len(ordered)) - 1)
    return float(ordered[index])


def apply_hub(candidates: Sequence[Candidate], threshold: float, cfg: MemoryRecallConfig) -> None:
    """Dampen memories whose linked entities are all hubs (mentions above the threshold)."""
    for c in candidates:
        if c.entity_mentions and all(count > threshold for count in c.entity_mentions):
            c.scale("hub", cfg.hub_penalty)


def apply_resolution(candidates: Sequence[Candidate], cfg: MemoryRecallConfig) -> None:
    """Lift constraints and decisions; dated content half as much; short content never."""
    for c in candidates:
        if len(c.content) < cfg.resolution_min_chars:
            continue
        if c.type in ("constraint", "decision"):
            c.scale("resolution", cfg.resolution_boost)
        elif c.mentions_any(MONTH_TERMS) or ("-" in c.content and _ISO_DATE.search(c.content)):
            c.scale("resolution", 1.0 + (cfg.resolution_boost - 1.0) * 0.5)


def apply_freshness(candidates: Sequence[Candidate], now: float, cfg: MemoryRecallConfig) -> None:
    """A bounded recency lift: ``1 + boost * 0.5 ** (age_days / half_life)``."""
    for c in candidates:
        age = max(0.0, now - c.created_at) / _DAY
        c.scale(
            "freshness", 1.0 + cfg.freshness_boost * 0.5 ** (age / cfg.freshness_half_life_days)
        )


def apply_currentness(candidates: Sequence[Candidate], cfg: MemoryRecallConfig) -> None:
    """Down-weight memories with superseded attributes (:func:`note_currentness` then
    names the replacements of the ones returned)."""
    for c in candidates:
        if c.superseded:
            c.scale("currentness", cfg.superseded_penalty)


def note_currentness(returned: Sequence[Candidate]) -> None:
    """The note of each returned memory with superseded attributes: what replaced them."""
    for c in returned:
        if c.superseded_by:
            c.note = "[currentness] superseded: " + "; ".join(c.superseded_by)


def apply_importance(candidates: Sequence[Candidate], now: float, cfg: MemoryRecallConfig) -> None:
    """Importance decayed by days since last access (pinned: none), modulating the score."""
    for c in candidates:
        days = max(0.0, now - c.accessed_at) / _DAY
        effective = c.importance if c.pinned else c.importance * cfg.importance_decay**days
        c.stages["importance_effective"] = effective
        c.scale("importance", 1.0 - cfg.importance_weight + cfg.importance_weight * effective)


def cap_traversal_only(candidates: Sequence[Candidate], cfg: MemoryRecallConfig) -> None:
    """Keep every traversal-only candidate below the lowest directly anchored one."""
    anchored = [c.score for c in candidates if c.anchored]
    if not anchored:
        return
    cap = min(anchored) * cfg.traversal_only_factor
    for c in candidates:
        if not c.anchored and c.score > cap:
            c.scale("traversal_cap", cap / c.score if c.score else 0.0)
