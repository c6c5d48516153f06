"""The ``groundwire`` command line: ground, search, inspect, validate and evaluate.

Built on the public ``groundwire`` API (and ``groundwire.eval``) only. Every command
but ``eval`` takes ``KB`` (a folder of Markdown entries with ``source.yaml``, or a
``.json``/``.yaml`` source file); ``eval`` takes a BEIR dataset or a knowledge base
with judged queries. ``ground`` and ``search`` also take documents (a folder without
``source.yaml``, a file that is not a source file, or a snapshot written by ``ingest``),
which they load, chunk and index on the fly; ``ingest`` saves such an index. Each
prints readable output, or JSON with ``--json``. Errors are one ``error: ...`` line on
stderr, never a traceback: exit code 2 for usage errors
(flags, arguments, option values), 1 for data errors (unreadable or invalid knowledge
or evaluation data, a knowledge base that did not build, a missing optional extra).

To add a command, decorate a function with ``@app.command()``, reuse the shared
argument/option types below, and build output with the ``_*_json`` helpers.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NamedTuple, NoReturn, cast

import typer
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

import groundwire
from groundwire import (
    ChatRequest,
    Chunk,
    ChunkingConfig,
    CitationCheck,
    CitationReport,
    Completion,
    ConfigError,
    ContextConfig,
    EvidenceResult,
    GroundedAnswer,
    GroundedAssistant,
    GroundingConfig,
    GroundingEngine,
    GroundingOutcome,
    GroundingStatus,
    GroundwireError,
    Hit,
    IndexFormatError,
    IndexSettings,
    KnowledgeBase,
    KnowledgeEntry,
    KnowledgeSource,
    LoadedDocument,
    Message,
    QueryError,
    Scope,
    SkippedSource,
    SourceError,
    Turn,
    ValidationFailedError,
    ValidationIssue,
    chunk_document,
    chunks_to_documents,
    create_provider,
    load_documents,
    load_sources,
    normalize_and_validate,
    retrieve_evidence,
    validate_citations,
)
from groundwire.config import OPENAI_COMPATIBLE_PRESETS, EvidenceSettings, chunk_settings
from groundwire.eval import EvalDataset, EvalReport, evaluate, load_dataset
from groundwire.eval.metrics import METRICS
from groundwire.eval.peers import evaluate_bm25s, require_bm25s
from groundwire.eval.runner import Progress as ProgressCallback
from groundwire.eval.runner import ratios
from groundwire.ingest.sources import SOURCE_MANIFEST

__all__ = ["app", "main"]

EXIT_OK = 0
#: Unreadable or invalid knowledge, or a knowledge base that did not build.
EXIT_DATA = 1
#: A bad flag, argument or option value (click's own usage-error code).
EXIT_USAGE = 2

_ROLES = ("user", "assistant")
#: Failure reasons that mean grounding could not run at all (as opposed to "found nothing").
_BROKEN = frozenset({"index-not-ready", "timeout", "error"})
_REASONS = {
    "disabled": "grounding is disabled",
    "empty-query": "the query is empty",
    "index-not-ready": "the knowledge base did not build",
    "no-match": "no eligible entry matched the query",
    "budget-exhausted": "no selected entry fits in the token budget",
    "timeout": "grounding took longer than its time budget",
    "error": "grounding failed unexpectedly",
}
_DEFAULT_MAX_TOKENS = ContextConfig().max_tokens


class _OneLineLog(logging.Handler):
    """Library log records as one ``warning:``/``error:`` line each, without tracebacks."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        cause = record.exc_info[1] if record.exc_info else None
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        _echo_line(record.levelname.lower(), record.getMessage() + detail)


_LOG_HANDLER = _OneLineLog()


