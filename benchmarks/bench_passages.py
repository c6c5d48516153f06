"""Does embedding SciFact abstracts past MiniLM's 256 tokens help? (an experiment)

all-MiniLM-L6-v2 reads the first 256 tokens of ``title\\ntext``; 71% of SciFact's
abstracts are longer (median 316 tokens). Each document is split into passages: the text
embedded today (passage 1, read from the cache), then windows of the rest, each
``title\\n`` + up to 254 tokens with 32 tokens of overlap. A document's dense score is
its first passage's cosine (today), the best passage's (max-pooled) or that of the mean
of its passage vectors; hybrid fuses as ``rank_channels`` does (lexical and phrase lists,
the dense list from those scores, ``fuse`` with the default settings).

``--subset``: only the documents, in corpus order, whose every passage is already in the
embedding cache (so the subset does not depend on the judgments), the queries with a
relevant document among them and their qrels restricted to them; every arm ranks that
same corpus. Without it every passage is embedded first (~11 CPU-minutes).

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_passages.py [--subset]``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from bench_fusion import DATA  # ../shared/datasets from main, ../../shared from a worktree
from groundwire import CachedEmbedder, EmbeddingCache, HybridSettings, create_embedder
from groundwire.config import DEFAULT_ALIAS_BOOST, DEFAULT_EXACT_BOOST
from groundwire.embed.cache import content_hash
from groundwire.embed.local import resolve_model
from groundwire.eval.datasets import EvalDataset, load_dataset
from groundwire.eval.hybrid import Prepared, prepare
from groundwire.eval.metrics import evaluate_run
from groundwire.retrieve.channels import ChannelList, fuse, lexical_channel, phrase_channel
from groundwire.retrieve.hybrid import scores_at

CONTENT_TOKENS, OVERLAP = 256 - 2, 32  # MiniLM's max_seq_length less [CLS] and [SEP]


def passages(tokenizer: object, title: str, body: str) -> list[str]:
    """Passage 1 (the text embedded today), then windows of what the model cut off."""
    full = f"{title}\n{body}" if title else body
    offsets = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)  # type: ignore[operator]
    spans = offsets["offset_mapping"]
    out = [full]
    if len(spans) <= CONTENT_TOKENS:
        return out
    head = len(tokenizer(f"{title}\n", add_special_tokens=False)["input_ids"]) if title else 0  # type: ignore[operator]
    start = CONTENT_TOKENS - OVERLAP
    while start < len(spans):
        end = min(len(spans), start + CONTENT_TOKENS - head)
        text = full[spans[start][0] : spans[end - 1][1]]
        out.append(f"{title}\n{text}" if title else text)
        if end == len(spans):
            break
        start = end - OVERLAP
    return out


def cached_prefix(dataset: EvalDataset, split: dict[str, list[str]], embedder: CachedEmbedder,
                  cache: EmbeddingCache) -> EvalDataset:  # fmt: skip
    """The documents (corpus order) whose passages are all cached, and their queries."""
    keep = []
    for doc in dataset.documents:
        keys = {content_hash(text) for text in split[doc.id]}
        if len(cache.get(embedder.model_id, "document", sorted(keys), embedder.dimensions)) < len(
            keys
        ):
            break
        keep.append(doc)
    ids = {doc.id for doc in keep}
    qrels = {q: {d: g for d, g in r.items() if d in ids} for q, r in dataset.qrels.items()}
    qrels = {q: r for q, r in qrels.items() if any(g > 0 for g in r.values())}
    queries = {q: t for q, t in dataset.queries.items() if q in qrels}
    return dataclasses.replace(dataset, documents=tuple(keep), qrels=qrels, queries=queries)


def run(ready: Prepared, dataset: EvalDataset, scores_of: object, mode: str) -> float:
    """nDCG@10 with the dense scores ``scores_of(query_vector)`` (dense or fused)."""
    kb, hybrid = ready.kb, HybridSettings(mode="hybrid")
    out = {}
    for qid, text in dataset.queries.items():
        vector = np.asarray(ready.queries[text], dtype=np.float32).reshape(-1)
        dense = np.asarray(scores_of(vector), dtype=np.float64)  # type: ignore[operator]
        top = np.lexsort((np.arange(dense.shape[0]), -dense))[: hybrid.channel_depth]
        if mode == "dense":
            out[qid] = [kb.entry(int(doc)).id for doc in top[:100]]
            continue
        terms = kb.analyzer.tokens(text)
        ids = kb.query_ids([terms])
        mask = kb.eligibility()
        lists = [
            lexical_channel(kb, ids, mask, hybrid.channel_depth),
            phrase_channel(kb, terms, ids, mask, DEFAULT_EXACT_BOOST, DEFAULT_ALIAS_BOOST),
            ChannelList.of("dense", top, dense[top]),
        ]
        scorers = {
            "dense": lambda docs, s=dense: s[docs],
            "lexical": lambda docs, ids=ids: scores_at(kb.lexical.score_ids(ids), docs),
        }
        out[qid] = [kb.entry(hit.doc).id for hit in fuse(lists, hybrid, 100, scorers)]
    return evaluate_run(out, dataset.qrels)["ndcg@10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA), help="folder holding scifact/")
    parser.add_argument("--subset", action="store_true", help="only fully cached documents")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model("all-MiniLM-L6-v2")[1]))
    cache = EmbeddingCache(Path.home() / ".cache" / "groundwire" / "embeddings.sqlite")
    embedder = CachedEmbedder(create_embedder("all-MiniLM-L6-v2"), cache)
    dataset = load_dataset(Path(args.data) / "scifact")
    split = {doc.id: passages(tokenizer, doc.title, doc.text) for doc in dataset.documents}
    if args.subset:
        dataset = cached_prefix(dataset, split, embedder, cache)
    ready = prepare(dataset, embedder)
    texts = [split[ready.kb.entry(pos).id] for pos in range(len(ready.kb))]
    starts = np.cumsum([0, *(len(t) for t in texts[:-1])])
    matrix = embedder.embed_documents([p for t in texts for p in t]).astype(np.float32)
    first = matrix[starts]
    mean = np.add.reduceat(matrix, starts, axis=0)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    arms = {
        "first passage (today)": lambda q: first @ q,
        "max-pooled passages": lambda q: np.maximum.reduceat(matrix @ q, starts),
        "mean of passage vectors": lambda q: mean @ q,
    }
    print(f"{len(dataset.documents)} documents, {matrix.shape[0]} passages, "
          f"{len(dataset.queries)} queries")  # fmt: skip
    for label, scores_of in arms.items():
        dense, hybrid = (run(ready, dataset, scores_of, mode) for mode in ("dense", "hybrid"))
        print(f"{label:<24} dense {dense:.4f}  hybrid (default fusion) {hybrid:.4f}", flush=True)


if __name__ == "__main__":
    main()
