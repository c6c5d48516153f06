"""``ask``: a grounded answer from a model, with its citations checked."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.text import Text

from groundwire import (
    ChatRequest,
    CitationReport,
    Completion,
    GroundedAnswer,
    GroundedAssistant,
    GroundingConfig,
    KnowledgeBase,
    Message,
    QueryError,
    create_provider,
    validate_citations,
)
from groundwire.cli.app import app
from groundwire.cli.inputs import (
    Documents,
    fail_not_ready,
    is_documents,
    load_kb,
    open_documents,
    open_engine,
)
from groundwire.cli.options import JsonOpt, KbOrDocsArg, ModelOpt
from groundwire.cli.output import (
    EVIDENCE_REASONS,
    REASONS,
    echo_line,
    fail,
    make_console,
    print_json,
    quiet_library_warnings,
)
from groundwire.config import OPENAI_COMPATIBLE_PRESETS
from groundwire.payloads import ask_json

# -- ask ----------------------------------------------------------------------------------------
_ASK_SYSTEM = (
    "Answer the user's question. Use the knowledge below where it applies, and cite each "
    "entry you rely on with its tag, written exactly as shown, for example "
    "[KB:security.api-keys@2026-11-15]. Cite only tags that appear below."
)
_REJECTIONS = {
    "no-citation": "it cites none of the returned evidence",
    "invalid-citation": "it cites ids outside the returned evidence",
    "unchecked-text": "it is too long for its citations to be checked",
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
    _require_key(key, base_url)
    spec = f"{key}:{model}" if model else key
    return create_provider(spec, **({"base_url": base_url} if base_url else {}))


def _require_key(provider: str, base_url: str | None) -> None:
    """A usage error naming the environment variable (or flag) when no key is set."""
    if provider == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        raise typer.BadParameter(
            "no API key for anthropic: set ANTHROPIC_API_KEY (ask reads keys from the "
            "environment only, never from a flag)",
            param_hint="'--provider'",
        )
    local = base_url or os.environ.get("OPENAI_BASE_URL")
    if provider == "openai" and not local and not os.environ.get("OPENAI_API_KEY"):
        raise typer.BadParameter(
            "no API key for openai: set OPENAI_API_KEY, or pass --base-url URL (or set "
            "OPENAI_BASE_URL) for a local OpenAI-compatible server, which needs none",
            param_hint="'--provider'",
        )


def _print_checks(report: CitationReport, where: Mapping[str, str]) -> None:
    """Each citation once, marked valid (offered) or invalid, with where it points."""
    console = make_console()
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


def _ask_documents(docs: Documents, question: str, provider: Any, as_json: bool) -> None:
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
        print_json(
            ask_json(
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
        message = f"No answer (insufficient evidence: {reason}): {EVIDENCE_REASONS[reason]}"
        make_console().print(
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
        fail(f"the answer was rejected and not shown: {_REJECTIONS[str(answer.reason)]}{shown}")


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
    config = GroundingConfig(sources=() if KnowledgeBase.is_snapshot(kb) else load_kb(kb))
    longest = config.retrieval.max_query_chars
    if len(question) > longest:
        raise QueryError(
            f"question has {len(question):,} characters, over the limit of {longest:,}"
        )
    with quiet_library_warnings(), open_engine(kb, config) as engine:  # errors listed below
        engine.ready()
        outcome = engine.ground(question)
        status = engine.status()
    reason = outcome.metadata.failure_reason
    if reason == "index-not-ready":
        fail_not_ready(kb, status)
    block = outcome.block
    if block is None:  # fail open, as generate does: answer without knowledge, and say so
        echo_line(
            "warning",
            f"no knowledge block ({reason}): {REASONS[str(reason)]}; the answer is not grounded",
        )
    system = _ASK_SYSTEM if block is None else f"{_ASK_SYSTEM}\n\n{block.content}"
    request = ChatRequest(messages=(Message("user", question),), system=system)
    with provider_for_ask() as provider:
        completion = _ask_model(provider, request, as_json)
    report = validate_citations(completion.text, block.citations if block is not None else [])
    if as_json:
        print_json(ask_json("knowledge", "answered", reason, completion.text, report, completion))
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
    model: ModelOpt = None,
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

    if is_documents(kb):
        docs = open_documents(kb)
        for item in docs.skipped:
            echo_line("warning", f"skipped {item.path}: {item.reason}")
        with provider_for_ask() as llm:
            _ask_documents(docs, question, llm, as_json)
    else:
        _ask_knowledge(kb, question, provider_for_ask, as_json)