class _CleanErrors(TyperGroup):
    """A command group that reports every error as one ``error:`` line on stderr."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the group; in standalone mode, map errors to one line and an exit code."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        library_log = logging.getLogger("groundwire")
        library_log.addHandler(_LOG_HANDLER)
        try:
            result = super().main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )
        except typer.TyperException as exc:  # every click usage error derives from it
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `groundwire`: show the help
                typer.echo(exc.format_message())
                raise SystemExit(EXIT_OK) from None
            _echo_error(exc.format_message())
            raise SystemExit(exc.exit_code) from None
        except GroundwireError as exc:
            _echo_error(str(exc))
            usage = isinstance(exc, ConfigError | QueryError)
            raise SystemExit(EXIT_USAGE if usage else EXIT_DATA) from None
        except typer.Abort:
            _echo_error("aborted")
            raise SystemExit(EXIT_DATA) from None
        finally:
            library_log.removeHandler(_LOG_HANDLER)
        raise SystemExit(result if isinstance(result, int) else EXIT_OK)


app = typer.Typer(
    name="groundwire",
    cls=_CleanErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# -- shared arguments and options ----------------------------------------------------------
KbArg = Annotated[
    Path,
    typer.Argument(
        metavar="KB",
        help="Knowledge base: a folder of Markdown entries with source.yaml, "
        "a .json/.yaml source file, or a snapshot folder written by 'groundwire index'.",
        show_default=False,
    ),
]
KbOrDocsArg = Annotated[
    Path,
    typer.Argument(
        metavar="KB",
        help="Knowledge base: a folder of Markdown entries with source.yaml, a .json/.yaml "
        "source file, or a snapshot folder written by 'groundwire index'. Or documents: a "
        "folder without source.yaml, any other file, or a snapshot written by "
        "'groundwire ingest'.",
        show_default=False,
    ),
]
QueryArg = Annotated[
    str, typer.Argument(metavar="QUERY", help="The question or message to find knowledge for.")
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON instead of readable output.", show_default=False)
]
BlockedOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--blocked-domain",
        metavar="NAME",
        help="Exclude entries of this domain before ranking (repeatable, case-insensitive).",
        show_default=False,
    ),
]


def _echo_line(label: str, message: str) -> None:
    typer.echo(f"{label}: " + " ".join(message.split()), err=True)


def _echo_error(message: str) -> None:
    _echo_line("error", message)


def _fail(message: str, code: int = EXIT_DATA) -> NoReturn:
    """Print one ``error:`` line and exit with ``code``."""
    _echo_error(message)
    raise typer.Exit(code)


def _console() -> Console:
    # Made per call so output follows the current sys.stdout (CliRunner swaps it).
    return Console(highlight=False)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _load(kb: Path) -> list[KnowledgeSource]:
    """The knowledge sources at ``kb`` (raises SourceError naming the file)."""
    return load_sources(kb)


def _engine(kb: Path, config: GroundingConfig) -> GroundingEngine:
    """An engine over ``kb``: opened from a snapshot, or built from the sources in ``config``."""
    if KnowledgeBase.is_snapshot(kb):
        return GroundingEngine.from_snapshot(kb, config)
    return GroundingEngine(config)


def _parse_turns(values: Sequence[str]) -> tuple[Turn, ...]:
    """``ROLE:TEXT`` strings into turns, oldest first; a bad value is a usage error."""
    turns = []
    for value in values:
        role, sep, text = value.partition(":")
        role = role.strip().lower()
        if not sep or role not in _ROLES or not text.strip():
            raise typer.BadParameter(
                f"{value!r} is not ROLE:TEXT with ROLE user or assistant and non-empty "
                "TEXT; write e.g. --turn 'user:my API key leaked'",
                param_hint="'--turn'",
            )
        turns.append(Turn(role, text.strip()))
    return tuple(turns)


def _not_ready(kb: Path, status: GroundingStatus) -> str:
    """Why the engine has no snapshot, naming the first validation error if any."""
    message = f"the knowledge base is not ready: {status.last_error or 'it did not build'}"
    errors = [issue for issue in status.validation_issues if issue.severity == "error"]
    if errors:
        message += f"; first: {errors[0].describe()}" + _validate_hint(kb)
    return message


def _validate_hint(kb: Path) -> str:
    return f"; run 'groundwire validate {kb}' to list every issue"


def _plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


# -- JSON shapes ----------------------------------------------------------------------------
def _issue_json(issue: ValidationIssue) -> dict[str, Any]:
    return {
        "severity": issue.severity,
        "code": issue.code,
        "message": issue.message,
        "source_id": issue.source_id,
        "entry_id": issue.entry_id,
        "field": issue.field,
        "origin": issue.origin,
    }


def _outcome_json(outcome: GroundingOutcome) -> dict[str, Any]:
    meta = outcome.metadata
    block = outcome.block
    return {
        "block": None
        if block is None
        else {
            "kind": block.kind,
            "trusted": block.trusted,
            "content": block.content,
            "citations": [citation.tag for citation in block.citations],
            "metadata": dict(block.metadata),
        },
        "metadata": {
            "selected_ids": list(meta.selected_ids),
            "expanded_ids": list(meta.expanded_ids),
            "candidate_count": meta.candidate_count,
            "context_tokens": meta.context_tokens,
            "truncated": meta.truncated,
            "duration_ms": meta.duration_ms,
            "confidence": meta.confidence,
            "failure_reason": meta.failure_reason,
        },
    }


def _status_json(status: GroundingStatus) -> dict[str, Any]:
    return {
        "enabled": status.enabled,
        "ready": status.ready,
        "entry_count": status.entry_count,
        "last_error": status.last_error,
        "validation_issues": [_issue_json(issue) for issue in status.validation_issues],
    }


def _hit_json(hit: Hit) -> dict[str, Any]:
    return {"id": hit.id, "score": hit.score, "breakdown": dict(hit.breakdown)}


def _eval_json(ours: EvalReport, peer: EvalReport | None) -> dict[str, Any]:
    """The 8 report keys; with a peer, ``{"groundwire", "bm25s", "ratios"}``."""
    if peer is None:
        return ours.as_dict()
    return {"groundwire": ours.as_dict(), peer.system: peer.as_dict(), "ratios": ratios(ours, peer)}


# -- readable output ------------------------------------------------------------------------
def _facts(rows: Sequence[tuple[str, str]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for name, value in rows:
        grid.add_row(name, Text(value))
    return grid


def _print_issues(console: Console, issues: Sequence[ValidationIssue]) -> None:
    for issue in issues:
        style = "red" if issue.severity == "error" else "yellow"
        console.print(Text(issue.describe(), style=style), soft_wrap=True)


def _print_outcome(outcome: GroundingOutcome, max_tokens: int) -> None:
    console = _console()
    meta = outcome.metadata
    if outcome.block is not None:
        console.rule("Knowledge block")
        console.print(Text(outcome.block.content), soft_wrap=True)
        console.rule("Citations")
        for citation in outcome.block.citations:
            console.print(Text(citation.tag), soft_wrap=True)
    else:
        reason = meta.failure_reason or "error"
        console.print(Text(f"No knowledge block ({reason}): {_REASONS[reason]}", style="yellow"))
    console.rule("Metadata")
    console.print(
        _facts(
            [
                ("selected", ", ".join(meta.selected_ids) or "-"),
                ("expanded", ", ".join(meta.expanded_ids) or "-"),
                ("confidence", meta.confidence),
                ("candidates", str(meta.candidate_count)),
                ("tokens", f"{meta.context_tokens} of {max_tokens}"),
                ("truncated", "yes" if meta.truncated else "no"),
                ("duration", f"{meta.duration_ms:.1f} ms"),
                ("failure reason", meta.failure_reason or "-"),
            ]
        )
    )


_EVAL_ROWS = {
    "ndcg@10": "nDCG@10",
    "recall@100": "recall@100",
    "mrr@10": "MRR@10",
    "map@100": "MAP@100",
    "queries": "queries",
    "documents": "documents",
    "index_seconds": "index seconds",
    "queries_per_second": "queries/second",
}


def _eval_cell(name: str, value: float | int) -> str:
    if name in METRICS:
        return f"{value:.4f}"
    if name == "index_seconds":
        return f"{value:.2f}"
    if name == "queries_per_second":
        return f"{value:,.0f}"
    return f"{value:,}"


def _print_eval(dataset: EvalDataset, reports: Sequence[EvalReport]) -> None:
    """One row per measure, one column per system (plus the ratio with a peer)."""
    console = _console()
    kind = "BEIR dataset" if dataset.kind == "beir" else "knowledge base"
    judged = f"; judgments: {dataset.qrels_path}" if dataset.qrels_path is not None else ""
    console.print(Text(f"{dataset.name} ({kind}{judged})"), soft_wrap=True)
    table = Table("", *(item.system for item in reports), box=box.SIMPLE_HEAD)
    shares = ratios(reports[0], reports[1]) if len(reports) == 2 else None
    if shares is not None:
        table.add_column(f"{reports[0].system} / {reports[1].system}")
    for column in table.columns[1:]:
        column.justify = "right"
    values = [item.as_dict() for item in reports]
    for name, label in _EVAL_ROWS.items():
        cells = [_eval_cell(name, row[name]) for row in values]
        if shares is not None:
            share = shares.get(name)
            cells.append("" if name not in shares else "-" if share is None else f"{share:.3f}x")
        table.add_row(label, *cells)
    console.print(table)


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress]:
    """A progress display on stderr; silent when disabled or stderr is not a terminal."""
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        refresh_per_second=4,  # light on the timed query loop
        disable=not enabled or not console.is_terminal,
    ) as progress:
        yield progress


def _tracker(progress: Progress, system: str, documents: int, queries: int) -> ProgressCallback:
    """A ``(stage, advance)`` callback moving one system's index and query bars."""
    tasks = {
        "index": progress.add_task(f"{system}: indexing", total=documents),
        "query": progress.add_task(f"{system}: querying", total=queries),
    }

    def advance(stage: str, count: int) -> None:
        progress.advance(tasks[stage], count)

    return advance


