"""``memory worker`` and ``memory review``: run the write pipeline's jobs on a store, and
decide the update and delete proposals it staged for review."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from groundwire import JobOutcome, MemoryPipeline, MemoryPipelineConfig, QueryError
from groundwire.cli.ask import _ask_provider
from groundwire.cli.memory import (
    AgentOpt,
    GroupOpt,
    StoreArg,
    TenantOpt,
    UserOpt,
    _open,
    _scope,
    memory_app,
)
from groundwire.cli.options import JsonOpt, ModelOpt
from groundwire.cli.output import EXIT_DATA, fail, make_console, print_json
from groundwire.config import (
    MEMORY_JOB_LEASE_S,
    MEMORY_UPDATE_POLICIES,
    MEMORY_UPDATE_POLICY,
    MEMORY_WORKER_POLL_RANGE_S,
    MEMORY_WORKER_POLL_S,
)

_LOW, _HIGH = MEMORY_WORKER_POLL_RANGE_S


def _line(outcome: JobOutcome) -> str:
    detail = outcome.error or json.dumps(dict(outcome.result or {}), sort_keys=True)
    return f"job {outcome.job_id} {outcome.kind}: {outcome.state} {detail}"


@contextmanager
def _stop_on_signals(pipeline: MemoryPipeline) -> Iterator[None]:
    """SIGTERM and SIGINT ask the worker to stop (a running call is abandoned, its job
    handed back); the previous handlers come back afterwards."""

    def stop(signum: int, frame: FrameType | None) -> None:
        pipeline.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@memory_app.command("worker")
def worker(
    store: StoreArg,
    provider: Annotated[
        str,
        typer.Option(
            "--provider",
            metavar="NAME",
            help="Model provider (as for 'groundwire ask'), or 'none' to run only the jobs "
            "that need no model (aspect feedback).",
        ),
    ] = "openai",
    model: ModelOpt = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            metavar="URL",
            help="API base URL, e.g. a local server.",
            show_default=False,
        ),
    ] = None,
    poll: Annotated[
        float,
        typer.Option(
            "--poll",
            metavar="SECONDS",
            help=f"Seconds between polls when idle ({_LOW:g}-{_HIGH:g}).",
        ),
    ] = MEMORY_WORKER_POLL_S,
    lease: Annotated[
        float,
        typer.Option("--lease", metavar="SECONDS", help="Seconds a claimed job stays leased."),
    ] = MEMORY_JOB_LEASE_S,
    update_policy: Annotated[
        str,
        typer.Option(
            "--update-policy",
            metavar="POLICY",
            help=f"Update/delete proposals: {', '.join(MEMORY_UPDATE_POLICIES)}.",
        ),
    ] = MEMORY_UPDATE_POLICY,
    hints: Annotated[
        bool, typer.Option("--hints", help="Queue prospective hints for extracted memories.")
    ] = False,
    once: Annotated[
        bool, typer.Option("--once", help="Run the jobs that are ready, then exit.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the write pipeline's jobs in STORE until stopped (SIGTERM or Ctrl-C).

    One line per job (a JSON object each with --json). On stop, a running model call
    is abandoned and its job handed back unchanged; exit code 0.
    """
    if not _LOW <= poll <= _HIGH:
        raise typer.BadParameter(f"expected {_LOW:g} to {_HIGH:g} seconds", param_hint="'--poll'")
    config = MemoryPipelineConfig(
        model=model,
        poll_interval_s=poll,
        lease_s=lease,
        update_policy=update_policy,
        hints=hints,
    )
    llm: Any = (
        None if provider.strip().lower() == "none" else _ask_provider(provider, model, base_url)
    )
    with _open(store) as opened:
        pipeline = MemoryPipeline(opened, llm, config=config)

        def report(outcome: JobOutcome) -> None:
            if as_json:  # one object per line, flushed: a log another program can follow
                line = {
                    "job_id": outcome.job_id,
                    "kind": outcome.kind,
                    "state": outcome.state,
                    "result": outcome.result,
                    "error": outcome.error,
                }
                typer.echo(json.dumps(line, ensure_ascii=False, sort_keys=True))
            else:
                typer.echo(_line(outcome))

        with _stop_on_signals(pipeline):
            if once:
                for outcome in pipeline.run_pending():
                    report(outcome)
                return
            typer.echo(f"worker {pipeline.worker_id} on {store}", err=True)
            processed = pipeline.run_forever(on_outcome=report)
    typer.echo(f"stopped after {processed} job(s)", err=True)


@memory_app.command("review")
def review_command(
    store: StoreArg,
    proposal: Annotated[
        int | None,
        typer.Argument(
            metavar="[ID]",
            help="A proposal to decide (default: list those awaiting review).",
            show_default=False,
        ),
    ] = None,
    approve: Annotated[bool, typer.Option("--approve", help="Apply proposal ID.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Reject proposal ID.")] = False,
    actor: Annotated[
        str, typer.Option("--actor", metavar="NAME", help="Who decides (recorded in the audit).")
    ] = "cli",
    tenant: TenantOpt = "default",
    agent: AgentOpt = "default",
    user: UserOpt = None,
    group: GroupOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the update and delete proposals awaiting review, or approve/reject one."""
    scope = _scope(tenant, agent, user, group)
    if proposal is None and (approve or reject):
        raise typer.BadParameter("give the proposal ID to decide", param_hint="'ID'")
    if proposal is not None and approve == reject:
        raise typer.BadParameter("pass exactly one of --approve and --reject")
    with _open(store) as opened:
        pipeline = MemoryPipeline(opened)
        if proposal is not None:
            try:
                decided = pipeline.review(scope, proposal, approve=approve, actor=actor)
            except QueryError as exc:
                fail(str(exc), EXIT_DATA)
            if as_json:
                print_json(decided)
            else:
                typer.echo(f"proposal {proposal} {decided['status']}")
            return
        waiting = [
            p
            for status in ("review", "shadow")
            for p in pipeline.proposals(scope, status=status, limit=1_000)
        ]
    if as_json:
        print_json({"proposals": waiting})
        return
    if not waiting:
        make_console().print("no proposal awaits review")
        return
    table = Table()
    for column in ("id", "status", "operation", "target", "content", "contradiction"):
        table.add_column(column)
    for p in waiting:
        verdict = p["contradiction"] or {}
        flag = f"{verdict.get('method')}: {verdict.get('reasoning')}" if p["flagged"] else "-"
        cells = [
            str(p["id"]),
            p["status"],
            p["operation"],
            (p["target_memory_id"] or "-")[:8],
            p["content"],
            flag,
        ]
        table.add_row(*(Text(c) for c in cells))
    make_console().print(table)
