"""What a server serves: ``NAME=PATH`` arguments opened as knowledge bases or documents.

A path is what the CLI accepts as ``KB`` (``docs/CLI.md``): a knowledge-base folder
(``source.yaml``), a snapshot built by ``groundwire index`` or ``groundwire ingest``, or a
folder or file of documents. Each is opened by an :data:`~groundwire.server.registry.Opener`
that the registry calls again on every reload, so a reload picks up a rebuilt snapshot or
edited sources. A source set with validation errors is never installed: opening raises
:class:`~groundwire.ValidationFailedError` with every issue.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from groundwire import (
    ChunkingConfig,
    Embedder,
    GroundingConfig,
    GroundingEngine,
    KnowledgeBase,
    SourceError,
    ValidationFailedError,
    chunks_to_documents,
    load_documents,
    load_sources,
)
from groundwire.cli.inputs import chunk_all, is_documents
from groundwire.cli.vectors import vectors_for
from groundwire.config import RelevanceGate, chunk_settings
from groundwire.ground.engine import warm_snapshot
from groundwire.server.registry import Opened, Source

__all__ = ["open_path", "parse_source", "source_for"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def parse_source(spec: str) -> tuple[str, Path]:
    """``NAME=PATH`` or ``PATH`` (named after its folder or file stem) → (name, path).

    Raises ValueError with the fix when the name is not a short identifier.
    """
    name, sep, rest = spec.partition("=")
    if sep and name and not Path(spec).exists():
        path = Path(rest)
    else:
        path = Path(spec)
        resolved = path.resolve()
        name = resolved.stem if resolved.is_file() else resolved.name
    if not _NAME.match(name):
        raise ValueError(
            f"{spec!r}: {name!r} is not a usable knowledge base name (letters, digits, "
            "'.', '_', '-', up to 64); name it explicitly as NAME=PATH"
        )
    return name, path


def open_path(path: Path, timeout_ms: int, embedder: Embedder | None = None) -> Opened:
    """Open ``path`` once: an engine for entries, an index of chunks for documents.

    With ``embedder``, the vectors of the snapshot (saved beside it when they match,
    else embedded now, through the embedding cache) are served too: ``mode`` dense and
    hybrid. Raises SourceError (missing or unreadable path), ValidationFailedError (the
    sources have errors) or KnowledgeIndexError (a damaged snapshot).
    """
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    if is_documents(path):
        opened = _open_documents(path)
        # Warm before serving, as for entries below (the evidence path reads the same two).
        warm_snapshot(opened.kb, RelevanceGate().noise_quantile, pools=False)
        return _with_vectors(opened, path, embedder)
    config = GroundingConfig(
        sources=() if KnowledgeBase.is_snapshot(path) else load_sources(path),
        timeout_ms=timeout_ms,
    )
    engine = (
        GroundingEngine.from_snapshot(path, config)
        if KnowledgeBase.is_snapshot(path)
        else GroundingEngine(config)
    )
    engine.ready()
    status = engine.status()
    kb = engine.knowledge_base
    if kb is None or not status.ready:
        engine.close()
        errors = tuple(issue for issue in status.validation_issues if issue.severity == "error")
        detail = status.last_error or "it did not build"
        if errors:
            raise ValidationFailedError(errors)
        raise SourceError(f"{path}: not served, {detail}")
    # Warm before serving: at start the server is not listening yet, and on a reload the
    # current generation keeps serving meanwhile, so no request pays the first-turn work.
    engine.warm()
    opened = Opened(kb, "knowledge", engine, issues=tuple(status.validation_issues))
    try:
        return _with_vectors(opened, path, embedder)
    except BaseException:
        engine.close()
        raise


def _with_vectors(opened: Opened, path: Path, embedder: Embedder | None) -> Opened:
    if embedder is None:
        return opened
    vectors = vectors_for(opened.kb, path, embedder)
    return dataclasses.replace(opened, vectors=vectors, embedder=embedder)


def _open_documents(path: Path) -> Opened:
    if KnowledgeBase.is_snapshot(path):
        kb = KnowledgeBase.load(path)
        files = len({str(entry.metadata.get("source_id")) for entry in kb})
        return Opened(kb, "documents", files=files, chunks=len(kb))
    loaded = load_documents(path)
    chunks, files, failed = chunk_all(loaded.documents, ChunkingConfig())
    skipped = (*loaded.skipped, *failed)
    if not chunks:
        first = f"; first skipped {skipped[0].path}: {skipped[0].reason}" if skipped else ""
        raise SourceError(f"{path}: no documents to serve{first}")
    kb = KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())
    return Opened(kb, "documents", files=files, chunks=len(chunks), skipped=tuple(skipped))


def source_for(spec: str, timeout_ms: int, embedder: Embedder | None = None) -> Source:
    """The :class:`Source` of one ``NAME=PATH`` argument (opened later, by the registry)."""
    name, path = parse_source(spec)
    return Source(name, str(path), lambda: open_path(path, timeout_ms, embedder))