def _top_fields(breakdown: Mapping[str, float], count: int = 3) -> str:
    best = sorted((item for item in breakdown.items() if item[1] > 0), key=lambda i: -i[1])
    return "\n".join(f"{name} {value:.1f}" for name, value in best[:count]) or "-"


# -- documents --------------------------------------------------------------------------------
#: Files that are knowledge source files (as before documents were accepted), not documents.
_SOURCE_FILE_SUFFIXES = frozenset({".json", ".yaml", ".yml"})
#: Folders load_sources does not walk when it looks for source.yaml.
_NOT_WALKED = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv"})
_EVIDENCE_REASONS = {
    "no-match": "no document matched the query",
    "below-min-score": "no excerpt scored at least --min-score",
    "too-few-sources": "fewer distinct documents matched than --min-sources",
    "budget-exhausted": "the excerpts do not fit in the token budget",
}
_EVIDENCE_DEFAULTS = EvidenceSettings()


class _Documents(NamedTuple):
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


def _is_documents(path: Path) -> bool:
    """Whether ``path`` names documents rather than a knowledge base (see docs/CLI.md).

    A missing path is a knowledge base, so it is reported exactly as before.
    """
    if path.is_file():
        return path.suffix.lower() not in _SOURCE_FILE_SUFFIXES
    if not path.is_dir():
        return False
    if KnowledgeBase.is_snapshot(path):
        try:  # a cheap look at the first entry; the full load verifies everything
            peek = KnowledgeBase.load(path, verify="manifest")
            return len(peek) > 0 and _is_chunk(peek.entry(0))
        except GroundwireError:
            return False  # the knowledge base path reports the damage
    return not _has_manifest(path)


def _chunk_all(
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


def _nothing_to_index(paths: Sequence[Path], skipped: Sequence[SkippedSource]) -> str:
    where = ", ".join(str(path) for path in paths)
    if not skipped:
        return f"{where}: no documents to index (no files found)"
    first = skipped[0]
    return (
        f"{where}: no documents to index; {_plural(len(skipped), 'file')} skipped, "
        f"first {first.path}: {first.reason}"
    )


def _documents(path: Path) -> _Documents:
    """Load, chunk and index documents (or open an ingested snapshot)."""
    if KnowledgeBase.is_snapshot(path):
        kb = KnowledgeBase.load(path)
        files = len({str(entry.metadata.get("source_id")) for entry in kb})
        return _Documents(kb, files, len(kb), ())
    loaded = load_documents(path)
    chunks, files, failed = _chunk_all(loaded.documents, ChunkingConfig())
    skipped = (*loaded.skipped, *failed)
    if not chunks:
        _fail(_nothing_to_index([path], skipped))
    kb = KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())
    return _Documents(kb, files, len(chunks), skipped)


def _reject_options(documents: bool, **given: Any) -> None:
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


def _skipped_json(skipped: Sequence[SkippedSource]) -> list[dict[str, str]]:
    return [{"path": item.path, "reason": item.reason} for item in skipped]


