"""Cut documents into cited chunks: one strategy per kind, all behind :class:`Chunker`.

What each strategy splits on (every strategy first keeps structural units whole,
packing neighbours together while they fit, and splits a unit too long for one chunk
with the character splitter):

- ``markdown``: ATX and setext headings outside code fences (or the loader's sections);
- ``html``, ``pdf``: the loader's sections (h1–h6 headings; pages);
- ``latex``: sectioning commands (``\\section``, ...), or the loader's sections;
- ``json``: members of the outermost object (elements of an array), then members of
  members that are still too long, a few levels deep; keys form the heading trail;
- ``code``: top-level definitions (Python through :mod:`ast`, other languages by a
  column-0 pattern), comments and decorators attached; names become ``symbols``;
- ``text`` (also CSV, YAML, XML, unknown types): the character splitter alone.

The character splitter cuts each chunk at the last paragraph break in the second half
of its window, else the last line break, sentence end, space, else at the size. It is
the only place chunks overlap: the next chunk restarts up to ``overlap`` code points
before the cut, at a word start. Units never overlap each other.

Chunks are trimmed of surrounding whitespace, never empty, at most ``size`` code points,
and ``chunk.text == document.text[chunk.start:chunk.end]``. Ids are
``<source id>#<n>``, ``n`` counting from 0 in text order. A document that would need
more than ``max_chunks`` chunks raises :class:`SourceError` (nothing is cut silently).
A chunk's heading trail is the common part of the trails of the units it holds.
"""

from __future__ import annotations

import hashlib
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from groundwire.config import ChunkingConfig
from groundwire.errors import ConfigError, SourceError
from groundwire.ingest._structure import (
    Unit,
    code_units,
    heading_trails,
    json_split,
    latex_sections,
    markdown_sections,
)
from groundwire.ingest.loaders._kinds import resolve_kind
from groundwire.model import Chunk, Document, LoadedDocument, Section

__all__ = [
    "ChunkSpan",
    "Chunker",
    "chunk_document",
    "chunk_text",
    "chunker_for",
    "chunks_to_documents",
]


class ChunkSpan(NamedTuple):
    """Where one chunk lies in a text (code points), its heading trail and code symbols."""

    start: int
    end: int
    headings: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()


@runtime_checkable
class Chunker(Protocol):
    """A chunking strategy: splits a text into ordered spans.

    ``sections`` are the headings a loader found; None asks the strategy to find its own
    structure in the text. :func:`chunk_document` turns the spans into :class:`Chunk`\\ s.
    """

    def split(self, text: str, sections: Sequence[Section] | None = None) -> list[ChunkSpan]:
        """The chunk spans of ``text``, in order."""
        ...


# --- the character splitter -----------------------------------------------------------------
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*(?=\s)|[。！？]")
_SPACE = re.compile(r"\s")


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _cut(text: str, low: int, limit: int) -> int:
    """The best cut in ``[low, limit]``: paragraph, line, sentence end, space, else limit."""
    at = text.rfind("\n\n", low, limit + 2)
    if at >= low:
        return at
    at = text.rfind("\n", low, limit + 1)
    if at >= low:
        return at
    last = -1
    for match in _SENTENCE_END.finditer(text, low, limit + 1):
        if match.end() <= limit:
            last = match.end()
    if last >= low:
        return last
    at = max(text.rfind(" ", low, limit + 1), text.rfind("\t", low, limit + 1))
    return at if at >= low else limit


def _restart(text: str, cut: int, overlap: int, floor: int) -> int:
    """Where the next chunk starts: a word start at most ``overlap`` before the cut.

    Text written without spaces (Chinese, Japanese, long tokens) restarts exactly
    ``overlap`` back; text with spaces never restarts mid-word (maybe no overlap).
    """
    if overlap == 0:
        return cut
    at = max(cut - overlap, floor + 1)
    if at < cut and not text[at - 1].isspace():
        space = _SPACE.search(text, at, cut)
        if space is not None:
            at = space.end()
        elif _SPACE.search(text, floor, at) is not None:
            at = cut
    return at


def _defined_in(unit: Unit, start: int, stop: int, first: bool) -> tuple[str, ...]:
    """The names a unit defines in ``[start, stop)`` (all of them without positions; the
    first piece also takes names defined before it, such as a decorated definition's)."""
    if not unit.symbol_starts:
        return unit.symbols
    return tuple(
        name
        for name, at in zip(unit.symbols, unit.symbol_starts, strict=True)
        if (first or start <= at) and at < stop
    )


