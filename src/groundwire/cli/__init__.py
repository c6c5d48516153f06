"""The ``groundwire`` command line: ground, search, inspect, validate, index and evaluate.

Built on the public ``groundwire`` API (and ``groundwire.eval``) only. Every command
but ``eval`` takes ``KB`` (a folder of Markdown entries with ``source.yaml``, or a
``.json``/``.yaml`` source file); ``eval`` takes a BEIR dataset or a knowledge base
with judged queries. ``ground`` and ``search`` also take documents (a folder without
``source.yaml``, a file that is not a source file, or a snapshot written by ``ingest``),
which they load, chunk and index on the fly; ``ingest`` saves such an index. Each
prints readable output, or JSON with ``--json``. Errors are one ``error: ...`` line on
stderr, never a traceback: exit code 2 for usage errors (flags, arguments, option
values), 1 for data errors (unreadable or invalid knowledge or evaluation data, a
knowledge base that did not build, a missing optional extra).

Layout: ``app`` (the command group and its error handling), ``options`` (shared
argument/option types), ``inputs`` (what a ``KB`` argument names and how to open it),
``output`` (error lines, JSON, tables, progress), then one module per command group.
To add a command, write a module that decorates functions with ``@app.command()``
and import it below.
"""

from __future__ import annotations

from groundwire.cli import (
    ask,
    build,
    checks,
    evaluate,
    export,
    grounding,
    memory,
    memory_worker,
    serve,
    sync,
)
from groundwire.cli.app import app, main

__all__ = ["app", "main"]

# The command modules register themselves on ``app`` when imported.
_COMMANDS = (grounding, checks, build, evaluate, ask, memory, memory_worker, sync, export, serve)
