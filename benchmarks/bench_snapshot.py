"""Snapshots (issue 5): load time vs build time, and the memory of processes sharing one.

Data: SciFact (BEIR test collection, 5,183 abstracts: ``../shared/datasets/scifact``,
title + text as documents) and a synthetic corpus of ``--docs`` (1,000,000) documents
made by ``bench_synthetic_1m.py``'s generator (same seed, vocabulary and Zipf law).
Both are indexed with ``KnowledgeBase.from_documents`` (document defaults: BM25F,
title 3, body 1, term pairs 0.25).

Measures, per corpus:

* build seconds (``from_documents``; median of ``--build-rounds`` for SciFact, one
  build for the synthetic corpus) and save seconds (``KnowledgeBase.save``: encode,
  hash, write, fsync, read back with full verification, install);
* load seconds, ``verify="full"`` (SHA-256 of every file and every bound) and
  ``verify="manifest"`` (manifest, names, sizes, headers): median of ``--load-rounds``
  loads in this process, and median of 5 loads each in a fresh process (imports not
  timed); the page cache is warm in both (the snapshot was just written; dropping it
  needs privileges this benchmark does not assume);
* the ratio build / load, against the target of 20x;
* the time of the first query after a load (lazy decoding) and query throughput of
  the built and the loaded index over the same queries (top-10; interleaved rounds),
  after checking that every query returns the same ids and scores (to 1e-12);
* memory of ``--processes`` (4) processes that each load the one snapshot (mapped, so
  they share its pages) vs as many processes that each build their own copy, after
  every process ran the same queries: RSS and PSS from ``/proc/<pid>/smaps_rollup``
  (PSS splits each shared page between the processes mapping it), summed; loading
  processes once per verification mode (full verification reads every mapped page, so
  all of them are resident, shared; ``manifest`` maps only what queries touch). On the
  synthetic corpus, copies that each build need more memory than a 23 GiB machine has
  (one build peaks at ~12 GiB), so one building process is measured and multiplied
  by the process count unless ``--real-copies`` is given.

Run from the repository root: ``.venv/bin/python benchmarks/bench_snapshot.py``
(``--docs 100000`` for a quick check; ``--no-synthetic`` / ``--no-scifact`` to skip).
``--ratio`` measures only issue 11's figure (SciFact build / load with full
verification in a fresh process, wall and CPU seconds, load average; about a minute).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import gzip
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import groundwire
from _common import peak_rss_mib, print_table, rss_mib, source_state, versions
from groundwire.index.store.checksums import forget_verdicts

REPO = Path(__file__).resolve().parents[1]
#: Next to the repository, or next to its folder of worktrees (``/work/wt/<name>``).
SCIFACT = next(
    (
        folder / "shared/datasets/scifact"
        for folder in (REPO.parent, REPO.parent.parent)
        if (folder / "shared").is_dir()
    ),
    REPO.parent / "shared/datasets/scifact",
)
#: Issue 11: SciFact load with the default (full) verification >= 50x faster than its build.
TARGET = 50.0
K = 10


# -- corpora ---------------------------------------------------------------------------------------
def scifact() -> tuple[list[dict[str, str]], list[str]]:
    """SciFact documents and its test queries (claims)."""
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        docs = [json.loads(line) for line in handle if line.strip()]
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as handle:
        queries = [json.loads(line)["text"] for line in handle if line.strip()]
    return [{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in docs], queries


def synthetic(count: int, seed: int, queries: int) -> tuple[list[dict[str, str]], list[str]]:
    """bench_synthetic_1m's corpus and its realistic queries (no top-100 words)."""
    from bench_synthetic_1m import make_corpus, make_queries, make_vocabulary, zipf_cdf

    rng = np.random.default_rng(seed)
    words = make_vocabulary(rng, 200_000)
    docs = make_corpus(count, words, zipf_cdf(len(words), 1.1), rng)
    return docs, make_queries(rng, words, zipf_cdf(len(words), 1.1, skip=100), queries)


def corpus(name: str, args: argparse.Namespace) -> tuple[list[dict[str, str]], list[str]]:
    """The documents and queries of a corpus name (``scifact`` or ``synthetic``)."""
    if name == "scifact":
        return scifact()
    return synthetic(args.docs, args.seed, args.queries)


