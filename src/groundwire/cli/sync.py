"""``sync``: run the configured sources once (or ``--watch``), then publish the snapshot."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from groundwire import Embedder, Syncer, SyncReport, load_sync_config
from groundwire.cli.app import app
from groundwire.cli.options import JsonOpt
from groundwire.cli.output import (
    EXIT_DATA,
    facts_table,
    fail,
    make_console,
    print_json,
    progress_display,
)
from groundwire.cli.vectors import AllowRemoteOpt, CacheOpt, cached_embedder


def _tracker(progress: Progress) -> Any:
    """A progress callback: one bar per source, advanced per item of each batch."""
    tasks: dict[str, TaskID] = {}

    def on_event(event: Any) -> None:
        task = tasks.get(event.source_id)
        if task is None:
            task = tasks[event.source_id] = progress.add_task(f"{event.source_id}", total=None)
        if event.stage == "batch":
            progress.update(
                task,
                description=f"{event.source_id}: batch {event.batch}",
                completed=0,
                total=event.total,
            )
        elif event.stage == "item":
            progress.update(task, completed=event.done)
        elif event.stage == "recorded":
            progress.update(task, description=f"{event.source_id}: committing batch {event.batch}")

    return on_event


def _summary_table(report: SyncReport) -> Table:
    table = Table(title=None, show_edge=False, pad_edge=False)
    for column in ("source", "new", "changed", "removed", "unchanged", "skipped", "batches"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for source in report.sources:
        table.add_row(
            source.source_id,
            str(len(source.new)),
            str(len(source.changed)),
            str(len(source.removed)),
            str(source.unchanged + len(source.replayed)),
            str(len(source.skipped)),
            str(source.batches),
        )
    return table


def _print(console: Console, report: SyncReport) -> None:
    console.print(_summary_table(report))
    for source in report.sources:
        if source.error is not None:
            console.print(
                Text(f"error {source.source_id}: {source.error}", style="red"), soft_wrap=True
            )
        if source.resync_reason:
            console.print(
                Text(f"resync {source.source_id}: {source.resync_reason}", style="yellow"),
                soft_wrap=True,
            )
        if source.replayed_batch:
            console.print(
                Text(
                    f"replayed {source.source_id}: batch {source.replayed_batch} "
                    "after an interrupted run"
                ),
                soft_wrap=True,
            )
        for item in source.skipped:
            console.print(
                Text(f"skipped {source.source_id} {item.path}: {item.reason}", style="yellow"),
                soft_wrap=True,
            )
    if report.publish_error is not None:
        console.print(Text(f"error snapshot: {report.publish_error}", style="red"), soft_wrap=True)
    for document in report.withdrawn:
        console.print(Text(f"withdrawn {document}", style="magenta"), soft_wrap=True)
    totals = report.totals()
    rows = [
        (
            "documents",
            f"{totals['new']} new, {totals['changed']} changed, {totals['removed']} removed",
        ),
        ("unchanged", str(totals["unchanged"])),
        ("skipped", str(totals["skipped"])),
        ("took", f"{report.seconds:.2f} s"),
    ]
    if report.published is not None:
        published = report.published
        rows.append(
            (
                "snapshot",
                f"{published.path} ({published.documents} documents, {published.chunks} chunks)",
            )
        )
        how = published.mode if published.reason is None else f"rebuild: {published.reason}"
        rows.append(("publish", how))
        if published.vectors:
            rows.append(("vectors", published.vectors))
    console.print(facts_table(rows))


def _report_json(report: SyncReport) -> dict[str, Any]:
    published = report.published
    return {
        "sources": [source.as_json() for source in report.sources],
        "totals": report.totals(),
        "withdrawn": report.withdrawn,
        "snapshot": None
        if published is None
        else {
            "path": published.path,
            "documents": published.documents,
            "chunks": published.chunks,
            "vectors": published.vectors,
            "seconds": round(published.seconds, 3),
            "publish": published.mode,
            "rebuild_reason": published.reason,
        },
        "publish_error": report.publish_error,
        "seconds": round(report.seconds, 3),
    }


def _problems(report: SyncReport) -> set[str]:
    """What failed in a run: ``sources``, ``snapshot``."""
    failed = {"sources"} if any(s.error is not None for s in report.sources) else set()
    return failed | ({"snapshot"} if report.publish_error is not None else set())


@app.command()
def sync(
    config: Annotated[
        Path,
        typer.Argument(
            metavar="CONFIG",
            help="Sync configuration (YAML): state folder, snapshot, and the sources "
            "(mbox, maildir, imap, folder, s3, gmail, drive). See docs/SYNC.md.",
            show_default=False,
        ),
    ],
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", help="Keep running: sync again every --interval seconds (Ctrl-C stops)."
        ),
    ] = False,
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval",
            metavar="SECONDS",
            min=0.1,
            help="Seconds between runs with --watch (default: the file's interval, else 60).",
            show_default=False,
        ),
    ] = None,
    max_runs: Annotated[
        int | None,
        typer.Option(
            "--max-runs",
            metavar="N",
            min=1,
            help="With --watch, stop after N runs.",
            show_default=False,
        ),
    ] = None,
    source: Annotated[
        list[str] | None,
        typer.Option(
            "--source", metavar="ID", help="Sync only this source (repeatable).", show_default=False
        ),
    ] = None,
    withdraw: Annotated[
        list[str] | None,
        typer.Option(
            "--withdraw",
            metavar="ID",
            help="Withdraw a document id or a whole source id before syncing (repeatable): its "
            "evidence is marked withdrawn and its text erased, then the snapshot is published "
            "without it. Needs --reason.",
            show_default=False,
        ),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason",
            metavar="TEXT",
            help="Why the documents are withdrawn (kept in the ledger).",
            show_default=False,
        ),
    ] = None,
    embed: Annotated[
        str | None,
        typer.Option(
            "--embed",
            metavar="MODEL",
            help="Also embed the chunks and store the vectors in the published snapshot "
            "(overrides the file's embed).",
            show_default=False,
        ),
    ] = None,
    cache: CacheOpt = None,
    allow_remote: AllowRemoteOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Sync the sources of CONFIG into custody and the evidence ledger, then publish.

    Each source resumes from its checkpoint: only new and changed items are read, items
    gone from the source are removed, and the summary counts documents new, changed,
    removed, unchanged and skipped (each skip with its reason). The snapshot named in
    CONFIG is written when anything changed; a killed run replays its last batch
    without duplicates.

    Examples: groundwire sync sync.yaml; groundwire sync sync.yaml --watch; groundwire
    sync sync.yaml --withdraw support/threads/3f2a --reason "legal hold".

    Exit codes: 0 synced (items may be skipped); 1 a source failed (the others still
    ran), the snapshot could not be written, or CONFIG or the state folder is damaged;
    2 usage errors (a bad option or key in CONFIG, an inline credential).
    """
    if withdraw and not (reason and reason.strip()):
        raise typer.BadParameter(
            "a withdrawal needs --reason TEXT (it is kept in the ledger)", param_hint="'--reason'"
        )
    settings = load_sync_config(config)
    model = embed or settings.embed
    embedder: Embedder | None = cached_embedder(model, cache, allow_remote) if model else None
    every = interval if interval is not None else settings.interval
    runs = 0
    failed: set[str] = set()
    with Syncer(settings, embedder=embedder) as syncer:
        withdrawn: list[str] = []
        for target in withdraw or ():
            withdrawn.extend(syncer.withdraw(target, reason or ""))
        try:
            while True:
                runs += 1
                with progress_display(not as_json) as progress:
                    report = syncer.run_once(source, _tracker(progress))
                report.withdrawn = withdrawn
                withdrawn = []
                failed |= _problems(report)
                if as_json:
                    print_json(_report_json(report))
                else:
                    _print(make_console(), report)
                if not watch or (max_runs is not None and runs >= max_runs):
                    break
                time.sleep(every)
        except KeyboardInterrupt:
            make_console().print(f"stopped after {runs} run(s)")
    if failed:
        what = {
            "sources": "some sources failed to sync",
            "snapshot": "the snapshot was not published",
        }
        fail(
            f"{' and '.join(what[k] for k in sorted(failed))} (see above); the next run resumes "
            "from the checkpoints and publishes again",
            EXIT_DATA,
        )
