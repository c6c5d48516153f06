"""The ``groundwire`` command line: ground, search, inspect and validate a knowledge base.

Built on the public ``groundwire`` API only. Every command takes ``KB`` (a folder of
Markdown entries with ``source.yaml``, or a ``.json``/``.yaml`` source file) and prints
readable output, or JSON with ``--json``. Errors are one ``error: ...`` line on stderr,
never a traceback: exit code 2 for usage errors (flags, arguments, option values),
1 for data errors (unreadable or invalid knowledge, a knowledge base that did not build).

To add a command, decorate a function with ``@app.command()``, reuse the shared
argument/option types below, and build output with the ``_*_json`` helpers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

import groundwire
from groundwire import (
    ConfigError,
    ContextConfig,
    GroundingConfig,
    GroundingEngine,
    GroundingOutcome,
    GroundingStatus,
    GroundwireError,
    Hit,
    KnowledgeBase,
    KnowledgeSource,
    QueryError,
    Scope,
    Turn,
    ValidationFailedError,
    ValidationIssue,
    load_sources,
    normalize_and_validate,
)

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
        "or a .json/.yaml source file.",
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


def _top_fields(breakdown: Mapping[str, float], count: int = 3) -> str:
    best = sorted((item for item in breakdown.items() if item[1] > 0), key=lambda i: -i[1])
    return "\n".join(f"{name} {value:.1f}" for name, value in best[:count]) or "-"


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


@app.command()
def ground(
    kb: KbArg,
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
    as_json: JsonOpt = False,
) -> None:
    """Select the knowledge one turn needs and print the block an LLM would receive.

    Shows the knowledge block, its citations and the grounding metadata.
    When no block comes back, the failure reason says why.
    Exits 1 only when grounding could not run (index-not-ready, timeout, error).
    """
    turns = _parse_turns(turn or ())
    config = GroundingConfig(
        sources=_load(kb),
        blocked_domains=tuple(blocked_domain or ()),
        context=ContextConfig(max_tokens=max_tokens),
    )
    limit = config.retrieval.max_query_chars
    if len(query) > limit:  # the engine would fail open; on the command line it is a usage error
        raise QueryError(f"query has {len(query):,} characters, over the limit of {limit:,}")
    with GroundingEngine(config) as engine:
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


@app.command()
def search(
    kb: KbArg,
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
    """Rank entries for a query and explain each score (no context, no expansion)."""
    sources = _load(kb)
    try:
        index = KnowledgeBase.from_sources(sources)
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

    Exits 1 when the knowledge base is not ready (for example, it failed validation).
    """
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

    Exits 1 when any issue is an error; warnings alone exit 0.
    """
    report = normalize_and_validate(_load(kb))
    if as_json:
        _print_json(
            {
                "ok": report.ok,
                "entries": len(report.entries),
                "issues": [_issue_json(issue) for issue in report.issues],
            }
        )
    else:
        console = _console()
        _print_issues(console, report.issues)
        counts = [
            _plural(len(report.entries), "valid entry", "valid entries"),
            _plural(len(report.errors), "error"),
            _plural(len(report.warnings), "warning"),
        ]
        verdict = "ok" if report.ok else "failed"
        console.print(Text(f"{verdict}: {', '.join(counts)}", style="bold"))
    if not report.ok:
        raise typer.Exit(EXIT_DATA)


def main() -> None:
    """Run the ``groundwire`` command line (the console script's entry point)."""
    app()
