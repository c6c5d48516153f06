"""Grounding precision: what the relevance gate sends, and when it sends nothing.

Runs every question through ``GroundingEngine.ground`` (entries) or ``retrieve_evidence``
(documents) twice — ``gate="off"`` (the seed's fixed count: 8 entries + 4 related, or 5
excerpts) and the default relevance gate — and prints, side by side:

* on judged sets (``examples/handbook-eval``, the second set ``examples/handbook-holdout``
  and the tuning set ``examples/handbook-tuning``, the only one gate rules are chosen on:
  ``benchmarks/tune_gate.py``):
  context precision (share of the entries in the block that are judged relevant, mean
  over questions that got a block), context recall (share of the judged-relevant entries
  that are in the block, mean over every question; no block counts 0), in-scope recall
  (the same over the judged entries the scope lets in, questions without one left out;
  under the default scope a quarter of the judged entries are integration-specific and
  out of reach whatever is selected), questions that
  got a block, tokens per turn (mean, blocks of no-block turns count 0), and nDCG@10 of
  the ranking (``KnowledgeBase.search``, which the gate does not touch);
* abstention on unjudged sets: the share of off-topic questions
  (``examples/handbook-eval/off-topic.jsonl``), of product questions the handbook
  cannot answer (``unanswerable.jsonl``) and of off-topic questions that name an
  integration (``off-topic-named.jsonl``; ``off-topic-named-2.jsonl``, written before the
  naming rules were measured; the tuning set's ``off-topic-named.jsonl``) that got no block;
* confidence calibration: per confidence class, how many questions and the share whose
  top entry is judged relevant;
* documents: off-topic questions over ``examples/docs`` (share with no evidence) and, when
  ``../shared/datasets/scifact`` exists, SciFact nDCG@10 and evidence precision/recall/
  abstention at document level.

Entries run under two scopes: ``default`` (no integration enabled, what
``groundwire ground`` does without ``--integration``) and ``all-integrations`` (every
integration an entry names enabled, so integration entries can be selected). The gate
runs twice: as shipped (integrations the query names join the turn's scope) and with
``named_integrations=False`` ("scope as given"); in-scope recall counts the judged
entries the request's own scope lets in.

Gate thresholds come from ``groundwire.config`` (``RelevanceGate``); ``--min-coverage`` and
friends override them for exploration. Run from the repository root:
``.venv/bin/python benchmarks/bench_precision.py`` (about 20 s; ``--no-scifact`` skips the
5,183-document collection).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import groundwire as gw
from groundwire.config import RelevanceGate, chunk_settings
from groundwire.eval import load_dataset
from groundwire.eval.metrics import ndcg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import source_state

REPO = Path(__file__).resolve().parents[1]
HANDBOOK = REPO / "examples" / "handbook"
EVAL = REPO / "examples" / "handbook-eval"
HOLDOUT = REPO / "examples" / "handbook-holdout"
TUNING = REPO / "examples" / "handbook-tuning"
DOCS = REPO / "examples" / "docs"
# The shared datasets sit next to the repository (or next to the folder of worktrees).
SCIFACT = next(
    (
        folder / "shared" / "datasets" / "scifact"
        for folder in (REPO.parent, REPO.parent.parent)
        if (folder / "shared" / "datasets" / "scifact").exists()
    ),
    REPO.parent / "shared" / "datasets" / "scifact",
)
CONFIDENCES = ("high", "medium", "low", "none")


def read_queries(path: Path) -> list[tuple[str, str]]:
    """``(id, text)`` of a JSON Lines query file."""
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    return [(row["_id"], row["text"]) for row in rows]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id → {entry id: grade} of a BEIR qrels TSV (header skipped)."""
    judged: dict[str, dict[str, int]] = defaultdict(dict)
    for line in path.read_text("utf-8").splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        judged[qid][doc] = int(grade)
    return judged


@dataclasses.dataclass
class Turn:
    """One grounded question: what the block held and how sure the engine was."""

    included: tuple[str, ...]
    top: str | None
    confidence: str
    tokens: int
    reason: str | None
    primary: tuple[str, ...] = ()
    ranked: tuple[tuple[str, float, float], ...] = ()  # (id, score, coverage) of candidates


