"""Query throughput on SciFact: groundwire vs bm25s, tantivy and rank-bm25, side by side.

Measures, in one process:

* build seconds of each system over the 5,183 SciFact abstracts (BEIR test split,
  ``corpus.jsonl.gz``: title + text), median of ``--build-rounds`` builds;
* queries/second over the 300 test claims (``queries.jsonl``, only ids in
  ``qrels/test.tsv``), one query at a time, top-10, tokenization included, ids returned;
  ``--rounds`` rounds interleaving the systems (order rotated each round), median per
  system, and the ratio of groundwire's q/s to each peer's;
* groundwire's per-query latency p50/p99 (and every peer's);
* nDCG@10 (binary relevance from the qrels) of each system, as a check that all do
  comparable work.

Peers: bm25s (numpy backend, ``method="lucene"``, k1=1.5, b=0.75, PyStemmer English,
Lucene stop words; via ``bm25s.tokenization.Tokenizer`` ids and via ``bm25s.tokenize``),
tantivy-py (``en_stem`` on title and body, optionally with the same stop words; BM25
k1=1.2, b=0.75 fixed by tantivy) and rank-bm25 ``BM25Okapi`` (pure Python scoring, timed
on the first ``--rank-bm25-queries`` queries only).

``--profile`` instead runs groundwire's query loop under pyinstrument and prints the
profile (``pip install pyinstrument``; a dev-only tool).

Run from the repository root: ``.venv/bin/python benchmarks/bench_query_scifact.py``.
"""

from __future__ import annotations

