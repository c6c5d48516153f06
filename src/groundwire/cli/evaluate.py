"""``eval``: ranking quality and speed on judged queries."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from groundwire import (
    ValidationFailedError,
)
from groundwire.cli.app import app
from groundwire.cli.inputs import validate_hint
from groundwire.cli.options import JsonOpt
from groundwire.cli.output import eval_tracker, fail, make_console, print_json, progress_display
from groundwire.eval import EvalDataset, EvalReport, evaluate, load_dataset
from groundwire.eval.metrics import METRICS
from groundwire.eval.peers import evaluate_bm25s, require_bm25s
from groundwire.eval.runner import ratios


def _eval_json(ours: EvalReport, peer: EvalReport | None) -> dict[str, Any]:
    """The 8 report keys; with a peer, ``{"groundwire", "bm25s", "ratios"}``."""
    if peer is None:
        return ours.as_dict()
    return {"groundwire": ours.as_dict(), peer.system: peer.as_dict(), "ratios": ratios(ours, peer)}


_EVAL_ROWS = {
    "ndcg@10": "nDCG@10",
    "recall@100": "recall@100",
    "mrr@10": "MRR@10",
    "map@100": "MAP@100",
    "queries": "queries",
    "documents": "documents",
    "index_seconds": "index seconds",
    "queries_per_second": "queries/second",
}


def _eval_cell(name: str, value: float | int) -> str:
    if name in METRICS:
        return f"{value:.4f}"
    if name == "index_seconds":
        return f"{value:.2f}"
    if name == "queries_per_second":
        return f"{value:,.0f}"
    return f"{value:,}"


def _print_eval(dataset: EvalDataset, reports: Sequence[EvalReport]) -> None:
    """One row per measure, one column per system (plus the ratio with a peer)."""
    console = make_console()
    kind = "BEIR dataset" if dataset.kind == "beir" else "knowledge base"
    judged = f"; judgments: {dataset.qrels_path}" if dataset.qrels_path is not None else ""
    console.print(Text(f"{dataset.name} ({kind}{judged})"), soft_wrap=True)
    table = Table("", *(item.system for item in reports), box=box.SIMPLE_HEAD)
    shares = ratios(reports[0], reports[1]) if len(reports) == 2 else None
    if shares is not None:
        table.add_column(f"{reports[0].system} / {reports[1].system}")
    for column in table.columns[1:]:
        column.justify = "right"
    values = [item.as_dict() for item in reports]
    for name, label in _EVAL_ROWS.items():
        cells = [_eval_cell(name, row[name]) for row in values]
        if shares is not None:
            share = shares.get(name)
            cells.append("" if name not in shares else "-" if share is None else f"{share:.3f}x")
        table.add_row(label, *cells)
    console.print(table)


DatasetArg = Annotated[
    Path,
    typer.Argument(
        metavar="DATASET",
        help="A BEIR dataset folder (corpus.jsonl or corpus.jsonl.gz, queries.jsonl, "
        "qrels/SPLIT.tsv), or a knowledge base whose queries.jsonl and qrels.tsv sit in "
        "it or in a sibling DATASET-eval folder.",
        show_default=False,
    ),
]


@app.command("eval")
def eval_(
    dataset: DatasetArg,
    split: Annotated[
        str,
        typer.Option("--split", metavar="NAME", help="BEIR qrels split: reads qrels/NAME.tsv."),
    ] = "test",
    queries: Annotated[
        Path | None,
        typer.Option(
            "--queries",
            metavar="FILE",
            help='Queries JSON Lines file ({"_id", "text"} per line), instead of the one found.',
            show_default=False,
        ),
    ] = None,
    qrels: Annotated[
        Path | None,
        typer.Option(
            "--qrels",
            metavar="FILE",
            help="Relevance judgments (query-id, corpus-id, score; TSV), instead of the one found.",
            show_default=False,
        ),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Also run bm25s (Lucene BM25, k1 1.5, b 0.75, the same stemmer and stop "
            "words) on the same data and print both rows and the ratios; needs "
            "pip install 'groundwire\\[bench]'.",  # rich would read [bench] as markup
            show_default=False,
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Measure ranking quality and speed on judged queries.

    Indexes the documents (or knowledge base entries), runs every judged query one at
    a time (top 100) and reports nDCG@10, recall@100, MRR@10 and MAP@100 (trec_eval
    definitions), the numbers of queries and documents, index build seconds and
    queries/second.
    """
    if compare:
        require_bm25s()  # fail before minutes of indexing, not after
    data = load_dataset(dataset, split=split, queries=queries, qrels=qrels)
    reports: list[EvalReport] = []
    with progress_display(not as_json) as progress:
        try:
            reports.append(
                evaluate(
                    data,
                    progress=eval_tracker(progress, "groundwire", data.size, len(data.queries)),
                )
            )
        except ValidationFailedError as exc:
            fail(str(exc) + validate_hint(dataset))
        if compare:
            tracker = eval_tracker(progress, "bm25s", data.size, len(data.queries))
            reports.append(evaluate_bm25s(data, progress=tracker))
    if as_json:
        print_json(_eval_json(reports[0], reports[1] if compare else None))
    else:
        _print_eval(data, reports)
