"""``serve``, ``mcp`` and ``keygen``: the HTTP API + MCP + playground, MCP over stdio, API keys."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from groundwire import ConfigError, MemoryStore
from groundwire.cli.app import app
from groundwire.cli.ask import _ask_provider
from groundwire.cli.inputs import principal_of
from groundwire.cli.options import GroupOpt, SubjectOpt, TenantOpt
from groundwire.cli.output import echo_line, quiet_library_warnings
from groundwire.cli.vectors import AllowRemoteOpt, CacheOpt, cached_embedder
from groundwire.config import (
    SERVER_CALLS,
    SERVER_GROUND_TIMEOUT_MS,
    SERVER_HOST,
    SERVER_KEYGEN_ALLOW,
    SERVER_MEMORY_AGENT,
    SERVER_PORT,
    SERVER_RATE_BURST,
    SERVER_RATE_PER_SECOND,
    SERVER_REQUEST_TIMEOUT_S,
    ServerSettings,
)

SourcesArg = Annotated[
    list[str],
    typer.Argument(
        metavar="KB...",
        help="Knowledge bases to serve, each PATH or NAME=PATH (named after the folder or "
        "file otherwise): a folder with source.yaml, a source file, a snapshot, or documents. "
        "The first is the default.",
        show_default=False,
    ),
]


EmbedderOpt = Annotated[
    str | None,
    typer.Option(
        "--embedder",
        metavar="MODEL",
        help="Serve vectors too (mode dense and hybrid): all-MiniLM-L6-v2 (local), hashing, "
        "a model folder, or openai:NAME / ollama:NAME (needs --allow-remote). Without it, "
        "requests for those modes get 409.",
        show_default=False,
    ),
]


def _registry(
    specs: list[str],
    timeout_ms: int,
    embedder: str | None = None,
    cache: Path | None = None,
    allow_remote: bool = False,
) -> Any:
    """The opened registry of ``specs``; usage errors for bad names, data errors as raised."""
    from groundwire.server import Registry, source_for

    embed = None if embedder is None else cached_embedder(embedder, cache, allow_remote)
    try:
        sources = [source_for(spec, timeout_ms, embed) for spec in specs]
        registry = Registry(sources)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'KB...'") from exc
    with quiet_library_warnings():
        registry.open_all()
    return registry


@app.command()
def serve(
    kb: SourcesArg,
    host: Annotated[
        str, typer.Option("--host", metavar="HOST", help="Address to listen on.")
    ] = SERVER_HOST,
    port: Annotated[
        int, typer.Option("--port", metavar="PORT", min=0, max=65535, help="Port (0: any free).")
    ] = SERVER_PORT,
    keys: Annotated[
        Path | None,
        typer.Option(
            "--keys",
            metavar="FILE",
            help="API keys file (YAML/JSON: each key's SHA-256, principal and allowed "
            "calls; see 'groundwire keygen'). Required unless --no-auth.",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Local development: no API keys, every call allowed; loopback only.",
        ),
    ] = False,
    tenant: TenantOpt = None,
    subject: SubjectOpt = None,
    group: GroupOpt = None,
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider",
            metavar="NAME",
            help="Model provider for /v1/ask (as 'groundwire ask --provider'); without it "
            "ask answers 503.",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME", help="Model for /v1/ask.")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", metavar="URL", help="Provider base URL for /v1/ask."),
    ] = None,
    rate: Annotated[
        float,
        typer.Option("--rate", metavar="N", min=0, help="Requests per second per key (0: off)."),
    ] = SERVER_RATE_PER_SECOND,
    burst: Annotated[
        int, typer.Option("--burst", metavar="N", min=1, help="Burst size per key.")
    ] = SERVER_RATE_BURST,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="S", min=0.001, help="Request timeout in seconds."),
    ] = SERVER_REQUEST_TIMEOUT_S,
    log_queries: Annotated[
        bool,
        typer.Option("--log-queries", help="Write query text into the access log (off: never)."),
    ] = False,
    embedder: EmbedderOpt = None,
    cache: CacheOpt = None,
    allow_remote: AllowRemoteOpt = False,
    memory: Annotated[
        Path | None,
        typer.Option(
            "--memory",
            metavar="STORE",
            help="Serve this agent memory store (SQLite) at /v1/memory; each key reads and "
            "writes its own principal's memories.",
            show_default=False,
        ),
    ] = None,
    memory_agent: Annotated[
        str,
        typer.Option("--memory-agent", metavar="NAME", help="The agent whose memory is served."),
    ] = SERVER_MEMORY_AGENT,
) -> None:
    """Serve KB... over HTTP: the /v1 API, MCP at /mcp and the web playground at /.

    Requests authenticate with an API key from --keys ('Authorization: Bearer KEY');
    each key acts as the principal the keys file gives it, never one a request names.
    With --no-auth every request acts as --tenant/--subject/--group (or anonymously),
    and the server listens on loopback only. Stops gracefully on Ctrl-C / SIGTERM.
    Access logs (JSON lines) go to stderr. Needs the [server] extra.
    """
    # The knowledge's errors come first, as for every command.
    registry = _registry(kb, SERVER_GROUND_TIMEOUT_MS, embedder, cache, allow_remote)
    try:
        _serve(registry, host, port, keys, no_auth, principal_of(tenant, subject, group or ()),
               _provider_factory(provider, model, base_url),
               ServerSettings(host=host, port=port, rate_per_second=rate, rate_burst=burst,
                              request_timeout_s=timeout, log_queries=log_queries,
                              memory_agent=memory_agent),
               memory)  # fmt: skip
    finally:
        registry.close()


def _provider_factory(provider: str | None, model: str | None, base_url: str | None) -> Any:
    """Makes the provider of /v1/ask (None without --provider); bad flags fail now."""
    if provider is None:
        return None
    _ask_provider(provider, model, base_url).close()

    def factory() -> Any:
        return _ask_provider(provider, model, base_url)

    return factory


def _serve(
    registry: Any,
    host: str,
    port: int,
    keys: Path | None,
    no_auth: bool,
    principal: Any,
    factory: Any,
    settings: ServerSettings,
    memory: Path | None,
) -> None:
    from groundwire.server import KeyRing, ServerState, create_app, is_loopback, local_grant
    from groundwire.server import serve as run_server

    if no_auth == (keys is not None):
        raise typer.BadParameter(
            "pass --keys FILE (API keys) or --no-auth (local development), exactly one",
            param_hint="'--keys/--no-auth'",
        )
    if no_auth and not is_loopback(host):
        raise typer.BadParameter(
            f"--no-auth serves loopback only; {host!r} is not a loopback address "
            "(use 127.0.0.1, or --keys FILE to serve a network)",
            param_hint="'--host'",
        )
    if principal is not None and not no_auth:
        raise typer.BadParameter(
            "with --keys each key names its principal; --tenant/--subject/--group are "
            "for --no-auth only",
            param_hint="'--tenant'",
        )
    ring = None if keys is None else KeyRing.load(keys)
    store = None if memory is None else MemoryStore(memory)
    state = ServerState(registry, settings, ring, local_grant(principal), factory, store)
    echo_line(
        "info",
        f"serving {', '.join(registry.names)} on http://{host}:{port}/ "
        f"({'no auth' if ring is None else f'{len(ring)} API keys'}); Ctrl-C stops",
    )
    run_server(create_app(state), state)


@app.command()
def mcp(
    kb: SourcesArg,
    tenant: TenantOpt = None,
    subject: SubjectOpt = None,
    group: GroupOpt = None,
) -> None:
    """Serve KB... as an MCP server over stdio (for Claude Desktop, IDEs, any MCP client).

    Tools: search_knowledge_base, ground, get_entry; resources kb://NAME/ENTRY_ID. Every
    call acts as --tenant/--subject/--group (the principal the launching host vouches
    for), or anonymously. Needs the [server] extra.
    """
    from groundwire.server import ServerState, local_grant
    from groundwire.server.mcp_server import build_mcp

    registry = _registry(kb, SERVER_GROUND_TIMEOUT_MS)
    try:
        principal = principal_of(tenant, subject, group or ())
        state = ServerState(registry, ServerSettings(), None, local_grant(principal))
        build_mcp(state).run("stdio")
    finally:
        registry.close()


@app.command()
def keygen(
    key_id: Annotated[
        str, typer.Option("--id", metavar="NAME", help="Name of the key (in logs and metrics).")
    ],
    tenant: Annotated[str, typer.Option("--tenant", metavar="ID", help="The key's tenant.")],
    subject: Annotated[
        str, typer.Option("--subject", metavar="ID", help="The key's user or service id.")
    ],
    group: GroupOpt = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="CALL",
            help=f"A call the key may make (repeatable): {', '.join(SERVER_CALLS)}, or '*' "
            f"[default: {', '.join(SERVER_KEYGEN_ALLOW)}].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Make an API key: the secret on stderr (shown once), its keys-file entry on stdout.

    Append the entry to the keys file given to 'groundwire serve --keys'; the file holds
    only the SHA-256 of the secret, never the secret itself.
    """
    from groundwire.server import KeyRing, hash_key, new_key

    secret = new_key()
    item = {
        "id": key_id,
        "sha256": hash_key(secret),
        "tenant": tenant,
        "subject": subject,
        "groups": list(group or ()),
        "allow": list(allow or SERVER_KEYGEN_ALLOW),
    }
    try:
        KeyRing.from_items([item], "--id/--tenant/--subject/--group/--allow")
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    print(f"secret (shown once; give it to the client): {secret}", file=sys.stderr)
    import yaml

    typer.echo(yaml.safe_dump([item], sort_keys=False).rstrip())
