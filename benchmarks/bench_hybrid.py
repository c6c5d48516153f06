"""Hybrid retrieval on SciFact: groundwire side by side with bm25s + sentence-transformers + numpy.

- **Data:** SciFact, BEIR test split (``--data``, default ``../shared/datasets/scifact``).
- **Model:** all-MiniLM-L6-v2 (the packaged offline copy). Document vectors come from the
  embedding cache (``~/.cache/groundwire/embeddings.sqlite``): the first run embeds
  SciFact (minutes on 2 cores) and reports docs/s; later runs reuse it. Both systems use
  the *same* vectors, so only retrieval is compared.
- **Measures:** build seconds (groundwire: BM25 index + vector index from cached
  vectors; peer: bm25s index + a numpy matrix), embedding docs/s when the cache was cold,
  query embedding ms (apart), per-mode query latency p50 over the 300 queries excluding
  the query embedding (``--rounds`` interleaved rounds, median), nDCG@10 of each, matrix
  memory, and the ratios hybrid/lexical and groundwire/peer.
- **Peer hybrid:** bm25s top 100 (Lucene BM25, k1 1.5, b 0.75, the same stop words and
  stemmer) and numpy cosine top 100, fused with the same weighted min-max formula over
  the union (BM25 of union members from bm25s' full score vector).
- **Run:** ``.venv/bin/python benchmarks/bench_hybrid.py`` (~1 minute once cached).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from groundwire import (
    CachedEmbedder,
    EmbeddingCache,
    HybridSettings,
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

    def ours(text: str, mode: str) -> list[str]:
        hits, _ = search_channels(
            kb,
            text,
            100,
            HybridSettings(mode=mode),
            vectors=vectors,
            query_vector=qvec[text],  # type: ignore[arg-type]
        )
        return [kb.entry(h.doc).id for h in hits]

    systems = {"groundwire": ours, "peer": peer}
    latency: dict[tuple[str, str], list[float]] = {}
    quality: dict[tuple[str, str], float] = {}
    for system, fn in systems.items():
        for mode in ("lexical", "dense", "hybrid"):
            run = {qid: fn(text, mode) for qid, text in queries}
            quality[(system, mode)] = evaluate_run(run, dataset.qrels)["ndcg@10"]
    for _ in range(args.rounds):
        for system, fn in systems.items():
            for mode in ("lexical", "dense", "hybrid"):
                started = time.perf_counter()
                for _, text in queries:
                    fn(text, mode)
                took = (time.perf_counter() - started) * 1000 / len(queries)
                latency.setdefault((system, mode), []).append(took)
    print(f"build: groundwire {build_gw:.2f} s (vectors from cache), peer {build_peer:.2f} s")
    print(
        f"vector matrix: {vectors.nbytes / 2**20:.1f} MiB float32, "
        f"{len(vectors)} x {vectors.dimensions}"
    )
    print(f"{'system':<11} {'mode':<8} {'ms/query':>9} {'nDCG@10':>8}")
    for (system, mode), values in latency.items():
        print(
            f"{system:<11} {mode:<8} {statistics.median(values):>9.3f} "
            f"{quality[(system, mode)]:>8.4f}"
        )
    for system in systems:
        ratio = statistics.median(latency[(system, "hybrid")]) / statistics.median(
            latency[(system, "lexical")]
        )
        print(f"{system}: hybrid / lexical latency = {ratio:.2f}x")
    ours_h, peer_h = (statistics.median(latency[(s, "hybrid")]) for s in systems)
    print(f"hybrid latency groundwire / peer = {ours_h / peer_h:.2f}x")


if __name__ == "__main__":
    main()
