"""The knowledge runtime: ingest → index → retrieve → answer, in one object, on groundwire's
own parts.

:class:`KnowledgeRuntime` keeps documents in named *spaces* of one tenant namespace.
``ingest_document`` (bytes or text) and ``ingest_paths`` (files, folders) load and chunk
them with :mod:`groundwire.ingest`, and label every chunk with its space, the runtime's
tenant, its ACL, locale and category. The next ``retrieve`` or ``query`` indexes the
chunks into a new immutable snapshot, swapped in atomically (turns running keep the one
they started with). ``retrieve`` is :func:`~groundwire.retrieve_evidence` under the
principal's labels and the filters (space, tenant, locale, category); ``query`` is a
:class:`~groundwire.GroundedAssistant` answer from that evidence, citations checked.
With a :class:`~groundwire.access.guard.KnowledgeAccessGuard`, ingesting is a ``write``
and retrieving a ``search`` of the space; a denial raises
:class:`~groundwire.AccessDeniedError` with the guard's localized message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from groundwire.access.guard import AccessContext, KnowledgeAccessGuard, KnowledgeSpace, Operation
from groundwire.access.labels import Labels, parse_acl, parse_tenant
from groundwire.config import (
    DEFAULT_EVIDENCE_LIMIT,
    DEFAULT_MIN_SCORE,
    ChunkingConfig,
    chunk_settings,
)
from groundwire.errors import ConfigError, SourceError
from groundwire.ground.evidence import EvidenceResult, retrieve_evidence
from groundwire.i18n import DEFAULT_LOCALE, check_locale, message
from groundwire.index import KnowledgeBase
from groundwire.ingest.chunking import chunk_document, chunks_to_documents
from groundwire.ingest.loaders import load_bytes, load_documents
from groundwire.ingest.policy import Labeler, label_chunks
from groundwire.llm.assistant import GroundedAnswer, GroundedAssistant
from groundwire.llm.base import Provider
from groundwire.model import Chunk, LoadedDocument, Principal, SkippedSource

__all__ = ["IngestReport", "KnowledgeRuntime"]

#: Chunk metadata keys the runtime's filters read (tenant is the access label itself).
SPACE_KEY, LOCALE_KEY, CATEGORY_KEY, TENANT_FILTER = "space", "locale", "category", "tenant"


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What one ingest added: documents, chunks, and the files left out with the reason."""

    documents: int
    chunks: int
    skipped: tuple[SkippedSource, ...] = ()

    def summary(self, locale: str = DEFAULT_LOCALE) -> str:
        """One line: ``3 documents, 12 chunks, 1 skipped`` (in ``locale``)."""
        return message(
            "ingest.summary",
            locale,
            documents=self.documents,
            chunks=self.chunks,
            skipped=len(self.skipped),
        )

    def skipped_lines(self, locale: str = DEFAULT_LOCALE) -> list[str]:
        """One line per file left out, ``skipped guide.md: <reason>`` (in ``locale``)."""
        return [
            message("ingest.skipped", locale, path=item.path, reason=item.reason)
            for item in self.skipped
        ]


def _fields(values: Mapping[str, str | None]) -> dict[str, str]:
    """The given metadata fields (None dropped); each must be a non-empty string."""
    for option, value in values.items():
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{option}={value!r} is invalid: expected a non-empty string or None")
    return {name: value for name, value in values.items() if value is not None}


