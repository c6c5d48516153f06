"""Hybrid retrieval on SciFact: groundwire side by side with bm25s + sentence-transformers + numpy.

- **Data:** SciFact, BEIR test split (``--data``, default ``../shared/datasets/scifact``).
- **Model:** all-MiniLM-L6-v2 (the packaged offline copy). Document vectors come from the
  embedding cache (``~/.cache/groundwire/embeddings.sqlite``): the first run embeds
  SciFact (minutes on 2 cores) and reports docs/s; later runs reuse it. Both systems use
  the *same* vectors, so only retrieval is compared.
- **Measures:** build seconds (groundwire: BM25 index + vector index from cached
  vectors; peer: bm25s index + a numpy matrix), embedding docs/s when the cache was cold,
  query embedding ms (apart), per-mode mean query latency over the 300 queries excluding
  the query embedding (``--rounds`` interleaved rounds, median of the rounds), as wall
  time and as this process's CPU time (steadier on a shared machine), nDCG@10 of each,
  matrix memory, and the ratios hybrid/lexical and groundwire/peer. groundwire runs with
  float32 vectors searched by the default scan (``groundwire/float32``: int8 codes, the
  pool rescored in float32, certified equal to the full scan; the script checks the
  lists are identical), by the full float32 scan (``groundwire/f32-full``, the reference)
  and int8 vectors (``--dtypes``). The load average is printed: on the shared machine
  wall times move with it, CPU times less.
- **Peer hybrid:** bm25s top 100 (Lucene BM25, k1 1.5, b 0.75, the same stop words and
  stemmer) and numpy cosine top 100, fused with the same weighted min-max formula over
  the union (BM25 of union members from bm25s' full score vector).
- **BLAS:** numpy's BLAS is pinned to one thread (``OPENBLAS_NUM_THREADS=1`` unless set):
  on the shared 2-core machine its thread pool made the peer's ``matrix @ query`` 10-20x
  slower, and its spinning workers were counted in every system's CPU time.
- **Run:** ``.venv/bin/python benchmarks/bench_hybrid.py`` (~2 minutes once cached).
"""

