"""Output helpers shared by every command: error lines, JSON, tables, progress, reasons."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
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

from groundwire import (
    SkippedSource,
    ValidationIssue,
)
from groundwire.eval.runner import Progress as ProgressCallback

EXIT_OK = 0
#: Unreadable or invalid knowledge, or a knowledge base that did not build.
EXIT_DATA = 1
#: A bad flag, argument or option value (click's own usage-error code).
EXIT_USAGE = 2


ROLES = ("user", "assistant")
#: Failure reasons that mean grounding could not run at all (as opposed to "found nothing").
BROKEN = frozenset({"index-not-ready", "timeout", "error"})
REASONS = {
    "disabled": "grounding is disabled",
    "empty-query": "the query is empty",
    "index-not-ready": "the knowledge base did not build",
    "no-match": "no eligible entry matched the query",
    "budget-exhausted": "no selected entry fits in the token budget",
    "timeout": "grounding took longer than its time budget",
    "error": "grounding failed unexpectedly",
}


EVIDENCE_REASONS = {
    "no-match": "no document matched the query",
    "below-min-score": "no excerpt scored at least --min-score",
    "too-few-sources": "fewer distinct documents matched than --min-sources",
    "budget-exhausted": "the excerpts do not fit in the token budget",
}


def echo_line(label: str, message: str) -> None:
    typer.echo(f"{label}: " + " ".join(message.split()), err=True)


def echo_error(message: str) -> None:
    echo_line("error", message)


def fail(message: str, code: int = EXIT_DATA) -> NoReturn:
    """Print one ``error:`` line and exit with ``code``."""
    echo_error(message)
    raise typer.Exit(code)


def make_console() -> Console:
    # Made per call so output follows the current sys.stdout (CliRunner swaps it).
    return Console(highlight=False)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def issue_json(issue: ValidationIssue) -> dict[str, Any]:
    return {
        "severity": issue.severity,
        "code": issue.code,
        "message": issue.message,
        "source_id": issue.source_id,
        "entry_id": issue.entry_id,
        "field": issue.field,
        "origin": issue.origin,
    }


def facts_table(rows: Sequence[tuple[str, str]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for name, value in rows:
        grid.add_row(name, Text(value))
    return grid


def print_issues(console: Console, issues: Sequence[ValidationIssue]) -> None:
    for issue in issues:
        style = "red" if issue.severity == "error" else "yellow"
        console.print(Text(issue.describe(), style=style), soft_wrap=True)


@contextmanager
def progress_display(enabled: bool) -> Iterator[Progress]:
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


def eval_tracker(progress: Progress, system: str, documents: int, queries: int) -> ProgressCallback:
    """A ``(stage, advance)`` callback moving one system's index and query bars."""
    tasks = {
        "index": progress.add_task(f"{system}: indexing", total=documents),
        "query": progress.add_task(f"{system}: querying", total=queries),
    }

    def advance(stage: str, count: int) -> None:
        progress.advance(tasks[stage], count)

    return advance


def top_fields(breakdown: Mapping[str, float], count: int = 3) -> str:
    best = sorted((item for item in breakdown.items() if item[1] > 0), key=lambda i: -i[1])
    return "\n".join(f"{name} {value:.1f}" for name, value in best[:count]) or "-"


def skipped_json(skipped: Sequence[SkippedSource]) -> list[dict[str, str]]:
    return [{"path": item.path, "reason": item.reason} for item in skipped]