import argparse
import atexit
import csv
import gzip
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import groundwire
from _common import (
    LUCENE_STOPWORDS,
    Search,
    System,
    build_tantivy,
    describe_groundwire,
    print_table,
    round_percentile,
    run_rounds,
    source_state,
    versions,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "scifact"
K = 10
SEEN: dict[str, str] = {}  # "settings": what groundwire was built with


# -- data -------------------------------------------------------------------------------------
def load_corpus(data: Path) -> list[dict[str, str]]:
    """SciFact documents as ``{"id", "title", "text"}``, in file order."""
    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [{"id": r["_id"], "title": r["title"], "text": r["text"]} for r in rows]


def load_qrels(data: Path) -> dict[str, set[str]]:
    """Test qrels: query id → relevant doc ids (score > 0)."""
    qrels: dict[str, set[str]] = {}
    with open(data / "qrels" / "test.tsv", encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(row["query-id"], set()).add(row["corpus-id"])
    return qrels


def load_queries(data: Path, qrels: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(query id, text) of the queries that have test qrels, in file order."""
    out = []
    with open(data / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                if row["_id"] in qrels:
                    out.append((row["_id"], row["text"]))
    return out


def ndcg_at_10(ranked: Sequence[Sequence[str]], relevant: Sequence[set[str]]) -> float:
    """Mean nDCG@10 with binary gains."""
    total = 0.0
    for ids, rel in zip(ranked, relevant, strict=True):
        dcg = sum(1.0 / math.log2(i + 2) for i, doc in enumerate(ids[:K]) if doc in rel)
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), K)))
        total += dcg / ideal if ideal else 0.0
    return total / len(ranked) if ranked else 0.0


# -- systems ----------------------------------------------------------------------------------
def build_groundwire(docs: list[dict[str, str]]) -> Search:
    """groundwire with its document defaults (``from_documents`` without settings)."""
    kb = groundwire.KnowledgeBase.from_documents(docs)
    SEEN["settings"] = describe_groundwire(kb)

    def search(query: str) -> list[str]:
        return [hit.id for hit in kb.search(query, k=K)]

    return search


def _bm25s_retriever() -> Any:
    import bm25s

    return bm25s.BM25(method="lucene", k1=1.5, b=0.75, backend="numpy")


def build_bm25s_tokenizer(docs: list[dict[str, str]], threads: int) -> Search:
    """bm25s with its Tokenizer: corpus ids with vocab, queries as ids (update_vocab=False)."""
    import bm25s
    import Stemmer

    tokenizer = bm25s.tokenization.Tokenizer(
        stopwords=list(LUCENE_STOPWORDS), stemmer=Stemmer.Stemmer("english")
    )
    corpus = [f"{d['title']} {d['text']}" for d in docs]
    tokens = tokenizer.tokenize(corpus, return_as="tuple", show_progress=False)
    retriever = _bm25s_retriever()
    retriever.index(tokens, show_progress=False)
    ids = np.array([d["id"] for d in docs], dtype=object)
    tokenize, retrieve = tokenizer.tokenize, retriever.retrieve

    def search(query: str) -> list[str]:
        query_ids = tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
        found, _ = retrieve(
            query_ids, k=K, n_threads=threads, show_progress=False, backend_selection="numpy"
        )
        return list(ids[found[0]])

    return search


def build_bm25s_plain(docs: list[dict[str, str]], threads: int) -> Search:
    """bm25s with ``bm25s.tokenize`` (README usage); queries tokenized to strings."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    stop = list(LUCENE_STOPWORDS)
    corpus = [f"{d['title']} {d['text']}" for d in docs]
    tokens = bm25s.tokenize(corpus, stopwords=stop, stemmer=stemmer, show_progress=False)
    retriever = _bm25s_retriever()
    retriever.index(tokens, show_progress=False)
    ids = np.array([d["id"] for d in docs], dtype=object)
    tokenize, retrieve = bm25s.tokenize, retriever.retrieve

    def search(query: str) -> list[str]:
        query_tokens = tokenize(
            query, stopwords=stop, stemmer=stemmer, return_ids=False, show_progress=False
        )
        found, _ = retrieve(
            query_tokens, k=K, n_threads=threads, show_progress=False, backend_selection="numpy"
        )
        return list(ids[found[0]])

    return search


def build_tantivy_search(docs: list[dict[str, str]], stopwords: bool, tmp: Path) -> Search:
    """tantivy on disk in ``tmp`` (page cache), one writer thread."""
    path = Path(tempfile.mkdtemp(dir=tmp))
    triples = ((d["id"], d["title"], d["text"]) for d in docs)
    index = build_tantivy(triples, stopwords=stopwords, path=path, heap_bytes=256 * 2**20)
    return index.search


_RANK_WORD = re.compile(r"(?u)\b\w\w+\b")


def build_rank_bm25(docs: list[dict[str, str]]) -> Search:
    """rank-bm25 BM25Okapi (k1=1.5, b=0.75) over bm25s-style tokens (lower, stop, stem)."""
    import Stemmer
    from rank_bm25 import BM25Okapi

    stem = Stemmer.Stemmer("english").stemWords
    stop = frozenset(LUCENE_STOPWORDS)

    def tokens(text: str) -> list[str]:
        return list(stem([w for w in _RANK_WORD.findall(text.lower()) if w not in stop]))

    model = BM25Okapi([tokens(f"{d['title']} {d['text']}") for d in docs], k1=1.5, b=0.75)
    ids = [d["id"] for d in docs]

    def search(query: str) -> list[str]:
        scores = model.get_scores(tokens(query))
        top = np.argpartition(-scores, K)[:K]
        top = top[np.lexsort((top, -scores[top]))]
        return [ids[i] for i in top.tolist()]

    return search


# -- main ---------------------------------------------------------------------------------
def profile(docs: list[dict[str, str]], queries: list[str], passes: int) -> None:
    """Run groundwire's query loop under pyinstrument and print the profile."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        sys.exit("--profile needs pyinstrument: .venv/bin/pip install pyinstrument")
    search = build_groundwire(docs)
    for query in queries:  # warm-up, not profiled
        search(query)
    profiler = Profiler(interval=0.0001)
    profiler.start()
    for _ in range(passes):
        for query in queries:
            search(query)
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    session = profiler.last_session
    root = session.root_frame() if session is not None else None
    if root is None:
        return
    # Flat self time per function (pyinstrument's own flat view merges [self] rows by file).
    own: dict[str, float] = {}
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        frame, parent = stack.pop()
        children = frame.children
        where = f"{frame.function}  {frame.file_path_short}:{frame.line_no}"
        if frame.is_synthetic_leaf:  # a "[self]" row: time spent in the parent itself
            where = parent
        self_time = frame.time - sum(child.time for child in children)
        own[where] = own.get(where, 0.0) + self_time
        stack.extend((child, where) for child in children)
    total = root.time
    per_query_us = total / (passes * len(queries)) * 1e6
    print(f"Self time by function ({total:.2f} s profiled, {per_query_us:.1f} µs/query):")
    for where, secs in sorted(own.items(), key=lambda item: -item[1])[:25]:
        print(f"{100 * secs / total:6.1f}%  {secs:7.3f} s  {where}")


def main(argv: Sequence[str] | None = None) -> None:
    """Parse arguments, build every system, time them interleaved and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="SciFact (BEIR) folder")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument(
        "--repeat", type=int, default=3, help="passes over the queries per system and round"
    )
    parser.add_argument("--build-rounds", type=int, default=3, help="builds per system")
    parser.add_argument(
        "--rank-bm25-queries", type=int, default=20, help="queries timed for rank-bm25 (0: skip)"
    )
    parser.add_argument("--no-tantivy", action="store_true", help="skip tantivy")
    parser.add_argument("--no-bm25s", action="store_true", help="skip bm25s")
    parser.add_argument("--profile", action="store_true", help="profile groundwire's queries")
    parser.add_argument("--profile-passes", type=int, default=20, help="query passes profiled")
    args = parser.parse_args(argv)

    data = args.data if args.data.is_absolute() else (REPO / args.data)
    docs = load_corpus(data)
    qrels = load_qrels(data)
    query_pairs = load_queries(data, qrels)
    texts = [text for _, text in query_pairs]
    relevant = [qrels[qid] for qid, _ in query_pairs]
    print(f"SciFact: {len(docs)} docs, {len(texts)} test queries ({data})")
    print(versions(["groundwire", "bm25s", "tantivy", "rank-bm25", "PyStemmer"]))
    print(source_state(REPO))
    if args.profile:
        profile(docs, texts, args.profile_passes)
        return

    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-scifact-"))
    atexit.register(shutil.rmtree, tmp, True)  # the tantivy indexes
    timed = texts * args.repeat
    builders: list[tuple[str, Callable[[], Search], Sequence[str], str]] = [
        ("groundwire", lambda: build_groundwire(docs), timed, "")
    ]
    if not args.no_bm25s:
        builders += [
            ("bm25s Tokenizer ids, n_threads=0", lambda: build_bm25s_tokenizer(docs, 0), timed, ""),
            ("bm25s Tokenizer ids, n_threads=1", lambda: build_bm25s_tokenizer(docs, 1), timed, ""),
            ("bm25s.tokenize, n_threads=0", lambda: build_bm25s_plain(docs, 0), timed, ""),
        ]
    if not args.no_tantivy:
        builders += [
            ("tantivy en_stem", lambda: build_tantivy_search(docs, False, tmp), timed, ""),
            (
                "tantivy en_stem + stop words",
                lambda: build_tantivy_search(docs, True, tmp),
                timed,
                "",
            ),
        ]
    if args.rank_bm25_queries > 0:
        subset = texts[: args.rank_bm25_queries]
        note = f"timed on {len(subset)} queries"
        builders.append(("rank-bm25 BM25Okapi", lambda: build_rank_bm25(docs), subset, note))

    # Builds, interleaved like the queries; the last build of each system is the one queried.
    build_secs: dict[str, list[float]] = {name: [] for name, *_ in builders}
    searches: dict[str, Search] = {}
    for r in range(args.build_rounds):
        for name, build, _, _ in builders[r % len(builders) :] + builders[: r % len(builders)]:
            start = time.perf_counter()
            searches[name] = build()
            build_secs[name].append(time.perf_counter() - start)
            print(
                f"  build {r + 1}/{args.build_rounds} {name:<32} {build_secs[name][-1]:.2f} s",
                file=sys.stderr,
            )

    systems = [System(name, searches[name], qs, note) for name, _, qs, note in builders]
    # Warm-up pass (untimed) over all queries: fills caches and gives the rankings for nDCG.
    ndcg: dict[str, float] = {}
    for system in systems:
        ndcg[system.name] = ndcg_at_10([system.search(q) for q in texts], relevant)
    run_rounds(systems, args.rounds)

    gw = systems[0]
    base = statistics.median(gw.qps)
    rows = []
    for s in systems:
        qps = statistics.median(s.qps)
        paired = statistics.median(g / p for g, p in zip(gw.qps, s.qps, strict=True))
        rows.append(
            [
                s.name + (f" ({s.note})" if s.note else ""),
                f"{statistics.median(build_secs[s.name]):.2f}",
                f"{qps:,.0f}",
                f"{max(s.qps):,.0f}",
                f"{base / qps:.2f}×",
                f"{paired:.2f}×",
                f"{round_percentile(s, 50):.3f}",
                f"{round_percentile(s, 99):.3f}",
                f"{ndcg[s.name]:.4f}",
            ]
        )
    print()
    print(
        f"{args.rounds} interleaved rounds of {args.repeat} × {len(texts)} queries per system "
        f"(top-{K}, one at a time); q/s = median over rounds, best = fastest round; "
        f"build = median of {args.build_rounds}; nDCG@10 over all {len(texts)} queries."
    )
    print(
        "speed-up = groundwire q/s ÷ system q/s (medians); paired = median over rounds of "
        "the same ratio within a round."
    )
    print(SEEN.get("settings", ""))
    print_table(
        [
            "system",
            "build s",
            "q/s",
            "best q/s",
            "groundwire speed-up",
            "paired",
            "p50 ms",
            "p99 ms",
            "nDCG@10",
        ],
        rows,
    )
    print(
        f"\ngroundwire per-query latency: p50 {round_percentile(gw, 50):.3f} ms, "
        f"p99 {round_percentile(gw, 99):.3f} ms (median over rounds)"
    )
    targets = {"bm25s": 4.0, "tantivy": 2.0}
    for prefix, target in targets.items():
        peers = [s for s in systems[1:] if s.name.startswith(prefix)]
        if peers:
            fastest = max(peers, key=lambda s: statistics.median(s.qps))
            ratio = base / statistics.median(fastest.qps)
            verdict = "met" if ratio >= target else "NOT met"
            print(
                f"target ≥{target:.0f}× the fastest {prefix} ({fastest.name}): "
                f"{ratio:.2f}× ({verdict})"
            )


if __name__ == "__main__":
    main()
