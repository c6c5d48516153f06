"""``ground`` and ``search``: what one turn would receive, and how entries rank."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from groundwire import (
    ContextConfig,
    EvidenceResult,
    GroundingConfig,
    GroundingMetadata,
    GroundingOutcome,
    HybridSettings,
    KnowledgeBase,
    Principal,
    RetrievalConfig,
    Scope,
    ScopedReader,
    ValidationFailedError,
    retrieve_evidence,
    search_channels,
)
from groundwire.cli.app import app
from groundwire.cli.inputs import (
    EVIDENCE_DEFAULTS,
    Documents,
    fail_not_ready,
    is_documents,
    load_kb,
    open_documents,
    open_engine,
    parse_turns,
    principal_of,
    reject_options,
    validate_hint,
)
from groundwire.cli.options import (
    AccessOpt,
    BlockedOpt,
    GateMode,
    GateOpt,
    GroupOpt,
    JsonOpt,
    KbOrDocsArg,
    QueryArg,
    SubjectOpt,
    TenantOpt,
)
from groundwire.cli.output import (
    BROKEN,
    EVIDENCE_REASONS,
    REASONS,
    echo_line,
    facts_table,
    fail,
    make_console,
    plural,
    print_json,
    quiet_library_warnings,
    top_fields,
)
from groundwire.cli.vectors import (
    MODES,
    AllowRemoteOpt,
    CacheOpt,
    ModelOpt,
    ModeOpt,
    cached_embedder,
    vectors_for,
)
from groundwire.config import DEFAULT_LOCAL_MODEL, EvidenceSettings
from groundwire.payloads import channel_hits_json, evidence_json, hit_json, outcome_json

_DEFAULT_MAX_TOKENS = ContextConfig().max_tokens
TRUNCATED_HINT = "hint: the query was longer than the limit and was cut (start and end kept)"


def _print_outcome(outcome: GroundingOutcome, max_tokens: int) -> None:
    console = make_console()
    meta = outcome.metadata
    if outcome.block is not None:
        console.rule("Knowledge block")
        console.print(Text(outcome.block.content), soft_wrap=True)
        console.rule("Citations")
        for citation in outcome.block.citations:
            console.print(Text(citation.tag), soft_wrap=True)
    else:
        reason = meta.failure_reason or "error"
        console.print(Text(f"No knowledge block ({reason}): {REASONS[reason]}", style="yellow"))
        retrieval = outcome.retrieval
        if reason == "low-relevance" and retrieval is not None:
            console.rule("Candidates (not sent)")
            for item in retrieval.candidates[:5]:
                coverage = f"{item.coverage:.0%}" if item.coverage is not None else "-"
                text = f"{item.entry.id}  score {item.score:.2f}  covers {coverage}"
                console.print(Text(text), soft_wrap=True)
    console.rule("Metadata")
    console.print(
        facts_table(
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
    for line in outcome_hints(meta):
        console.print(Text(line, style="yellow"), soft_wrap=True)


def outcome_hints(meta: GroundingMetadata) -> list[str]:
    """What a person can do about this turn, and what widened it: integrations the query
    named, integrations to enable, a query to shorten."""
    hints = []
    if meta.named_integrations:
        hints.append(
            f"note: the query names {', '.join(meta.named_integrations)}, so "
            f"{'its' if len(meta.named_integrations) == 1 else 'their'} entries joined "
            "this turn's scope"
        )
    if meta.out_of_scope_count:
        names = meta.out_of_scope_integrations
        flags = " ".join(f"--integration {name}" for name in names)
        hints.append(
            f"hint: {plural(meta.out_of_scope_count, 'entry', 'entries')} for "
            f"{', '.join(names)} matched but {'is' if meta.out_of_scope_count == 1 else 'are'} "
            f"out of scope; pass {flags} to include them"
        )
    if meta.truncated_query:
        hints.append(TRUNCATED_HINT)
    return hints


def _print_evidence(result: EvidenceResult, docs: Documents, duration_ms: float) -> None:
    console = make_console()
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
        console.print(Text(f"No evidence ({reason}): {EVIDENCE_REASONS[reason]}", style="yellow"))
    console.rule("Metadata")
    settings = result.settings
    console.print(
        facts_table(
            [
                ("status", result.status),
                ("reason", result.reason or "-"),
                (
                    "documents",
                    f"{plural(docs.files, 'file')}, {plural(docs.chunks, 'chunk')}, "
                    f"{len(docs.skipped)} skipped",
                ),
                (
                    "excerpts",
                    f"{len(result.excerpts)} from {plural(len(result.source_ids), 'source')}",
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
    if result.truncated_query:
        console.print(Text(TRUNCATED_HINT, style="yellow"), soft_wrap=True)


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
            help=f"{_DOCS_ONLY} most excerpts [default: {EVIDENCE_DEFAULTS.limit}].",
            show_default=False,
        ),
    ] = None,
    max_excerpt_chars: Annotated[
        int | None,
        typer.Option(
            "--max-excerpt-chars",
            metavar="N",
            help=f"{_DOCS_ONLY} longest excerpt in characters "
            f"[default: {EVIDENCE_DEFAULTS.max_excerpt_chars}].",
            show_default=False,
        ),
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            metavar="S",
            help=f"{_DOCS_ONLY} lowest BM25 score an excerpt may have "
            f"[default: {EVIDENCE_DEFAULTS.min_score:g}].",
            show_default=False,
        ),
    ] = None,
    min_sources: Annotated[
        int | None,
        typer.Option(
            "--min-sources",
            metavar="N",
            help=f"{_DOCS_ONLY} distinct documents needed for a ready result "
            f"[default: {EVIDENCE_DEFAULTS.min_sources}].",
            show_default=False,
        ),
    ] = None,
    gate: GateOpt = GateMode.relevance,
    mode: ModeOpt = "lexical",
    model: ModelOpt = DEFAULT_LOCAL_MODEL,
    cache: CacheOpt = None,
    allow_remote: AllowRemoteOpt = False,
    tenant: TenantOpt = None,
    subject: SubjectOpt = None,
    group: GroupOpt = None,
    access: AccessOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Select the knowledge one turn needs and print the block an LLM would receive.

    Shows the knowledge block, its citations and the grounding metadata.
    When no block comes back, the failure reason says why.
    Exits 1 only when grounding could not run (index-not-ready, timeout, error).

    For documents, prints the evidence block (quoted excerpts with spans), its
    citations, and the status: ready, or insufficient with the reason.

    --tenant/--subject/--group run the turn as that principal (a development aid);
    without them it runs anonymously: entries and chunks with tenant or ACL labels are
    not visible.

    With --mode dense or hybrid (knowledge bases), the engine embeds the entries with
    --model (a snapshot's saved vectors are used when they match; embeddings are cached)
    and the metadata reports the channels.
    """
    if mode not in MODES:
        fail(f"--mode {mode!r} is invalid: expected one of {', '.join(MODES)}")
    principal = principal_of(tenant, subject, group or ())
    documents_only = {
        "limit": limit,
        "max_excerpt_chars": max_excerpt_chars,
        "min_score": min_score,
        "min_sources": min_sources,
    }
    if is_documents(kb):
        reject_options(True, integration=integration, blocked_domain=blocked_domain, turn=turn)
        reject_options(True, mode=None if mode == "lexical" else mode)
        given = {name: value for name, value in documents_only.items() if value is not None}
        _ground_documents(
            kb,
            query,
            as_json,
            principal,
            access,
            max_total_tokens=max_tokens,
            gate=gate.value,
            **given,
        )
        return
    reject_options(False, access=access, **documents_only)
    turns = parse_turns(turn or ())
    config = GroundingConfig(
        sources=() if KnowledgeBase.is_snapshot(kb) else load_kb(kb),
        blocked_domains=tuple(blocked_domain or ()),
        retrieval=RetrievalConfig(gate=gate.value, hybrid=HybridSettings(mode=mode)),  # type: ignore[arg-type]
        context=ContextConfig(max_tokens=max_tokens),
        embedder=None if mode == "lexical" else cached_embedder(model, cache, allow_remote),
    )
    with quiet_library_warnings(), open_engine(kb, config) as engine:  # errors listed below
        engine.ready()
        outcome = engine.ground(
            query,
            recent_turns=turns,
            scope=Scope(tuple(integration or ())),
            principal=principal,
        )
        status = engine.status()
    if as_json:
        print_json(outcome_json(outcome))
    else:
        _print_outcome(outcome, max_tokens)
    reason = outcome.metadata.failure_reason
    if reason == "index-not-ready":
        fail_not_ready(kb, status)
    if reason in BROKEN:
        fail(REASONS[str(reason)])


