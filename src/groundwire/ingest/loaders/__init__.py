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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from groundwire.config import (
    EXCLUDED_DIRS,
    GIT_TIMEOUT_SECONDS,
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENTS,
    MAX_TOTAL_DOCUMENT_BYTES,
)
from groundwire.errors import ConfigError, MissingExtraError, SourceError
from groundwire.ingest.loaders._kinds import decode, resolve_kind, sha256_hex
from groundwire.ingest.safety import find_secret, git_ignored, git_work_tree
from groundwire.model import LoadedDocument, Section, SkippedSource

__all__ = [
    "LoadResult",
    "file_type",
    "load_bytes",
    "load_document",
    "load_documents",
    "open_regular",
    "read_bounded",
    "walk_folder",
]

PathInput = str | os.PathLike[str]
#: Opening non-blocking makes open(2) of a FIFO return at once instead of waiting for a writer.
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


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
        from groundwire.ingest.parsing import parse_json

        value = parse_json(text, where)
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


def open_regular(
    path: Path, *, follow_symlinks: bool = True, allow_hard_links: bool = True
) -> tuple[BinaryIO, os.stat_result]:
    """Open a regular file for reading, and its ``fstat``; anything else is refused.

    A FIFO, device, socket or folder raises :class:`SourceError` without blocking: the
    file is opened non-blocking and checked with ``fstat`` before a byte is read, so a
    FIFO put in place of a file never hangs the reader. With ``allow_hard_links=False``
    a file with more than one link is refused too (its other name may be anywhere).
    """
    flags = os.O_RDONLY | _O_NONBLOCK | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SourceError(f"{path}: cannot open ({exc.strerror or exc})") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SourceError(f"{path}: not a regular file ({file_type(info.st_mode)})")
        if not allow_hard_links and info.st_nlink > 1:
            raise SourceError(
                f"{path}: has {info.st_nlink} hard links, so the same file also lives "
                "elsewhere, possibly outside the root; copy it instead of linking it"
            )
        if _O_NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info
    except BaseException:
        os.close(fd)
        raise


def read_bounded(
    path: Path, max_bytes: int, *, follow_symlinks: bool = True, allow_hard_links: bool = True
) -> bytes:
    """Read a regular file (see :func:`open_regular`) of at most ``max_bytes``.

    The size is checked before and while reading.
    """
    handle, info = open_regular(
        path, follow_symlinks=follow_symlinks, allow_hard_links=allow_hard_links
    )
    with handle:
        if info.st_size > max_bytes:
            raise SourceError(
                f"{path}: {info.st_size:,} bytes is over the {max_bytes:,}-byte limit for one "
                "file; split it or raise the limit"
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SourceError(f"{path}: grew past the {max_bytes:,}-byte limit while being read")
    return data


def file_type(mode: int) -> str:
    """What a non-regular file is, for messages."""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


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
                skipped.append(SkippedSource(rel(full), f"not a regular file ({file_type(mode)})"))
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
        secret = find_secret(data)
        doc = load_bytes(data, source_id, path=shown) if secret is None else None
    except (SourceError, MissingExtraError) as exc:
        return SkippedSource(shown, str(exc))
    secret = secret or find_secret(b"", doc.text if doc is not None else None)
    if secret is not None or doc is None:
        return SkippedSource(shown, secret or "unreadable")
    if not doc.text.strip():
        return SkippedSource(shown, "no text after extraction")
    return doc


def _ignored_by_git(plan: Sequence[tuple[Path, str, str, Path]], timeout: float) -> dict[Path, str]:
    """Planned files git ignores → why, for the planned inputs inside a git work tree."""
    tops: dict[Path, Path | None] = {}
    by_top: dict[Path, dict[str, Path]] = {}
    for file, _, _, item in plan:
        if item not in tops:
            tops[item] = git_work_tree(item, timeout)
        top = tops[item]
        if top is None:
            continue
        try:
            rel = file.resolve().relative_to(top.resolve()).as_posix()
        except (OSError, ValueError):
            continue
        by_top.setdefault(top, {})[rel] = file
    ignored: dict[Path, str] = {}
    for top, files in by_top.items():
        for rel, reason in git_ignored(top, sorted(files), timeout).items():
            if rel in files:
                ignored[files[rel]] = reason
    return ignored


def load_documents(
    paths: PathInput | Iterable[PathInput],
    *,
    max_file_bytes: int = MAX_DOCUMENT_BYTES,
    max_total_bytes: int = MAX_TOTAL_DOCUMENT_BYTES,
    max_documents: int = MAX_DOCUMENTS,
    progress: Callable[[int, int], None] | None = None,
    gitignore: bool = True,
    git_timeout: float = GIT_TIMEOUT_SECONDS,
) -> LoadResult:
    """Load files and folders (walked recursively) into documents.

    A file that cannot be read, decoded or parsed, is too large, has an unsupported
    type, needs a missing extra, has no text, or repeats a source id is skipped with
    the reason; so is a file carrying a secret marker (a private key, a URL with a
    password, a service token: :func:`groundwire.ingest.safety.find_secret`) and, with
    ``gitignore`` (the default), a file git ignores when the input lies in a git work
    tree (the same rules as the repository corpus). A path that does not exist, more
    than ``max_documents`` files or more than ``max_total_bytes`` bytes raise
    :class:`SourceError`, and so does an input inside a work tree when git cannot run.
    ``progress(done, total)`` is called after each file.
    """
    _positive("max_file_bytes", max_file_bytes)
    _positive("max_total_bytes", max_total_bytes)
    _positive("max_documents", max_documents)
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    plan: list[tuple[Path, str, str, Path]] = []  # file, source id, path shown, input
    skipped: list[SkippedSource] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            files, left_out = walk_folder(path)
            plan.extend((file, rel, rel, path) for file, rel in files)
            skipped.extend(left_out)
        elif path.exists():  # a file; a FIFO or device is skipped when read
            plan.append((path, path.name, path.as_posix(), path))
        else:
            raise SourceError(f"{path}: no such file or folder")
    if gitignore and plan:
        ignored = _ignored_by_git(plan, git_timeout)
        skipped.extend(
            SkippedSource(shown, ignored[file]) for file, _, shown, _ in plan if file in ignored
        )
        plan = [step for step in plan if step[0] not in ignored]
    if len(plan) > max_documents:
        raise SourceError(
            f"{len(plan):,} files to load, over max_documents={max_documents:,}; load fewer "
            "folders or raise the limit"
        )
    documents: list[LoadedDocument] = []
    seen: dict[str, str] = {}
    total = 0
    for done, (path, source_id, shown, _) in enumerate(plan, start=1):
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