def ground_all(
    engine: gw.GroundingEngine, queries: Sequence[tuple[str, str]], scope: gw.Scope
) -> dict[str, Turn]:
    """Ground every question once."""
    out = {}
    for qid, text in queries:
        outcome = engine.ground(text, scope=scope)
        retrieval = outcome.retrieval
        context = retrieval.context if retrieval is not None else None
        included = context.included_ids if context is not None and outcome.block else ()
        top = retrieval.selected_ids[0] if retrieval and retrieval.selected_ids else None
        out[qid] = Turn(
            tuple(included),
            top if outcome.block else None,
            outcome.metadata.confidence if outcome.block else "none",
            outcome.metadata.context_tokens if outcome.block else 0,
            outcome.metadata.failure_reason,
            retrieval.selected_ids if retrieval is not None else (),
            tuple(
                (item.entry.id, item.score, item.coverage or 0.0)
                for item in (retrieval.candidates if retrieval is not None else ())
            ),
        )
    return out


def print_misses(
    kb: gw.KnowledgeBase,
    turns: dict[str, Turn],
    qrels: dict[str, dict[str, int]],
    in_scope: Callable[[str], bool],
) -> None:
    """Per question: the judged entries the scope lets in but the block lacks, with their
    rank among the candidates, score relative to the best kept entry, coverage, and the
    kept entries that link to them (what the relationship expansion could have added)."""
    for qid, turn in turns.items():
        missed = sorted(
            doc
            for doc, grade in qrels[qid].items()
            if grade > 0 and in_scope(doc) and doc not in turn.included
        )
        if not missed:
            continue
        ids = [doc for doc, _, _ in turn.ranked]
        best = max((score for doc, score, _ in turn.ranked if doc in turn.primary), default=0.0)
        print(f"{qid}: kept {', '.join(turn.included) or '-'}")
        for doc in missed:
            linked = [kept for kept in turn.primary if doc in kb.related(kept)]
            if doc in ids:
                _, score, coverage = turn.ranked[ids.index(doc)]
                where = f"rank {ids.index(doc)}, coverage {coverage:.2f}"
                where += f", score ratio {score / best:.2f}" if best else ""
            else:
                where = "not a candidate"
            print(f"  missed {doc} (grade {qrels[qid][doc]}): {where}, linked from {linked or '-'}")
    print()


def judged_figures(
    turns: dict[str, Turn],
    qrels: dict[str, dict[str, int]],
    in_scope: Callable[[str], bool] = lambda _: True,
) -> dict[str, float]:
    """Context precision, recall (of every judged entry, and of those the scope allows),
    blocks and tokens per turn of one judged run."""
    precision, recall, reachable = [], [], []
    for qid, turn in turns.items():
        relevant = {doc for doc, grade in qrels[qid].items() if grade > 0}
        hits = sum(1 for doc in turn.included if doc in relevant)
        if turn.included:
            precision.append(hits / len(turn.included))
        recall.append(hits / len(relevant) if relevant else 0.0)
        allowed = {doc for doc in relevant if in_scope(doc)}
        if allowed:
            reachable.append(sum(1 for doc in turn.included if doc in allowed) / len(allowed))
    return {
        "precision": statistics.fmean(precision) if precision else 0.0,
        "recall": statistics.fmean(recall),
        "reachable": statistics.fmean(reachable) if reachable else 0.0,
        "blocks": sum(1 for turn in turns.values() if turn.included),
        "questions": len(turns),
        "tokens": statistics.fmean(turn.tokens for turn in turns.values()),
    }


def calibration(
    turns: dict[str, Turn], qrels: dict[str, dict[str, int]]
) -> dict[str, tuple[int, float]]:
    """Per confidence class: questions, and the share whose top entry is judged relevant."""
    by_class: dict[str, list[bool]] = defaultdict(list)
    for qid, turn in turns.items():
        by_class[turn.confidence].append(turn.top is not None and qrels[qid].get(turn.top, 0) > 0)
    return {
        name: (len(by_class[name]), statistics.fmean(by_class[name]) if by_class[name] else 0.0)
        for name in CONFIDENCES
    }


