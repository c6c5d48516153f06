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
from groundwire.cli.output import (
    eval_tracker,
    facts_table,
    fail,
    make_console,
    print_json,
    progress_display,
)
from groundwire.cli.vectors import (
    MODES,
    AllowRemoteOpt,
    CacheOpt,
    ModelOpt,
    ModeOpt,
    cached_embedder,
)
from groundwire.config import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION,
    DEFAULT_LOCAL_MODEL,
    HybridSettings,
)
from groundwire.eval import EvalDataset, EvalReport, evaluate, load_dataset
from groundwire.eval.hybrid import FIT_GRID, evaluate_mode, fit_fusion, prepare
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
            "pip install 'groundwire[bench]'.",
            show_default=False,
        ),
    ] = False,
    mode: ModeOpt = "lexical",
    model: ModelOpt = DEFAULT_LOCAL_MODEL,
    fusion: Annotated[
        str, typer.Option("--fusion", metavar="METHOD", help="hybrid: weighted or rrf.")
    ] = DEFAULT_FUSION,
    dense_weight: Annotated[
        float,
        typer.Option("--dense-weight", metavar="W", min=0.0, max=1.0, help="hybrid: 0 to 1."),
    ] = DEFAULT_DENSE_WEIGHT,
    fit_fusion: Annotated[
        bool,
        typer.Option(
            "--fit-fusion",
            help="Fit the dense weight on the judged queries: report only 2-fold "
            "cross-validated (held-out) scores, and the weight fitted on all queries "
            "to use (--dense-weight) on another dataset.",
            show_default=False,
        ),
    ] = False,
    cache: CacheOpt = None,
    allow_remote: AllowRemoteOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Measure ranking quality and speed on judged queries.

    Indexes the documents (or knowledge base entries), runs every judged query one at
    a time (top 100) and reports nDCG@10, recall@100, MRR@10 and MAP@100 (trec_eval
    definitions), the numbers of queries and documents, index build seconds and
    queries/second. With --mode dense or hybrid, documents and queries are embedded
    first (cached), so queries/second excludes embedding; embedding times are reported
    apart.
    """
    if mode not in MODES:
        fail(f"--mode {mode!r} is invalid: expected one of {', '.join(MODES)}")
    if compare:
        require_bm25s()  # fail before minutes of indexing, not after
    data = load_dataset(dataset, split=split, queries=queries, qrels=qrels)
    if mode != "lexical" or fit_fusion:
        _eval_vectors(
            data, mode, model, fusion, dense_weight, fit_fusion, cache, allow_remote, as_json
        )
        return
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


def _eval_vectors(
    data: EvalDataset,
    mode: str,
    model: str,
    fusion: str,
    dense_weight: float,
    fit: bool,
    cache: Path | None,
    allow_remote: bool,
    as_json: bool,
) -> None:
    """``eval --mode dense|hybrid`` and ``--fit-fusion``."""
    settings = HybridSettings(
        mode="hybrid" if fit else mode,  # type: ignore[arg-type]
        fusion=fusion,  # type: ignore[arg-type]
        dense_weight=dense_weight,
    )
    embedder = cached_embedder(model, cache, allow_remote)
    with progress_display(not as_json) as progress:
        task = progress.add_task("embedding", total=data.size + len(data.queries))
        embedder.progress = lambda count: progress.advance(task, count)
        try:
            prepared = prepare(data, embedder)
        except ValidationFailedError as exc:
            fail(str(exc))
        embedder.progress = None
        if fit:
            fitting = progress.add_task("fitting", total=len(FIT_GRID))
            result = fit_fusion(
                data,
                embedder,
                settings,
                prepared=prepared,
                progress=lambda count: progress.advance(fitting, count),
            )
        else:
            report = evaluate_mode(data, embedder, settings, prepared=prepared)
    if fit:
        summary = {
            "fusion": result.fusion,
            "dense_weight": result.weight,
            "fold_weights": list(result.fold_weights),
            "held_out": {name: round(value, 6) for name, value in result.held_out.items()},
            "model": embedder.model_id,
        }
        if as_json:
            print_json(summary)
            return
        make_console().print(
            facts_table(
                [
                    ("fusion", result.fusion),
                    ("fitted dense weight (all queries)", f"{result.weight:.2f}"),
                    ("fold weights", ", ".join(f"{w:.2f}" for w in result.fold_weights)),
                    *((f"held-out {n}", f"{v:.4f}") for n, v in result.held_out.items()),
                ]
            )
        )
        return
    if as_json:
        print_json({"groundwire": report.as_dict()})
    else:
        _print_eval(data, [report])
        extra = {k: str(v) for k, v in report.details.items()}
        make_console().print(facts_table(list(extra.items())))
