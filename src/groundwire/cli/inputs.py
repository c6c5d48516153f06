"""What a ``KB`` argument names: sources, snapshots or documents, and how to open it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import typer

from groundwire import (
    AccessPolicy,
    Chunk,
    ChunkingConfig,
    GroundingConfig,
    GroundingEngine,
    GroundingStatus,
    KnowledgeBase,
    KnowledgeEntry,
    KnowledgeSource,
    LoadedDocument,
    Principal,
    SkippedSource,
    SourceError,
    Turn,
    chunk_document,
    chunks_to_documents,
    label_chunks,
    load_documents,
    load_sources,
)
from groundwire.cli.output import ROLES, echo_line, fail, plural
from groundwire.config import EvidenceSettings, chunk_settings
from groundwire.ingest.sources import SOURCE_MANIFEST, entry_front_matter


def load_kb(kb: Path) -> list[KnowledgeSource]:
    """The knowledge sources at ``kb`` (raises SourceError naming the file)."""
    return load_sources(kb)


def open_engine(kb: Path, config: GroundingConfig) -> GroundingEngine:
    """An engine over ``kb``: opened from a snapshot, or built from the sources in ``config``."""
    if KnowledgeBase.is_snapshot(kb):
        return GroundingEngine.from_snapshot(kb, config)
    return GroundingEngine(config)


def parse_turns(values: Sequence[str]) -> tuple[Turn, ...]:
    """``ROLE:TEXT`` strings into turns, oldest first; a bad value is a usage error."""
    turns = []
    for value in values:
        role, sep, text = value.partition(":")
        role = role.strip().lower()
        if not sep or role not in ROLES or not text.strip():
            raise typer.BadParameter(
                f"{value!r} is not ROLE:TEXT with ROLE user or assistant and non-empty "
                "TEXT; write e.g. --turn 'user:my API key leaked'",
                param_hint="'--turn'",
            )
        turns.append(Turn(role, text.strip()))
    return tuple(turns)


def fail_not_ready(kb: Path, status: GroundingStatus) -> NoReturn:
    """Exit 1 saying why the engine has no snapshot: every validation error, one ``error:``
    line each, then what to run (``groundwire validate``)."""
    message = f"the knowledge base is not ready: {status.last_error or 'it did not build'}"
    errors = [issue for issue in status.validation_issues if issue.severity == "error"]
    for issue in errors:
        echo_line("error", issue.describe())
    fail(message + (validate_hint(kb) if errors else ""))


def validate_hint(kb: Path) -> str:
    return f"; run 'groundwire validate {kb}' to list every issue"


# -- documents --------------------------------------------------------------------------------
#: Files that are knowledge source files (as before documents were accepted), not documents.
_SOURCE_FILE_SUFFIXES = frozenset({".json", ".yaml", ".yml"})
#: Folders load_sources does not walk when it looks for source.yaml.
_NOT_WALKED = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv"})


EVIDENCE_DEFAULTS = EvidenceSettings()


class Documents(NamedTuple):
    """An index of document chunks and how it was made (for the summary)."""

    kb: KnowledgeBase
    files: int
    chunks: int
    skipped: tuple[SkippedSource, ...]


def _is_chunk(entry: KnowledgeEntry) -> bool:
    meta = entry.metadata
    return isinstance(meta.get("source_id"), str) and isinstance(meta.get("start"), int)


def _has_manifest(folder: Path) -> bool:
    """Whether a source.yaml sits in ``folder`` or below it, where load_sources looks."""
    for _, dirnames, filenames in os.walk(folder):
        if SOURCE_MANIFEST in filenames:
            return True
        dirnames[:] = [name for name in dirnames if name not in _NOT_WALKED]
    return False


def is_documents(path: Path) -> bool:
    """Whether ``path`` names documents rather than a knowledge base (see docs/CLI.md).

    A missing path is a knowledge base, so it is reported exactly as before. A file
    that is not a regular file (a FIFO, a device) counts by its name like any file, and
    reading it reports the problem. A folder that looks like a snapshot, even a damaged
    one (see ``KnowledgeBase.is_snapshot``), is never documents.
    """
    if path.exists() and not path.is_dir():
        return path.suffix.lower() not in _SOURCE_FILE_SUFFIXES
    if not path.is_dir():
        return False
    if KnowledgeBase.is_snapshot(path):
        try:  # a cheap look at the first entry; the full load verifies everything
            peek = KnowledgeBase.load(path, verify="manifest")
            return len(peek) > 0 and _is_chunk(peek.entry(0))
        except Exception:  # any damage at all: the full load, next, reports it in one line
            return False
    return not _has_manifest(path)


def chunk_all(
    documents: Sequence[LoadedDocument], config: ChunkingConfig, advance: Any = None
) -> tuple[list[Chunk], int, list[SkippedSource]]:
    """Every document's chunks, the documents chunked, and those skipped (too many chunks)."""
    chunks: list[Chunk] = []
    skipped: list[SkippedSource] = []
    for document in documents:
        try:
            chunks.extend(chunk_document(document, config))
        except SourceError as exc:
            skipped.append(SkippedSource(document.path, str(exc)))
        if advance is not None:
            advance()
    return chunks, len(documents) - len(skipped), skipped


