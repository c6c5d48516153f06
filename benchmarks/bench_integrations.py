"""The framework adapters on SciFact: what each adds over groundwire, and Haystack's own BM25.

Runs SciFact test queries (top 10, one query at a time, rounds interleaved) through:

* ``groundwire EntrySearcher``: the searcher every adapter calls (relevance gate off, so
  every system returns ten documents and nDCG@10 compares rankings), with and without
  score breakdowns (``explain=False``), anonymous on the unlabeled corpus and as a
  ``Principal`` on a copy whose every abstract carries a tenant and an ACL label the
  principal holds (the same documents visible: what the labels' check costs);
* the LangChain, LlamaIndex and Haystack adapters over that searcher (``invoke``,
  ``retrieve``, ``run``): the conversion cost each framework adds;
* Haystack's ``InMemoryBM25Retriever`` over an ``InMemoryDocumentStore`` of the same
  documents (BM25L by default, and BM25Okapi), the retriever a Haystack user would
  otherwise use.

Prints q/s and p50 latency (over the first ``--timed`` queries, 100 by default: Haystack's
retriever takes about 0.1-0.2 s a query), nDCG@10 over all 300 queries
(``groundwire.eval.metrics.ndcg``) and q/s ratios against Haystack's BM25L retriever. Run
from the repository root: ``.venv/bin/python benchmarks/bench_integrations.py`` (about
three minutes on two cores).
Needs ``../shared/datasets/scifact`` and the ``[integrations]`` extra.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no traffic leaves the machine

import groundwire as gw
from groundwire.eval import load_dataset
from groundwire.eval.metrics import ndcg
from groundwire.integrations import Access, EntrySearcher

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import System, print_table, round_percentile, run_rounds, source_state, versions

REPO = Path(__file__).resolve().parents[1]
SCIFACT = next(
    (
        folder / "shared" / "datasets" / "scifact"
        for folder in (REPO.parent, REPO.parent.parent)
        if (folder / "shared" / "datasets" / "scifact").exists()
    ),
    REPO.parent / "shared" / "datasets" / "scifact",
)
K = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timed", type=int, default=100, help="queries timed per round")
    args = parser.parse_args()

    from haystack import Document as HaystackDocument
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from groundwire.integrations.haystack import GroundwireRetriever as HaystackRetriever
    from groundwire.integrations.langchain import GroundwireRetriever as LangChainRetriever
    from groundwire.integrations.llamaindex import GroundwireRetriever as LlamaRetriever

    data = load_dataset(SCIFACT)
    queries = [data.queries[q] for q in sorted(data.qrels) if q in data.queries]
    judged = {data.queries[q]: data.qrels[q] for q in data.qrels if q in data.queries}
    kb = gw.KnowledgeBase.from_documents(data.documents)
    config = gw.RetrievalConfig(gate="off", candidate_limit=K, result_limit=K, relation_limit=0)
    searcher = EntrySearcher(kb, config=config, expand=False)
    quick = EntrySearcher(kb, config=config, expand=False, explain=False)
    nobody = Access()
    labels = {"tenant": "lab", "acl": ["group:readers"]}
    labeled = gw.KnowledgeBase.from_documents(
        [replace(d, metadata={**d.metadata, **labels}) for d in data.documents]
    )
    as_reader = EntrySearcher(labeled, config=config, expand=False, explain=False)
    reader = Access(principal=gw.Principal("lab", "ana", groups=("readers",)))
    langchain = LangChainRetriever(searcher=searcher)
    llama = LlamaRetriever(searcher)
    haystack = HaystackRetriever(searcher)

    stores = {}
    for algorithm in ("BM25L", "BM25Okapi"):
        store = InMemoryDocumentStore(bm25_algorithm=algorithm)
        store.write_documents(
            [HaystackDocument(id=d.id, content=f"{d.title}\n{d.text}") for d in data.documents]
        )
        stores[algorithm] = InMemoryBM25Retriever(store, top_k=K)

    timed = queries[: args.timed]
    systems = [
        System(
            "groundwire EntrySearcher explain=False",
            lambda q: [p.id for p in quick.search(q, nobody).passages],
            timed,
        ),
        System(
            "groundwire EntrySearcher explain=False, a Principal",
            lambda q: [p.id for p in as_reader.search(q, reader).passages],
            timed,
        ),
        System(
            "groundwire EntrySearcher",
            lambda q: [p.id for p in searcher.search(q, nobody).passages],
            timed,
        ),
        System(
            "LangChain GroundwireRetriever", lambda q: [d.id for d in langchain.invoke(q)], timed
        ),
        System(
            "LlamaIndex GroundwireRetriever",
            lambda q: [n.node.node_id for n in llama.retrieve(q)],
            timed,
        ),
        System(
            "Haystack GroundwireRetriever",
            lambda q: [d.id for d in haystack.run(q)["documents"]],
            timed,
        ),
        *(
            System(
                f"Haystack InMemoryBM25Retriever {name}",
                lambda q, r=r: [d.id for d in r.run(q)["documents"]],
                timed,
            )
            for name, r in stores.items()
        ),
    ]
    quality = {
        s.name: statistics.fmean(ndcg(s.search(q), judged[q], K) for q in queries) for s in systems
    }
    run_rounds(systems, args.rounds)
    peer = statistics.median(systems[-2].qps)
    rows = [
        [
            s.name,
            f"{statistics.median(s.qps):,.0f}",
            f"{round_percentile(s, 50):.3f}",
            f"{quality[s.name]:.4f}",
            f"{statistics.median(s.qps) / peer:.1f}x",
        ]
        for s in systems
    ]
    same = all(
        [p.id for p in quick.search(q, nobody).passages]
        == [p.id for p in as_reader.search(q, reader).passages]
        for q in queries
    )
    assert same, "the labeled copy must rank exactly as the unlabeled corpus"
    print(
        f"SciFact ({len(data.documents):,} documents, {len(queries)} queries; "
        f"{len(timed)} timed), top {K}, {args.rounds} rounds"
    )
    print(versions(["langchain-core", "llama-index-core", "haystack-ai"]))
    print(source_state(REPO))
    print_table(["system", "q/s", "p50 ms", "nDCG@10", "vs Haystack BM25L"], rows)
    cost = label_cost([(quick, nobody), (as_reader, reader)], queries, args.rounds + 2)
    print(
        "labels' cost, CPU ms per query over all queries (median of interleaved rounds; "
        f"rounds' range): anonymous {cost[0]}, as the Principal {cost[1]}"
    )


def label_cost(
    pairs: list[tuple[EntrySearcher, Access]], queries: list[str], rounds: int
) -> list[str]:
    """CPU time per query of each (searcher, access), interleaved rounds: less sensitive
    than wall clock to other work on a shared machine."""
    times: list[list[float]] = [[] for _ in pairs]
    for _ in range(rounds):
        for spent, (searcher, access) in zip(times, pairs, strict=True):
            started = time.process_time()
            for query in queries:
                searcher.search(query, access)
            spent.append((time.process_time() - started) * 1000.0 / len(queries))
    return [f"{statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f})" for t in times]


if __name__ == "__main__":
    main()