def _in_scope(kb: gw.KnowledgeBase, doc: str, *, scope: gw.Scope) -> bool:
    """Whether the scope lets the entry in (everywhere-entries, or an enabled integration)."""
    entry = kb.get(doc)
    enabled = {name.casefold() for name in scope.enabled_integrations}
    return entry is not None and (
        not entry.integrations or bool(enabled & {n.casefold() for n in entry.integrations})
    )


def abstention(turns: dict[str, Turn]) -> float:
    """Share of questions that got no block."""
    return sum(1 for turn in turns.values() if not turn.included) / len(turns)


def search_ndcg(kb: gw.KnowledgeBase, queries: Sequence[tuple[str, str]], qrels: dict) -> float:
    """nDCG@10 of ``KnowledgeBase.search`` (``groundwire eval``'s ranking)."""
    return statistics.fmean(
        ndcg(kb.search_ids(text, k=10)[0], qrels[qid], 10) for qid, text in queries
    )


def fmt(value: float) -> str:
    return f"{value:.3f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    print()


def entries(gate: RelevanceGate, misses: bool = False) -> dict[str, object]:
    """Every handbook figure, before and after, under both scopes."""
    sources = gw.load_sources(HANDBOOK)
    kb = gw.KnowledgeBase.from_sources(sources)
    every = sorted({name for entry in kb for name in entry.integrations})
    scopes = {"default": gw.Scope(), "all-integrations": gw.Scope(tuple(every))}
    sets = {
        "handbook-eval": (read_queries(EVAL / "queries.jsonl"), read_qrels(EVAL / "qrels.tsv")),
        "holdout": (read_queries(HOLDOUT / "queries.jsonl"), read_qrels(HOLDOUT / "qrels.tsv")),
        "tuning": (read_queries(TUNING / "queries.jsonl"), read_qrels(TUNING / "qrels.tsv")),
    }
    unjudged = {
        "off-topic": read_queries(EVAL / "off-topic.jsonl"),
        "unanswerable": read_queries(EVAL / "unanswerable.jsonl"),
        "off-topic, naming an integration": read_queries(EVAL / "off-topic-named.jsonl"),
        "the same, held out": read_queries(EVAL / "off-topic-named-2.jsonl"),
        "the same, tuning": read_queries(TUNING / "off-topic-named.jsonl"),
    }
    modes = {
        "before (gate off)": gw.RetrievalConfig(gate="off"),
        "gate, scope as given": gw.RetrievalConfig(relevance=gate, named_integrations=False),
        "after (gate)": gw.RetrievalConfig(relevance=gate),
    }
    print(f"knowledge base: {HANDBOOK.relative_to(REPO)} ({len(kb)} entries)\n")
    for scope_name, scope in scopes.items():
        print(f"== entries, scope {scope_name} ==")
        rows, calib_rows, abst_rows = [], [], []
        for mode, retrieval in modes.items():
            config = gw.GroundingConfig(sources=sources, retrieval=retrieval, timeout_ms=60_000)
            with gw.GroundingEngine(config) as engine:
                engine.ready()
                for name, (queries, qrels) in sets.items():
                    turns = ground_all(engine, queries, scope)
                    in_scope = partial(_in_scope, kb, scope=scope)
                    f = judged_figures(turns, qrels, in_scope)
                    if misses and retrieval.gate != "off":
                        print(f"-- {name}, scope {scope_name}: judged entries in scope, missed")
                        print_misses(kb, turns, qrels, in_scope)
                    rows.append(
                        [
                            name,
                            mode,
                            fmt(f["precision"]),
                            fmt(f["recall"]),
                            fmt(f["reachable"]),
                            f"{f['blocks']}/{f['questions']}",
                            f"{f['tokens']:.0f}",
                            fmt(search_ndcg(kb, queries, qrels)),
                        ]
                    )
                    for confidence, (count, share) in calibration(turns, qrels).items():
                        if count:
                            calib_rows.append([name, mode, confidence, count, fmt(share)])
                for name, queries in unjudged.items():
                    turns = ground_all(engine, queries, scope)
                    tokens = statistics.fmean(turn.tokens for turn in turns.values())
                    reasons = Counter(turn.reason or "block" for turn in turns.values())
                    abst_rows.append(
                        [
                            name,
                            mode,
                            f"{abstention(turns):.0%}",
                            f"{tokens:.0f}",
                            ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())),
                        ]
                    )
        headers = ["set", "mode", "precision", "recall", "in-scope recall", "blocks"]
        table([*headers, "tokens/turn", "nDCG@10"], rows)
        table(["set", "mode", "no block", "tokens/turn", "outcomes"], abst_rows)
        table(["set", "mode", "confidence", "questions", "top relevant"], calib_rows)
    return {}


