"""The ``groundwire`` command group: one-line errors, exit codes, ``--version``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

import groundwire
from groundwire import ConfigError, GroundwireError, QueryError
from groundwire.cli.output import EXIT_DATA, EXIT_OK, EXIT_USAGE, echo_error, echo_line


class _OneLineLog(logging.Handler):
    """Library log records as one ``warning:``/``error:`` line each, without tracebacks."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        cause = record.exc_info[1] if record.exc_info else None
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        echo_line(record.levelname.lower(), record.getMessage() + detail)


_LOG_HANDLER = _OneLineLog()
#: The order ``--help`` lists commands in: a user's path from trying to building to checking.
#: Commands missing here (a new module) follow, in the order they were registered.
COMMAND_ORDER = ("ground", "search", "ask", "status", "validate", "index", "ingest", "eval")


class _CleanErrors(TyperGroup):
    """A command group that reports every error as one ``error:`` line on stderr."""

    def list_commands(self, ctx: Any) -> list[str]:
        """Command names in :data:`COMMAND_ORDER`, then any others as registered."""
        names = super().list_commands(ctx)
        known = [name for name in COMMAND_ORDER if name in names]
        return known + [name for name in names if name not in COMMAND_ORDER]

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the group; in standalone mode, map errors to one line and an exit code."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        library_log = logging.getLogger("groundwire")
        library_log.addHandler(_LOG_HANDLER)
        try:
            result = super().main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )
        except typer.TyperException as exc:  # every click usage error derives from it
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `groundwire`: show the help
                typer.echo(exc.format_message())
                raise SystemExit(EXIT_OK) from None
            echo_error(exc.format_message())
            raise SystemExit(exc.exit_code) from None
        except GroundwireError as exc:
            echo_error(str(exc))
            usage = isinstance(exc, ConfigError | QueryError)
            raise SystemExit(EXIT_USAGE if usage else EXIT_DATA) from None
        except typer.Abort:
            echo_error("aborted")
            raise SystemExit(EXIT_DATA) from None
        finally:
            library_log.removeHandler(_LOG_HANDLER)
        raise SystemExit(result if isinstance(result, int) else EXIT_OK)


app = typer.Typer(
    name="groundwire",
    cls=_CleanErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"groundwire {groundwire.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the groundwire version and exit.",
        ),
    ] = False,
) -> None:
    """Ground LLM calls in your team's curated knowledge base.

    Exit codes: 0 success, 1 data error, 2 usage error.
    """


def main() -> None:
    """Run the ``groundwire`` command line (the console script's entry point)."""
    app()
