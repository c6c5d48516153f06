"""The ``groundwire`` command group: one-line errors, exit codes, ``--version``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

import groundwire
from groundwire import ConfigError, GroundwireError, QueryError
from groundwire.cli.output import (
    EXIT_DATA,
    EXIT_OK,
    EXIT_USAGE,
    echo_error,
    echo_line,
    reset_errors_shown,
)


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
COMMAND_ORDER = ("ground", "search", "ask", "status", "validate", "index", "ingest", "sync", "eval")


def _plain_arguments(command: Any) -> None:
    """Show each positional argument as its metavar: ``KB``, ``PATH...``.

    Typer prints an argument's Python type after it (``KB <path>``, ``PATH...
    <list[Path]>``) and wraps required ones in braces on the usage line (``{KB}``);
    the metavars already say what to pass. Instance attributes shadow those two methods.
    """
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") != "argument" or param.metavar is None:
            continue
        many = param.nargs != 1 and not param.metavar.endswith("...")
        shown = param.metavar + ("..." if many else "")
        param.display_type_rich = lambda ctx: None
        param._usage_display_name = lambda shown=shown: shown


class _CleanErrors(TyperGroup):
    """A command group that reports every error as one ``error:`` line on stderr."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command, with arguments shown by their metavar alone (see _plain_arguments)."""
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _plain_arguments(command)
        return command

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
        reset_errors_shown()
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
        except Exception as exc:  # a bug, not bad input: still one line, never a traceback
            echo_error(
                f"unexpected {type(exc).__name__}: {exc} (this is a bug in groundwire; "
                "please report it with the command that caused it)"
            )
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
    # Plain help text: rich markup would eat bracketed text such as "[default: 5]" or
    # "[KB:id@version]", and its panels print <bool> after every flag.
    rich_markup_mode=None,
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