def documents(gate: RelevanceGate, scifact: bool) -> None:
    """Off-topic questions over examples/docs; SciFact evidence when available."""
    loaded = gw.load_documents([DOCS])
    chunks = [c for doc in loaded.documents for c in gw.chunk_document(doc, gw.ChunkingConfig())]
    kb = gw.KnowledgeBase.from_documents(gw.chunks_to_documents(chunks), chunk_settings())
    off = read_queries(EVAL / "off-topic.jsonl")
    print(f"== documents: {DOCS.relative_to(REPO)} ({len(chunks)} chunks) ==")
    rows = []
    for mode, settings in (("before (gate off)", "off"), ("after (gate)", "relevance")):
        results = [gw.retrieve_evidence(kb, text, gate=settings, relevance=gate) for _, text in off]
        none = sum(1 for result in results if not result.ready) / len(results)
        tokens = statistics.fmean(result.tokens for result in results)
        rows.append(["off-topic", mode, f"{none:.0%}", f"{tokens:.0f}"])
    table(["set", "mode", "no evidence", "tokens/turn"], rows)
    if not scifact or not SCIFACT.exists():
        print("SciFact skipped\n")
        return
    data = load_dataset(SCIFACT)
    sci = gw.KnowledgeBase.from_documents(data.documents)
    queries = list(data.queries.items())
    rows = []
    for mode, settings in (("before (gate off)", "off"), ("after (gate)", "relevance")):
        precision, recall, ready, tokens = [], [], 0, []
        for qid, text in queries:
            result = gw.retrieve_evidence(sci, text, gate=settings, relevance=gate)
            relevant = {doc for doc, grade in data.qrels[qid].items() if grade > 0}
            got = [excerpt.source_id for excerpt in result.excerpts]
            hits = sum(1 for doc in got if doc in relevant)
            tokens.append(result.tokens)
            if got:
                ready += 1
                precision.append(hits / len(got))
            recall.append(hits / len(relevant))
        rows.append(
            [
                mode,
                fmt(statistics.fmean(precision) if precision else 0.0),
                fmt(statistics.fmean(recall)),
                f"{ready}/{len(queries)}",
                f"{statistics.fmean(tokens):.0f}",
                fmt(search_ndcg(sci, queries, data.qrels)),
            ]
        )
    print(f"== documents: SciFact ({len(sci)} documents, {len(queries)} judged claims) ==")
    table(["mode", "precision", "recall", "with evidence", "tokens/turn", "nDCG@10"], rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = RelevanceGate()
    for f in dataclasses.fields(RelevanceGate):  # every threshold, for exploration
        kind = int if f.name.endswith("_terms") else float
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", type=kind, default=getattr(defaults, f.name)
        )
    parser.add_argument("--no-scifact", action="store_true", help="skip SciFact")
    parser.add_argument("--no-documents", action="store_true", help="entries only")
    parser.add_argument(
        "--misses", action="store_true", help="print the judged entries the gate leaves out"
    )
    args = parser.parse_args(argv)
    gate = RelevanceGate(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(RelevanceGate)}
    )
    print(f"groundwire {gw.__version__}, {source_state(REPO)}")
    print(f"gate: {gate}\n")
    entries(gate, misses=args.misses)
    if not args.no_documents:
        documents(gate, scifact=not args.no_scifact)


if __name__ == "__main__":
    main()