class KnowledgeRuntime:
    """Ingest, index, retrieve and answer for the spaces of one tenant namespace.

    ``spaces``: where documents go (names or :class:`KnowledgeSpace`; the first is the
    default). ``tenant``: the tenant label put on every chunk ingested (None: shared by
    every tenant). ``provider``: the model (or fallback list) :meth:`query` asks.
    ``guard``/``context``: the access guard and this runtime's workflow/agent bindings.
    ``locale``: the language of prompts and messages. Thread-safe.
    """

    def __init__(
        self,
        spaces: str | KnowledgeSpace | Sequence[str | KnowledgeSpace],
        *,
        tenant: str | None = None,
        provider: Provider | Sequence[Provider] | None = None,
        guard: KnowledgeAccessGuard | None = None,
        context: AccessContext | None = None,
        locale: str = DEFAULT_LOCALE,
        chunking: ChunkingConfig | None = None,
    ) -> None:
        items = [spaces] if isinstance(spaces, str | KnowledgeSpace) else list(spaces)
        if not items:
            raise ConfigError("a knowledge runtime needs at least one space")
        resolved = [s if isinstance(s, KnowledgeSpace) else KnowledgeSpace(s) for s in items]
        self._spaces = {space.key: space for space in resolved}
        self.default_space = resolved[0].key
        try:
            self.tenant = parse_tenant(tenant)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self.locale = check_locale(locale)
        self.provider = provider
        self.guard = guard
        self.context = context if context is not None else AccessContext(locale=self.locale)
        self.chunking = chunking if chunking is not None else ChunkingConfig()
        self._chunks: dict[str, tuple[Chunk, ...]] = {}  # source id → its chunks
        self._lock = threading.Lock()
        self._snapshot: KnowledgeBase | None = None

    # -- spaces and access ------------------------------------------------------------------
    def _space(self, space: str | None, operation: Operation, principal: Principal | None) -> str:
        """The space key, after the guard (if any) allowed ``operation`` on it."""
        key = self.default_space if space is None else space
        found = self._spaces.get(key)
        if found is None:
            raise ConfigError(f"space {key!r} is not one of this runtime's: {sorted(self._spaces)}")
        if self.guard is not None:
            who = principal if principal is not None else self.context.principal
            self.guard.check(operation, found, replace(self.context, principal=who)).require()
        return key

    # -- ingest -----------------------------------------------------------------------------
    def ingest_document(
        self,
        id: str,
        data: bytes | str,
        *,
        kind: str | None = None,
        space: str | None = None,
        acl: Sequence[str] = (),
        locale: str | None = None,
        category: str | None = None,
        principal: Principal | None = None,
        labeler: Labeler | None = None,
    ) -> IngestReport:
        """Load one document (bytes or text; ``kind`` or ``id``'s extension decides how),
        chunk it and add it to ``space``; an ``id`` already there is replaced."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if not isinstance(raw, bytes):
            raise ConfigError("data must be bytes or text")
        key = self._space(space, "write", principal)
        document = load_bytes(raw, id, kind=kind)
        return self._add([document], [], key, acl, locale, category, labeler)

    def ingest_paths(
        self,
        paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        *,
        space: str | None = None,
        acl: Sequence[str] = (),
        locale: str | None = None,
        category: str | None = None,
        principal: Principal | None = None,
        labeler: Labeler | None = None,
    ) -> IngestReport:
        """Load files and folders (as :func:`~groundwire.load_documents`) into ``space``."""
        key = self._space(space, "write", principal)
        loaded = load_documents(paths)
        return self._add(loaded.documents, loaded.skipped, key, acl, locale, category, labeler)

    def _add(
        self,
        documents: Sequence[LoadedDocument],
        skipped: Sequence[SkippedSource],
        space: str,
        acl: Sequence[str],
        locale: str | None,
        category: str | None,
        labeler: Labeler | None,
    ) -> IngestReport:
        try:
            labels = Labels(self.tenant, parse_acl(list(acl)))
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        extra = _fields({SPACE_KEY: space, LOCALE_KEY: locale, CATEGORY_KEY: category})
        prefix = f"{self.tenant}/{space}" if self.tenant else space  # ids unique per namespace
        chunks: list[Chunk] = []
        failed = list(skipped)
        for document in documents:
            named = replace(document, source_id=f"{prefix}/{document.source_id}")
            try:
                cut = chunk_document(named, self.chunking)
            except SourceError as exc:
                failed.append(SkippedSource(document.path, str(exc)))
                continue
            chunks.extend(replace(c, metadata={**c.metadata, **extra}) for c in cut)

        def decide(chunk: Chunk, _: Labels | None) -> Labels | None:
            return labels if labeler is None else labeler(chunk, labels)

        labeled, refused = label_chunks(chunks, None, decide)
        by_source: dict[str, list[Chunk]] = {}
        for chunk in labeled:
            by_source.setdefault(chunk.source_id, []).append(chunk)
        with self._lock:
            self._chunks.update({source: tuple(group) for source, group in by_source.items()})
            self._snapshot = None  # rebuilt on the next retrieval
        return IngestReport(len(by_source), len(labeled), (*failed, *refused))

    # -- the index --------------------------------------------------------------------------
    @property
    def knowledge_base(self) -> KnowledgeBase | None:
        """The current snapshot of every space (built now if documents were added), or None."""
        with self._lock:
            if self._snapshot is None and self._chunks:
                chunks = [
                    chunk for source in sorted(self._chunks) for chunk in self._chunks[source]
                ]
                self._snapshot = KnowledgeBase.from_documents(
                    chunks_to_documents(chunks), chunk_settings()
                )
            return self._snapshot

    def _search(
        self,
        principal: Principal | None,
        space: str | None,
        tenant: str | None,
        locale: str | None,
        category: str | None,
    ) -> tuple[KnowledgeBase, dict[str, str]]:
        """The snapshot to search (empty before any ingest) and the filters, after the guard."""
        key = self._space(space, "search", principal)
        where = _fields(
            {SPACE_KEY: key, TENANT_FILTER: tenant, LOCALE_KEY: locale, CATEGORY_KEY: category}
        )
        kb = self.knowledge_base
        return (kb if kb is not None else KnowledgeBase.from_documents([], chunk_settings())), where

    # -- retrieve and answer ----------------------------------------------------------------
    def retrieve(
        self,
        query: str,
        *,
        principal: Principal | None = None,
        space: str | None = None,
        tenant: str | None = None,
        locale: str | None = None,
        category: str | None = None,
        top_k: int = DEFAULT_EVIDENCE_LIMIT,
        min_score: float = DEFAULT_MIN_SCORE,
    ) -> EvidenceResult:
        """Evidence for ``query`` from one space: what ``principal`` may see (None:
        anonymous), narrowed to chunks of ``tenant`` (only that tenant's own, not the
        shared ones), ``locale`` and ``category`` when given; at most ``top_k`` excerpts."""
        kb, where = self._search(principal, space, tenant, locale, category)
        return retrieve_evidence(
            kb,
            query,
            principal=principal,
            where=where,
            limit=top_k,
            min_score=min_score,
            locale=self.locale,
        )

    def query(
        self,
        question: str,
        *,
        principal: Principal | None = None,
        space: str | None = None,
        tenant: str | None = None,
        locale: str | None = None,
        category: str | None = None,
        top_k: int = DEFAULT_EVIDENCE_LIMIT,
        on_rejection: Literal["raise", "return"] = "raise",
    ) -> GroundedAnswer:
        """Answer ``question`` from :meth:`retrieve`'s evidence through the provider, with
        checked citations (see :class:`~groundwire.GroundedAssistant`); no provider call
        when the evidence is insufficient."""
        if self.provider is None:
            raise ConfigError("query() needs a provider: KnowledgeRuntime(..., provider=...)")
        kb, where = self._search(principal, space, tenant, locale, category)
        assistant = GroundedAssistant(
            kb,
            self.provider,
            principal=principal,
            where=where,
            limit=top_k,
            locale=self.locale,
            on_rejection=on_rejection,
        )
        return assistant.answer(question)
