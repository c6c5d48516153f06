"""Building a knowledge base: normalized entries in, :class:`~groundwire.index.parts.Parts` out.

Entries are put in id order (code point), so an entry's position is its rank in that
order and every tie in scoring breaks on id without extra work. Then: the BM25 rows
(``lexical_builder.py``), the exact/alias phrase maps, the relations and the
eligibility masks. Nothing here reads or writes files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from groundwire.config import BUILD_MEMORY_BUDGET, MAX_PHRASE_TOKENS, IndexSettings
from groundwire.errors import KnowledgeIndexError
from groundwire.index import bulk
from groundwire.index.lexical import LexicalIndex, MaskArray
from groundwire.index.lexical_builder import LexicalIndexBuilder
from groundwire.index.parts import Parts
from groundwire.model import Document, KnowledgeEntry, ValidationIssue
from groundwire.text import Analyzer

__all__ = [
    "BIGRAMS",
    "FIELD_TEXT",
    "build_parts",
    "document_entries",
    "links_of",
    "phrases_of",
    "relations_of",
    "term_ids_reader",
    "text_readers",
]

#: How each indexable field is read from an entry.
FIELD_TEXT: Mapping[str, Callable[[KnowledgeEntry], str]] = {
    "title": lambda e: e.title,
    "aliases": lambda e: "\n".join(e.aliases),
    "keywords": lambda e: "\n".join(e.keywords),
    "summary": lambda e: e.summary,
    "body": lambda e: e.body,
    "symbols": lambda e: _symbols(e.metadata.get("symbols")),
}
#: A derived field: adjacent term pairs of these fields, matched by query term pairs.
BIGRAMS = "bigrams"
BIGRAM_SOURCES = frozenset({"title", "summary", "body"})
#: A code name distinctive enough to be a phrase key: with an underscore, a digit or an
#: inner capital (a plain word such as ``request`` would match ordinary questions).
_CODE_NAME = re.compile(r"^(?=\w*(?:_|\d|[a-z][A-Z]))\w+$", re.M)
Progress = Callable[[int], None]


def _symbols(value: object) -> str:
    """Code symbols of a document chunk (a string or a list of names) as field text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "\n".join(item for item in value if isinstance(item, str))
    return ""


def build_parts(
    entries: Iterable[KnowledgeEntry],
    settings: IndexSettings,
    *,
    exact_ids: bool = True,
    exact_titles: bool = True,
    issues: Sequence[ValidationIssue] = (),
    progress: Progress | None = None,
    memory_budget: int | None = None,
) -> Parts:
    """Index normalized entries (duplicate ids are a KnowledgeIndexError); analysis works
    in batches of about ``memory_budget`` bytes (default ``BUILD_MEMORY_BUDGET``)."""
    ordered = tuple(sorted(entries, key=lambda e: e.id))
    positions = {entry.id: n for n, entry in enumerate(ordered)}
    if len(positions) != len(ordered):
        dupes = sorted({a.id for a, b in pairwise(ordered) if a.id == b.id})
        raise KnowledgeIndexError(f"duplicate entry ids {dupes[:5]}; ids must be unique")
    analyzer = Analyzer(settings.analyzer)
    budget = BUILD_MEMORY_BUDGET if memory_budget is None else memory_budget
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        raise KnowledgeIndexError(
            f"memory_budget={memory_budget!r} is invalid: expected a positive number of bytes"
        )
    if bulk.available():
        fields = text_readers(settings)
        lexical = bulk.bulk_lexical(ordered, settings, analyzer, budget, fields, progress)
    else:  # the numpy builder: the same arrays, bit for bit
        lexical = _lexical(ordered, settings, analyzer, progress)
    exact, alias = phrases_of(ordered, analyzer, exact_ids, exact_titles)
    n = len(ordered)
    domains: dict[str, int] = {}
    codes = np.fromiter(
        (domains.setdefault(e.domain.casefold(), len(domains)) for e in ordered), np.int32, n
    )
    masks: dict[str, MaskArray] = {}
    for doc, entry in enumerate(ordered):
        for name in {i.casefold() for i in entry.integrations}:
            masks.setdefault(name, np.zeros(n, dtype=bool))[doc] = True
    return Parts(
        entries=ordered,
        positions=positions,
        settings=settings,
        lexical=lexical,
        exact_index=exact,
        alias_index=alias,
        relations=relations_of(links := links_of(ordered), positions),
        links=links,
        phrase_keys=(exact_ids, exact_titles),
        active=np.fromiter((e.status == "active" for e in ordered), bool, n),
        universal=np.fromiter((not e.integrations for e in ordered), bool, n),
        domains=domains,
        domain_codes=codes,
        integration_masks=masks,
        issues=tuple(issues),
    )


def links_of(entries: Iterable[KnowledgeEntry]) -> dict[str, tuple[str, ...]]:
    """Entry id → its related then parent ids, unresolved (duplicates and itself dropped),
    for the entries that have any."""
    links: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        if entry.related or entry.parent:
            named = [*entry.related, *([entry.parent] if entry.parent else [])]
            kept = tuple(i for i in dict.fromkeys(named) if i != entry.id)
            if kept:
                links[entry.id] = kept
    return links


def relations_of(
    links: Mapping[str, tuple[str, ...]], positions: Mapping[str, int]
) -> dict[str, tuple[str, ...]]:
    """Entry id → its linked ids that exist (see :func:`links_of`)."""
    relations: dict[str, tuple[str, ...]] = {}
    for entry_id, named in links.items():
        kept = tuple(i for i in named if i in positions)
        if kept:
            relations[entry_id] = kept
    return relations


