"""``status`` and ``validate``: is a knowledge base ready, and what is wrong with it."""

from __future__ import annotations

import typer
from rich.text import Text

from groundwire import (
    GroundingConfig,
    GroundingEngine,
    GroundingStatus,
    IndexFormatError,
    KnowledgeBase,
    normalize_and_validate,
)
from groundwire.cli.app import app
from groundwire.cli.inputs import load_kb
from groundwire.cli.options import JsonOpt, KbArg
from groundwire.cli.output import (
    EXIT_DATA,
    echo_error,
    errors_shown,
    facts_table,
    make_console,
    plural,
    print_issues,
    print_json,
)
from groundwire.payloads import status_json, validation_json


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
        with GroundingEngine(GroundingConfig(sources=load_kb(kb))) as engine:
            engine.ready()
            state = engine.status()
    if as_json:
        print_json(status_json(state))
    else:
        console = make_console()
        errors = sum(1 for issue in state.validation_issues if issue.severity == "error")
        warnings = len(state.validation_issues) - errors
        console.print(
            facts_table(
                [
                    ("enabled", "yes" if state.enabled else "no"),
                    ("ready", "yes" if state.ready else "no"),
                    ("entries", str(state.entry_count)),
                    ("last error", state.last_error or "-"),
                    ("issues", f"{plural(errors, 'error')}, {plural(warnings, 'warning')}"),
                ]
            )
        )
        print_issues(console, state.validation_issues)
    if not state.ready:
        if not errors_shown():  # a build failure may already have logged its one line
            echo_error(f"the knowledge base is not ready: {state.last_error or 'it did not build'}")
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
        report = normalize_and_validate(load_kb(kb))
        entries, issues, note = len(report.entries), report.issues, ""
    errors = sum(1 for issue in issues if issue.severity == "error")
    ok = errors == 0
    if as_json:
        print_json(validation_json(entries, issues))
    else:
        console = make_console()
        print_issues(console, issues)
        counts = [
            plural(entries, "valid entry", "valid entries"),
            plural(errors, "error"),
            plural(len(issues) - errors, "warning"),
        ]
        verdict = "ok" if ok else "failed"
        console.print(Text(f"{verdict}: {', '.join(counts)}{note}", style="bold"))
    if not ok:
        raise typer.Exit(EXIT_DATA)
