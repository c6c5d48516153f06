"""The C query kernel vs the numpy query path on SciFact: per-query µs of scoring + top-k.

Data: SciFact (BEIR test split, 5,183 abstracts, the 300 test claims), from
``../shared/datasets/scifact`` (``--data``), indexed with ``KnowledgeBase.from_documents``
and its document defaults. Each query is analysed once up front:
``terms = kb.analyzer.tokens(q)``; its rows are those of
``kb.lexical.query_ids(terms)`` (the ids ``LexicalIndex.score`` sums: known terms, one per
occurrence, and indexed term pairs) in ``kb.lexical.indptr``.

Measures, per query, for k = 10 and k = 100 (``--rounds`` interleaved rounds, the order
rotated every round, ``--repeat`` passes over the queries per round; median over rounds):

* ``numpy``: ``kb.lexical.score(terms).top(k)``, the current query path;
* ``kernel``: ``_kernel.score_topk`` on the same rows given as int64 arrays;
* ``kernel from terms``: what a wired-in ``LexicalIndex.score`` would do: ``query_ids``,
  bounds from a list of ``indptr`` (Python ints), then ``score_topk``;
* ``kernel, int32 docs``: the kernel on an int32 copy of the documents (the dtype a loaded
  snapshot holds);
* for k = 10 only, with the analyser included (``tokens``): the
  analyser alone, ``query_ids`` + bounds alone (part of "kernel from terms"), analyser +
  kernel from terms, and, when bm25s is installed (and not
  ``--no-bm25s``), bm25s with its Tokenizer ids, numpy backend, ``n_threads=0`` (the
  configuration of ``bench_query_scifact.py``); the target is ≥ 4× bm25s;
* ``words + codes + kernel``: the path ``KnowledgeBase.search`` takes without phrase
  boosts: ``Analyzer.words``, the knowledge base's cached word codes, then one kernel call
  that also finds the term pairs (``LexicalIndex.top_codes``); results as Python lists.

Plus the fixed cost of one call: ``score_topk`` on zero rows (the Python wrapper and the
ctypes call) and the bare ctypes call (one pointer to the prepared ``gw_query``).

Before timing, every query's kernel result must equal the numpy path's: same ids, scores
bit for bit, for both k and both document dtypes.

Run from the repository root: ``.venv/bin/python benchmarks/bench_kernel.py`` (about 1
minute on 2 cores). Needs the kernel built (``pip install -e .`` with a C compiler).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import groundwire
from _common import print_table, source_state, versions
from groundwire.eval import load_dataset
from groundwire.index import _kernel

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "scifact"


def interleaved(
    loops: dict[str, Callable[[], object]], rounds: int, per_round: int
) -> dict[str, float]:
    """Median µs per query of each loop (``per_round`` queries per call), rounds rotated."""
    names = list(loops)
    samples: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter_ns
    for r in range(rounds):
        shift = r % len(names)
        for name in [*names[shift:], *names[:shift]]:
            loop = loops[name]
            gc.collect()
            start = clock()
            loop()
            samples[name].append((clock() - start) / 1e3 / per_round)
    return {name: statistics.median(values) for name, values in samples.items()}


def bm25s_search(data: Path) -> Callable[[str], Any] | None:
    """bench_query_scifact's bm25s (Tokenizer ids, n_threads=0), or None without bm25s."""
    try:
        import bm25s  # noqa: F401
    except ImportError:
        return None
    import bench_query_scifact as peers

    return peers.build_bm25s_tokenizer(peers.load_corpus(data), 0)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="SciFact (BEIR) folder")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--repeat", type=int, default=5, help="passes over the queries a round")
    parser.add_argument("--no-bm25s", action="store_true", help="skip the bm25s reference")
    args = parser.parse_args(argv)
    if not _kernel.available():
        sys.exit(f"the C kernel is unavailable: {_kernel.unavailable_reason()}")

    ds = load_dataset(args.data if args.data.is_absolute() else REPO / args.data)
    kb = groundwire.KnowledgeBase.from_documents(ds.documents)
    texts = list(ds.queries.values())
    print(f"SciFact: {len(ds.documents)} docs, {len(texts)} test queries ({args.data})")
    print(versions(["groundwire", "bm25s"]))
    print(source_state(REPO))

    lexical = kb.lexical
    query_ids, n_docs = lexical.query_ids, lexical.doc_count
    docs, scores = lexical.docs, lexical.scores
    docs32 = docs.astype(np.int32)
    bounds: list[int] = lexical.indptr.tolist()
    analyse = kb.analyzer.tokens
    queries = [analyse(text) for text in texts]
    ids = [query_ids(terms) for terms in queries]
    rows = [
        (
            np.array([bounds[t] for t in tids], np.int64),
            np.array([bounds[t + 1] for t in tids], np.int64),
        )
        for tids in ids
    ]
    postings = [int((hi - lo).sum()) for lo, hi in rows]
    print(
        f"rows per query: median {statistics.median(len(t) for t in ids)}, "
        f"postings per query: median {statistics.median(postings)}, max {max(postings)}"
    )

    # Identical results before any timing.
    for k in (10, 100):
        for terms, (lo, hi) in zip(queries, rows, strict=True):
            want_docs, want_scores = lexical.score(terms).top(k)
            for rows_docs in (docs, docs32):
                got_docs, got_scores = _kernel.score_topk(lo, hi, rows_docs, scores, n_docs, k)
                assert got_docs.tolist() == want_docs.tolist(), (terms, k)
                assert got_scores.tobytes() == np.asarray(want_scores, np.float64).tobytes()
    print(f"identical ids and bitwise-identical scores on all {len(queries)} queries, k=10/100")

    score, score_topk = lexical.score, _kernel.score_topk
    repeat = args.repeat

    def numpy_loop(k: int) -> Callable[[], object]:
        def run() -> None:
            for _ in range(repeat):
                for terms in queries:
                    score(terms).top(k)

        return run

    def kernel_loop(k: int, rows_docs: Any) -> Callable[[], object]:
        def run() -> None:
            for _ in range(repeat):
                for lo, hi in rows:
                    score_topk(lo, hi, rows_docs, scores, n_docs, k)

        return run

    def from_terms(terms: Sequence[str], k: int) -> object:
        tids = query_ids(terms)
        return score_topk(
            [bounds[t] for t in tids], [bounds[t + 1] for t in tids], docs, scores, n_docs, k
        )

    def terms_loop(k: int) -> Callable[[], object]:
        def run() -> None:
            for _ in range(repeat):
                for terms in queries:
                    from_terms(terms, k)

        return run

    def analyse_loop(with_kernel: bool) -> Callable[[], object]:
        def run() -> None:
            for _ in range(repeat):
                for text in texts:
                    terms = analyse(text)
                    if with_kernel:
                        from_terms(terms, 10)

        return run

    loops: dict[str, Callable[[], object]] = {}
    for k in (10, 100):
        loops[f"numpy, k={k}"] = numpy_loop(k)
        loops[f"kernel, k={k}"] = kernel_loop(k, docs)
        loops[f"kernel from terms, k={k}"] = terms_loop(k)
        loops[f"kernel, int32 docs, k={k}"] = kernel_loop(k, docs32)

    def ids_loop() -> None:
        for _ in range(repeat):
            for terms in queries:
                tids = query_ids(terms)
                _ = [bounds[t] for t in tids], [bounds[t + 1] for t in tids]

    loops["query_ids + bounds only"] = ids_loop
    loops["analyser only"] = analyse_loop(False)
    loops["analyser + kernel from terms, k=10"] = analyse_loop(True)
    words_of, codes_of, top_codes = kb.analyzer.words, kb._word_codes, lexical.top_codes
    for text in texts:  # the same results as the numpy path, before timing
        want_docs, want_scores = lexical.score(analyse(text)).top(10)
        assert top_codes(codes_of(words_of(text)), 10) == (want_docs.tolist(), want_scores.tolist())

    def codes_loop() -> None:
        for _ in range(repeat):
            for text in texts:
                top_codes(codes_of(words_of(text)), 10)

    loops["words + codes + kernel, k=10"] = codes_loop
    peer = None if args.no_bm25s else bm25s_search(args.data)
    if peer is not None:

        def bm25s_loop() -> None:
            for _ in range(repeat):
                for text in texts:
                    peer(text)

        loops["bm25s (Tokenizer ids, n_threads=0), k=10"] = bm25s_loop

    empty = np.empty(0, np.int64)
    fixed: dict[str, Callable[[], object]] = {
        "score_topk, zero rows": lambda: [
            score_topk(empty, empty, docs, scores, n_docs, 10) for _ in range(1000)
        ],
        "ctypes call, zero rows": bare_call(docs, scores, n_docs),
    }

    median = interleaved(loops, args.rounds, repeat * len(texts))
    overhead = interleaved(fixed, args.rounds, 1000)
    paths = ("numpy", "kernel", "kernel from terms", "kernel, int32 docs")
    table: list[list[object]] = [
        [name, f"{median[name]:.1f}", f"{median[f'numpy, k={k}'] / median[name]:.2f}x"]
        for k in (10, 100)
        for name in (f"{path}, k={k}" for path in paths)
    ]
    print("\nScoring + top-k per query (analysed queries; ratio = numpy time / this time)")
    print_table(["path", "µs/query", "speed-up vs numpy"], table)

    peer_name = next((name for name in median if name.startswith("bm25s")), None)

    def versus(name: str) -> str:
        return "" if peer_name is None else f"{median[peer_name] / median[name]:.2f}x"

    table = [
        ["query_ids + bounds only", f"{median['query_ids + bounds only']:.1f}", ""],
        ["analyser only", f"{median['analyser only']:.1f}", ""],
    ]
    for name in ("analyser + kernel from terms, k=10", "words + codes + kernel, k=10"):
        table.append([name, f"{median[name]:.1f}", versus(name)])
    if peer_name is not None:
        table.append([peer_name, f"{median[peer_name]:.1f}", "1.00x"])
    print("\nWith query analysis (text in, top-10 positions out; bm25s / this: its time over")
    print("this path's; the target of >= 4x is measured end to end by bench_query_scifact.py)")
    print_table(["path", "µs/query", "bm25s / this"], table)

    print("\nFixed cost of one call")
    print_table(["call", "µs"], [[name, f"{value:.2f}"] for name, value in overhead.items()])


def bare_call(docs: Any, scores: Any, n_docs: int) -> Callable[[], object]:
    """1000 bare ctypes calls of gw_query_topk on zero rows (the struct already set up)."""
    _kernel.score_topk([], [], docs, scores, n_docs, 10)  # loads, caches, sizes the scratch
    library = _kernel._load()
    assert library is not None
    topk, query = library.topk, _kernel._scratch().query_ptr
    return lambda: [topk(query) for _ in range(1000)]


if __name__ == "__main__":
    main()