def _ground_documents(
    path: Path,
    query: str,
    as_json: bool,
    principal: Principal | None,
    access: Path | None,
    **options: Any,
) -> None:
    """Evidence for ``query`` from the documents at ``path`` (options: retrieve_evidence's)."""
    EvidenceSettings(**options)  # bad values are usage errors before any file is read
    docs = open_documents(path, access)
    started = time.perf_counter()
    result = retrieve_evidence(docs.kb, query, principal=principal, **options)
    duration_ms = (time.perf_counter() - started) * 1000
    if as_json:
        print_json(
            evidence_json(
                result, duration_ms, files=docs.files, chunks=docs.chunks, skipped=docs.skipped
            )
        )
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
    mode: ModeOpt = "lexical",
    model: ModelOpt = DEFAULT_LOCAL_MODEL,
    cache: CacheOpt = None,
    allow_remote: AllowRemoteOpt = False,
    tenant: TenantOpt = None,
    subject: SubjectOpt = None,
    group: GroupOpt = None,
    access: AccessOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rank entries for a query and explain each score (no context, no expansion).

    For documents, ranks their chunks; skipped files are listed as warnings on stderr.
    With --mode dense or hybrid, entries are embedded (a snapshot's saved vectors are
    used when they match; embeddings are cached) and each hit shows its channels.
    Searches what the principal of --tenant/--subject/--group may see, scored as if
    nothing else were indexed (kb.reader); without them, what an anonymous request sees.
    """
    if mode not in MODES:
        fail(f"--mode {mode!r} is invalid: expected one of {', '.join(MODES)}")
    principal = principal_of(tenant, subject, group or ())
    if is_documents(kb):
        reject_options(True, integration=integration, blocked_domain=blocked_domain)
        docs = open_documents(kb, access)
        for item in docs.skipped:
            echo_line("warning", f"skipped {item.path}: {item.reason}")
        index = docs.kb
    elif KnowledgeBase.is_snapshot(kb):
        reject_options(False, access=access)
        index = KnowledgeBase.load(kb)
    else:
        reject_options(False, access=access)
        try:
            index = KnowledgeBase.from_sources(load_kb(kb))
        except ValidationFailedError as exc:
            fail(str(exc) + validate_hint(kb))
    scope = None if integration is None else Scope(tuple(integration))
    reader = index.reader(principal)
    if mode != "lexical":
        _search_vectors(
            reader,
            index,
            kb,
            query,
            limit,
            mode,
            model,
            cache,
            allow_remote,
            as_json,
            reader.knowledge_base.eligibility(scope, tuple(blocked_domain or ())),
        )
        return
    hits = reader.search(query, k=limit, scope=scope, blocked_domains=tuple(blocked_domain or ()))
    if as_json:
        print_json([hit_json(hit) for hit in hits])
        return
    console = make_console()
    if not hits:
        console.print("No entries matched.")
        return
    table = Table("#", "id / title", "score", "top fields", box=box.SIMPLE_HEAD)
    table.columns[1].no_wrap = True
    table.columns[2].justify = "right"
    for rank, hit in enumerate(hits, 1):
        entry = reader.get(hit.id)
        name = Text(hit.id, style="bold")
        name.append("\n" + (entry.title if entry is not None else ""), style="default")
        table.add_row(str(rank), name, f"{hit.score:.2f}", Text(top_fields(hit.breakdown)))
    console.print(table)


def _search_vectors(
    reader: ScopedReader,
    index: KnowledgeBase,
    source: Path,
    query: str,
    limit: int,
    mode: str,
    model: str,
    cache: Path | None,
    allow_remote: bool,
    as_json: bool,
    mask: Any,
) -> None:
    """``search --mode dense|hybrid``: channel ranking with a per-channel breakdown."""
    embedder = cached_embedder(model, cache, allow_remote)
    vectors = reader.vectors_for(vectors_for(index, source, embedder))
    index = reader.knowledge_base  # the principal's view, its vectors alongside
    hits, report = search_channels(
        index,
        query,
        limit,
        HybridSettings(mode=mode),  # type: ignore[arg-type]
        vectors=vectors,
        embedder=embedder,
        mask=mask,
    )
    data = channel_hits_json(index, hits, report)
    rows = data["hits"]
    if as_json:
        print_json(data)
        return
    console = make_console()
    if report.reason:
        echo_line("warning", report.reason)
    table = Table("#", "id / title", "score", "channels (rank: score)", box=box.SIMPLE_HEAD)
    table.columns[2].justify = "right"
    for rank, (hit, row) in enumerate(zip(hits, rows, strict=True), 1):
        name = Text(str(row["id"]), style="bold")
        name.append("\n" + index.entry(hit.doc).title, style="default")
        parts = ", ".join(
            f"{channel} {part.rank or '-'}: {part.score:.3f}"
            for channel, part in hit.channels.items()
        )
        table.add_row(str(rank), name, f"{hit.score:.3f}", Text(parts))
    console.print(table)
