"""The repository corpus: an explicit allow-list of files under a root, checked and chunked.

:func:`build_corpus` reads only what the allow-list names (paths, folders or globs such
as ``docs/**/*.md``, relative to the root) and leaves out, with a reason:

- paths escaping the root (``..``, absolute paths elsewhere), symlinks anywhere in a
  path, and anything that is not a regular file;
- hidden paths and :data:`~groundwire.config.EXCLUDED_DIRS` (VCS, dependencies,
  virtualenvs, build output), even when listed explicitly; folder and glob walks
  prune them without reporting each file;
- files git ignores: every candidate goes through ``git check-ignore --no-index``, so
  ignore rules apply to tracked files too. Without git, or outside a work tree, the
  build fails closed: it raises and nothing is included;
- files with more than one hard link (unless ``allow_hard_links=True``): the other
  name of the file may be anywhere on the file system, outside the root;
- files over the per-file byte bound, of an unsupported type, or that fail to decode;
- files carrying a secret marker — a private key, a URL with a password, a token of a
  common service — in their raw bytes or in their decoded and extracted text (see
  :func:`groundwire.ingest.safety.find_secret`: UTF-16, HTML character references and
  JSON escapes do not hide one).

Every source records its path, raw-content SHA-256 (its version is the first 12 hex
digits) and extracted-text SHA-256. Pass the previous result to rebuild incrementally:
unchanged files (same raw SHA-256 and chunking config) keep their source object and
chunks; changed files are re-chunked; files no longer selected disappear; listed paths
or globs that match nothing are reported in ``missing``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from groundwire.config import (
    CORPUS_MAX_FILE_BYTES,
    CORPUS_MAX_TOTAL_BYTES,
    EXCLUDED_DIRS,
    GIT_TIMEOUT_SECONDS,
    MAX_DOCUMENTS,
    ChunkingConfig,
)
from groundwire.errors import ConfigError, MissingExtraError, SourceError
from groundwire.ingest.chunking import chunk_document
from groundwire.ingest.loaders import file_type, load_bytes, read_bounded, walk_folder
from groundwire.ingest.loaders._kinds import resolve_kind, sha256_hex
from groundwire.ingest.safety import find_secret, git_ignored
from groundwire.model import Chunk, SkippedSource

__all__ = ["CorpusResult", "CorpusSource", "build_corpus"]


@dataclass(frozen=True, slots=True)
class CorpusSource:
    """One included file: relative path, hashes, size and its chunks."""

    path: str
    kind: str
    title: str
    sha256: str
    text_sha256: str
    size: int
    chunks: tuple[Chunk, ...]

    @property
    def version(self) -> str:
        """12 hex digits of the raw-content SHA-256, as cited with the chunks."""
        return self.sha256[:12]


@dataclass(frozen=True, slots=True)
class CorpusResult:
    """A built corpus: sources (by path), what was left out, missing, and what changed."""

    root: str
    include: tuple[str, ...]
    config: ChunkingConfig
    sources: tuple[CorpusSource, ...]
    skipped: tuple[SkippedSource, ...]
    missing: tuple[str, ...]
    added: tuple[str, ...]
    changed: tuple[str, ...]
    reused: tuple[str, ...]
    removed: tuple[str, ...]
    bytes_read: int

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        """Every chunk, source by source in path order."""
        return tuple(chunk for source in self.sources for chunk in source.chunks)

    def source(self, path: str) -> CorpusSource | None:
        """The source at a relative path, or None."""
        return next((source for source in self.sources if source.path == path), None)


def _normalize(pattern: str, root: Path) -> tuple[str, str | None]:
    """A pattern as a ``/``-separated path relative to the root, or the reason it is refused."""
    if not isinstance(pattern, str) or not pattern.strip():
        return "", "empty allow-list entry"
    text = pattern.strip().replace("\\", "/")
    if os.path.isabs(pattern) or text.startswith("/"):
        try:
            text = Path(pattern).relative_to(root).as_posix()
        except ValueError:
            return "", f"absolute path outside the corpus root {root}; list paths under the root"
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        return "", "path traversal ('..') is not allowed; list paths under the root"
    return "/".join(parts), None


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` within one path segment, ``**`` across segments, ``[...]`` classes."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        char = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 1
        elif char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


def _refusal(rel: str, root: Path, *, folder: bool = False) -> str | None:
    """Why a relative path (a file, or a folder to walk) may not be in the corpus, or None."""
    parts = rel.split("/")
    for part in parts if folder else parts[:-1]:
        if part in EXCLUDED_DIRS:
            return f"in {part!r}, a dependency/VCS/build folder"
        if part.startswith("."):
            return f"in the hidden folder {part!r}"
    here = root
    for part in parts:
        here = here / part
        if here.is_symlink():
            return "symlink in the path (not followed)"
    if folder:
        return None
    if parts[-1].startswith("."):
        return "hidden file"
    if "." in parts[-1] and resolve_kind(parts[-1]) is None:
        return f"unsupported file type {PurePosixPath(parts[-1]).suffix!r}"
    return None


def _select(root: Path, include: Sequence[str]) -> tuple[list[str], list[SkippedSource], list[str]]:
    """Candidate relative paths (sorted), refusals, and patterns that matched nothing."""
    candidates: set[str] = set()
    skipped: list[SkippedSource] = []
    missing: list[str] = []
    walked: tuple[list[str], list[SkippedSource]] | None = None
    for pattern in include:
        rel, problem = _normalize(pattern, root)
        if problem is not None:
            skipped.append(SkippedSource(str(pattern), problem))
            continue
        if any(char in rel for char in "*?["):
            if walked is None:
                files, left_out = walk_folder(root, report_excluded=False)
                walked = ([name for _, name in files], left_out)
            regex = _glob_regex(rel)
            found = [name for name in walked[0] if regex.fullmatch(name)]
            refused = [item for item in walked[1] if regex.fullmatch(item.path)]
            candidates.update(found)
            skipped.extend(refused)
            if not found and not refused:
                missing.append(pattern)
            continue
        full = root / rel if rel else root
        try:
            mode = full.lstat().st_mode
        except FileNotFoundError:
            missing.append(pattern)
            continue
        except OSError as exc:
            skipped.append(SkippedSource(rel, f"cannot read ({exc.strerror or exc})"))
            continue
        if stat.S_ISLNK(mode):
            skipped.append(SkippedSource(rel, "symlink (not followed)"))
        elif stat.S_ISDIR(mode):
            if rel and (reason := _refusal(rel, root, folder=True)):
                skipped.append(SkippedSource(rel, reason))
                continue
            files, left_out = walk_folder(full, report_excluded=False)
            prefix = f"{rel}/" if rel else ""
            candidates.update(prefix + name for _, name in files)
            skipped.extend(SkippedSource(prefix + s.path, s.reason) for s in left_out)
        elif stat.S_ISREG(mode):
            candidates.add(rel)
        else:
            skipped.append(SkippedSource(rel, f"not a regular file ({file_type(mode)})"))
    return sorted(candidates), skipped, missing


def _check_bound(option: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{option}={value!r} is invalid: expected an integer >= 1")
    return value


def build_corpus(
    root: str | os.PathLike[str],
    include: str | Sequence[str],
    *,
    previous: CorpusResult | None = None,
    config: ChunkingConfig | None = None,
    max_file_bytes: int = CORPUS_MAX_FILE_BYTES,
    max_total_bytes: int = CORPUS_MAX_TOTAL_BYTES,
    max_files: int = MAX_DOCUMENTS,
    git_timeout: float = GIT_TIMEOUT_SECONDS,
    allow_hard_links: bool = False,
) -> CorpusResult:
    """Select, check, read and chunk the allow-listed files under ``root``.

    ``allow_hard_links=True`` accepts files with more than one hard link (refused by
    default: the other link may be outside the root, where the allow-list cannot see).

    Raises :class:`SourceError` when git cannot check ignore rules (fail closed), when
    more than ``max_files`` files are selected, or when the selection holds more than
    ``max_total_bytes`` bytes; per-file problems are reported in ``skipped``.
    """
    config = config if config is not None else ChunkingConfig()
    _check_bound("max_file_bytes", max_file_bytes)
    _check_bound("max_total_bytes", max_total_bytes)
    _check_bound("max_files", max_files)
    base = Path(root)
    if not base.is_dir():
        raise SourceError(f"{base}: the corpus root is not a folder")
    real_root = base.resolve(strict=True)
    patterns = (include,) if isinstance(include, str) else tuple(include)
    if not patterns:
        raise SourceError("the allow-list is empty; list the files, folders or globs to include")
    candidates, skipped, missing = _select(real_root, patterns)
    kept = []
    for rel in candidates:
        reason = _refusal(rel, real_root)
        if reason is None:
            kept.append(rel)
        else:
            skipped.append(SkippedSource(rel, reason))
    ignored = git_ignored(real_root, kept, git_timeout) if kept else {}
    skipped.extend(SkippedSource(rel, ignored[rel]) for rel in kept if rel in ignored)
    kept = [rel for rel in kept if rel not in ignored]
    if len(kept) > max_files:
        raise SourceError(
            f"the allow-list selects {len(kept):,} files, over max_files={max_files:,}; "
            "narrow it or raise the limit"
        )
    old = {}
    if previous is not None and previous.config == config:
        old = {source.path: source for source in previous.sources}
    previous_paths = {s.path for s in previous.sources} if previous is not None else set()
    sources: list[CorpusSource] = []
    added, changed, reused = [], [], []
    total = 0
    for rel in kept:
        try:
            data = read_bounded(
                real_root / rel,
                max_file_bytes,
                follow_symlinks=False,
                allow_hard_links=allow_hard_links,
            )
        except SourceError as exc:
            skipped.append(SkippedSource(rel, str(exc).replace(f"{real_root / rel}: ", "")))
            continue
        total += len(data)
        if total > max_total_bytes:
            raise SourceError(
                f"{rel}: the corpus passes max_total_bytes={max_total_bytes:,}; narrow the "
                "allow-list or raise the limit"
            )
        source = _source(rel, data, old.get(rel), config)
        if isinstance(source, SkippedSource):
            skipped.append(source)
            continue
        sources.append(source)
        if source is old.get(rel):
            reused.append(rel)
        elif rel in previous_paths:
            changed.append(rel)
        else:
            added.append(rel)
    current = {source.path for source in sources}
    return CorpusResult(
        root=str(real_root),
        include=patterns,
        config=config,
        sources=tuple(sources),
        skipped=tuple(sorted(skipped, key=lambda s: (s.path, s.reason))),
        missing=tuple(missing),
        added=tuple(added),
        changed=tuple(changed),
        reused=tuple(reused),
        removed=tuple(sorted(previous_paths - current)),
        bytes_read=total,
    )


def _source(
    rel: str, data: bytes, old: CorpusSource | None, config: ChunkingConfig
) -> CorpusSource | SkippedSource:
    """The source for one file's bytes: the old one when unchanged, else read and chunked."""
    if old is not None and old.sha256 == sha256_hex(data):
        return old
    reason = find_secret(data)
    if reason is not None:
        return SkippedSource(rel, reason)
    try:
        document = load_bytes(data, rel, path=rel)
        reason = find_secret(b"", document.text)
        if reason is not None:
            return SkippedSource(rel, reason)
        chunks = chunk_document(document, config)
    except (SourceError, MissingExtraError) as exc:
        return SkippedSource(rel, str(exc).removeprefix(f"{rel}: "))
    return CorpusSource(
        path=rel,
        kind=document.kind,
        title=document.title,
        sha256=document.sha256,
        text_sha256=document.text_sha256,
        size=len(data),
        chunks=chunks,
    )
