"""``memory``: an agent memory store on the command line (add, recall, forget, show, graph, stats,
optimize).

Every subcommand takes ``STORE`` (a memory store file, created on first ``add``) and the
scope options: ``--tenant`` and ``--agent`` name whose memory it is, ``--user`` and
``--group`` who is asking (ACL labels are matched against them).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from groundwire import (
    Memory,
    MemoryAttribute,
    MemoryEntity,
    MemoryRelation,
    MemoryScope,
    MemoryStore,
    QueryError,
)
from groundwire.cli.app import app
from groundwire.cli.options import JsonOpt
from groundwire.cli.output import EXIT_DATA, facts_table, fail, make_console, print_json
from groundwire.config import MEMORY_RECALL_LIMIT, MEMORY_TYPES
from groundwire.payloads import memory_details_json, memory_json, recall_json

memory_app = typer.Typer(
    name="memory",
    help="Agent memory: remember facts with entities and relations, recall them, forget them.",
    no_args_is_help=True,
)
app.add_typer(memory_app, name="memory")

StoreArg = Annotated[
    Path,
    typer.Argument(metavar="STORE", help="The memory store file (SQLite).", show_default=False),
]
TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant the memory belongs to.")]
AgentOpt = Annotated[str, typer.Option("--agent", help="Agent whose memory it is.")]
UserOpt = Annotated[
    str | None,
    typer.Option(
        "--user", help="Subject asking (matches 'user:NAME' ACL labels).", show_default=False
    ),
]
GroupOpt = Annotated[
    list[str] | None,
    typer.Option("--group", help="Group of the subject (repeatable).", show_default=False),
]
IdArg = Annotated[str, typer.Argument(metavar="ID", help="A memory id.", show_default=False)]


def _scope(tenant: str, agent: str, user: str | None, groups: list[str] | None) -> MemoryScope:
    return MemoryScope(tenant, agent, user, tuple(groups or ()))


def _open(store: Path, *, create: bool = False) -> MemoryStore:
    if not create and not store.is_file():
        fail(
            f"{store}: no such file or folder; create it with 'groundwire memory add {store} TEXT'"
        )
    return MemoryStore(store)


def _split(option: str, value: str, least: int, most: int) -> list[str]:
    parts = [part.strip() for part in value.split("|")]
    if not least <= len(parts) <= most or not all(parts[:least]):
        raise QueryError(f"{option} {value!r} is invalid: see 'groundwire memory add --help'")
    return parts


def _when(option: str, value: str | None) -> float | None:
    """An ISO date/time (UTC unless it says otherwise) or Unix seconds, as Unix seconds."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError as exc:
            raise QueryError(
                f"{option} {value!r} is invalid: use an ISO date such as 2024-05-01 or Unix seconds"
            ) from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    if not math.isfinite(seconds):
        raise QueryError(f"{option} {value!r} is invalid: expected a finite number of seconds")
    return seconds


