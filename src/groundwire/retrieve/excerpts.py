"""From ranked chunks to excerpts: merge per source, cut to a window, diversify by source.

* **Merge** (:func:`merge_pieces`, per source): chunks with identical text keep the
  best-scoring one (ties: the earliest); chunks whose spans overlap become one piece
  covering both, with every merged chunk kept as a part.
* **Cut** (:func:`cut_excerpt`): a piece longer than ``size`` code points is cut to a
  window around its best-matching region: the run of query-term words of that width
  covering the most distinct terms, then the most words (earliest on ties), centred, then
  narrowed to whole words. The span is adjusted, so ``source_text[start:end] == text``
  still holds. The excerpt cites (and scores as) the best chunk it still covers, and
  lists every chunk it covers.
* **Diversify** (:func:`round_robin`): sources are ordered by their best excerpt's score
  (descending, then source id); round *r* takes each source's *r*-th best excerpt (score
  descending, then start) in that order.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from groundwire.errors import KnowledgeIndexError
from groundwire.model import EvidenceSource, Excerpt, KnowledgeEntry

__all__ = [
    "Hits",
    "Piece",
    "cut_excerpt",
    "merge_pieces",
    "round_robin",
    "source_id_of",
    "term_hits",
    "to_piece",
]

_WORD = re.compile(r"\w+")
#: Words of a text holding query terms: (start, end, terms matched), in text order.
Hits = list[tuple[int, int, frozenset[str]]]


class _Part(NamedTuple):
    """One candidate chunk inside a piece."""

    id: str
    start: int
    end: int
    score: float
    headings: tuple[str, ...]


class Piece(NamedTuple):
    """A candidate chunk, or several overlapping ones merged, of one source."""

    start: int
    end: int
    text: str
    digest: str
    parts: tuple[_Part, ...]  # in text order

    def best(self, start: int, end: int) -> tuple[_Part, tuple[str, ...]]:
        """The best-scoring part overlapping ``[start, end)`` (earliest on ties), and all ids."""
        covered = [p for p in self.parts if p.start < end and p.end > start] or list(self.parts)
        return min(covered, key=lambda p: (-p.score, p.start)), tuple(p.id for p in covered)


def source_id_of(entry: KnowledgeEntry) -> str | None:
    """The chunk's ``metadata["source_id"]``, or ``None`` for an entry that is no chunk."""
    value = entry.metadata.get("source_id")
    return value if isinstance(value, str) and value else None


def _span(entry: KnowledgeEntry) -> tuple[int, int]:
    """A chunk's code-point span in its source; it must match the chunk's text."""
    start, end = entry.metadata.get("start"), entry.metadata.get("end")
    if (
        not isinstance(start, int)
        or not isinstance(end, int)
        or not 0 <= start <= end
        or end - start != len(entry.body)
    ):
        raise KnowledgeIndexError(
            f"chunk {entry.id!r}: span {start!r}-{end!r} does not match its "
            f"{len(entry.body):,}-character text; rebuild the index from the documents"
        )
    return start, end


def to_piece(entry: KnowledgeEntry, score: float) -> Piece:
    """One scored chunk (or plain entry, a source of its own, whole) as a piece."""
    meta, text = entry.metadata, entry.body
    headings: tuple[str, ...] = ()
    if source_id_of(entry) is None:  # a plain entry is a source of its own, whole
        start, end = 0, len(text)
    else:
        start, end = _span(entry)
        raw = meta.get("headings")
        if isinstance(raw, list | tuple):
            headings = tuple(h for h in raw if isinstance(h, str))
    digest = meta.get("sha256")
    if not isinstance(digest, str) or not digest:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Piece(start, end, text, digest, (_Part(entry.id, start, end, score, headings),))


def merge_pieces(pieces: Iterable[Piece]) -> list[Piece]:
    """One source's pieces: identical text deduplicated, overlapping spans merged."""
    unique: dict[str, Piece] = {}
    for piece in sorted(pieces, key=lambda p: (-p.parts[0].score, p.start, p.parts[0].id)):
        unique.setdefault(piece.digest, piece)  # the best (then earliest) of identical texts
    merged: list[Piece] = []
    for piece in sorted(unique.values(), key=lambda p: (p.start, p.end, p.parts[0].id)):
        last = merged[-1] if merged else None
        if last is None or piece.start >= last.end:
            merged.append(piece)
            continue
        text = (
            last.text + piece.text[last.end - piece.start :] if piece.end > last.end else last.text
        )
        merged[-1] = last._replace(
            end=max(last.end, piece.end), text=text, parts=(*last.parts, *piece.parts)
        )
    return merged