def _evidence_json(result: EvidenceResult, docs: _Documents, duration_ms: float) -> dict[str, Any]:
    return {
        "status": result.status,
        "reason": result.reason,
        "block": result.text if result.ready else None,
        "citations": [citation.tag for citation in result.citations],
        "excerpts": [
            {
                "id": excerpt.id,
                "chunk_ids": list(excerpt.chunk_ids),
                "source": excerpt.source_id,
                "path": excerpt.path,
                "heading": excerpt.heading,
                "span": [excerpt.start, excerpt.end],
                "version": excerpt.version,
                "sha256": excerpt.sha256,
                "score": excerpt.score,
                "cut": excerpt.cut,
                "text": excerpt.text,
            }
            for excerpt in result.excerpts
        ],
        "metadata": {
            "tokens": result.tokens,
            "max_tokens": result.settings.max_total_tokens,
            "candidate_count": result.candidate_count,
            "candidates_truncated": result.candidates_truncated,
            "context_truncated": result.context_truncated,
            "sources": len(result.source_ids),
            "duration_ms": round(duration_ms, 3),
        },
        "settings": result.settings.as_dict(),
        "documents": {
            "files": docs.files,
            "chunks": docs.chunks,
            "skipped": _skipped_json(docs.skipped),
        },
    }


def _print_evidence(result: EvidenceResult, docs: _Documents, duration_ms: float) -> None:
    console = _console()
    if result.ready:
        console.rule("Evidence block")
        console.print(Text(result.text), soft_wrap=True)
        console.rule("Citations")
        for excerpt in result.excerpts:
            line = Text(excerpt.citation.tag)
            line.append(f"  {excerpt.path} {excerpt.start}-{excerpt.end}", style="dim")
            if excerpt.heading:
                line.append(f"  {excerpt.heading}", style="dim")
            console.print(line, soft_wrap=True)
    else:
        reason = result.reason or "no-match"
        console.print(Text(f"No evidence ({reason}): {_EVIDENCE_REASONS[reason]}", style="yellow"))
    console.rule("Metadata")
    settings = result.settings
    console.print(
        _facts(
            [
                ("status", result.status),
                ("reason", result.reason or "-"),
                (
                    "documents",
                    f"{_plural(docs.files, 'file')}, {_plural(docs.chunks, 'chunk')}, "
                    f"{len(docs.skipped)} skipped",
                ),
                (
                    "excerpts",
                    f"{len(result.excerpts)} from {_plural(len(result.source_ids), 'source')}",
                ),
                ("candidates", str(result.candidate_count)),
                ("tokens", f"{result.tokens} of {settings.max_total_tokens}"),
                ("truncated", "yes" if result.truncated else "no"),
                ("duration", f"{duration_ms:.1f} ms"),
            ]
        )
    )
    for item in docs.skipped:
        console.print(Text(f"skipped {item.path}: {item.reason}", style="yellow"), soft_wrap=True)


# -- commands ---------------------------------------------------------------------------------
def _version(value: bool) -> None:
    if value:
        typer.echo(f"groundwire {groundwire.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the groundwire version and exit.",
        ),
    ] = False,
) -> None:
    """Ground LLM calls in your team's curated knowledge base.

    Exit codes: 0 success, 1 data error, 2 usage error.
    """


_DOCS_ONLY = "Documents only:"