def _day(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M")


@memory_app.command("add")
def add(
    store: StoreArg,
    text: Annotated[str, typer.Argument(metavar="TEXT", help="What to remember.")],
    memory_type: Annotated[
        str, typer.Option("--type", help=f"One of: {', '.join(MEMORY_TYPES)}.")
    ] = "fact",
    importance: Annotated[
        float | None, typer.Option("--importance", help="0 to 1 (default 0.5).", show_default=False)
    ] = None,
    pin: Annotated[bool, typer.Option("--pin", help="Pin it: it never decays.")] = False,
    sources: Annotated[
        list[str] | None,
        typer.Option(
            "--source", help="Id it came from, e.g. a turn id (repeatable).", show_default=False
        ),
    ] = None,
    acl: Annotated[
        list[str] | None,
        typer.Option(
            "--acl",
            help="Label 'user:NAME' or 'group:NAME' (repeatable; none = tenant).",
            show_default=False,
        ),
    ] = None,
    entities: Annotated[
        list[str] | None,
        typer.Option("--entity", help="NAME or NAME|TYPE (repeatable).", show_default=False),
    ] = None,
    relations: Annotated[
        list[str] | None,
        typer.Option("--relation", help="SOURCE|TYPE|TARGET (repeatable).", show_default=False),
    ] = None,
    attributes: Annotated[
        list[str] | None,
        typer.Option(
            "--attribute",
            help="ENTITY|ASPECT|VALUE[|CLAIM_KEY[|GROUP_KEY]] (repeatable); a claim key "
            "supersedes the older value of the same entity, aspect, group and claim.",
            show_default=False,
        ),
    ] = None,
    hints: Annotated[
        list[str] | None,
        typer.Option(
            "--hint", help="A question this memory answers (repeatable).", show_default=False
        ),
    ] = None,
    created: Annotated[
        str | None,
        typer.Option(
            "--created",
            help="When it happened: ISO date or Unix seconds (default now).",
            show_default=False,
        ),
    ] = None,
    tenant: TenantOpt = "default",
    agent: AgentOpt = "default",
    user: UserOpt = None,
    group: GroupOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remember TEXT in STORE (created if missing), with optional graph links and hints."""
    scope = _scope(tenant, agent, user, group)
    parsed_entities = []
    for value in entities or ():
        name, *kind = _split("--entity", value, 1, 2)
        parsed_entities.append(MemoryEntity(name, kind[0] if kind else ""))
    parsed_relations = []
    for value in relations or ():
        source, kind_name, target = _split("--relation", value, 3, 3)
        parsed_relations.append(MemoryRelation(source, kind_name, target))
    parsed_attributes = []
    for value in attributes or ():
        parts = _split("--attribute", value, 3, 5)
        claim = parts[3] if len(parts) > 3 and parts[3] else None
        group_key = parts[4] if len(parts) > 4 else ""
        parsed_attributes.append(MemoryAttribute(parts[0], parts[1], parts[2], claim, group_key))
    with _open(store, create=True) as opened:
        memory = opened.remember(
            scope,
            text,
            type=memory_type,
            importance=importance,
            pinned=pin,
            sources=sources or (),
            acl=acl or (),
            entities=parsed_entities,
            relations=parsed_relations,
            attributes=parsed_attributes,
            hints=hints or (),
            created_at=_when("--created", created),
        )
    if as_json:
        print_json(memory_json(memory))
        return
    typer.echo(f"remembered {memory.id}")


@memory_app.command("recall")
def recall(
    store: StoreArg,
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to recall memories for.")],
    limit: Annotated[
        int, typer.Option("--limit", help="Memories to return (1-200).")
    ] = MEMORY_RECALL_LIMIT,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only memories created at or after (ISO date or Unix seconds).",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Only memories created at or before.", show_default=False),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option("--session", help="Record this recall in a session.", show_default=False),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show each channel and stage.")
    ] = False,
    tenant: TenantOpt = "default",
    agent: AgentOpt = "default",
    user: UserOpt = None,
    group: GroupOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall the memories in STORE that best answer QUERY, best first."""
    scope = _scope(tenant, agent, user, group)
    with _open(store) as opened:
        result = opened.recall(
            scope, query, limit=limit, since=_when("--since", since),
            until=_when("--until", until), session_id=session,
        )  # fmt: skip
    if as_json:
        print_json(recall_json(result))
        return
    console = make_console()
    if not result.memories:
        console.print("no memory matched")
        return
    table = Table(show_lines=False)
    for column in ("#", "score", "id", "memory"):
        table.add_column(column)
    if explain:
        table.add_column("why")
    for item in result.memories:
        text = item.memory.content + (f"\n{item.note}" if item.note else "")
        row = [str(item.rank), f"{item.score:.3f}", item.memory.id[:8], text]
        if explain:
            parts = [f"{k} {v:.2f}" for k, v in item.channels.items()]
            hidden = ("fused", "importance_effective")
            parts += [f"{k} ×{v:.2f}" for k, v in item.stages.items() if k not in hidden]
            row.append("\n".join(parts))
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    if result.timed_out:
        console.print("note: the graph lookup hit its deadline; graph boosts may be partial")


@memory_app.command("forget")
def forget(
    store: StoreArg,
    memory_id: IdArg,
    tenant: TenantOpt = "default",
    agent: AgentOpt = "default",
    user: UserOpt = None,
    group: GroupOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Forget memory ID: it leaves recall, text search, hints and the graph at once."""
    with _open(store) as opened:
        done = opened.forget(_scope(tenant, agent, user, group), memory_id)
    if as_json:
        print_json({"id": memory_id, "forgotten": done})
    elif done:
        typer.echo(f"forgot {memory_id}")
    if not done:
        fail(
            f"no memory {memory_id!r} in this scope (check the id, --tenant and --agent)", EXIT_DATA
        )


@memory_app.command("show")
def show(
    store: StoreArg,
    memory_id: IdArg,
    tenant: TenantOpt = "default",
    agent: AgentOpt = "default",
    user: UserOpt = None,
    group: GroupOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show memory ID with its entities, attributes (current or superseded) and hints."""
    with _open(store) as opened:
        details = opened.details(_scope(tenant, agent, user, group), memory_id)
    if details is None:
        fail(f"no memory {memory_id!r} in this scope (check the id, --tenant and --agent)")
    memory: Memory = details["memory"]
    if as_json:
        print_json(memory_details_json(details))
        return
    console = make_console()
    accessed = f"{_day(memory.accessed_at)} ({memory.access_count}x)"
    rows = [
        ("id", memory.id),
        ("type", memory.type),
        ("content", memory.content),
        ("importance", f"{memory.importance:g}" + (" (pinned)" if memory.pinned else "")),
        ("created", _day(memory.created_at)),
        ("accessed", accessed),
        ("sources", ", ".join(memory.sources) or "-"),
        ("acl", ", ".join(memory.acl) or "whole tenant"),
        ("entities", ", ".join(e["name"] for e in details["entities"]) or "-"),
        ("hints", "; ".join(details["hints"]) or "-"),
    ]
    rows += [
        ("attribute", f"{a['entity']} {a['aspect']} = {a['value']} [{a['status']}]")
        for a in details["attributes"]
    ]
    console.print(facts_table(rows))


@memory_app.command("graph")
def graph(
    store: StoreArg,
    entity: Annotated[
        str | None,
        typer.Argument(
            metavar="[ENTITY]",
            help="One entity to show (default: the most mentioned).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="Entities to list.")] = 20,
    tenant: TenantOpt = "default",
    agent: AgentOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """List entities by mentions with their relations, or show one ENTITY."""
    if limit < 1:
        raise typer.BadParameter("expected at least 1", param_hint="'--limit'")
    with _open(store) as opened:
        found = opened.entities(_scope(tenant, agent, None, None), limit=limit, name=entity)
    if entity is not None and not found:
        fail(f"no entity {entity!r} in this scope")
    if as_json:
        print_json({"entities": found})
        return
    console = make_console()
    for item in found:
        kind = f" ({item['type']})" if item["type"] else ""
        console.print(Text(f"{item['name']}{kind} — {item['mentions']} mentions", style="bold"))
        for rel in item["relations"]:
            arrow = "→" if rel["direction"] == "out" else "←"
            console.print(
                Text(f"  {arrow} {rel['type']} {arrow} {rel['entity']} ×{rel['mentions']}")
            )


@memory_app.command("stats")
def stats(
    store: StoreArg,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Count one tenant only (with --agent).", show_default=False),
    ] = None,
    agent: AgentOpt = "default",
    as_json: JsonOpt = False,
) -> None:
    """Counts of memories, graph, hints, sessions and jobs; schema version; size on disk;
    the write pipeline's model calls, proposals, audit and feedback counters."""
    with _open(store) as opened:
        counts = opened.stats(None if tenant is None else MemoryScope(tenant, agent))
    if as_json:
        print_json(counts)
        return
    pipeline = counts.pop("pipeline", {})
    rows = [
        (key, ", ".join(f"{k} {n}" for k, n in value.items()) or "-")
        if isinstance(value, dict)
        else (key, str(value))
        for key, value in [*counts.items(), *pipeline.items()]
    ]
    make_console().print(facts_table(rows))


@memory_app.command("optimize")
def optimize(store: StoreArg, as_json: JsonOpt = False) -> None:
    """Merge the store's text indexes into one segment each (after a bulk import): recall
    returns the same results with fewer index lookups. Safe while others read; it waits
    for other writers."""
    with _open(store) as opened:
        segments = opened.optimize()
    if as_json:
        print_json(segments)
        return
    for table, before in segments["before"].items():
        typer.echo(f"{table}: {before} -> {segments['after'][table]} segments")
