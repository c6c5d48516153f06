"""Scale test: build and query a synthetic 1,000,000-document corpus; groundwire vs bm25s/tantivy.

Data: generated in memory from a fixed seed. A vocabulary of ``--vocab`` (200k) distinct
pseudo-words of 3-10 random letters (no word of bm25s' 179-word ``STOPWORDS_EN_PLUS``, a
superset of Lucene's list, so no system drops a generated word; shorter words get the
frequent ranks), word ranks drawn from a Zipf law (exponent ``--zipf``, 1.1); each document
has a title of 3-10 words and a body of 20-80 words (about 56 words per document).

Measures, in one process:

* groundwire ``KnowledgeBase.from_documents`` build seconds; then a second, instrumented
  build split into the bulk build's stages (docs/INDEX.md, "Building"): splitting texts
  into words, numbering words, stemming new words, postings per document, rows and scores,
  the rest of ``from_documents`` (entries, id sort, phrase maps, masks) as remainder;
* memory: peak RSS during each build above the RSS before it (``getrusage`` ru_maxrss,
  with the kernel's peak mark reset through ``/proc/self/clear_refs`` before each build),
  RSS kept after it, and the LexicalIndex size (sum of its numpy arrays' ``nbytes``);
* query latency p50/p90/p99 (median over ``--rounds`` interleaved rounds) of ``--queries``
  queries of 2-6 words from the same Zipf law, once without the 100 most frequent words
  (like real queries) and once with them, top-10 ids, tokenization included; beside it,
  the same index through the kernel with pruning off (``--no-unpruned`` skips it), whose
  results must be identical;
* the same build time, memory and latency for bm25s (numpy backend, ``method="lucene"``,
  k1=1.5, b=0.75, Tokenizer with PyStemmer English and Lucene stop words, corpus = title +
  " " + body, ``n_threads=0``) and tantivy-py (``en_stem`` plus the same stop words, title
  and body fields, one writer thread, index in a temporary folder), plus their top-10
  overlap with groundwire as a sanity check.

Run from the repository root: ``.venv/bin/python benchmarks/bench_synthetic_1m.py``
(``--docs 100000`` for a quick check; ``--no-bm25s`` / ``--no-tantivy`` to skip peers).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import groundwire
from _common import (
    LUCENE_STOPWORDS,
    System,
    build_tantivy,
    describe_groundwire,
    directory_mib,
    peak_rss_mib,
    print_table,
    reset_peak_rss,
    round_percentile,
    rss_mib,
    run_rounds,
    source_state,
    versions,
)
from groundwire.index import _kernel
from groundwire.index.update import compact

REPO = Path(__file__).resolve().parents[1]
K = 10
MAX_WORD = 10


# -- corpus -----------------------------------------------------------------------------------
def make_vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """``size`` distinct lowercase pseudo-words, shortest first (they get the frequent ranks)."""
    candidates = int(size * 1.3) + 1000
    lengths = rng.integers(3, MAX_WORD + 1, candidates)
    letters = rng.integers(ord("a"), ord("z") + 1, (candidates, MAX_WORD), dtype=np.uint8)
    letters[np.arange(MAX_WORD) >= lengths[:, None]] = 0  # NUL-padded, dropped by the view
    raw = letters.view(f"S{MAX_WORD}").ravel()
    _, first = np.unique(raw, return_index=True)
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    stop = {*LUCENE_STOPWORDS, *STOPWORDS_EN_PLUS}
    words = [w for w in raw[np.sort(first)].astype(f"U{MAX_WORD}").tolist() if w not in stop]
    if len(words) < size:
        raise SystemExit(f"only {len(words)} distinct words generated; lower --vocab")
    words = words[:size]
    words.sort(key=len)  # stable: equal lengths keep their random order
    return words


def zipf_cdf(size: int, exponent: float, skip: int = 0) -> np.ndarray:
    """Cumulative Zipf probabilities over ranks 1..size, ranks ``<= skip`` given weight 0."""
    weights = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    weights[:skip] = 0.0
    cdf: np.ndarray = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


def sample_ranks(rng: np.random.Generator, cdf: np.ndarray, count: int) -> np.ndarray:
    """``count`` word indexes (0-based ranks) drawn from ``cdf``."""
    ranks = np.searchsorted(cdf, rng.random(count), side="right")
    return np.minimum(ranks, len(cdf) - 1).astype(np.int32)


def make_corpus(
    n_docs: int, words: list[str], cdf: np.ndarray, rng: np.random.Generator
) -> list[dict[str, str]]:
    """``n_docs`` documents ``{"id", "title", "text"}``; built in chunks, joined once per chunk."""
    spaced = np.array([w + " " for w in words], dtype=object)
    char_len = np.array([len(w) + 1 for w in words], dtype=np.int64)
    docs: list[dict[str, str]] = []
    chunk = 100_000
    for first in range(0, n_docs, chunk):
        n = min(chunk, n_docs - first)
        lengths = np.empty(2 * n, dtype=np.int64)
        lengths[0::2] = rng.integers(3, 11, n)  # title words
        lengths[1::2] = rng.integers(20, 81, n)  # body words
        ranks = sample_ranks(rng, cdf, int(lengths.sum()))
        text = "".join(spaced[ranks].tolist())
        char_end = np.cumsum(char_len[ranks])[np.cumsum(lengths) - 1]
        char_start = np.concatenate(([0], char_end[:-1]))
        # Each field ends with its last word's trailing space; drop it.
        fields = [
            text[a : b - 1] for a, b in zip(char_start.tolist(), char_end.tolist(), strict=True)
        ]
        docs.extend(
            {"id": f"d{first + i:07d}", "title": fields[2 * i], "text": fields[2 * i + 1]}
            for i in range(n)
        )
    return docs


def make_queries(
    rng: np.random.Generator, words: list[str], cdf: np.ndarray, count: int
) -> list[str]:
    """``count`` queries of 2-6 words drawn from ``cdf``."""
    lengths = rng.integers(2, 7, count)
    ranks = sample_ranks(rng, cdf, int(lengths.sum())).tolist()
    out, at = [], 0
    for n in lengths.tolist():
        out.append(" ".join(words[r] for r in ranks[at : at + n]))
        at += n
    return out


# -- measurements -----------------------------------------------------------------------------
@dataclasses.dataclass
class Build:
    """One system's build: its search function and what the build cost."""

    name: str
    search: Callable[[str], list[str]]
    seconds: float
    base_mib: float | None
    peak_mib: float
    kept_mib: float | None
    index_mib: float | None
    note: str = ""
    keep: Any = None  # keeps the built object alive
    cpu: float = 0.0  # CPU seconds of this process (all its threads) during the build


