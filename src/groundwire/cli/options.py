"""Argument and option types shared by several commands."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

# -- shared arguments and options ----------------------------------------------------------
KbArg = Annotated[
    Path,
    typer.Argument(
        metavar="KB",
        help="Knowledge base: a folder of Markdown entries with source.yaml, "
        "a .json/.yaml source file, or a snapshot folder written by 'groundwire index'.",
        show_default=False,
    ),
]
KbOrDocsArg = Annotated[
    Path,
    typer.Argument(
        metavar="KB",
        help="Knowledge base: a folder of Markdown entries with source.yaml, a .json/.yaml "
        "source file, or a snapshot folder written by 'groundwire index'. Or documents: a "
        "folder without source.yaml, any other file, or a snapshot written by "
        "'groundwire ingest'.",
        show_default=False,
    ),
]
QueryArg = Annotated[
    str, typer.Argument(metavar="QUERY", help="The question or message to find knowledge for.")
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON instead of readable output.", show_default=False)
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME",
        help="Model name [default: $OPENAI_MODEL or $ANTHROPIC_MODEL].",
        show_default=False,
    ),
]
BlockedOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--blocked-domain",
        metavar="NAME",
        help="Exclude entries of this domain before ranking (repeatable, case-insensitive).",
        show_default=False,
    ),
]


class GateMode(StrEnum):
    """The relevance gate's modes (``RetrievalConfig.gate``, ``retrieve_evidence(gate=)``)."""

    relevance = "relevance"
    off = "off"


GateOpt = Annotated[
    GateMode,
    typer.Option(
        "--gate",
        help="relevance: send only what the question supports, possibly nothing; off: the "
        "fixed count (8 entries and 4 related ones, or the --limit best excerpts).",
    ),
]

# -- principal flags (a development aid: a host passes principals its authentication verified)
_AS_PRINCIPAL = (
    "Development aid: run as a principal. In an application the host passes a Principal its "
    "own authentication verified; groundwire never derives one from a query."
)
TenantOpt = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        metavar="ID",
        help=f"{_AS_PRINCIPAL} The principal's tenant (with --subject). Without "
        "--tenant/--subject the query runs anonymously and sees only entries and chunks "
        "without tenant and ACL labels.",
        show_default=False,
    ),
]
SubjectOpt = Annotated[
    str | None,
    typer.Option(
        "--subject",
        metavar="ID",
        help="The principal's user or service id (with --tenant); it holds the ACL label user:ID.",
        show_default=False,
    ),
]
GroupOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--group",
        metavar="NAME",
        help="A group of the principal (repeatable); it holds the ACL label group:NAME.",
        show_default=False,
    ),
]
AccessOpt = Annotated[
    Path | None,
    typer.Option(
        "--access",
        metavar="FILE",
        help="Documents only: an access.yaml policy labeling files with tenant and ACL by "
        "path (first matching rule wins; files no rule matches are skipped unless it has "
        "a default). See docs/ACCESS.md.",
        show_default=False,
    ),
]