@app.command()
def ground(
    kb: KbOrDocsArg,
    query: QueryArg,
    integration: Annotated[
        list[str] | None,
        typer.Option(
            "--integration",
            metavar="NAME",
            help="Enable an integration for this turn (repeatable). Entries specific to "
            "an integration are only included when you pass --integration NAME; entries "
            "that apply everywhere are always included.",
            show_default=False,
        ),
    ] = None,
    blocked_domain: BlockedOpt = None,
    max_tokens: Annotated[
        int,
        typer.Option("--max-tokens", metavar="N", min=1, help="Token budget of the block."),
    ] = _DEFAULT_MAX_TOKENS,
    turn: Annotated[
        list[str] | None,
        typer.Option(
            "--turn",
            metavar="ROLE:TEXT",
            help="An earlier message of the conversation, oldest first (repeatable); "
            "ROLE is user or assistant.",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            "-n",
            metavar="K",
            help=f"{_DOCS_ONLY} most excerpts [default: {_EVIDENCE_DEFAULTS.limit}].",
            show_default=False,
        ),
    ] = None,
    max_excerpt_chars: Annotated[
        int | None,
        typer.Option(
            "--max-excerpt-chars",
            metavar="N",
            help=f"{_DOCS_ONLY} longest excerpt in characters "
            f"[default: {_EVIDENCE_DEFAULTS.max_excerpt_chars}].",
            show_default=False,
        ),
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            metavar="S",
            help=f"{_DOCS_ONLY} lowest BM25 score an excerpt may have "
            f"[default: {_EVIDENCE_DEFAULTS.min_score:g}].",
            show_default=False,
        ),
    ] = None,
    min_sources: Annotated[
        int | None,
        typer.Option(
            "--min-sources",
            metavar="N",
            help=f"{_DOCS_ONLY} distinct documents needed for a ready result "
            f"[default: {_EVIDENCE_DEFAULTS.min_sources}].",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Select the knowledge one turn needs and print the block an LLM would receive.

    Shows the knowledge block, its citations and the grounding metadata.
    When no block comes back, the failure reason says why.
    Exits 1 only when grounding could not run (index-not-ready, timeout, error).

    For documents, prints the evidence block (quoted excerpts with spans), its
    citations, and the status: ready, or insufficient with the reason.
    """
    documents_only = {
        "limit": limit,
        "max_excerpt_chars": max_excerpt_chars,
        "min_score": min_score,
        "min_sources": min_sources,
    }
    if _is_documents(kb):
        _reject_options(True, integration=integration, blocked_domain=blocked_domain, turn=turn)
        given = {name: value for name, value in documents_only.items() if value is not None}
        _ground_documents(kb, query, as_json, max_total_tokens=max_tokens, **given)
        return
    _reject_options(False, **documents_only)
    turns = _parse_turns(turn or ())
    config = GroundingConfig(
        sources=() if KnowledgeBase.is_snapshot(kb) else _load(kb),
        blocked_domains=tuple(blocked_domain or ()),
        context=ContextConfig(max_tokens=max_tokens),
    )
    limit = config.retrieval.max_query_chars
    if len(query) > limit:  # the engine would fail open; on the command line it is a usage error
        raise QueryError(f"query has {len(query):,} characters, over the limit of {limit:,}")
    with _engine(kb, config) as engine:
        engine.ready()
        outcome = engine.ground(query, recent_turns=turns, scope=Scope(tuple(integration or ())))
        status = engine.status()
    if as_json:
        _print_json(_outcome_json(outcome))
    else:
        _print_outcome(outcome, max_tokens)
    reason = outcome.metadata.failure_reason
    if reason == "index-not-ready":
        _fail(_not_ready(kb, status))
    if reason in _BROKEN:
        _fail(_REASONS[str(reason)])


def _ground_documents(path: Path, query: str, as_json: bool, **options: Any) -> None:
    """Evidence for ``query`` from the documents at ``path`` (options: retrieve_evidence's)."""
    EvidenceSettings(**options)  # bad values are usage errors before any file is read
    longest = _EVIDENCE_DEFAULTS.max_query_chars
    if len(query) > longest:
        raise QueryError(f"query has {len(query):,} characters, over the limit of {longest:,}")
    docs = _documents(path)
    started = time.perf_counter()
    result = retrieve_evidence(docs.kb, query, **options)
    duration_ms = (time.perf_counter() - started) * 1000
    if as_json:
        _print_json(_evidence_json(result, docs, duration_ms))
    else:
        _print_evidence(result, docs, duration_ms)


@app.command()
def search(
    kb: KbOrDocsArg,
    query: QueryArg,
    integration: Annotated[
        list[str] | None,
        typer.Option(
            "--integration",
            metavar="NAME",
            help="Only consider integration-specific entries of these integrations "
            "(repeatable). Without it, search does not filter by integration.",
            show_default=False,
        ),
    ] = None,
    blocked_domain: BlockedOpt = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", metavar="K", min=1, help="Number of results.")
    ] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Rank entries for a query and explain each score (no context, no expansion).

    For documents, ranks their chunks; skipped files are listed as warnings on stderr.
    """
    if _is_documents(kb):
        _reject_options(True, integration=integration, blocked_domain=blocked_domain)
        docs = _documents(kb)
        for item in docs.skipped:
            _echo_line("warning", f"skipped {item.path}: {item.reason}")
        index = docs.kb
    elif KnowledgeBase.is_snapshot(kb):
        index = KnowledgeBase.load(kb)
    else:
        try:
            index = KnowledgeBase.from_sources(_load(kb))
        except ValidationFailedError as exc:
            _fail(str(exc) + _validate_hint(kb))
    scope = None if integration is None else Scope(tuple(integration))
    hits = index.search(query, k=limit, scope=scope, blocked_domains=tuple(blocked_domain or ()))
    if as_json:
        _print_json([_hit_json(hit) for hit in hits])
        return
    console = _console()
    if not hits:
        console.print("No entries matched.")
        return
    table = Table("#", "id / title", "score", "top fields", box=box.SIMPLE_HEAD)
    table.columns[1].no_wrap = True
    table.columns[2].justify = "right"
    for rank, hit in enumerate(hits, 1):
        entry = index.get(hit.id)
        name = Text(hit.id, style="bold")
        name.append("\n" + (entry.title if entry is not None else ""), style="default")
        table.add_row(str(rank), name, f"{hit.score:.2f}", Text(_top_fields(hit.breakdown)))
    console.print(table)


@app.command()
def status(kb: KbArg, as_json: JsonOpt = False) -> None:
    """Build the knowledge base as the grounding engine does and report its status.

    Exits 1 when the knowledge base is not ready (for example, it failed validation,
    or a snapshot failed its checks).
    """
    if KnowledgeBase.is_snapshot(kb):
        try:
            with GroundingEngine.from_snapshot(kb) as engine:
                state = engine.status()
        except IndexFormatError as exc:
            state = GroundingStatus(True, False, 0, f"{type(exc).__name__}: {exc}", ())
    else:
        with GroundingEngine(GroundingConfig(sources=_load(kb))) as engine:
            engine.ready()
            state = engine.status()
    if as_json:
        _print_json(_status_json(state))
    else:
        console = _console()
        errors = sum(1 for issue in state.validation_issues if issue.severity == "error")
        warnings = len(state.validation_issues) - errors
        console.print(
            _facts(
                [
                    ("enabled", "yes" if state.enabled else "no"),
                    ("ready", "yes" if state.ready else "no"),
                    ("entries", str(state.entry_count)),
                    ("last error", state.last_error or "-"),
                    ("issues", f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')}"),
                ]
            )
        )
        _print_issues(console, state.validation_issues)
    if not state.ready:
        raise typer.Exit(EXIT_DATA)


@app.command()
def validate(kb: KbArg, as_json: JsonOpt = False) -> None:
    """Check every entry and print one line per issue, naming file, source, entry and field.

    A snapshot folder is verified instead (every checksum and bound); its build's
    warnings are listed. Exits 1 when any issue is an error; warnings alone exit 0.
    """
    if KnowledgeBase.is_snapshot(kb):
        snapshot = KnowledgeBase.load(kb, verify="full")  # IndexFormatError: one line, exit 1
        entries, issues = len(snapshot), snapshot.issues
        note = " (snapshot verified: checksums and bounds)"
    else:
        report = normalize_and_validate(_load(kb))
        entries, issues, note = len(report.entries), report.issues, ""
    errors = sum(1 for issue in issues if issue.severity == "error")
    ok = errors == 0
    if as_json:
        _print_json(
            {"ok": ok, "entries": entries, "issues": [_issue_json(issue) for issue in issues]}
        )
    else:
        console = _console()
        _print_issues(console, issues)
        counts = [
            _plural(entries, "valid entry", "valid entries"),
            _plural(errors, "error"),
            _plural(len(issues) - errors, "warning"),
        ]
        verdict = "ok" if ok else "failed"
        console.print(Text(f"{verdict}: {', '.join(counts)}{note}", style="bold"))
    if not ok:
        raise typer.Exit(EXIT_DATA)


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
    """The summary of a written snapshot, from its manifest (a documented file format)."""
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    files = manifest["files"].values()
    return {
        "path": str(out),
        "format_version": manifest["format_version"],
        "entries": manifest["counts"]["entries"],
        "terms": manifest["counts"]["terms"],
        "files": len(files) + 1,
        "bytes": sum(item["bytes"] for item in files) + (out / "manifest.json").stat().st_size,
        "source_manifest_hash": manifest["source_manifest_hash"],
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
    as_json: JsonOpt = False,
) -> None:
    """Validate and index knowledge bases once, and save the snapshot to PATH.

    Every other command (and GroundingEngine.from_snapshot) opens the snapshot in
    milliseconds instead of rebuilding. Nothing is written when validation fails;
    a failed write leaves an existing snapshot at PATH intact.
    """
    loaded = [source for path in sources for source in _load(path)]
    report = normalize_and_validate(loaded)
    if not report.ok:
        hint = _validate_hint(sources[0]) if len(sources) == 1 else ""
        _fail(str(ValidationFailedError(report.issues)) + hint)
    with _progress(not as_json) as progress:
        task = progress.add_task("indexing", total=len(report.entries))
        started = time.perf_counter()
        snapshot = KnowledgeBase(
            report.entries,
            IndexSettings(),
            issues=report.issues,
            progress=lambda count: progress.advance(task, count),
        )
        built = time.perf_counter() - started
        progress.add_task("saving", total=None)
        started = time.perf_counter()
        snapshot.save(out)
        saved = time.perf_counter() - started
    summary = _index_json(out, built, saved, len(report.warnings))
    if as_json:
        _print_json(summary)
        return
    _console().print(
        _facts(
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


DocumentsArg = Annotated[
    list[Path],
    typer.Argument(
        metavar="PATH...",
        help="Documents to ingest together: files, and folders walked recursively "
        "(Markdown/MDX, HTML, JSON, LaTeX, text, CSV/YAML/XML, source code, PDF).",
        show_default=False,
    ),
]
_CHUNKING = ChunkingConfig()


def _ingest_json(
    out: Path, files: int, chunks: int, bytes_read: int, skipped: Sequence[SkippedSource]
) -> dict[str, Any]:
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return {
        "path": str(out),
        "files": files,
        "chunks": chunks,
        "bytes_read": bytes_read,
        "skipped": _skipped_json(skipped),
        "terms": manifest["counts"]["terms"],
        "source_manifest_hash": manifest["source_manifest_hash"],
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
    as_json: JsonOpt = False,
) -> None:
    """Load, chunk and index documents once, and save the snapshot to DIR.

    Shows a progress bar, then a summary: files, chunks, and every skipped file with the
    reason. 'groundwire ground DIR' and 'groundwire search DIR' then answer from it.
    Nothing is written when no document could be loaded.
    """
    config = ChunkingConfig(size=chunk_size, overlap=chunk_overlap)
    with _progress(not as_json) as progress:
        reading = progress.add_task("loading", total=None)

        def loaded(done: int, total: int) -> None:
            progress.update(reading, completed=done, total=total)

        started = time.perf_counter()
        result = load_documents(paths, progress=loaded)
        chunking = progress.add_task("chunking", total=len(result.documents))
        chunks, files, failed = _chunk_all(
            result.documents, config, lambda: progress.advance(chunking)
        )
        skipped = (*result.skipped, *failed)
        if not chunks:
            _fail(_nothing_to_index(paths, skipped))
        load_seconds = time.perf_counter() - started
        indexing = progress.add_task("indexing", total=len(chunks))
        started = time.perf_counter()
        kb = KnowledgeBase.from_documents(
            chunks_to_documents(chunks),
            chunk_settings(),
            progress=lambda count: progress.advance(indexing, count),
        )
        index_seconds = time.perf_counter() - started
        progress.add_task("saving", total=None)
        started = time.perf_counter()
        kb.save(out)
        save_seconds = time.perf_counter() - started
    summary = _ingest_json(out, files, len(chunks), result.bytes_read, skipped)
    summary.update(
        load_seconds=round(load_seconds, 3),
        index_seconds=round(index_seconds, 3),
        save_seconds=round(save_seconds, 3),
    )
    if as_json:
        _print_json(summary)
        return
    console = _console()
    console.print(
        _facts(
            [
                ("snapshot", summary["path"]),
                ("files", f"{files:,} ({result.bytes_read:,} bytes)"),
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


DatasetArg = Annotated[
    Path,
    typer.Argument(
        metavar="DATASET",
        help="A BEIR dataset folder (corpus.jsonl or corpus.jsonl.gz, queries.jsonl, "
        "qrels/SPLIT.tsv), or a knowledge base whose queries.jsonl and qrels.tsv sit in "
        "it or in a sibling DATASET-eval folder.",
        show_default=False,
    ),
]


@app.command("eval")
def eval_(
    dataset: DatasetArg,
    split: Annotated[
        str,
        typer.Option("--split", metavar="NAME", help="BEIR qrels split: reads qrels/NAME.tsv."),
    ] = "test",
    queries: Annotated[
        Path | None,
        typer.Option(
            "--queries",
            metavar="FILE",
            help='Queries JSON Lines file ({"_id", "text"} per line), instead of the one found.',
            show_default=False,
        ),
    ] = None,
    qrels: Annotated[
        Path | None,
        typer.Option(
            "--qrels",
            metavar="FILE",
            help="Relevance judgments (query-id, corpus-id, score; TSV), instead of the one found.",
            show_default=False,
        ),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Also run bm25s (Lucene BM25, k1 1.5, b 0.75, the same stemmer and stop "
            "words) on the same data and print both rows and the ratios; needs "
            "pip install 'groundwire\\[bench]'.",  # rich would read [bench] as markup
            show_default=False,
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Measure ranking quality and speed on judged queries.

    Indexes the documents (or knowledge base entries), runs every judged query one at
    a time (top 100) and reports nDCG@10, recall@100, MRR@10 and MAP@100 (trec_eval
    definitions), the numbers of queries and documents, index build seconds and
    queries/second.
    """
    if compare:
        require_bm25s()  # fail before minutes of indexing, not after
    data = load_dataset(dataset, split=split, queries=queries, qrels=qrels)
    reports: list[EvalReport] = []
    with _progress(not as_json) as progress:
        try:
            reports.append(
                evaluate(
                    data,
                    progress=_tracker(progress, "groundwire", data.size, len(data.queries)),
                )
            )
        except ValidationFailedError as exc:
            _fail(str(exc) + _validate_hint(dataset))
        if compare:
            tracker = _tracker(progress, "bm25s", data.size, len(data.queries))
            reports.append(evaluate_bm25s(data, progress=tracker))
    if as_json:
        _print_json(_eval_json(reports[0], reports[1] if compare else None))
    else:
        _print_eval(data, reports)


# -- ask ----------------------------------------------------------------------------------------
_ASK_SYSTEM = (
    "Answer the user's question. Use the knowledge below where it applies, and cite each "
    "entry you rely on with its tag, written exactly as shown, for example "
    "[KB:security.api-keys@2026-11-15]. Cite only tags that appear below."
)
_REJECTIONS = {
    "no-citation": "it cites none of the returned evidence",
    "invalid-citation": "it cites ids outside the returned evidence",
}
QuestionArg = Annotated[
    str, typer.Argument(metavar="QUESTION", help="The question to answer from KB.")
]


def _ask_provider(name: str, model: str | None, base_url: str | None) -> Any:
    """The provider for ``ask``: arguments first, then the usual environment variables."""
    key = name.strip().lower()
    known = ("openai", "anthropic", *sorted(OPENAI_COMPATIBLE_PRESETS))
    if key not in known:
        raise typer.BadParameter(
            f"{name!r} is not a provider; use one of: {', '.join(known)}",
            param_hint="'--provider'",
        )
    env = "ANTHROPIC_MODEL" if key == "anthropic" else "OPENAI_MODEL"
    if not model and not os.environ.get(env):
        raise typer.BadParameter(
            f"no model given: pass --model NAME or set {env}", param_hint="'--model'"
        )
    spec = f"{key}:{model}" if model else key
    return create_provider(spec, **({"base_url": base_url} if base_url else {}))


def _check_json(check: CitationCheck) -> dict[str, Any]:
    return {
        "tag": check.tag,
        "kind": check.kind,
        "id": check.id,
        "version": check.version,
        "valid": check.valid,
        "problem": check.problem,
    }


def _ask_json(
    kind: str,
    status: str,
    reason: str | None,
    text: str,
    report: CitationReport | None,
    completion: Completion | None,
) -> dict[str, Any]:
    return {
        "kb_kind": kind,
        "status": status,
        "reason": reason,
        "answer": text,
        "citations": [] if report is None else [_check_json(c) for c in report.citations],
        "citations_ok": report is not None and report.ok,
        "offered": [] if report is None else [c.tag for c in report.offered],
        "provider": None if completion is None else completion.provider,
        "model": None if completion is None else completion.model,
    }


def _print_checks(report: CitationReport, where: Mapping[str, str]) -> None:
    """Each citation once, marked valid (offered) or invalid, with where it points."""
    console = _console()
    console.rule("Citations")
    if not report.citations:
        console.print(Text("none: the answer cites nothing", style="yellow"))
    seen: set[str] = set()
    for check in report.citations:
        if check.tag in seen:
            continue
        seen.add(check.tag)
        line = Text(
            "valid    " if check.valid else "INVALID  ", style="green" if check.valid else "red"
        )
        line.append(check.tag)
        if check.valid and where.get(check.id):
            line.append(f"  {where[check.id]}", style="dim")
        elif not check.valid:
            line.append(f"  ({check.problem}: not among the ids given to the model)", style="red")
        console.print(line, soft_wrap=True)


def _ask_documents(docs: _Documents, question: str, provider: Any, as_json: bool) -> None:
    """Answer from evidence: buffered until the citations pass (GroundedAssistant)."""
    assistant = GroundedAssistant(docs.kb, provider, on_rejection="return")
    answer: GroundedAnswer | None = None
    if as_json:
        answer = assistant.answer(question)
    else:
        for event in assistant.stream_answer(question):
            if event.kind == "text":
                typer.echo(event.text, nl=False)
            else:
                answer = event.answer
    assert answer is not None  # a stream always ends with its done event
    if as_json:
        _print_json(
            _ask_json(
                "documents",
                answer.status,
                answer.reason,
                answer.text,
                answer.citations,
                answer.completion,
            )
        )
    elif answer.status == "insufficient":
        reason = answer.reason or "no-match"
        message = f"No answer (insufficient evidence: {reason}): {_EVIDENCE_REASONS[reason]}"
        _console().print(
            Text(message + "; the model was not called", style="yellow"), soft_wrap=True
        )
    elif answer.answered and answer.citations is not None:
        typer.echo()
        where = {}
        for excerpt in answer.evidence.excerpts:
            label = f"{excerpt.path} {excerpt.start}-{excerpt.end}"
            for chunk_id in (excerpt.id, *excerpt.chunk_ids):
                where[chunk_id] = label + (f"  {excerpt.heading}" if excerpt.heading else "")
        _print_checks(answer.citations, where)
    if answer.status == "rejected":
        invalid = answer.citations.invalid_tags if answer.citations is not None else ()
        shown = f" ({', '.join(invalid[:5])})" if invalid else ""
        _fail(f"the answer was rejected and not shown: {_REJECTIONS[str(answer.reason)]}{shown}")


def _ask_model(provider: Any, request: ChatRequest, as_json: bool) -> Completion:
    """One whole completion (``--json``), or the answer streamed to stdout as it comes."""
    if as_json:
        return cast(Completion, provider.complete(request))
    completion = None
    pieces: list[str] = []
    for event in provider.stream(request):
        if event.kind == "text":
            pieces.append(event.text)
            typer.echo(event.text, nl=False)
        elif event.kind == "done":
            completion = event.completion
    typer.echo()
    return completion if completion is not None else Completion("".join(pieces))


def _ask_knowledge(
    kb: Path, question: str, provider_for_ask: Callable[[], Any], as_json: bool
) -> None:
    """Answer with the knowledge block in the system prompt; stream, then check citations."""
    config = GroundingConfig(sources=() if KnowledgeBase.is_snapshot(kb) else _load(kb))
    longest = config.retrieval.max_query_chars
    if len(question) > longest:
        raise QueryError(
            f"question has {len(question):,} characters, over the limit of {longest:,}"
        )
    with _engine(kb, config) as engine:
        engine.ready()
        outcome = engine.ground(question)
        status = engine.status()
    reason = outcome.metadata.failure_reason
    if reason == "index-not-ready":
        _fail(_not_ready(kb, status))
    block = outcome.block
    if block is None:  # fail open, as generate does: answer without knowledge, and say so
        _echo_line(
            "warning",
            f"no knowledge block ({reason}): {_REASONS[str(reason)]}; the answer is not grounded",
        )
    system = _ASK_SYSTEM if block is None else f"{_ASK_SYSTEM}\n\n{block.content}"
    request = ChatRequest(messages=(Message("user", question),), system=system)
    with provider_for_ask() as provider:
        completion = _ask_model(provider, request, as_json)
    report = validate_citations(completion.text, block.citations if block is not None else [])
    if as_json:
        _print_json(_ask_json("knowledge", "answered", reason, completion.text, report, completion))
        return
    titles = {c.id: "" for c in report.offered}
    if outcome.retrieval is not None:
        for item in outcome.retrieval.primary:
            titles[item.entry.id] = item.entry.title
        for entry in outcome.retrieval.expanded:
            titles[entry.id] = entry.title
    _print_checks(report, titles)


@app.command()
def ask(
    kb: KbOrDocsArg,
    question: QuestionArg,
    provider: Annotated[
        str,
        typer.Option(
            "--provider",
            metavar="NAME",
            help="Model provider: openai (or any OpenAI-compatible server, with "
            "--base-url), anthropic, or a local server preset: ollama, vllm, llamacpp, "
            "lmstudio. Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY.",
        ),
    ] = "openai",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="NAME",
            help="Model name [default: $OPENAI_MODEL or $ANTHROPIC_MODEL].",
            show_default=False,
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            metavar="URL",
            help="API base URL, e.g. a local server "
            "[default: $OPENAI_BASE_URL or $ANTHROPIC_BASE_URL, else the provider's].",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer QUESTION with a model, grounded in KB, and check the answer's citations.

    For a knowledge base, the knowledge block goes into the system prompt; the answer
    streams as it comes, then its [KB:id@version] citations are listed and checked.

    For documents, the answer is built from evidence excerpts and must cite them as
    [evidence:ID]; it is held back until every citation is checked, and rejected (exit
    1) when it cites anything outside the evidence or nothing. When the evidence is
    insufficient the model is not called. Checked citations mean the ids were given to
    the model, not that the answer is true.
    """

    @contextmanager
    def provider_for_ask() -> Iterator[Any]:
        """Made once ``KB`` has been read (its errors come first), closed after the answer."""
        llm = _ask_provider(provider, model, base_url)
        try:
            yield llm
        finally:
            close = getattr(llm, "close", None)
            if callable(close):
                close()

    if _is_documents(kb):
        docs = _documents(kb)
        for item in docs.skipped:
            _echo_line("warning", f"skipped {item.path}: {item.reason}")
        with provider_for_ask() as llm:
            _ask_documents(docs, question, llm, as_json)
    else:
        _ask_knowledge(kb, question, provider_for_ask, as_json)


def main() -> None:
    """Run the ``groundwire`` command line (the console script's entry point)."""
    app()