def nothing_to_index(paths: Sequence[Path | str], skipped: Sequence[SkippedSource]) -> str:
    where = ", ".join(str(path) for path in paths)
    if not skipped:
        return f"{where}: no documents to index (no files found)"
    first = skipped[0]
    return (
        f"{where}: no documents to index; {plural(len(skipped), 'file')} skipped, "
        f"first {first.path}: {first.reason}"
    )


def warn_entry_files(paths: Sequence[Path]) -> None:
    """Say so when a folder read as documents holds knowledge entries without source.yaml.

    Such a folder is indexed as documents (its files become cited excerpts): a source
    version is what entry citations pin, and it only comes from ``source.yaml``.
    """
    for path in paths:
        if not path.is_dir() or KnowledgeBase.is_snapshot(path):
            continue
        entries, looked = entry_front_matter(path)
        if entries:
            echo_line(
                "warning",
                f"{path} has no {SOURCE_MANIFEST}, so it is read as documents, although "
                f"{entries} of {plural(looked, 'Markdown file')} carry knowledge entry front "
                f"matter; to index them as entries add {path / SOURCE_MANIFEST} with 'id' and "
                "'version'",
            )


def principal_of(
    tenant: str | None, subject: str | None, groups: Sequence[str]
) -> Principal | None:
    """The principal the flags name, or None (anonymous); a usage error when incomplete."""
    if tenant is None and subject is None:
        if groups:
            raise typer.BadParameter("needs --tenant and --subject", param_hint="'--group'")
        return None
    if tenant is None or subject is None:
        missing = "'--subject'" if subject is None else "'--tenant'"
        raise typer.BadParameter(
            "--tenant and --subject go together: pass both to run as a principal",
            param_hint=missing,
        )
    try:
        return Principal(tenant, subject, tuple(groups))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--tenant/--subject/--group'") from exc


def load_policy(access: Path | None) -> AccessPolicy | None:
    """The ``--access`` policy, or None; SourceError naming the file and field."""
    return None if access is None else AccessPolicy.load(access)


def _is_file(base: Path, relative: str, target: Path) -> bool:
    try:
        return (base / relative).resolve() == target.resolve()
    except OSError:
        return False


def without_policy(
    paths: Sequence[Path], documents: Sequence[LoadedDocument], access: Path | None
) -> list[LoadedDocument]:
    """``documents`` without the ``--access`` policy file itself (it is not content)."""
    if access is None:
        return list(documents)
    folders = [path for path in paths if path.is_dir()]
    return [
        doc
        for doc in documents
        if not any(_is_file(folder, doc.source_id, access) for folder in folders)
        and not _is_file(Path(), doc.path, access)
    ]


def labeled_chunks(
    chunks: list[Chunk], access: Path | None
) -> tuple[list[Chunk], list[SkippedSource]]:
    """``chunks`` labeled by the ``--access`` policy, and the files it leaves out."""
    policy = load_policy(access)
    if policy is None:
        return chunks, []
    return label_chunks(chunks, policy)


def open_documents(path: Path, access: Path | None = None) -> Documents:
    """Load, chunk, label (``--access``) and index documents (or open an ingested snapshot)."""
    if KnowledgeBase.is_snapshot(path):
        if access is not None:
            raise typer.BadParameter(
                "a snapshot carries the labels given at ingest; pass --access to "
                "'groundwire ingest' instead",
                param_hint="'--access'",
            )
        kb = KnowledgeBase.load(path)
        files = len({str(entry.metadata.get("source_id")) for entry in kb})
        return Documents(kb, files, len(kb), ())
    warn_entry_files([path])
    loaded = load_documents(path)
    documents = without_policy([path], loaded.documents, access)
    chunks, files, failed = chunk_all(documents, ChunkingConfig())
    chunks, refused = labeled_chunks(chunks, access)
    skipped = (*loaded.skipped, *failed, *refused)
    files -= len(refused)
    if not chunks:
        fail(nothing_to_index([path], skipped))
    kb = KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())
    return Documents(kb, files, len(chunks), skipped)


def reject_options(documents: bool, **given: Any) -> None:
    """A usage error for a given option that does not apply to this kind of ``KB``."""
    for name, value in given.items():
        if value is not None and value != []:
            option = "--" + name.replace("_", "-")
            kind, other = (
                ("knowledge bases", "documents (no source.yaml)")
                if documents
                else ("documents", "a knowledge base")
            )
            raise typer.BadParameter(
                f"it applies to {kind} only, and KB is {other}", param_hint=f"'{option}'"
            )
