"""Load files, folders and uploaded bytes into text with structure (:class:`LoadedDocument`).

Kinds by extension: Markdown/MDX, HTML (``[html]`` extra), JSON, LaTeX, plain text,
CSV/TSV, YAML, XML, source code and PDF (``[pdf]`` extra); files without an extension
are read as plain text. Text is UTF-8 (a byte-order mark is honoured) with ``\\n``
newlines. A folder's files get source ids relative to the folder, with ``/``; a file
given directly is known by its name. Problems with one file of a folder skip that file
with a reason; the bounds on bytes and documents are errors.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from groundwire.config import (
    EXCLUDED_DIRS,
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENTS,
    MAX_TOTAL_DOCUMENT_BYTES,
)
from groundwire.errors import ConfigError, MissingExtraError, SourceError
from groundwire.ingest.loaders._kinds import decode, resolve_kind, sha256_hex
from groundwire.model import LoadedDocument, Section, SkippedSource

__all__ = [
    "LoadResult",
    "load_bytes",
    "load_document",
    "load_documents",
    "read_bounded",
    "walk_folder",
]

PathInput = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class LoadResult:
    """Documents loaded (in input order, folders sorted by path), files skipped and why."""

    documents: tuple[LoadedDocument, ...]
    skipped: tuple[SkippedSource, ...]
    bytes_read: int


def _positive(option: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{option}={value!r} is invalid: expected an integer >= 1")
    return value


def _extract(
    data: bytes, kind: str, where: str, encoding: str | None
) -> tuple[str, str | None, list[Section] | None, dict[str, Any]]:
    if kind == "pdf":
        from groundwire.ingest.loaders._pdf import extract_pdf

        return extract_pdf(data, where)
    text = decode(data, where, encoding)
    if kind == "markdown":
        from groundwire.ingest.loaders._markdown import extract_markdown

        return extract_markdown(text, where)
    if kind == "html":
        from groundwire.ingest.loaders._html import extract_html

        return extract_html(text)
    if kind == "latex":
        from groundwire.ingest.loaders._latex import extract_latex

        return extract_latex(text)
    if kind == "json":
        import json

        try:
            value = json.loads(text)
        except ValueError as exc:
            line = getattr(exc, "lineno", None)
            raise SourceError(f"{where}{f':{line}' if line else ''}: invalid JSON ({exc})") from exc
        title = value.get("title") if isinstance(value, dict) else None
        return text, title if isinstance(title, str) else None, None, {}
    return text, None, None, {}


def _default_title(path: str, kind: str) -> str:
    """A file's stem (its full name for code), or the URL when there is no name."""
    name = PurePosixPath(path.split("?", 1)[0].rstrip("/")).name
    if not name or ("://" in path and "/" not in path.split("://", 1)[1].rstrip("/")):
        return path
    return name if kind == "code" else PurePosixPath(name).stem or name


def load_bytes(
    data: bytes,
    source_id: str,
    *,
    path: str | None = None,
    kind: str | None = None,
    encoding: str | None = None,
) -> LoadedDocument:
    """Extract one document from its raw bytes (an upload, a fetched body, a read file).

    ``kind`` is a kind name (``markdown``, ``html``, ``pdf``, ...) or an extension; by
    default the extension of ``path`` or ``source_id`` decides, and unknown types are
    read as plain text. ``encoding`` overrides UTF-8 for text kinds. Raises
    :class:`SourceError` when the content cannot be decoded or parsed, and
    :class:`MissingExtraError` when HTML or PDF support is not installed.
    """
    if not isinstance(source_id, str) or not source_id:
        raise SourceError("a document needs a non-empty source id (a relative path or a URL)")
    where = path or source_id
    resolved = resolve_kind(kind or where) or ("text", None)
    text, title, sections, metadata = _extract(data, resolved[0], where, encoding)
    if resolved[1] is not None:
        metadata["language"] = resolved[1]
    return LoadedDocument(
        source_id=source_id,
        path=where,
        kind=resolved[0],
        title=title or _default_title(where, resolved[0]),
        text=text,
        sha256=sha256_hex(data),
        text_sha256=sha256_hex(text.encode("utf-8")),
        sections=None if sections is None else tuple(sections),
        metadata=metadata,
    )


