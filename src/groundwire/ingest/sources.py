"""Read knowledge sources from Python objects, JSON/YAML files and Markdown folders.

A Markdown knowledge base is a folder holding ``source.yaml`` (``id`` and ``version``)
and one ``.md`` file per entry: YAML front matter with the entry's fields, then the
body. Folders nested under another ``source.yaml`` form their own source.
``README.md`` files are documentation and are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groundwire.config import MAX_SOURCE_FILE_BYTES
from groundwire.errors import SourceError
from groundwire.ingest.loaders import read_bounded
from groundwire.ingest.parsing import parse_json, parse_yaml
from groundwire.ingest.validate import coerce_source
from groundwire.model import KnowledgeSource

__all__ = ["SOURCE_MANIFEST", "entry_front_matter", "load_sources", "read_front_matter"]

#: The file that makes a folder a knowledge source.
SOURCE_MANIFEST = "source.yaml"
#: Front matter keys only a knowledge entry has (documents use ``title`` and little else).
_ENTRY_KEYS = frozenset({"summary", "domain", "integrations"})
#: Markdown files :func:`entry_front_matter` looks at, at most: a sample, not an audit.
_ENTRY_SAMPLE = 200
_FENCE = "---"
_SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv"})

SourceInput = (
    str
    | os.PathLike[str]
    | KnowledgeSource
    | Mapping[str, Any]
    | Sequence[KnowledgeSource | Mapping[str, Any]]
)


def load_sources(source: SourceInput) -> list[KnowledgeSource]:
    """Load knowledge sources from a path or Python objects.

    Accepts a folder of Markdown entries (with ``source.yaml``), a ``.json``/``.yaml``
    file holding one source object or a list of them, a ``KnowledgeSource``, a mapping,
    or a list of those. Raises :class:`SourceError` naming the file (and line) when
    something cannot be read; entry-level problems are left to validation.
    """
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_dir():
            return _load_folder(path)
        if path.exists():  # a file, or a FIFO or device that reading refuses
            return _load_file(path)
        raise SourceError(
            f"{path}: no such file or folder; pass a knowledge base folder or a "
            ".json/.yaml source file"
        )
    if isinstance(source, KnowledgeSource | Mapping):
        return [coerce_source(source)]
    if isinstance(source, Sequence) and not isinstance(source, str | bytes):
        return [coerce_source(item) for item in source]
    raise SourceError(
        f"cannot load sources from a {type(source).__name__}; pass a path, a mapping, "
        "a KnowledgeSource or a list of them"
    )


def _read_text(path: Path) -> str:
    """A source file's text: a regular file (never a FIFO or device) of bounded size, UTF-8."""
    data = read_bounded(path, MAX_SOURCE_FILE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not valid UTF-8 (byte {exc.start}); save it as UTF-8") from exc


def _load_file(path: Path) -> list[KnowledgeSource]:
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise SourceError(
            f"{path}: unsupported source file type {suffix or '(none)'!r}; use "
            ".json, .yaml/.yml, or a folder of Markdown entries"
        )
    text = _read_text(path)
    data = parse_json(text, str(path)) if suffix == ".json" else parse_yaml(text, str(path))
    items = data if isinstance(data, list) else [data]
    sources = []
    for n, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise SourceError(
                f"{path}: item #{n + 1} is a {type(item).__name__}; a source is an "
                "object with id, version and entries"
            )
        source = coerce_source(item)
        sources.append(KnowledgeSource(source.id, source.version, source.entries, origin=str(path)))
    return sources


def read_front_matter(path: Path) -> tuple[dict[str, Any], str]:
    """Split a Markdown file into its YAML front matter (a mapping) and its body."""
    text = _read_text(path).lstrip("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        raise SourceError(
            f"{path}:1: missing front matter; start the file with '---', the "
            "entry's fields in YAML, then '---'"
        )
    for end in range(1, len(lines)):
        if lines[end].strip() == _FENCE:
            break
    else:
        raise SourceError(
            f"{path}: front matter is not closed; add a line with '---' after the entry's fields"
        )
    meta = parse_yaml("".join(lines[1:end]), str(path), line_offset=1)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise SourceError(
            f"{path}:2: front matter must be a YAML mapping of entry fields, got a "
            f"{type(meta).__name__}"
        )
    return meta, "".join(lines[end + 1 :]).strip()


def entry_front_matter(folder: Path) -> tuple[int, int]:
    """How many Markdown files under ``folder`` (a sample of at most 200, README files left
    out) carry knowledge entry front matter (``id`` plus ``summary``, ``domain`` or
    ``integrations``), and how many were looked at. Unreadable files count as not."""
    entries = looked = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        for name in sorted(filenames):
            if not name.lower().endswith(".md") or name.lower() == "readme.md":
                continue
            if looked >= _ENTRY_SAMPLE:
                return entries, looked
            looked += 1
            try:
                meta, _ = read_front_matter(Path(dirpath) / name)
            except SourceError:
                continue
            entries += "id" in meta and bool(_ENTRY_KEYS & set(meta))
    return entries, looked


def _load_folder(root: Path) -> list[KnowledgeSource]:
    manifests: dict[Path, dict[str, Any]] = {}
    files: dict[Path, list[Path]] = {}
    owner_of: dict[Path, Path | None] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        parent_owner = owner_of.get(here.parent) if here != root else None
        if SOURCE_MANIFEST in filenames:
            manifests[here] = _manifest(here / SOURCE_MANIFEST)
            owner_of[here] = here
        else:
            owner_of[here] = parent_owner
        for name in sorted(filenames):
            if not name.lower().endswith(".md") or name.lower() == "readme.md":
                continue
            owner = owner_of[here]
            path = here / name
            if owner is None:
                raise SourceError(
                    f"{path}: no {SOURCE_MANIFEST} in this folder or above it; add "
                    f"{root / SOURCE_MANIFEST} with 'id' and 'version'"
                )
            files.setdefault(owner, []).append(path)
    if not manifests:
        raise SourceError(
            f"{root}: not a knowledge base folder (no {SOURCE_MANIFEST}); add one "
            "with 'id' and 'version'"
        )
    sources = []
    for folder, manifest in manifests.items():
        entries: list[dict[str, Any]] = []
        origins: list[str | None] = []
        for path in files.get(folder, []):
            meta, body = read_front_matter(path)
            if body and "body" in meta:
                raise SourceError(
                    f"{path}: the body is given twice (front matter 'body' and "
                    "Markdown text); keep one"
                )
            if body:
                meta["body"] = body
            entries.append(meta)
            origins.append(str(path))
        source = coerce_source(manifest)
        sources.append(
            KnowledgeSource(
                source.id,
                source.version,
                tuple(entries),
                origin=str(folder / SOURCE_MANIFEST),
                entry_origins=tuple(origins),
            )
        )
    return sources


def _manifest(path: Path) -> dict[str, Any]:
    data = parse_yaml(_read_text(path), str(path))
    if not isinstance(data, dict):
        raise SourceError(f"{path}: must be a YAML mapping with 'id' and 'version'")
    unknown = set(data) - {"id", "version", "description", "title"}
    if unknown:
        raise SourceError(
            f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            "allowed: id, version, description, title"
        )
    return data
