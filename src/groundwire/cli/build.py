"""``index`` and ``ingest``: build a snapshot once and save it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer
from rich.text import Text

from groundwire import (
    AccessPolicy,
    ChunkingConfig,
    GroundwireError,
    IndexSettings,
    KnowledgeBase,
    LoadedDocument,
    LoadResult,
    SkippedSource,
    SourceError,
    ValidationFailedError,
    VectorIndex,
    chunks_to_documents,
    fetch_url,
    find_secret,
    load_documents,
    normalize_and_validate,
)
from groundwire.cli.app import app
from groundwire.cli.inputs import (
    chunk_all,
    labeled_chunks,
    load_kb,
    load_policy,
    nothing_to_index,
    validate_hint,
    warn_entry_files,
    without_policy,
)
from groundwire.cli.options import AccessOpt, JsonOpt
from groundwire.cli.output import (
    facts_table,
    fail,
    make_console,
    print_json,
    progress_display,
    skipped_json,
)
from groundwire.cli.vectors import AllowRemoteOpt, CacheOpt, cached_embedder
from groundwire.config import chunk_settings
from groundwire.index.vector_files import remove_side_file, vectors_path, with_vectors

SourcesArg = Annotated[
    list[Path],
    typer.Argument(
        metavar="SOURCES...",
        help="Knowledge bases to index together: folders of Markdown entries with "
        "source.yaml, or .json/.yaml source files.",
        show_default=False,
    ),
]


def _index_json(out: Path, built: float, saved: float, warnings: int) -> dict[str, Any]:
    """The summary of a written snapshot, from its manifest."""
    info = KnowledgeBase.describe_snapshot(out)
    return {
        "path": str(out),
        **{key: info[key] for key in ("format_version", "entries", "terms", "files", "bytes")},
        "source_manifest_hash": info["source_manifest_hash"],
        "warnings": warnings,
        "build_seconds": round(built, 3),
        "save_seconds": round(saved, 3),
    }


@app.command()
def index(
    sources: SourcesArg,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="PATH",
            help="Snapshot folder to write. An existing snapshot there is replaced "
            "atomically; any other existing folder is refused.",
            show_default=False,
        ),
    ],
    embed: Annotated[
        str | None,
        typer.Option(
            "--embed",
            metavar="MODEL",
            help="Also embed every entry/chunk with MODEL (all-MiniLM-L6-v2, hashing, a "
            "folder, openai:NAME...) and store the vectors in the snapshot, for search "
            "--mode dense/hybrid. Embeddings are cached; with --update only new and "
            "changed entries are embedded.",
            show_default=False,
        ),
    ] = None,
    cache: CacheOpt = None,
    allow_remote: AllowRemoteOpt = False,
    update: UpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Validate and index knowledge bases once, and save the snapshot to PATH.

    Every other command (and GroundingEngine.from_snapshot) opens the snapshot in
    milliseconds instead of rebuilding. Nothing is written when validation fails;
    a failed write leaves an existing snapshot at PATH intact. With --update, only
    entries that changed since PATH was written are analyzed.
    """
    loaded = [source for path in sources for source in load_kb(path)]
    report = normalize_and_validate(loaded)
    if not report.ok:
        hint = validate_hint(sources[0]) if len(sources) == 1 else ""
        fail(str(ValidationFailedError(report.issues)) + hint)
    if update and KnowledgeBase.is_snapshot(out):
        _index_update(out, report.entries, _Embedding(embed, cache, allow_remote), as_json)
        return
    with progress_display(not as_json) as progress:
        task = progress.add_task("indexing", total=len(report.entries))
        started = time.perf_counter()
        snapshot = KnowledgeBase(
            report.entries,
            IndexSettings(),
            issues=report.issues,
            progress=lambda count: progress.advance(task, count),
        )
        built = time.perf_counter() - started
        snapshot, embedded = _embed(snapshot, _Embedding(embed, cache, allow_remote), progress)
        progress.add_task("saving", total=None)
        started = time.perf_counter()
        _save(snapshot, out)
        saved = time.perf_counter() - started
    summary = _index_json(out, built, saved, len(report.warnings))
    summary.update(embedded)
    if as_json:
        print_json(summary)
        return
    make_console().print(
        facts_table(
            [
                ("snapshot", summary["path"]),
                ("entries", f"{summary['entries']:,}"),
                ("terms", f"{summary['terms']:,}"),
                ("files", f"{summary['files']} ({summary['bytes']:,} bytes)"),
                ("source hash", summary["source_manifest_hash"]),
                ("warnings", str(summary["warnings"])),
                ("build", f"{built:.2f} s"),
                ("save", f"{saved:.2f} s"),
            ]
        )
    )