def text_readers(
    settings: IndexSettings,
) -> tuple[list[str], str | None, list[str], list[Callable[[KnowledgeEntry], str]]]:
    """The text fields of ``settings`` (in order), the pair field (or None), the fields
    pairs are taken from, and how each text field is read from an entry."""
    weights = settings.field_weights
    bigrams = weights.get(BIGRAMS, 0.0) > 0
    names = [name for name in weights if name != BIGRAMS]
    unknown = [name for name in names if name not in FIELD_TEXT]
    if unknown:
        known = sorted([*FIELD_TEXT, BIGRAMS])
        raise KnowledgeIndexError(f"unknown field(s) {unknown}; indexable fields are {known}")
    sources = [name for name in names if name in BIGRAM_SOURCES] if bigrams else []
    return names, BIGRAMS if bigrams else None, sources, [FIELD_TEXT[name] for name in names]


def _lexical(
    entries: Sequence[KnowledgeEntry],
    settings: IndexSettings,
    analyzer: Analyzer,
    progress: Progress | None,
) -> LexicalIndex:
    names, pair_field, pair_sources, readers = text_readers(settings)
    builder = LexicalIndexBuilder(names, pair_field=pair_field, pair_sources=pair_sources)
    ids_of = term_ids_reader(analyzer, builder)
    for n, entry in enumerate(entries):
        builder.add_ids([ids_of(text) if (text := read(entry)) else [] for read in readers])
        if progress is not None and n % 1024 == 1023:
            progress(1024)
    if progress is not None and len(entries) % 1024:
        progress(len(entries) % 1024)
    return builder.build(settings)


def term_ids_reader(analyzer: Analyzer, builder: LexicalIndexBuilder) -> Callable[[str], list[int]]:
    """Text → term ids, remembering each distinct word's id (-1 for a stop word).

    One dictionary lookup per word once a word has been seen: building spends most
    of its time here, so words skip the analyzer's own cache and the vocabulary.
    """
    known: dict[str, int] = {}
    lookup = known.__getitem__

    def ids_of(text: str) -> list[int]:
        words = analyzer.words(text)
        try:
            return list(map(lookup, words))  # -1 marks a stop word
        except KeyError:
            new = list(dict.fromkeys(word for word in words if word not in known))
            for word, term in zip(new, analyzer.analyze_words(new), strict=True):
                known[word] = builder.term_id(term) if term else -1
            return list(map(lookup, words))

    return ids_of


def phrases_of(
    entries: Sequence[KnowledgeEntry], analyzer: Analyzer, exact_ids: bool, exact_titles: bool
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """Normalized exact (id, title) and alias phrases → positions among ``entries``."""
    phrase = analyzer.phrase
    exact: dict[str, list[int]] = {}
    alias: dict[str, list[int]] = {}
    if not exact_ids and not exact_titles and not any(e.aliases for e in entries):
        return {}, {}
    for doc, entry in enumerate(entries):
        keys = {phrase(entry.title)} if exact_titles else set()
        if exact_ids:
            keys.add(phrase(entry.id))
        for key in keys:
            if key and key.count(" ") < MAX_PHRASE_TOKENS:
                exact.setdefault(key, []).append(doc)
        for key in {phrase(a) for a in entry.aliases}:
            if key and key.count(" ") < MAX_PHRASE_TOKENS:
                alias.setdefault(key, []).append(doc)
    return ({k: tuple(v) for k, v in exact.items()}, {k: tuple(v) for k, v in alias.items()})


def document_entries(documents: Iterable[Document | Mapping[str, Any]]) -> list[KnowledgeEntry]:
    """Plain documents (``id``, ``title``, ``text``, optional ``metadata``) as entries."""
    return [_document_entry(doc, n) for n, doc in enumerate(documents)]


def _document_entry(doc: Document | Mapping[str, Any], n: int) -> KnowledgeEntry:
    if type(doc) is dict or isinstance(doc, Mapping):  # a plain dict skips the ABC check
        doc_id, title, text = doc.get("id", doc.get("_id")), doc.get("title", ""), doc.get("text")
        metadata = doc.get("metadata") or {}
    elif isinstance(doc, Document):
        doc_id, title, text, metadata = doc.id, doc.title, doc.text, doc.metadata
    else:
        raise KnowledgeIndexError(
            f"document #{n + 1} is a {type(doc).__name__}; expected a "
            "Document or a mapping with id, title and text"
        )
    if not isinstance(doc_id, str) or not doc_id:
        raise KnowledgeIndexError(
            f"document #{n + 1} has no id; give every document a unique string 'id'"
        )
    if not isinstance(title, str) or not isinstance(text, str):
        raise KnowledgeIndexError(f"document {doc_id!r}: 'title' and 'text' must be strings")
    # A chunk's source version (chunks_to_documents), so it is cited as [KB:<id>@<version>].
    version = metadata.get("version", "") if isinstance(metadata, Mapping) else ""
    code = bool(metadata) and isinstance(metadata, Mapping) and metadata.get("kind") == "code"
    return KnowledgeEntry(
        id=doc_id,
        title=title,
        summary="",
        domain="",
        integrations=(),
        body=text,
        # Names a code chunk defines, written the way code writes them (snake_case,
        # camelCase, digits), are phrase keys: a query naming one finds its definition.
        aliases=tuple(_CODE_NAME.findall(_symbols(metadata.get("symbols")))) if code else (),
        version=version if isinstance(version, str) else "",
        metadata=dict(metadata),
    )
