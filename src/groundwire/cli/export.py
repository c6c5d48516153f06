"""``export``: mirror a snapshot (or a knowledge base) into a Milvus collection."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from groundwire import KnowledgeBase, VectorIndex, sync_milvus
from groundwire.cli.app import app
from groundwire.cli.inputs import is_documents, load_kb
from groundwire.cli.options import JsonOpt
from groundwire.cli.output import EXIT_USAGE, fail, print_json
from groundwire.index.vector_files import saved_vectors


@app.command()
def export(
    snapshot: Annotated[
        Path,
        typer.Argument(
            metavar="SNAPSHOT",
            help="A snapshot written by index/ingest, or a knowledge base (folder or source file).",
        ),
    ],
    milvus: Annotated[
        str,
        typer.Option(
            "--milvus",
            metavar="URI",
            help="Milvus to write to: a Milvus Lite file (./kb.db) or a server "
            "(http://host:19530; https:// for TLS).",
        ),
    ],
    collection: Annotated[
        str, typer.Option("--collection", metavar="NAME", help="Collection name.")
    ] = "groundwire",
    vectors: Annotated[
        Path | None,
        typer.Option(
            "--vectors",
            metavar="FILE",
            help="A vectors file to export (default: the vectors the snapshot holds, or a "
            "legacy SNAPSHOT.vectors file beside it).",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str,
        typer.Option(
            "--token",
            metavar="TOKEN",
            envvar="MILVUS_TOKEN",
            help="user:password or API key (or MILVUS_TOKEN).",
            show_default=False,
        ),
    ] = "",
    recreate: Annotated[
        bool,
        typer.Option(
            "--recreate",
            help="Drop and rebuild a collection built for other settings or another model.",
        ),
    ] = False,
    partition_key: Annotated[
        bool,
        typer.Option(
            "--partition-key",
            help="Make tenant the partition key (Milvus servers; not Milvus Lite 2.5).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write SNAPSHOT into a Milvus collection, or bring the collection up to date.

    The first export creates the collection; later ones write only rows whose content
    changed and delete rows no longer in SNAPSHOT, then record the snapshot's digest.
    Search it with groundwire.MilvusBackend(URI, NAME) (docs/MILVUS.md).
    """
    if not snapshot.exists():
        fail(f"{snapshot}: no such file or folder")
    if KnowledgeBase.is_snapshot(snapshot):
        kb = KnowledgeBase.load(snapshot)
    elif is_documents(snapshot):
        fail(
            f"{snapshot} holds documents, not a snapshot; index them first: "
            f"groundwire ingest {snapshot} --out SNAPSHOT",
            EXIT_USAGE,
        )
    else:
        kb = KnowledgeBase.from_sources(load_kb(snapshot))
    matrix: VectorIndex | None
    if vectors is not None:
        matrix = VectorIndex.load(vectors).check_for(kb)
    else:  # the snapshot's vectors section, else a legacy SNAPSHOT.vectors beside it
        matrix = saved_vectors(kb, snapshot)
    report = sync_milvus(
        kb,
        milvus,
        collection,
        vectors=matrix,
        token=token,
        recreate=recreate,
        partition_key=partition_key,
    )
    if as_json:
        print_json(
            {
                "collection": report.collection,
                "upserted": report.upserted,
                "deleted": report.deleted,
                "unchanged": report.unchanged,
                "snapshot": report.snapshot,
                "vectors": None if matrix is None else matrix.model_id,
                "seconds": round(report.seconds, 3),
            }
        )
        return
    typer.echo(
        f"exported {len(kb)} entries to {milvus} collection {report.collection}: "
        f"{report.upserted} written, {report.deleted} deleted, {report.unchanged} unchanged"
        + ("" if matrix is None else f", vectors {matrix.model_id}")
        + f" (snapshot {report.snapshot[:12]})"
    )