def read_bounded(path: Path, max_bytes: int, *, follow_symlinks: bool = True) -> bytes:
    """Read a regular file of at most ``max_bytes`` (checked before and while reading)."""
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SourceError(f"{path}: cannot open ({exc.strerror or exc})") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SourceError(f"{path}: not a regular file")
        if info.st_size > max_bytes:
            raise SourceError(
                f"{path}: {info.st_size:,} bytes is over the {max_bytes:,}-byte limit for one "
                "file; split it or raise the limit"
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SourceError(f"{path}: grew past the {max_bytes:,}-byte limit while being read")
    return data


def load_document(
    path: PathInput,
    *,
    source_id: str | None = None,
    kind: str | None = None,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> LoadedDocument:
    """Load one file; its source id defaults to the file name."""
    file = Path(path)
    data = read_bounded(file, _positive("max_bytes", max_bytes))
    name = source_id if source_id is not None else file.name
    return load_bytes(data, name, path=file.as_posix() if source_id is None else name, kind=kind)


def walk_folder(
    folder: Path, *, report_excluded: bool = True
) -> tuple[list[tuple[Path, str]], list[SkippedSource]]:
    """Files under ``folder`` as ``(path, relative id)``, sorted; what was left out and why.

    Never follows symlinks; hidden entries and :data:`EXCLUDED_DIRS` are not entered.
    """
    files: list[tuple[Path, str]] = []
    skipped: list[SkippedSource] = []

    def rel(path: Path) -> str:
        return path.relative_to(folder).as_posix()

    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        kept = []
        for name in sorted(dirnames):
            full = here / name
            if full.is_symlink():
                skipped.append(SkippedSource(rel(full), "symlink (not followed)"))
            elif name in EXCLUDED_DIRS or name.startswith("."):
                if report_excluded:
                    why = "hidden" if name.startswith(".") else "dependency/VCS/build"
                    skipped.append(SkippedSource(rel(full), f"{why} folder (not walked)"))
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            full = here / name
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                skipped.append(SkippedSource(rel(full), "symlink (not followed)"))
            elif not stat.S_ISREG(mode):
                skipped.append(SkippedSource(rel(full), "not a regular file"))
            elif name.startswith("."):
                skipped.append(SkippedSource(rel(full), "hidden file"))
            elif "." in name and resolve_kind(name) is None:
                suffix = PurePosixPath(name).suffix
                skipped.append(SkippedSource(rel(full), f"unsupported file type {suffix!r}"))
            else:
                files.append((full, rel(full)))
    files.sort(key=lambda item: item[1])
    skipped.sort(key=lambda item: item.path)
    return files, skipped


def _load_planned(
    path: Path, source_id: str, shown: str, max_file_bytes: int
) -> LoadedDocument | SkippedSource:
    try:
        data = read_bounded(path, max_file_bytes)
        doc = load_bytes(data, source_id, path=shown)
    except (SourceError, MissingExtraError) as exc:
        return SkippedSource(shown, str(exc))
    if not doc.text.strip():
        return SkippedSource(shown, "no text after extraction")
    return doc


def load_documents(
    paths: PathInput | Iterable[PathInput],
    *,
    max_file_bytes: int = MAX_DOCUMENT_BYTES,
    max_total_bytes: int = MAX_TOTAL_DOCUMENT_BYTES,
    max_documents: int = MAX_DOCUMENTS,
    progress: Callable[[int, int], None] | None = None,
) -> LoadResult:
    """Load files and folders (walked recursively) into documents.

    A file that cannot be read, decoded or parsed, is too large, has an unsupported
    type, needs a missing extra, has no text, or repeats a source id is skipped with
    the reason; a path that does not exist, more than ``max_documents`` files or more
    than ``max_total_bytes`` bytes raise :class:`SourceError`. ``progress(done, total)``
    is called after each file.
    """
    _positive("max_file_bytes", max_file_bytes)
    _positive("max_total_bytes", max_total_bytes)
    _positive("max_documents", max_documents)
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    plan: list[tuple[Path, str, str]] = []  # file, source id, path shown in chunks
    skipped: list[SkippedSource] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            files, left_out = walk_folder(path)
            plan.extend((file, rel, rel) for file, rel in files)
            skipped.extend(left_out)
        elif path.is_file():
            plan.append((path, path.name, path.as_posix()))
        else:
            raise SourceError(f"{path}: no such file or folder")
    if len(plan) > max_documents:
        raise SourceError(
            f"{len(plan):,} files to load, over max_documents={max_documents:,}; load fewer "
            "folders or raise the limit"
        )
    documents: list[LoadedDocument] = []
    seen: dict[str, str] = {}
    total = 0
    for done, (path, source_id, shown) in enumerate(plan, start=1):
        if source_id in seen:
            reason = f"duplicate source id {source_id!r} (also {seen[source_id]}); load them apart"
            skipped.append(SkippedSource(shown, reason))
        else:
            try:
                size = min(path.stat().st_size, max_file_bytes + 1)
            except OSError:
                size = 0  # reading it reports the error
            if total + size > max_total_bytes:
                raise SourceError(
                    f"{path}: loading it would read over max_total_bytes={max_total_bytes:,} "
                    f"({total:,} bytes read so far); load fewer files or raise the limit"
                )
            outcome = _load_planned(path, source_id, shown, max_file_bytes)
            if isinstance(outcome, SkippedSource):
                skipped.append(outcome)
            else:
                total += size
                seen[source_id] = shown
                documents.append(outcome)
        if progress is not None:
            progress(done, len(plan))
    return LoadResult(tuple(documents), tuple(skipped), total)