UpdateOpt = Annotated[
    bool,
    typer.Option(
        "--update",
        help="Update the snapshot at the output path instead of rebuilding it: only what "
        "changed since it was written is analyzed (a missing snapshot is built).",
    ),
]


def _update_summary(out: Path, before: int, seconds: float, **counts: Any) -> dict[str, Any]:
    info = KnowledgeBase.describe_snapshot(out)
    return {
        "path": str(out),
        "updated": True,
        "entries_before": before,
        "entries": info["entries"],
        **counts,
        "terms": info["terms"],
        "source_manifest_hash": info["source_manifest_hash"],
        "update_seconds": round(seconds, 3),
    }


def _print_update(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(summary)
        return
    rows = [(key.replace("_", " "), str(value)) for key, value in summary.items()]
    make_console().print(facts_table(rows))


def _ingest_update(
    sources: _Sources,
    out: Path,
    config: ChunkingConfig,
    policy: AccessPolicy | None,
    embedding: _Embedding,
    as_json: bool,
) -> None:
    """``ingest --update``: chunk and index only the files that changed (see index/changes)."""
    started = time.perf_counter()
    try:
        kb = KnowledgeBase.load(out)
        documents, skipped, _ = _load_all(sources)
        updated, changes = kb.update_documents(documents, config, access=policy)
    except (GroundwireError, ValueError) as exc:
        fail(str(exc))
    skipped = [*skipped, *changes.skipped]
    if len(updated) == 0:
        fail(nothing_to_index([*sources.files, *sources.urls], skipped))
    updated, embedded = _embed(updated, embedding, None, (kb, out))
    _save(updated, out)
    summary = _update_summary(
        out,
        len(kb),
        time.perf_counter() - started,
        added=len(changes.added),
        changed=len(changes.changed),
        unchanged=len(changes.unchanged),
        removed=len(changes.removed),
        relabeled=len(changes.relabeled),
        chunks_upserted=len(changes.upserts),
        chunks_deleted=len(changes.deletes),
        skipped=skipped_json(skipped),
        **embedded,
    )
    _print_update(summary, as_json)


def _index_update(out: Path, entries: Sequence[Any], embedding: _Embedding, as_json: bool) -> None:
    """``index --update``: only entries whose content changed are analyzed (and embedded)."""
    started = time.perf_counter()
    kb = KnowledgeBase.load(out)
    if kb.settings != IndexSettings():
        fail(f"{out}: the snapshot was built with other index settings; rebuild it")
    try:
        updated, upserts, deletes = kb.update_entries(entries)
    except GroundwireError as exc:
        fail(str(exc))
    updated, embedded = _embed(updated, embedding, None, (kb, out))
    _save(updated, out)
    summary = _update_summary(
        out,
        len(kb),
        time.perf_counter() - started,
        upserted=len(upserts),
        deleted=len(deletes),
        unchanged=len(entries) - len(upserts),
        **embedded,
    )
    _print_update(summary, as_json)


DocumentsArg = Annotated[
    list[str],
    typer.Argument(
        metavar="PATH_OR_URL...",
        help="Documents to ingest together: files, folders walked recursively "
        "(Markdown/MDX, HTML, JSON, LaTeX, text, CSV/YAML/XML, source code, PDF), and "
        "http(s):// URLs of pages, fetched with the URL fetcher's guards.",
        show_default=False,
    ),
]
_URL_SCHEMES = ("http://", "https://")


def _fetch_all(
    urls: Sequence[str], allow_private: bool, on_done: Any
) -> tuple[list[LoadedDocument], list[SkippedSource], int]:
    """Fetch each URL; a URL that fails or carries a secret is skipped with the reason."""
    documents: list[LoadedDocument] = []
    skipped: list[SkippedSource] = []
    total = 0
    for url in urls:
        try:
            document = fetch_url(url, block_private_addresses=not allow_private)
        except SourceError as exc:
            skipped.append(SkippedSource(url, str(exc).removeprefix(f"{url}: ")))
        else:
            reason = find_secret(b"", document.text)
            if reason is not None:
                skipped.append(SkippedSource(url, reason))
            elif not document.text.strip():
                skipped.append(SkippedSource(url, "no text after extraction"))
            else:
                documents.append(document)
                total += len(document.text.encode("utf-8"))
        on_done()
    return documents, skipped, total


class _Sources(NamedTuple):
    """What ``ingest`` reads: files and folders, URLs, and how."""

    files: list[Path]
    urls: list[str]
    gitignore: bool
    allow_private: bool
    access: Path | None  # the policy file, never content


def _load_all(
    sources: _Sources,
    loaded: Callable[[int, int], None] | None = None,
    fetched: Callable[[], None] = lambda: None,
) -> tuple[list[LoadedDocument], list[SkippedSource], int]:
    """Every document ``sources`` name (files, then pages), what was skipped, bytes read."""
    warn_entry_files(sources.files)
    result = (
        load_documents(sources.files, progress=loaded, gitignore=sources.gitignore)
        if sources.files
        else LoadResult((), (), 0)
    )
    pages, failed, page_bytes = _fetch_all(sources.urls, sources.allow_private, fetched)
    documents = [*without_policy(sources.files, result.documents, sources.access), *pages]
    return documents, [*result.skipped, *failed], result.bytes_read + page_bytes


_CHUNKING = ChunkingConfig()


def _ingest_json(
    out: Path, files: int, chunks: int, bytes_read: int, skipped: Sequence[SkippedSource]
) -> dict[str, Any]:
    info = KnowledgeBase.describe_snapshot(out)
    return {
        "path": str(out),
        "files": files,
        "chunks": chunks,
        "bytes_read": bytes_read,
        "skipped": skipped_json(skipped),
        "terms": info["terms"],
        "source_manifest_hash": info["source_manifest_hash"],
    }


@app.command()
def ingest(
    paths: DocumentsArg,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Snapshot folder to write. An existing snapshot there is replaced "
            "atomically; any other existing folder is refused.",
            show_default=False,
        ),
    ],
    chunk_size: Annotated[
        int,
        typer.Option("--chunk-size", metavar="N", help="Longest chunk, in characters."),
    ] = _CHUNKING.size,
    chunk_overlap: Annotated[
        int,
        typer.Option(
            "--chunk-overlap",
            metavar="N",
            help="Characters consecutive chunks of one split section share (under half "
            "of --chunk-size).",
        ),
    ] = _CHUNKING.overlap,
    embed: Annotated[
        str | None,
        typer.Option(
            "--embed",
            metavar="MODEL",
            help="Also embed every entry/chunk with MODEL (all-MiniLM-L6-v2, hashing, a "
            "folder, openai:NAME...) and store the vectors in the snapshot, for search "
            "--mode dense/hybrid. Embeddings are cached; with --update only new and "
            "changed entries are embedded.",
            show_default=False,
        ),
    ] = None,
    cache: CacheOpt = None,
    allow_remote: AllowRemoteOpt = False,
    access: AccessOpt = None,
    no_gitignore: Annotated[
        bool,
        typer.Option(
            "--no-gitignore",
            help="Also ingest files git ignores (by default a file .gitignore excludes is "
            "skipped when PATH is inside a git work tree), e.g. generated docs.",
        ),
    ] = False,
    allow_private_addresses: Annotated[
        bool,
        typer.Option(
            "--allow-private-addresses",
            help="Fetch URLs whose host is a loopback, private or link-local address "
            "(refused by default). Only for hosts you trust.",
        ),
    ] = False,
    update: UpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Load, chunk and index documents once, and save the snapshot to DIR.

    Shows a progress bar, then a summary: files, chunks, and every skipped file with the
    reason. 'groundwire ground DIR' and 'groundwire search DIR' then answer from it.
    Nothing is written when no document could be loaded. With --access, every chunk
    carries the tenant and ACL labels of the first matching rule (saved in the snapshot).
    Files or pages that carry a secret (a private key, a URL with a password, a service
    token) are always skipped. With --update, DIR's snapshot is updated in place of a
    rebuild: only new and changed files (and pages) are chunked and indexed (labeled by
    --access as a rebuild labels them; another policy than the snapshot's relabels every
    chunk; a labeled snapshot needs --access).
    """
    config = ChunkingConfig(size=chunk_size, overlap=chunk_overlap)
    policy = load_policy(access)  # a bad policy is reported before any document is read
    urls = [item for item in paths if item.lower().startswith(_URL_SCHEMES)]
    files_given = [Path(item) for item in paths if not item.lower().startswith(_URL_SCHEMES)]
    for given in files_given:
        if KnowledgeBase.is_snapshot(given):  # even a damaged one is not documents
            fail(
                f"{given}: is a snapshot folder written by groundwire, not documents; "
                f"search or ground it directly ('groundwire search {given} QUERY')"
            )
    sources = _Sources(files_given, urls, not no_gitignore, allow_private_addresses, access)
    if update and KnowledgeBase.is_snapshot(out):
        embedding = _Embedding(embed, cache, allow_remote)
        _ingest_update(sources, out, config, policy, embedding, as_json)
        return
    with progress_display(not as_json) as progress:
        reading = progress.add_task("loading", total=None)

        def loaded(done: int, total: int) -> None:
            progress.update(reading, completed=done, total=total + len(urls))

        started = time.perf_counter()
        documents, read_skipped, bytes_read = _load_all(
            sources, loaded, lambda: progress.advance(reading)
        )
        chunking = progress.add_task("chunking", total=len(documents))
        chunks, files, failed = chunk_all(documents, config, lambda: progress.advance(chunking))
        chunks, refused = labeled_chunks(chunks, access)
        files -= len(refused)
        skipped = (*read_skipped, *failed, *refused)
        if not chunks:
            fail(nothing_to_index(paths, skipped))
        load_seconds = time.perf_counter() - started
        indexing = progress.add_task("indexing", total=len(chunks))
        started = time.perf_counter()
        kb = KnowledgeBase.from_documents(
            chunks_to_documents(chunks),
            chunk_settings(),
            progress=lambda count: progress.advance(indexing, count),
        ).with_section(KnowledgeBase.chunking_section(config, policy))
        index_seconds = time.perf_counter() - started
        kb, embedded = _embed(kb, _Embedding(embed, cache, allow_remote), progress)
        progress.add_task("saving", total=None)
        started = time.perf_counter()
        _save(kb, out)
        save_seconds = time.perf_counter() - started
    summary = _ingest_json(out, files, len(chunks), bytes_read, skipped)
    summary.update(embedded)
    summary.update(
        load_seconds=round(load_seconds, 3),
        index_seconds=round(index_seconds, 3),
        save_seconds=round(save_seconds, 3),
    )
    if as_json:
        print_json(summary)
        return
    console = make_console()
    console.print(
        facts_table(
            [
                ("snapshot", summary["path"]),
                ("files", f"{files:,} ({bytes_read:,} bytes)"),
                ("chunks", f"{len(chunks):,}"),
                ("skipped", str(len(skipped))),
                ("terms", f"{summary['terms']:,}"),
                ("source hash", summary["source_manifest_hash"]),
                ("load", f"{load_seconds:.2f} s"),
                ("index", f"{index_seconds:.2f} s"),
                ("save", f"{save_seconds:.2f} s"),
            ]
        )
    )
    for item in skipped:
        console.print(Text(f"skipped {item.path}: {item.reason}", style="yellow"), soft_wrap=True)


class _Embedding(NamedTuple):
    """How ``--embed`` asked to embed: the model (None: not asked), cache, consent."""

    model: str | None
    cache: Path | None
    allow_remote: bool


def _embed(
    kb: KnowledgeBase,
    embedding: _Embedding,
    progress: Any,
    previous: tuple[KnowledgeBase, Path] | None = None,
) -> tuple[KnowledgeBase, dict[str, Any]]:
    """``kb`` carrying its vectors section, and what embedding did (empty: no vectors).

    A new snapshot is embedded with ``embedding.model``. An update (``previous``: the
    snapshot it updates and its path) brings the vectors its section holds along:
    unchanged entries keep their rows, only new and changed ones are embedded (with
    another ``--embed`` model than the stored one, everything is). Rows of a legacy
    ``.vectors`` file are not reused (it is not covered by the snapshot's checksums):
    ``--embed`` re-embeds through the cache. A failure fails the command before
    anything is written.
    """
    held = None if previous is None else VectorIndex.from_section(previous[0])
    side = None if previous is None else vectors_path(previous[1])
    if held is None and embedding.model is None and side is not None and side.is_file():
        fail(
            f"{side}: the snapshot's vectors are in this legacy file; pass --embed MODEL "
            "to store them in the snapshot (cached embeddings are reused)"
        )
    if embedding.model is None and held is None:
        return kb, {}
    embedder = None
    if embedding.model is not None:
        embedder = cached_embedder(embedding.model, embedding.cache, embedding.allow_remote)
        if progress is not None:
            task = progress.add_task("embedding", total=len(kb))
            embedder.progress = lambda count: progress.advance(task, count)
    started = time.perf_counter()
    if held is not None and previous is not None:
        vectors = held.updated(previous[0], kb, embedder)
    else:
        assert embedder is not None
        vectors = VectorIndex.build(kb, embedder)
    sent = 0 if embedder is None else embedder.embedded + embedder.reused
    return with_vectors(kb, vectors), {
        "vectors": len(vectors),
        "model": vectors.model_id,
        "embedded": 0 if embedder is None else embedder.embedded,
        "reused": 0 if embedder is None else embedder.reused,
        "kept": len(vectors) - sent,
        "embed_seconds": round(time.perf_counter() - started, 3),
    }


def _save(kb: KnowledgeBase, out: Path) -> None:
    """Write the snapshot (its vectors inside it); a legacy ``OUT.vectors`` file beside it
    is removed, since it no longer describes the snapshot."""
    kb.save(out)
    remove_side_file(out)