def _window(text: str, unit: Unit, size: int, overlap: int, out: list[ChunkSpan]) -> None:
    """Split one range into chunks of at most ``size`` with the overlap rule."""
    position, end = unit.start, unit.end
    first = True
    while True:
        start, stop = _trim(text, position, end)
        if start >= stop:
            return
        if stop - start <= size:
            symbols = _defined_in(unit, position, end, first)
            out.append(ChunkSpan(start, stop, unit.headings, symbols))
            return
        cut = _cut(text, start + max(1, size // 2), start + size)
        symbols = _defined_in(unit, position, cut, first)
        out.append(ChunkSpan(*_trim(text, start, cut), unit.headings, symbols))
        position = _restart(text, cut, overlap, start)
        first = False


def _common_trail(trails: list[tuple[str, ...]]) -> tuple[str, ...]:
    first = trails[0]
    keep = len(first)
    for trail in trails[1:]:
        keep = min(keep, len(trail))
        while keep and trail[:keep] != first[:keep]:
            keep -= 1
    return first[:keep]


def _pack(text: str, units: Iterable[Unit], size: int, overlap: int) -> list[ChunkSpan]:
    """Neighbouring units joined while they fit in ``size``; longer units split."""
    out: list[ChunkSpan] = []
    group: list[Unit] = []
    start = stop = 0

    def flush() -> None:
        if group:
            trail = _common_trail([unit.headings for unit in group])
            symbols = tuple(dict.fromkeys(name for unit in group for name in unit.symbols))
            out.append(ChunkSpan(start, stop, trail, symbols))

    for unit in units:
        low, high = _trim(text, unit.start, unit.end)
        if low >= high:
            continue
        if high - low > size:
            flush()
            group = []
            _window(text, unit._replace(start=low, end=high), size, overlap, out)
        elif group and high - start <= size:
            group.append(unit)
            stop = high
        else:
            flush()
            group, start, stop = [unit], low, high
    flush()
    return out


def _section_units(text: str, sections: Sequence[Section]) -> list[Unit]:
    """The text before the first section, then each section up to the next one."""
    ordered: list[Section] = []
    for section in sorted(sections, key=lambda s: s.start):
        if 0 <= section.start <= len(text) and (not ordered or section.start > ordered[-1].start):
            ordered.append(section)
    if not ordered:
        return [Unit(0, len(text))]
    units = [Unit(0, ordered[0].start)] if ordered[0].start > 0 else []
    bounds = [section.start for section in ordered[1:]] + [len(text)]
    for section, trail, end in zip(ordered, heading_trails(ordered), bounds, strict=True):
        units.append(Unit(section.start, end, trail))
    return units


# --- strategies -----------------------------------------------------------------------------
class _Strategy:
    """A built-in strategy: find units (or use the loader's sections), then pack them."""

    __slots__ = ("config", "finder", "language", "name")

    def __init__(
        self,
        name: str,
        config: ChunkingConfig,
        finder: Callable[[str], list[Section]] | None = None,
        language: str | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.finder = finder
        self.language = language

    def __repr__(self) -> str:
        return f"<{self.name} chunker size={self.config.size} overlap={self.config.overlap}>"

    def units(self, text: str, sections: Sequence[Section] | None) -> list[Unit]:
        """The structural units of ``text``."""
        if sections is not None:
            return _section_units(text, sections)
        if self.name == "json":
            return json_split(text, 0, len(text), self.config.size)
        if self.name == "code":
            return code_units(text, self.language or "")
        if self.finder is not None:
            return _section_units(text, self.finder(text))
        return [Unit(0, len(text))]

    def split(self, text: str, sections: Sequence[Section] | None = None) -> list[ChunkSpan]:
        """The chunk spans of ``text``, in order (see the module docstring)."""
        return _pack(text, self.units(text, sections), self.config.size, self.config.overlap)


_FINDERS: dict[str, Callable[[str], list[Section]] | None] = {
    "markdown": markdown_sections,
    "latex": latex_sections,
}
_STRUCTURED_KINDS = {"markdown", "html", "pdf", "latex", "json", "code"}


def chunker_for(
    path_or_extension: str | os.PathLike[str], config: ChunkingConfig | None = None
) -> Chunker:
    """The chunking strategy for a file path, an extension (``.md``) or a kind name.

    Unknown types get the character splitter. ``config`` defaults to ``ChunkingConfig()``.
    """
    config = config if config is not None else ChunkingConfig()
    if not isinstance(config, ChunkingConfig):
        raise ConfigError(f"config={config!r} is invalid: expected a ChunkingConfig")
    kind, language = resolve_kind(os.fspath(path_or_extension)) or ("text", None)
    name = kind if kind in _STRUCTURED_KINDS else "text"
    return _Strategy(name, config, _FINDERS.get(name), language)


# --- chunks ---------------------------------------------------------------------------------
def _check_spans(spans: Sequence[ChunkSpan], length: int, source_id: str) -> None:
    previous = -1
    for span in spans:
        if not 0 <= span.start < span.end <= length or span.start <= previous:
            raise ConfigError(
                f"{source_id}: the chunker returned span {span.start}-{span.end}, outside "
                f"the text (0-{length}) or out of order; spans must be non-empty and ascending"
            )
        previous = span.start


def chunk_document(
    document: LoadedDocument,
    config: ChunkingConfig | None = None,
    *,
    chunker: Chunker | None = None,
) -> tuple[Chunk, ...]:
    """The chunks of one loaded document, with ids, spans, hashes and its version.

    ``chunker`` defaults to :func:`chunker_for` the document's kind (code by language).
    Raises :class:`SourceError` when the document needs more than ``config.max_chunks``.
    """
    config = config if config is not None else ChunkingConfig()
    if chunker is None:
        chunker = chunker_for(document.metadata.get("language") or document.kind, config)
    text = document.text
    spans = chunker.split(text, document.sections)
    _check_spans(spans, len(text), document.source_id)
    if len(spans) > config.max_chunks:
        raise SourceError(
            f"{document.path}: splits into {len(spans):,} chunks, over max_chunks="
            f"{config.max_chunks:,}; split the file, use a larger chunk size, or raise max_chunks"
        )
    page_starts: Sequence[int] = document.metadata.get("page_starts") or ()
    chunks = []
    for number, span in enumerate(spans):
        piece = text[span.start : span.end]
        metadata: dict[str, Any] = {}
        if page_starts:
            first = bisect_right(page_starts, span.start)
            metadata["pages"] = (first, bisect_right(page_starts, span.end - 1))
        chunks.append(
            Chunk(
                id=f"{document.source_id}#{number}",
                source_id=document.source_id,
                number=number,
                text=piece,
                start=span.start,
                end=span.end,
                version=document.version,
                sha256=hashlib.sha256(piece.encode("utf-8")).hexdigest(),
                path=document.path,
                title=document.title,
                kind=document.kind,
                headings=tuple(span.headings),
                symbols=tuple(span.symbols),
                metadata=metadata,
            )
        )
    return tuple(chunks)


def chunk_text(
    text: str,
    source_id: str,
    *,
    kind: str = "text",
    title: str = "",
    config: ChunkingConfig | None = None,
) -> tuple[Chunk, ...]:
    """Chunk a string as a document of ``kind`` (a kind name or an extension).

    The version is taken from the SHA-256 of the text's UTF-8 bytes.
    """
    if not isinstance(text, str):
        raise SourceError(f"{source_id}: text must be a string, got {type(text).__name__}")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    resolved_kind, language = resolve_kind(kind) or ("text", None)
    document = LoadedDocument(
        source_id=source_id,
        path=source_id,
        kind=resolved_kind,
        title=title,
        text=text,
        sha256=digest,
        text_sha256=digest,
        metadata={"language": language} if language else {},
    )
    return chunk_document(document, config)


def chunks_to_documents(chunks: Iterable[Chunk]) -> list[Document]:
    """Chunks as :class:`Document` records for :meth:`KnowledgeBase.from_documents`.

    The title is the document title and heading trail (``Guide > Install``), the text
    the chunk; ``metadata`` carries ``symbols`` (the ``symbols`` index field) and the
    source id, path, version, number, span, hash, kind, headings and pages for citing.
    """
    documents = []
    for chunk in chunks:
        headings = list(chunk.headings)
        if headings and chunk.title and headings[0].casefold() == chunk.title.casefold():
            headings.pop(0)
        title = " > ".join(part for part in (chunk.title, *headings) if part)
        metadata = {
            "source_id": chunk.source_id,
            "path": chunk.path,
            "version": chunk.version,
            "number": chunk.number,
            "start": chunk.start,
            "end": chunk.end,
            "sha256": chunk.sha256,
            "kind": chunk.kind,
            "title": chunk.title,
            "headings": chunk.headings,
            "symbols": chunk.symbols,
            **chunk.metadata,
        }
        documents.append(Document(chunk.id, title, chunk.text, metadata))
    return documents
