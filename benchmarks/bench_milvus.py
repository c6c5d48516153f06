"""Milvus Lite vs the embedded index: ingest throughput and query latency, side by side.

Data: ``--chunks`` synthetic chunks (default 100,000) from bench_synthetic_1m's generator
(Zipf words; title 3-10 words, body 20-80), each labeled with one of ``--tenants``
tenants (a fifth shared), and ``--dims``-dimensional hashing vectors (computed once, not
timed: both systems get the same vectors). Both use the same index settings (title 3,
body 1, per-field BM25 "fields" scoring: the one Milvus can express) and the same
backend API (groundwire.backends), so each query does the same work: lexical top 10 and
dense top 10 under a tenant principal's filter.

Ingest: embedded = ``KnowledgeBase.from_documents`` + ``VectorIndex``; Milvus =
``sync_milvus`` into a fresh Milvus Lite file (analysis, rows, upserts, index build).
Queries: ``--rounds`` interleaved rounds over ``--queries`` queries; p50/p99 latency and
queries/s (median over rounds), and the top-10 overlap of the two systems as a check.
``ground``: a whole grounding turn (``GroundingEngine.from_backend``: candidates, the
relevance gate's counts, expansion, context) over a quarter of the queries. Re-sync:
``sync_milvus`` again with nothing changed, then with 1% of the chunks edited.

Run: ``.venv/bin/python benchmarks/bench_milvus.py`` (about 5-10 minutes at 100k on 2
cores; ``--chunks 10000`` for a quick look).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import groundwire as gw
from _common import System, print_table, round_percentile, run_rounds, source_state, versions
from bench_synthetic_1m import make_corpus, make_queries, make_vocabulary, zipf_cdf
from groundwire.config import AnalyzerConfig, IndexSettings

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--dims", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    print(versions(["pymilvus", "milvus-lite"]))
    print(source_state(ROOT))
    rng = np.random.default_rng(args.seed)
    words = make_vocabulary(rng, args.vocab)
    cdf = zipf_cdf(len(words), 1.1)
    raw = make_corpus(args.chunks, words, cdf, rng)
    tenants = [f"t{n}" for n in range(args.tenants)]
    labels = rng.integers(0, args.tenants + args.tenants // 4 + 1, len(raw)).tolist()
    docs = [
        gw.Document(
            d["id"], d["title"], d["text"], {} if t >= args.tenants else {"tenant": tenants[t]}
        )
        for d, t in zip(raw, labels, strict=True)
    ]
    queries = make_queries(rng, words, cdf, args.queries)
    settings = IndexSettings(
        field_weights={"title": 3.0, "body": 1.0},
        scoring="fields",
        analyzer=AnalyzerConfig(stopwords="extended"),
    )
    embedder = gw.HashingEmbedder(args.dims)
    matrix = embedder.embed_documents(
        [f"{d.title}\n{d.text}" for d in sorted(docs, key=lambda d: d.id)]
    )
    query_vectors = {q: embedder.embed_query(q) for q in queries}
    print(f"{len(docs):,} chunks, {args.tenants} tenants, {args.dims}-dim hashing vectors")

    started = time.perf_counter()
    kb = gw.KnowledgeBase.from_documents(docs, settings)
    vectors = gw.VectorIndex([e.id for e in kb.entries], matrix, embedder.model_id)
    embedded_s = time.perf_counter() - started
    embedded = gw.EmbeddedBackend(kb, vectors)
    print(f"embedded ingest {embedded_s:.1f} s", file=sys.stderr)

    folder = Path(tempfile.mkdtemp(prefix="bench_milvus_"))
    try:
        uri = str(folder / "milvus.db")
        started = time.perf_counter()
        gw.sync_milvus(kb, uri, "bench", vectors=vectors)
        milvus_s = time.perf_counter() - started
        print(f"milvus ingest {milvus_s:.1f} s", file=sys.stderr)
        with gw.MilvusBackend(uri, "bench") as milvus:
            principal = gw.Principal(tenants[0], "alice")
            flt = gw.Filter.of(principal)
            systems = []
            engines: list[gw.GroundingEngine] = []
            for name, backend in (("embedded", embedded), ("milvus-lite", milvus)):
                systems.append(
                    System(
                        f"{name} lexical",
                        lambda q, b=backend: [h.id for h in b.lexical(q, flt, 10)],
                        queries,
                    )
                )
                systems.append(
                    System(
                        f"{name} dense",
                        lambda q, b=backend: [h.id for h in b.dense(query_vectors[q], flt, 10)],
                        queries,
                    )
                )
                engine = gw.GroundingEngine.from_backend(
                    backend, gw.GroundingConfig(timeout_ms=600_000)
                )
                engines.append(engine)
                systems.append(
                    System(
                        f"{name} ground",
                        lambda q, e=engine: list(
                            e.ground(q, principal=principal).metadata.selected_ids
                        ),
                        queries[: max(1, len(queries) // 4)],
                    )
                )
            run_rounds(systems, args.rounds)
            for engine in engines:
                engine.close()
            overlap = statistics.mean(
                len(
                    {h.id for h in embedded.lexical(q, flt, 10)}
                    & {h.id for h in milvus.lexical(q, flt, 10)}
                )
                / max(1, len(embedded.lexical(q, flt, 10)))
                for q in queries[:50]
            )
        resync = _resync(kb, docs, settings, vectors, uri)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    ingest = {"embedded": embedded_s, "milvus-lite": milvus_s}
    rows = []
    base = {
        s.name.split()[1]: statistics.median(s.qps)
        for s in systems
        if s.name.startswith("embedded")
    }
    for s in systems:
        system, channel = s.name.split()
        qps = statistics.median(s.qps)
        rows.append(
            [
                system,
                channel,
                f"{ingest[system]:.1f}",
                f"{len(docs) / ingest[system]:,.0f}",
                f"{round_percentile(s, 50):.2f}",
                f"{round_percentile(s, 99):.2f}",
                f"{qps:,.1f}",
                f"{base[channel] / qps:.1f}x",
            ]
        )
    print_table(
        [
            "system",
            "query",
            "ingest s",
            "chunks/s",
            "p50 ms",
            "p99 ms",
            "q/s",
            "embedded faster by",
        ],
        rows,
    )
    print(f"lexical top-10 overlap, embedded vs milvus-lite (50 queries): {overlap:.3f}")
    for what, seconds in resync.items():
        print(f"milvus-lite re-sync, {what}: {seconds:.1f} s")


def _resync(
    kb: gw.KnowledgeBase,
    docs: list[gw.Document],
    settings: IndexSettings,
    vectors: gw.VectorIndex,
    uri: str,
) -> dict[str, float]:
    """Seconds of ``sync_milvus`` with nothing changed and with 1% of the chunks edited."""
    out = {}
    started = time.perf_counter()
    gw.sync_milvus(kb, uri, "bench", vectors=vectors)
    out["nothing changed"] = time.perf_counter() - started
    edited = [
        gw.Document(d.id, d.title + " revised", d.text, d.metadata) if n % 100 == 0 else d
        for n, d in enumerate(docs)
    ]
    changed = gw.KnowledgeBase.from_documents(edited, settings)
    started = time.perf_counter()
    report = gw.sync_milvus(changed, uri, "bench", vectors=vectors)
    out[f"{report.upserted:,} chunks changed (1%)"] = time.perf_counter() - started
    return out


if __name__ == "__main__":
    main()