# -- workers (this script run with --worker) ----------------------------------------------------
def _smaps(pid: int) -> dict[str, float]:
    """RSS and PSS (MiB) of a process from /proc/<pid>/smaps_rollup."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Pss_Anon", "Pss_File"):
                out[key] = int(rest.split()[0]) / 1024
    return out


def worker(argv: Sequence[str]) -> None:
    """``load PATH VERIFY QUERIES`` | ``build CORPUS DOCS SEED QUERIES`` |
    ``time-load PATH VERIFY`` | ``times ARGS_JSON WORKDIR``.

    ``load``/``build`` print ``ready`` plus timings as JSON, then wait for stdin to close
    (the parent measures memory meanwhile). ``time-load`` prints one load's seconds;
    ``times`` runs :func:`measure_times` and prints its result as JSON.
    """
    mode = argv[0]
    if mode == "times":
        options = argparse.Namespace(**json.loads(argv[1]))
        result = measure_times(argv[2], options, Path(argv[3]))
        print("result " + json.dumps(dataclasses.asdict(result)), flush=True)
        return
    if mode == "time-load":
        importlib.import_module("groundwire.index.store.reader")  # imports are not load time

        start, cpu = time.perf_counter(), time.process_time()
        groundwire.KnowledgeBase.load(argv[1], verify=argv[2])  # type: ignore[arg-type]
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(json.dumps({"seconds": seconds, "cpu": cpu}), flush=True)
        return
    queries = json.loads(Path(argv[-1]).read_text(encoding="utf-8"))
    start = time.perf_counter()
    if mode == "load":
        kb = groundwire.KnowledgeBase.load(argv[1], verify=argv[2])  # type: ignore[arg-type]
    else:
        ns = argparse.Namespace(docs=int(argv[2]), seed=int(argv[3]), queries=0)
        docs, _ = corpus(argv[1], ns)
        kb = groundwire.KnowledgeBase.from_documents(docs)
        del docs
        gc.collect()
    ready = time.perf_counter() - start
    for query in queries:
        kb.search(query, K)
    print("ready " + json.dumps({"seconds": ready}), flush=True)
    sys.stdin.read()


def _spawn(args: Sequence[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def processes_memory(specs: Sequence[Sequence[str]], staggered: bool) -> list[dict[str, float]]:
    """Start one worker per spec, wait until all are ready, read their memory, stop them.

    ``staggered`` starts each after the previous one is ready (bounds the peak).
    """
    children: list[subprocess.Popen[str]] = []
    seconds: list[float] = []
    try:
        for spec in specs:
            children.append(_spawn(spec))
            if staggered:
                seconds.append(_ready(children[-1]))
        if not staggered:
            seconds = [_ready(child) for child in children]
        results = []
        for child, ready in zip(children, seconds, strict=True):
            results.append({**_smaps(child.pid), "seconds": ready})
        return results
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(120)


def _ready(child: subprocess.Popen[str]) -> float:
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line.startswith("ready "):
        raise RuntimeError(f"worker failed: {line!r}")
    return float(json.loads(line[6:])["seconds"])


def fresh_loads(path: Path, verify: str, runs: int) -> list[dict[str, float]]:
    """``runs`` loads, each in a new process: wall and CPU seconds (all threads) of the
    load alone (interpreter start and imports excluded)."""
    times = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, __file__, "--worker", "time-load", str(path), verify],
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(json.loads(done.stdout))
    return times


def fresh_load(path: Path, verify: str, runs: int = 5) -> float:
    """Median wall seconds of one load in a new process (see :func:`fresh_loads`)."""
    return statistics.median(t["seconds"] for t in fresh_loads(path, verify, runs))


# -- measurements ----------------------------------------------------------------------------------
@dataclass
class Result:
    """Everything measured on one corpus."""

    name: str
    docs: int
    terms: int = 0
    snapshot_mib: float = 0.0
    build: list[float] = field(default_factory=list)
    save: float = 0.0
    load: dict[str, list[float]] = field(default_factory=dict)
    fresh: dict[str, float] = field(default_factory=dict)
    first_query_ms: float = 0.0
    qps: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    copies_note: str = ""


def check_equal(built: Any, loaded: Any, queries: Sequence[str]) -> None:
    """Every query: same ids, scores equal to 1e-12 (fails loudly otherwise)."""
    for query in queries:
        a, b = built.search(query, K), loaded.search(query, K)
        if [h.id for h in a] != [h.id for h in b] or any(
            abs(x.score - y.score) > 1e-12 for x, y in zip(a, b, strict=True)
        ):
            raise SystemExit(f"loaded snapshot answers {query!r} differently")


def throughput(kbs: dict[str, Any], queries: Sequence[str], rounds: int) -> dict[str, list[float]]:
    """Queries/second of each index, rounds interleaved (order rotated each round)."""
    out: dict[str, list[float]] = {name: [] for name in kbs}
    names = list(kbs)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            search = kbs[name].search
            gc.collect()
            start = time.perf_counter()
            for query in queries:
                search(query, K)
            out[name].append(len(queries) / (time.perf_counter() - start))
    return out


def measure_times(name: str, args: argparse.Namespace, workdir: Path) -> Result:
    """Build, save, load and query one corpus (run in a child process: see measure)."""
    docs, queries = corpus(name, args)
    queries = queries[: args.queries]
    result = Result(name, len(docs))
    print(f"{name}: {len(docs):,} docs, {len(queries):,} queries; building", file=sys.stderr)
    rounds = args.build_rounds if name == "scifact" else 1
    built = None
    for _ in range(rounds):
        built = None
        gc.collect()
        start = time.perf_counter()
        built = groundwire.KnowledgeBase.from_documents(docs)
        result.build.append(time.perf_counter() - start)
    assert built is not None
    result.terms = len(built.lexical.vocabulary)
    print(f"  built in {result.build[-1]:.1f} s; saving", file=sys.stderr)
    path = workdir / f"{name}.snapshot"
    start = time.perf_counter()
    built.save(path)
    result.save = time.perf_counter() - start
    result.snapshot_mib = sum(p.stat().st_size for p in path.iterdir()) / 2**20
    loaded = None
    for verify in ("full", "manifest"):
        result.load[verify] = []
        for _ in range(args.load_rounds if verify == "manifest" or name == "scifact" else 3):
            loaded = None
            gc.collect()
            forget_verdicts()  # every timed load hashes (a reload would skip verified files)
            start = time.perf_counter()
            loaded = groundwire.KnowledgeBase.load(path, verify=verify)  # type: ignore[arg-type]
            result.load[verify].append(time.perf_counter() - start)
        result.fresh[verify] = fresh_load(path, verify)
    assert loaded is not None
    start = time.perf_counter()
    loaded.search(queries[0], K)
    result.first_query_ms = (time.perf_counter() - start) * 1000
    print("  loaded; checking answers and timing queries", file=sys.stderr)
    check_equal(built, loaded, queries)
    result.qps = throughput({"built": built, "loaded": loaded}, queries, args.rounds)
    (workdir / f"{name}.queries.json").write_text(json.dumps(list(queries)), encoding="utf-8")
    return result


def measure(name: str, args: argparse.Namespace, workdir: Path) -> Result:
    """Times in a child process (its memory dies with it), then the memory test from here."""
    done = subprocess.run(
        [
            *(sys.executable, __file__, "--worker", "times"),
            *(json.dumps(vars(args), default=str), name, str(workdir)),
        ],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("result "))
    result = Result(**json.loads(line[7:]))
    path = workdir / f"{name}.snapshot"
    query_file = workdir / f"{name}.queries.json"
    n = args.processes
    print(f"  memory: {n} processes loading the snapshot", file=sys.stderr)
    for verify in ("full", "manifest"):
        result.memory[f"shared-{verify}"] = processes_memory(
            [["load", str(path), verify, str(query_file)]] * n, staggered=False
        )
    build_spec = ["build", name, str(args.docs), str(args.seed), str(query_file)]
    if name == "scifact" or args.real_copies:
        print(f"  memory: {n} processes building their own copy", file=sys.stderr)
        result.memory["copies"] = processes_memory([build_spec] * n, staggered=name != "scifact")
    else:
        print("  memory: one process building its own copy (x processes)", file=sys.stderr)
        one = processes_memory([build_spec], staggered=True)
        result.memory["copies"] = one * n
        result.copies_note = f"one building process measured, x{n} (copies do not fit in RAM)"
    return result


def measure_ratio(args: argparse.Namespace, workdir: Path) -> None:
    """``--ratio``: issue 11's figure alone, SciFact build seconds / load seconds with
    ``verify="full"`` in a fresh process (imports excluded), wall and CPU (all threads).

    Rounds interleave one build with ``--fresh-loads`` fresh-process loads, so a busy
    phase of a shared machine hits both; in-process loads (verdicts forgotten, and a
    reload whose files were verified before) are timed after. Load averages are printed
    before and after: on a loaded machine compare the CPU columns.
    """
    docs, _ = scifact()
    before = os.getloadavg()
    path = workdir / "scifact.snapshot"
    builds: list[dict[str, float]] = []
    fresh: list[dict[str, float]] = []
    for r in range(args.build_rounds):
        built = None
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        built = groundwire.KnowledgeBase.from_documents(docs)
        builds.append({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu})
        if r == 0:
            built.save(path)
        fresh += fresh_loads(path, "full", args.fresh_loads)
        print(f"  round {r + 1}: build {builds[-1]['seconds']:.2f} s", file=sys.stderr)
    inproc: dict[str, list[dict[str, float]]] = {"cold": [], "reload": []}
    for kind in ("cold", "reload"):
        for _ in range(args.load_rounds):
            if kind == "cold":
                forget_verdicts()
            gc.collect()
            start, cpu = time.perf_counter(), time.process_time()
            groundwire.KnowledgeBase.load(path)
            inproc[kind].append(
                {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}
            )
    after = os.getloadavg()

    def median_of(rows: Sequence[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    build_s, build_cpu = median_of(builds, "seconds"), median_of(builds, "cpu")
    mib = sum(p.stat().st_size for p in path.iterdir()) / 2**20
    print()
    print(
        f'SciFact ({len(docs):,} docs, snapshot {mib:.1f} MiB): build vs load, verify="full" '
        f"(medians; {len(builds)} builds, {len(fresh)} fresh-process loads, "
        f"{args.load_rounds} in-process loads each)."
    )
    print(
        f"Load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
        f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} ({os.cpu_count()} CPUs)."
    )
    rows = [["build (from_documents)", f"{build_s * 1000:,.1f}", f"{build_cpu * 1000:,.1f}"]]
    rows[0] += ["", ""]
    for label, items in (
        ("load, fresh process", fresh),
        ("load, in process, verdicts forgotten", inproc["cold"]),
        ("reload, in process, files verified before", inproc["reload"]),
    ):
        wall, cpu = median_of(items, "seconds"), median_of(items, "cpu")
        rows.append(
            [
                label,
                f"{wall * 1000:,.1f}",
                f"{cpu * 1000:,.1f}",
                f"{build_s / wall:,.0f}×",
                f"{build_cpu / cpu:,.0f}×",
            ]
        )
    print_table(["", "wall ms", "CPU ms", "build / load (wall)", "build / load (CPU)"], rows)
    wall_ratio = build_s / median_of(fresh, "seconds")
    cpu_ratio = build_cpu / median_of(fresh, "cpu")
    print(
        f"Issue 11 (fresh process, target {TARGET:.0f}x): {wall_ratio:,.1f}x wall "
        f"({'met' if wall_ratio >= TARGET else 'NOT met'}), {cpu_ratio:,.1f}x CPU "
        f"({'met' if cpu_ratio >= TARGET else 'NOT met'})"
    )


# -- report -------------------------------------------------------------------------------------
def med(values: Sequence[float]) -> float:
    """Median."""
    return statistics.median(values)


def report(results: Sequence[Result], args: argparse.Namespace) -> None:
    """Print the Markdown tables for docs/BENCHMARKS.md."""
    print()
    print("Build vs load (seconds; load = median; the page cache is warm).")
    rows = []
    for r in results:
        build = med(r.build)
        rows.append(
            [
                f"{r.name} ({r.docs:,} docs, {r.terms:,} terms, {r.snapshot_mib:,.0f} MiB)",
                f"{build:.2f}",
                f"{r.save:.2f}",
                f"{med(r.load['full']):.3f}",
                f"{r.fresh['full']:.3f}",
                f"{build / med(r.load['full']):,.0f}×",
                f"{med(r.load['manifest']) * 1000:.1f} ms",
                f"{r.fresh['manifest'] * 1000:.1f} ms",
                f"{build / med(r.load['manifest']):,.0f}×",
            ]
        )
    print_table(
        [
            "corpus",
            "build s",
            "save s",
            "load full s",
            "fresh proc. full s",
            "build / load full",
            "load manifest",
            "fresh proc. manifest",
            "build / load manifest",
        ],
        rows,
    )
    for r in results:
        ratio = med(r.build) / max(med(r.load["full"]), r.fresh["full"])
        verdict = "met" if ratio >= TARGET else "NOT met"
        print(
            f"{r.name}: load ≥ {TARGET:.0f}x faster than build with full verification "
            f"(worst of in-process and fresh-process medians): {ratio:,.0f}x, {verdict}"
        )
    print()
    print(f"Queries (top-{K}, same answers checked): first query after load and throughput.")
    print_table(
        ["corpus", "first query ms", "built q/s", "loaded q/s", "loaded / built"],
        [
            [
                r.name,
                f"{r.first_query_ms:.1f}",
                f"{med(r.qps['built']):,.0f}",
                f"{med(r.qps['loaded']):,.0f}",
                f"{med(r.qps['loaded']) / med(r.qps['built']):.2f}×",
            ]
            for r in results
        ],
    )
    print()
    print(
        f"Memory of {args.processes} processes after the same queries (MiB, from "
        "/proc/<pid>/smaps_rollup; PSS shares each page among the processes mapping it)."
    )
    rows = []
    for r in results:
        for kind in ("shared-full", "shared-manifest", "copies"):
            items = r.memory[kind]
            label = (
                f"load one mapped snapshot (verify={kind[7:]})"
                if kind.startswith("shared")
                else "each builds its own"
            )
            note = f" ({r.copies_note})" if kind == "copies" and r.copies_note else ""
            rows.append(
                [
                    f"{r.name}: {label}{note}",
                    f"{med([i['seconds'] for i in items]):.2f}",
                    f"{med([i['Rss'] for i in items]):,.0f}",
                    f"{sum(i['Rss'] for i in items):,.0f}",
                    f"{med([i['Pss'] for i in items]):,.0f}",
                    f"{sum(i['Pss'] for i in items):,.0f}",
                ]
            )
    print_table(["processes", "ready s", "RSS each", "RSS sum", "PSS each", "PSS sum"], rows)
    for r in results:
        shared = sum(i["Pss"] for i in r.memory["shared-full"])
        copies = sum(i["Pss"] for i in r.memory["copies"])
        print(f"{r.name}: {args.processes} copies use {copies / shared:,.1f}x the memory (PSS sum)")


def main(argv: Sequence[str] | None = None) -> None:
    """Measure every corpus and print the tables."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--worker":
        worker(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1_000_000, help="synthetic documents")
    parser.add_argument("--seed", type=int, default=20240601, help="synthetic corpus seed")
    parser.add_argument("--queries", type=int, default=1000, help="queries per corpus (max)")
    parser.add_argument("--build-rounds", type=int, default=3, help="SciFact builds timed")
    parser.add_argument("--load-rounds", type=int, default=10, help="loads timed per mode")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved query rounds")
    parser.add_argument("--processes", type=int, default=4, help="processes in the memory test")
    parser.add_argument("--no-scifact", action="store_true", help="skip SciFact")
    parser.add_argument("--no-synthetic", action="store_true", help="skip the synthetic corpus")
    parser.add_argument("--real-copies", action="store_true", help="build every synthetic copy")
    parser.add_argument("--workdir", type=Path, help="keep snapshots here (default: temporary)")
    parser.add_argument(
        "--ratio",
        action="store_true",
        help="only issue 11's figure: SciFact build / fresh-process load (wall and CPU)",
    )
    parser.add_argument(
        "--fresh-loads", type=int, default=5, help="fresh-process loads per build (--ratio)"
    )
    args = parser.parse_args(argv)

    print(versions(["groundwire", "PyStemmer"]))
    print(source_state(REPO))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gw-bench-snapshot-"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    names = [n for n in ("scifact", "synthetic") if not getattr(args, f"no_{n}")]
    try:
        if args.ratio:
            measure_ratio(args, workdir)
            return
        results = [measure(name, args, workdir) for name in names]
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"RSS of this process now {rss_mib() or 0:,.0f} MiB, peak {peak_rss_mib():,.0f} MiB")
    report(results, args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