def measured_build(name: str, build: Callable[[], tuple[Callable[[str], list[str]], Any]]) -> Build:
    """Run ``build`` with the peak-RSS mark reset; record seconds and memory."""
    gc.collect()
    exact = reset_peak_rss()
    base = rss_mib()
    start, cpu = time.perf_counter(), time.process_time()
    search, keep = build()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = peak_rss_mib()
    gc.collect()
    kept = rss_mib()
    note = "" if exact else "peak = process peak so far (clear_refs unsupported)"
    print(f"  built {name} in {seconds:.1f} s (CPU {cpu:.1f} s)", file=sys.stderr)
    return Build(name, search, seconds, base, peak, kept, None, note, keep, cpu)


def nbytes(obj: Any) -> int:
    """Total ``nbytes`` of the numpy arrays in ``obj`` (dataclasses and tuples followed)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(nbytes(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if isinstance(obj, tuple | list):
        return sum(nbytes(item) for item in obj)
    return 0


def dict_mib(mapping: dict[str, Any]) -> float:
    """Approximate size of a str → int dict: table, keys and int objects (MiB)."""
    keys = sum(sys.getsizeof(k) for k in mapping)
    return (sys.getsizeof(mapping) + keys + 32 * len(mapping)) / 2**20


def groundwire_split(docs: list[dict[str, str]]) -> tuple[float, list[tuple[str, float]]]:
    """Rebuild with timers around groundwire's build stages; (total seconds, stages).

    Wraps the bulk build's stages (``index/bulk.py``) for the duration of one
    ``from_documents``; the wrappers add well under a microsecond per call (a few calls
    per batch). Internal names: skipped if they change.
    """
    from groundwire.index import _bulk, bulk
    from groundwire.text.analyzer import Analyzer

    spent: dict[str, float] = {}
    clock = time.perf_counter
    targets = [
        (Analyzer, "joined_words", "texts → words (Analyzer.joined_words)"),
        (_bulk.WordTable, "numbers", "words → numbers (C hash table)"),
        (Analyzer, "analyze_words", "stemming new words (Analyzer.analyze_words)"),
        (_bulk, "doc_postings", "postings per document (_bulk.doc_postings)"),
        (bulk, "_rows", "rows: counting sorts + scoring (bulk._rows)"),
    ]
    originals = [(owner, name, vars(owner)[name]) for owner, name, _ in targets]

    def timing(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        spent[label] = 0.0

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += clock() - start

        return wrapper

    try:
        for owner, name, label in targets:
            setattr(owner, name, timing(vars(owner)[name], label))
        gc.collect()
        start = clock()
        groundwire.KnowledgeBase.from_documents(docs)
        total = clock() - start
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    return total, list(spent.items())


def build_groundwire(docs: list[dict[str, str]]) -> tuple[Callable[[str], list[str]], Any]:
    """groundwire with its document defaults (fields title+body, k1=1.5, b=0.75)."""
    kb = groundwire.KnowledgeBase.from_documents(docs)

    def search(query: str) -> list[str]:
        return [hit.id for hit in kb.search(query, k=K)]

    return search, kb


def build_bm25s(combined: list[str], ids: np.ndarray) -> tuple[Callable[[str], list[str]], Any]:
    """bm25s numpy backend, Tokenizer ids (queries with update_vocab=False), n_threads=0."""
    import bm25s
    import Stemmer

    tokenizer = bm25s.tokenization.Tokenizer(
        stopwords=list(LUCENE_STOPWORDS), stemmer=Stemmer.Stemmer("english")
    )
    tokens = tokenizer.tokenize(combined, return_as="tuple", show_progress=False)
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75, backend="numpy")
    retriever.index(tokens, show_progress=False)
    del tokens
    tokenize, retrieve = tokenizer.tokenize, retriever.retrieve

    def search(query: str) -> list[str]:
        query_ids = tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
        found, _ = retrieve(
            query_ids, k=K, n_threads=0, show_progress=False, backend_selection="numpy"
        )
        return list(ids[found[0]])

    return search, retriever


def measure_updates(
    kb: Any, docs: list[dict[str, str]], words: list[str], cdf: np.ndarray, rng: np.random.Generator
) -> tuple[list[tuple[str, float, float]], Any, Any]:
    """Seconds of ``KnowledgeBase.update``: add 1% new documents, delete 1,000, replace 1,000
    (each from the built index, each kept in a delta segment), then compacting the first
    one's delta (the results are checked against nothing here: the tests prove updates
    equal a build from scratch). Also returns the knowledge base with the 1% delta, and a
    twin of it (the same update again: its own row cache, for the rescored queries)."""
    extra = make_corpus(max(len(docs) // 100, 1), words, cdf, rng)
    for n, doc in enumerate(extra):
        doc["id"] = f"n{n:07d}"
    gone = [docs[i]["id"] for i in range(0, len(docs), max(len(docs) // 1000, 1))][:1000]
    changed = [dict(docs[i], text=docs[i]["text"] + " revised") for i in range(1, 2001, 2)]
    out = []
    kept = None
    for name, upserts, deletes in (
        (f"add {len(extra):,} documents (1%)", extra, []),
        (f"delete {len(gone):,} documents", [], gone),
        (f"replace {len(changed):,} documents", changed, []),
    ):
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        updated = kb.update(upserts, deletes)
        out.append((name, time.perf_counter() - start, time.process_time() - cpu))
        print(f"  {name}: {out[-1][1]:.2f} s (CPU {out[-1][2]:.2f} s)", file=sys.stderr)
        kept = updated if kept is None else kept
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    compact(kept._lexical)  # not kept: the delta index is queried as a delta below
    out.append(("compact the 1% delta", time.perf_counter() - start, time.process_time() - cpu))
    print(f"  compact: {out[-1][1]:.2f} s (CPU {out[-1][2]:.2f} s)", file=sys.stderr)
    return out, kept, kb.update(extra)


def _files(path: Path) -> dict[str, int]:
    return {item.name: item.stat().st_size for item in path.iterdir() if item.is_file()}


def measure_disk_updates(
    kb: Any,
    docs: list[dict[str, str]],
    words: list[str],
    cdf: np.ndarray,
    rng: np.random.Generator,
    folder: Path,
) -> list[tuple[str, float, float, int, int]]:
    """Updates of a snapshot on disk, one after the other (each on the previous one's
    result, as ``groundwire index --update`` runs): load, update, save. Seconds and CPU
    of the full save first, then per step of the load (the first with the verdict cache
    emptied: every file hashed, as in a fresh process), the update and the save, with
    the files and bytes the save wrote (names new in the folder, manifest included)."""
    from groundwire.index.store import checksums

    extra = make_corpus(max(len(docs) // 100, 1), words, cdf, rng)
    for n, doc in enumerate(extra):
        doc["id"] = f"m{n:07d}"
    gone = [docs[i]["id"] for i in range(3, len(docs), max(len(docs) // 1000, 1))][:1000]
    changed = [dict(docs[i], text=docs[i]["text"] + " edited") for i in range(2, 2002, 2)]
    path = folder / "snapshot"
    out: list[tuple[str, float, float, int, int]] = []

    def timed(name: str, run: Callable[[], Any]) -> Any:
        before = _files(path) if path.exists() else {}
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        result = run()
        wall, used = time.perf_counter() - start, time.process_time() - cpu
        after = _files(path)
        new = [n for n in after if n not in before or n == "manifest.json"]
        written = sum(after[n] for n in new) if name.endswith("save") else 0
        out.append((name, wall, used, len(new) if written else 0, written))
        print(f"  {name}: {wall:.2f} s (CPU {used:.2f} s)", file=sys.stderr)
        return result

    timed("full save (build saved)", lambda: kb.save(path))
    checksums.forget_verdicts()  # the first load hashes every file, as a fresh process would
    for step, (label, upserts, deletes) in enumerate(
        (
            (f"add {len(extra):,} (1%)", extra, []),
            (f"delete {len(gone):,}", [], gone),
            (f"replace {len(changed):,}", changed, []),
        )
    ):
        fresh = " (fresh process: every file hashed)" if step == 0 else " (verdicts kept)"
        loaded = timed(f"{label}: load{fresh}", partial(groundwire.KnowledgeBase.load, path))
        updated = timed(f"{label}: update", partial(loaded.update, upserts, deletes))
        timed(f"{label}: save", partial(updated.save, path))
        del loaded, updated
    return out


def search_ids(kb: Any, query: str) -> list[str]:
    return [hit.id for hit in kb.search(query, k=K)]


def kernel_variant(kb: Any, prune: int) -> Callable[[str], list[str]]:
    """``search_ids`` on ``kb`` through a kernel view of its arrays with the given pruning
    mode (``_kernel.PRUNE_*``): installed on the index before each query if another view
    is there, so two variants can take turns on one index (once per round of queries)."""
    lexical = kb._lexical
    base = lexical._kernel_index()
    indptr, docs, scores, starts, seconds = base.arrays
    view = _kernel.Index(
        indptr, docs, scores, base.n_docs, base.n_single, starts, seconds, prune=prune
    )

    def search(query: str) -> list[str]:
        if lexical._native is not view:
            object.__setattr__(lexical, "_native", view)
        return search_ids(kb, query)

    return search


def search_cold(kb: Any, query: str) -> list[str]:
    """``search_ids`` on a delta index with its caches of scored rows emptied first, so
    every query row is rescored (the first time a query's terms are seen)."""
    lexical = kb._lexical
    lexical._state["minis"].clear()
    scorer = lexical._scorer()
    if scorer is not None:
        scorer.clear()
    return search_ids(kb, query)


def cpu_p50_ms(system: System) -> float:
    """Median CPU milliseconds (``time.process_time``) of one pass over the system's
    queries: on a loaded machine, wall time also counts waits for a core."""
    spent = []
    for query in system.queries:
        start = time.process_time()
        system.search(query)
        spent.append(time.process_time() - start)
    return statistics.median(spent) * 1e3


def overlap(a: Sequence[Sequence[str]], b: Sequence[Sequence[str]]) -> float:
    """Mean share of ``a``'s top-k ids also in ``b``'s top-k."""
    shares = [len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b, strict=True) if x]
    return statistics.fmean(shares) if shares else 0.0