def term_hits(text: str, terms: frozenset[str], tokens: Callable[[str], list[str]]) -> Hits:
    """Words of ``text`` holding query terms: (start, end, terms matched)."""
    hits = []
    known: dict[str, frozenset[str]] = {}
    for match in _WORD.finditer(text):
        word = match.group()
        found = known.get(word)
        if found is None:
            found = known[word] = frozenset(tokens(word)) & terms
        if found:
            hits.append((match.start(), match.end(), found))
    return hits


def _window(
    text: str, hits: Sequence[tuple[int, int, frozenset[str]]], size: int
) -> tuple[int, int]:
    """The cut ``[lo, hi)`` of at most ``size`` code points (see the module docstring)."""
    length = len(text)
    first, last = 0, 0  # the region that must stay: from the first to the last chosen hit
    best: tuple[int, int] | None = None
    best_at = (0, 0)
    seen: Counter[str] = Counter()
    j = 0
    for i, (start, _, _) in enumerate(hits):
        j = max(j, i)
        while j < len(hits) and hits[j][1] - start <= size:
            seen.update(hits[j][2])
            j += 1
        if j > i:
            key = (len(seen), j - i)
            if best is None or key > best:
                best, best_at = key, (i, j - 1)
            seen.subtract(hits[i][2])
            seen += Counter()  # drop zero counts
    if best is None:
        lo = 0
    else:
        first, last = hits[best_at[0]][0], hits[best_at[1]][1]
        lo = max(0, min(first - (size - (last - first)) // 2, length - size))
    hi = min(length, lo + size)
    if best is None:
        first, last = hi, lo  # nothing to protect
    # Whole words only: move a cut that falls inside a word to the nearest space inward,
    # never past the protected region; text without spaces keeps the exact cut.
    if lo > 0 and not text[lo - 1].isspace() and not text[lo].isspace():
        space = next((k for k in range(lo, min(first, hi)) if text[k].isspace()), None)
        if space is not None:
            lo = space
    if hi < length and not text[hi - 1].isspace() and not text[hi].isspace():
        space = next((k for k in range(hi - 1, max(last, lo) - 1, -1) if text[k].isspace()), None)
        if space is not None:
            hi = space
    while lo < hi and text[lo].isspace():
        lo += 1
    while hi > lo and text[hi - 1].isspace():
        hi -= 1
    return (lo, hi) if hi > lo else (0, min(length, size))


def cut_excerpt(
    piece: Piece, source: EvidenceSource, size: int, hits: Callable[[str], Hits]
) -> Excerpt:
    """``piece`` of ``source`` as an excerpt of at most ``size`` code points."""
    text, start, cut = piece.text, piece.start, False
    if len(text) > size:
        lo, hi = _window(text, hits(text), size)
        text, start, cut = text[lo:hi], start + lo, True
    # A cut cites (and scores as) the best chunk it still covers.
    best, chunk_ids = piece.best(start, start + len(text))
    return Excerpt(
        id=best.id,
        source_id=source.id,
        path=source.path,
        headings=best.headings,
        start=start,
        end=start + len(text),
        text=text,
        version=source.version,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        score=best.score,
        chunk_ids=chunk_ids,
        cut=cut,
    )


def round_robin(excerpts: Iterable[Excerpt]) -> list[Excerpt]:
    """Each source's r-th best excerpt, round by round; sources by their best score then id."""
    groups: dict[str, list[Excerpt]] = {}
    for excerpt in excerpts:
        groups.setdefault(excerpt.source_id, []).append(excerpt)
    for group in groups.values():
        group.sort(key=lambda e: (-e.score, e.start))
    order = sorted(groups, key=lambda s: (-groups[s][0].score, s))
    rounds = max((len(group) for group in groups.values()), default=0)
    return [groups[s][r] for r in range(rounds) for s in order if r < len(groups[s])]
