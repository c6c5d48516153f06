"""Output helpers shared by every command: error lines, JSON, tables, progress, reasons."""

from __future__ import annotations

import json
import logging
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

from groundwire import ValidationIssue
from groundwire.eval.runner import Progress as ProgressCallback
from groundwire.payloads import issue_json, skipped_json

__all__ = ["issue_json", "skipped_json"]  # re-exported: the JSON shapes live in payloads

EXIT_OK = 0
#: Unreadable or invalid knowledge, or a knowledge base that did not build.
EXIT_DATA = 1
#: A bad flag, argument or option value (click's own usage-error code).
EXIT_USAGE = 2


ROLES = ("user", "assistant")
#: Failure reasons that mean grounding could not run at all (as opposed to "found nothing").
BROKEN = frozenset({"index-not-ready", "timeout", "error", "backend-unavailable"})
REASONS = {
    "disabled": "grounding is disabled",
    "empty-query": "the query is empty",
    "index-not-ready": "the knowledge base did not build",
    "no-match": "no eligible entry matched the query",
    "low-relevance": "entries matched, but none well enough to send (see the candidates)",
    "budget-exhausted": "no selected entry fits in the token budget",
    "timeout": "grounding took longer than its time budget",
    "error": "grounding failed unexpectedly",
    "backend-unavailable": "the search backend (Milvus) failed; see the log",
}


EVIDENCE_REASONS = {
    "no-match": "no document matched the query",
    "below-min-score": "no excerpt scored at least --min-score",
    "low-relevance": "chunks matched, but none well enough to send",
    "too-few-sources": "fewer distinct documents matched than --min-sources",
    "budget-exhausted": "the excerpts do not fit in the token budget",
}


_SHOWN = {"error": 0}


def echo_line(label: str, message: str) -> None:
    if label == "error":
        _SHOWN["error"] += 1
    typer.echo(f"{label}: " + " ".join(message.split()), err=True)


def errors_shown() -> int:
    """``error:`` lines written since the command started (see ``reset_errors_shown``)."""
    return _SHOWN["error"]


def reset_errors_shown() -> None:
    _SHOWN["error"] = 0


def echo_error(message: str) -> None:
    echo_line("error", message)


def fail(message: str, code: int = EXIT_DATA) -> NoReturn:
    """Print one ``error:`` line and exit with ``code``."""
    echo_error(message)
    raise typer.Exit(code)


@contextmanager
def quiet_library_warnings() -> Iterator[None]:
    """Hold back the library's warnings (a command reports the same facts itself)."""
    library = logging.getLogger("groundwire")
    level = library.level
    library.setLevel(logging.ERROR)
    try:
        yield
    finally:
        library.setLevel(level)


#: Width of a console whose output goes to a pipe or a file: wide enough that nothing is
#: wrapped, since nothing pads to the full width there (see ``_Output``).
PIPED_WIDTH = 100_000


class _Output(Console):
    """The stdout console: rich on a terminal; piped or redirected, plain lines that are
    neither wrapped nor padded to 80 columns (rules become one short line)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Print; piped, without the spaces rich pads table cells and lines with."""
        if self.is_terminal:
            super().print(*objects, **kwargs)
            return
        with self.capture() as captured:
            super().print(*objects, **kwargs)
        self.file.write("\n".join(line.rstrip() for line in captured.get().split("\n")))

    def rule(self, title: Any = "", *args: Any, **kwargs: Any) -> None:
        """A horizontal rule on a terminal; ``── title ──`` otherwise."""
        if self.is_terminal:
            super().rule(title, *args, **kwargs)
        else:
            self.print(Text(f"── {title} ──" if title else "──"), soft_wrap=True)


def make_console() -> Console:
    """A console on the current stdout (made per call: CliRunner swaps sys.stdout)."""
    probe = Console()
    return _Output(highlight=False, width=None if probe.is_terminal else PIPED_WIDTH)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


class _Facts:
    """Name/value rows: an aligned grid on a terminal; piped, one ``name  value`` line
    each, without trailing spaces."""

    def __init__(self, rows: Sequence[tuple[str, str]]) -> None:
        self.rows = rows

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Any]:
        if console.is_terminal:
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold")
            grid.add_column()
            for name, value in self.rows:
                grid.add_row(name, Text(value))
            yield grid
            return
        width = max((len(name) for name, _ in self.rows), default=0)
        for name, value in self.rows:
            yield Text(f"{name.ljust(width)}  {value}".rstrip())


def facts_table(rows: Sequence[tuple[str, str]]) -> _Facts:
    """Name/value rows for ``console.print`` (see :class:`_Facts`)."""
    return _Facts(rows)


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