def fmt_mib(value: float | None) -> str:
    """MiB with no decimals, or n/a."""
    return "n/a" if value is None else f"{value:,.0f}"


def main(argv: Sequence[str] | None = None) -> None:
    """Generate the corpus, build every system, time queries interleaved, print tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1_000_000, help="documents to generate")
    parser.add_argument("--vocab", type=int, default=200_000, help="distinct pseudo-words")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent")
    parser.add_argument("--queries", type=int, default=1000, help="queries per query set")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--seed", type=int, default=20240601, help="random seed")
    parser.add_argument("--no-bm25s", action="store_true", help="skip bm25s")
    parser.add_argument("--no-tantivy", action="store_true", help="skip tantivy")
    parser.add_argument("--no-split", action="store_true", help="skip the build-time split")
    parser.add_argument(
        "--no-unpruned",
        action="store_true",
        help="skip timing groundwire's unpruned kernel beside the default (pruned) one",
    )
    parser.add_argument(
        "--no-update", action="store_true", help="skip the incremental update timings"
    )
    parser.add_argument(
        "--no-disk-update",
        action="store_true",
        help="skip the on-disk updates (load, update, save a snapshot)",
    )
    parser.add_argument(
        "--delta-queries",
        type=int,
        default=200,
        help="queries timed on the index with a 1%% delta segment (rows cached, and rescored)",
    )
    args = parser.parse_args(argv)

    print(versions(["groundwire", "bm25s", "tantivy", "PyStemmer"]))
    print(source_state(REPO))
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    words = make_vocabulary(rng, args.vocab)
    cdf = zipf_cdf(len(words), args.zipf)
    docs = make_corpus(args.docs, words, cdf, rng)
    queries_rare = make_queries(rng, words, zipf_cdf(len(words), args.zipf, skip=100), args.queries)
    queries_all = make_queries(rng, words, cdf, args.queries)
    gen_secs = time.perf_counter() - start
    n_words = sum(len(d["title"].split()) + len(d["text"].split()) for d in docs[:10_000])
    print(
        f"corpus: {len(docs):,} docs, ~{n_words / min(len(docs), 10_000):.1f} words/doc, "
        f"vocabulary {len(words):,}, Zipf {args.zipf}, seed {args.seed}; "
        f"generated in {gen_secs:.1f} s; RSS {fmt_mib(rss_mib())} MiB "
        f"(peak so far {peak_rss_mib():,.0f} MiB)"
    )
    print(f"query (no top-100 words): {queries_rare[0]!r}; query (all words): {queries_all[0]!r}")

    builds: list[Build] = []
    gw = measured_build("groundwire", lambda: build_groundwire(docs))
    kb = gw.keep
    gw.index_mib = nbytes(kb.lexical) / 2**20
    builds.append(gw)
    print(describe_groundwire(kb))
    dropped = set(words) & set(getattr(kb.analyzer, "_stopwords", ()))
    if dropped:
        print(f"WARNING: groundwire drops {len(dropped)} generated words as stop words")
    updates: list[tuple[str, float, float]] = []
    delta_kb = cold_kb = None
    if not args.no_update:
        updates, delta_kb, cold_kb = measure_updates(
            kb, docs, words, cdf, np.random.default_rng(args.seed + 1)
        )
        gc.collect()
    disk: list[tuple[str, float, float, int, int]] = []
    if not args.no_disk_update:
        folder = Path(tempfile.mkdtemp(prefix="gw-bench-1m-disk-"))
        try:
            disk = measure_disk_updates(
                kb, docs, words, cdf, np.random.default_rng(args.seed + 2), folder
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        gc.collect()
    vocab_mib = dict_mib(dict(kb.lexical.vocabulary))
    lexical_terms = len(kb.lexical.vocabulary)

    split: list[tuple[str, float]] = []
    split_total = 0.0
    if not args.no_split:
        try:
            split_total, split = groundwire_split(docs)
        except Exception as exc:  # internals may change under us; the split is optional
            print(f"  build split unavailable: {exc!r}", file=sys.stderr)
        gc.collect()

    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-1m-"))
    try:
        if not args.no_bm25s:
            combined = [f"{d['title']} {d['text']}" for d in docs]
            ids = np.array([d["id"] for d in docs], dtype=object)
            bm = measured_build("bm25s", lambda: build_bm25s(combined, ids))
            del combined
            scores = bm.keep.scores
            bm.index_mib = (
                sum(v.nbytes for v in scores.values() if isinstance(v, np.ndarray)) / 2**20
            )
            builds.append(bm)
        if not args.no_tantivy:
            path = tmp / "tantivy"
            path.mkdir()

            def tantivy_build() -> tuple[Callable[[str], list[str]], Any]:
                triples = ((d["id"], d["title"], d["text"]) for d in docs)
                index = build_tantivy(
                    triples, stopwords=True, path=path, heap_bytes=1024 * 2**20, threads=1
                )
                return index.search, index

            tv = measured_build("tantivy", tantivy_build)
            tv.index_mib = directory_mib(path)
            tv.note = "index size = files on disk (mmap)"
            builds.append(tv)

        # -- queries --------------------------------------------------------------------------
        tables: list[tuple[str, list[System]]] = []
        cpu_p50: dict[str, dict[str, float]] = {}
        for label, queries in (
            ("without the 100 most frequent words", queries_rare),
            ("with frequent words", queries_all),
        ):
            systems = [System(b.name, b.search, queries) for b in builds]
            if not args.no_unpruned:  # the same index through the kernel without pruning
                systems[0] = System(gw.name, kernel_variant(kb, _kernel.PRUNE_AUTO), queries)
                unpruned = kernel_variant(kb, _kernel.PRUNE_OFF)
                systems.insert(1, System("groundwire, unpruned kernel", unpruned, queries))
            if delta_kb is not None:  # the same queries after adding 1% (a delta segment)
                delta_search = partial(search_ids, delta_kb)
                subset = queries[: args.delta_queries]
                systems.append(System("groundwire +1% delta", delta_search, subset))
                cold = partial(search_cold, cold_kb)
                systems.append(System("groundwire +1% delta, rows rescored", cold, subset))
            ranked = {s.name: [s.search(q) for q in s.queries] for s in systems}  # warm-up
            for s in systems[1:]:
                shared = overlap(ranked[s.name], ranked[gw.name][: len(s.queries)])
                s.note = f"top-10 overlap with groundwire {shared:.2f}"
                if s.name == "groundwire, unpruned kernel":
                    same = ranked[s.name] == ranked[gw.name]
                    s.note = "same ids, same order" if same else "DIFFERENT RESULTS (a bug)"
            print(f"queries {label}:", file=sys.stderr)
            run_rounds(systems, args.rounds)
            if delta_kb is not None:
                cpu_p50[label] = {s.name: cpu_p50_ms(s) for s in systems}
            tables.append((label, systems))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # -- report -------------------------------------------------------------------------------
    print()
    print(f"Build ({len(docs):,} docs); memory in MiB; peak = peak RSS during the build.")
    print_table(
        [
            "system",
            "build s",
            "CPU s",
            "RSS before",
            "peak RSS",
            "peak − before",
            "kept after",
            "index MiB",
        ],
        [
            [
                b.name + (f" ({b.note})" if b.note else ""),
                f"{b.seconds:.1f}",
                f"{b.cpu:.1f}",
                fmt_mib(b.base_mib),
                fmt_mib(b.peak_mib),
                fmt_mib(None if b.base_mib is None else b.peak_mib - b.base_mib),
                fmt_mib(
                    None if b.kept_mib is None or b.base_mib is None else b.kept_mib - b.base_mib
                ),
                fmt_mib(b.index_mib),
            ]
            for b in builds
        ],
    )
    csr_mib = nbytes((kb.lexical.indptr, kb.lexical.docs, kb.lexical.scores)) / 2**20
    print(
        f"groundwire LexicalIndex: {lexical_terms:,} terms, numpy arrays {gw.index_mib:,.0f} MiB "
        f"(scoring CSR {csr_mib:,.0f} MiB), vocabulary dict ~{vocab_mib:,.0f} MiB"
    )
    if split:
        total = split_total
        print(f"\ngroundwire build split (a second, instrumented from_documents: {total:.1f} s):")
        for name, secs in split:
            print(f"  {name:<52} {secs:7.1f} s  ({100 * secs / total:4.1f}%)")
        rest = total - sum(secs for _, secs in split)
        print(
            f"  {'remainder (entries, batches, sort, phrase maps, masks)':<52} {rest:7.1f} s  "
            f"({100 * rest / total:4.1f}%)"
        )

    if updates:
        print(f"\ngroundwire incremental updates ({len(docs):,} docs; build {gw.seconds:.1f} s):")
        for name, secs, cpu in updates:
            print(
                f"  {name:<40} {secs:7.2f} s  ({100 * secs / gw.seconds:5.2f}% of the build); "
                f"CPU {cpu:6.2f} s ({100 * cpu / max(gw.cpu, 1e-9):5.2f}% of the build's CPU)"
            )

    if disk:
        print(
            f"\ngroundwire snapshot updates on disk ({len(docs):,} docs; build {gw.seconds:.1f} s):"
        )
        for name, secs, cpu, files, written in disk:
            wrote = f"; wrote {files} files, {written / 2**20:,.1f} MiB" if written else ""
            print(
                f"  {name:<58} {secs:7.2f} s ({100 * secs / gw.seconds:5.2f}%); "
                f"CPU {cpu:6.2f} s ({100 * cpu / max(gw.cpu, 1e-9):5.2f}%){wrote}"
            )

    for label, systems in tables:
        base = round_percentile(systems[0], 50)
        print(
            f"\nQuery latency, {len(systems[0].queries):,} queries {label} "
            f"(ms, median of {args.rounds} rounds):"
        )
        print_table(
            ["system", "p50", "p90", "p99", "q/s", "p50 vs groundwire", "check"],
            [
                [
                    s.name,
                    f"{round_percentile(s, 50):.2f}",
                    f"{round_percentile(s, 90):.2f}",
                    f"{round_percentile(s, 99):.2f}",
                    f"{statistics.median(s.qps):,.0f}",
                    f"{round_percentile(s, 50) / base:.2f}×",
                    s.note,
                ]
                for s in systems
            ],
        )
        if label in cpu_p50:
            own = cpu_p50[label]
            first = own[systems[0].name]
            shown = ", ".join(f"{n} {v:.2f} ms ({v / first:.2f}×)" for n, v in own.items())
            print(f"CPU p50 (time.process_time per query, one more pass): {shown}")
    rare_p50 = round_percentile(tables[0][1][0], 50)
    above = None if gw.base_mib is None else gw.peak_mib - gw.base_mib
    print(
        f"\ntargets: groundwire p50 ≤ 10 ms: {rare_p50:.2f} ms (realistic queries) "
        f"{'met' if rare_p50 <= 10 else 'NOT met'}; build ≤ 120 s: {gw.seconds:.1f} s "
        f"{'met' if gw.seconds <= 120 else 'NOT met'}; groundwire build peak RSS "
        f"{fmt_mib(gw.peak_mib)} MiB ({fmt_mib(above)} MiB above the corpus already in memory)"
    )


if __name__ == "__main__":
    main()