# ruff: noqa: E402  (the BLAS thread count must be set before numpy is imported)
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # before numpy loads its BLAS (see the docstring)

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from groundwire import (
    CachedEmbedder,
    EmbeddingCache,
    HybridSettings,
    VectorIndex,
    create_embedder,
    search_channels,
)
from groundwire.eval.datasets import load_dataset
from groundwire.eval.hybrid import prepare
from groundwire.eval.metrics import evaluate_run
from groundwire.eval.peers import require_bm25s
from groundwire.text.stopwords import resolve_stopwords

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "scifact"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtypes", default="float32,int8", help="groundwire vector types")
    args = parser.parse_args()
    dataset = load_dataset(args.data)
    cache = EmbeddingCache(Path.home() / ".cache" / "groundwire" / "embeddings.sqlite")
    embedder = CachedEmbedder(create_embedder("all-MiniLM-L6-v2"), cache)
    started = time.perf_counter()
    ready = prepare(dataset, embedder)
    build_gw = time.perf_counter() - started
    if embedder.embedded:
        print(
            f"embedded {embedder.embedded} texts: {embedder.embedded / ready.embed_seconds:.1f}/s"
        )
    print(f"query embedding: {ready.query_embed_ms:.2f} ms/query (cached runs: lookup only)")
    kb, vectors, qvec = ready.kb, ready.vectors, ready.queries
    queries = list(dataset.queries.items())

    bm25s = require_bm25s()
    import Stemmer

    ids = [doc.id for doc in dataset.documents]
    texts = [f"{doc.title} {doc.text}" for doc in dataset.documents]
    started = time.perf_counter()
    stemmer = Stemmer.Stemmer("english")
    stop = sorted(resolve_stopwords("extended", "english"))
    tokens = bm25s.tokenize(texts, stopwords=stop, stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(tokens, show_progress=False)
    matrix = np.stack([vectors.vector(kb.position(doc_id)) for doc_id in ids])  # type: ignore[arg-type]
    build_peer = time.perf_counter() - started

    def peer(text: str, mode: str) -> list[str]:
        words = bm25s.tokenize(
            [text], stopwords=stop, stemmer=stemmer, show_progress=False, return_ids=False
        )[0]
        lex = retriever.get_scores(words)
        cos = matrix @ qvec[text]
        if mode == "lexical":
            s = lex
        elif mode == "dense":
            s = cos
        else:
            top_l = np.argsort(-lex, kind="stable")[:100]
            top_l = top_l[lex[top_l] > 0]
            top_d = np.argsort(-cos, kind="stable")[:100]
            union = np.union1d(top_l, top_d)
            s = np.full(len(ids), -1e9)
            for values, w in ((lex[union], 0.5), (cos[union], 0.5)):
                lo, hi = values.min(), values.max()
                s[union] = np.where(s[union] < -1e8, 0.0, s[union]) + w * (
                    (values - lo) / (hi - lo) if hi > lo else 1.0
                )
        order = np.lexsort((np.arange(len(ids)), -s))[:100]
        return [ids[i] for i in order]

    def ours(index: VectorIndex) -> Callable[[str, str], list[str]]:
        def search(text: str, mode: str) -> list[str]:
            hits, _ = search_channels(
                kb,
                text,
                100,
                HybridSettings(mode=mode),  # type: ignore[arg-type]
                vectors=index,
                query_vector=qvec[text],
            )
            return [kb.entry(h.doc).id for h in hits]

        return search

    systems: dict[str, Callable[[str, str], list[str]]] = {}
    indexes: dict[str, VectorIndex] = {}
    for dtype in args.dtypes.split(","):
        index = vectors if dtype == "float32" else VectorIndex(
            vectors.ids, vectors.matrix(), vectors.model_id, dtype=dtype  # type: ignore[arg-type]
        )  # fmt: skip
        indexes[f"groundwire/{dtype}"] = index
        if dtype == "float32":  # the default scan (int8 codes, exact rescoring) and the full one
            indexes["groundwire/f32-full"] = index.with_scan("full")
    for name, index in indexes.items():
        systems[name] = ours(index)
    if "groundwire/f32-full" in indexes:
        exact, rescored = indexes["groundwire/f32-full"], indexes["groundwire/float32"]
        same = sum(
            exact.search(qvec[text], depth) == rescored.search(qvec[text], depth)
            for _, text in queries
            for depth in (10, 100)
        )
        print(f"rescored scan = full scan (hits and scores): {same}/{2 * len(queries)} lists")
    systems["peer"] = peer
    latency: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    quality: dict[tuple[str, str], float] = {}
    for system, fn in systems.items():
        for mode in ("lexical", "dense", "hybrid"):
            run = {qid: fn(text, mode) for qid, text in queries}
            quality[(system, mode)] = evaluate_run(run, dataset.qrels)["ndcg@10"]
    for _ in range(args.rounds):
        for system, fn in systems.items():
            for mode in ("lexical", "dense", "hybrid"):
                started, started_cpu = time.perf_counter(), time.process_time()
                for _, text in queries:
                    fn(text, mode)
                took = (time.perf_counter() - started) * 1000 / len(queries)
                latency.setdefault((system, mode), []).append(took)
                took_cpu = (time.process_time() - started_cpu) * 1000 / len(queries)
                cpu.setdefault((system, mode), []).append(took_cpu)
    print(f"load average (1, 5, 15 min): {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"build: groundwire {build_gw:.2f} s (vectors from cache), peer {build_peer:.2f} s")
    print(
        f"vector matrix: {vectors.nbytes / 2**20:.1f} MiB float32, "
        f"{len(vectors)} x {vectors.dimensions}"
    )
    print(f"{'system':<20} {'mode':<8} {'wall ms':>8} {'cpu ms':>8} {'nDCG@10':>8}")
    for (system, mode), values in latency.items():
        print(
            f"{system:<20} {mode:<8} {statistics.median(values):>8.3f} "
            f"{statistics.median(cpu[(system, mode)]):>8.3f} {quality[(system, mode)]:>8.4f}"
        )

    def ratio(table: dict[tuple[str, str], list[float]], a: tuple[str, str], b: tuple[str, str]):
        return statistics.median(table[a]) / statistics.median(table[b])

    for system in systems:
        wall = ratio(latency, (system, "hybrid"), (system, "lexical"))
        used = ratio(cpu, (system, "hybrid"), (system, "lexical"))
        print(f"{system}: hybrid / lexical = {wall:.2f}x wall, {used:.2f}x cpu")
    for system in systems:
        if system != "peer":
            wall = ratio(latency, (system, "hybrid"), ("peer", "hybrid"))
            used = ratio(cpu, (system, "hybrid"), ("peer", "hybrid"))
            print(f"hybrid {system} / peer = {wall:.2f}x wall, {used:.2f}x cpu")


if __name__ == "__main__":
    main()
