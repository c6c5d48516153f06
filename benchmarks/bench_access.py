"""What tenant and ACL labels cost: turn latency, tenant pools, readers, evidence.

Data: the 80 entries of ``examples/handbook`` copied once per tenant (``--tenants``, 20:
1,600 entries), ids prefixed by the tenant, every tenth copy restricted to a group; and
the same 1,600 entries without any label, as the baseline. Queries: the 40 questions of
``examples/handbook-eval``. Documents: ``examples/docs`` chunked, each file labeled with
one of the tenants (round robin), against the same chunks unlabeled.

Measures, side by side in one process with interleaved rounds (``--rounds``, 7):

* one grounding turn (``GroundingEngine.ground``) as a principal of one tenant on the
  labeled snapshot vs an anonymous turn on the unlabeled one (same entry count): the
  price of the eligibility filter and of searching the tenant's statistics pool;
* ``retrieve_evidence`` as a principal on labeled chunks vs unlabeled chunks;
* one-off costs: the full build, the label index, all tenant pools (the engine builds
  them in the background after a build), and one scoped reader (``kb.reader``), with
  the resident memory the pools add.

There is no peer: no other library here has tenant-isolated BM25 statistics.
Run from the repository root: ``.venv/bin/python benchmarks/bench_access.py``
(about a minute).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import groundwire as gw
from _common import System, print_table, rss_mib, run_rounds, source_state, timed, versions
from groundwire.index.scoped import label_index
from groundwire.retrieve.eligibility import warm_tenant_pools

ROOT = Path(__file__).resolve().parents[1]


def tenant_entries(tenants: int) -> tuple[list[gw.KnowledgeEntry], list[gw.KnowledgeEntry]]:
    """The handbook once per tenant, labeled; and the same entries without labels."""
    base = gw.KnowledgeBase.from_sources(gw.load_sources(ROOT / "examples" / "handbook"))
    labeled, plain = [], []
    for t in range(tenants):
        tenant = f"tenant{t:03d}"
        ids = {e.id: f"{tenant}.{e.id}" for e in base}
        for n, entry in enumerate(base):
            copy = replace(
                entry,
                id=ids[entry.id],
                related=tuple(ids[r] for r in entry.related if r in ids),
                parent=ids.get(entry.parent) if entry.parent else None,
            )
            labels: dict[str, Any] = {"tenant": tenant}
            if n % 10 == 0:
                labels["acl"] = ("group:admins",)
            labeled.append(replace(copy, metadata={**copy.metadata, **labels}))
            plain.append(copy)
    return labeled, plain


def queries() -> list[str]:
    path = ROOT / "examples" / "handbook-eval" / "queries.jsonl"
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def engine_of(entries: list[gw.KnowledgeEntry]) -> gw.GroundingEngine:
    source = gw.KnowledgeSource("bench", "1", tuple(entries))
    engine = gw.GroundingEngine(gw.GroundingConfig(sources=[source], timeout_ms=60_000))
    assert engine.ready(600)
    return engine


def docs_kbs(tenants: int) -> tuple[gw.KnowledgeBase, gw.KnowledgeBase, gw.KnowledgeBase]:
    """examples/docs chunks: unlabeled; all of tenant001; one tenant per file (round robin)."""
    loaded = gw.load_documents(ROOT / "examples" / "docs")
    chunks = [c for doc in loaded.documents for c in gw.chunk_document(doc, gw.ChunkingConfig())]
    names = sorted({c.source_id for c in chunks})
    owner = {name: f"tenant{n % tenants:03d}" for n, name in enumerate(names)}
    settings = gw.chunk_settings()

    def index(labels: dict[str, str] | None) -> gw.KnowledgeBase:
        labeled = [
            c
            if labels is None
            else replace(c, metadata={**c.metadata, "tenant": labels[c.source_id]})
            for c in chunks
        ]
        return gw.KnowledgeBase.from_documents(gw.chunks_to_documents(labeled), settings)

    return index(None), index(dict.fromkeys(names, "tenant001")), index(owner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(versions([]))
    print(source_state(ROOT))
    labeled, plain = tenant_entries(args.tenants)
    texts = queries()
    member = gw.Principal("tenant007", "alice")

    (plain_engine, build_plain) = timed(lambda: engine_of(plain))
    (labeled_engine, build_labeled) = timed(lambda: engine_of(labeled))
    kb = labeled_engine.knowledge_base
    assert kb is not None
    warm_tenant_pools(kb)  # waits for the engine's background warm-up: turns run warm
    fresh = gw.KnowledgeBase(kb.entries, kb.settings)  # a cold copy for the one-off costs
    _, index_s = timed(lambda: label_index(fresh))
    rss_before = rss_mib()
    _, pools_s = timed(lambda: warm_tenant_pools(fresh))
    rss_after = rss_mib()
    _, reader_s = timed(lambda: fresh.reader(member))

    systems = [
        System(
            "ground, principal, 20 tenants",
            lambda q: list(labeled_engine.ground(q, principal=member).metadata.selected_ids),
            texts,
        ),
        System(
            "ground, anonymous, unlabeled",
            lambda q: list(plain_engine.ground(q).metadata.selected_ids),
            texts,
        ),
    ]
    docs_plain, docs_all, docs_split = docs_kbs(args.tenants)
    doc_member = gw.Principal("tenant001", "alice")

    def evidence(kb: gw.KnowledgeBase, who: gw.Principal | None) -> Any:
        return lambda q: [e.id for e in gw.retrieve_evidence(kb, q, principal=who).excerpts]

    systems += [
        System("evidence, anonymous, unlabeled", evidence(docs_plain, None), texts),
        System("evidence, principal sees all", evidence(docs_all, doc_member), texts),
        System("evidence, principal sees 1/20", evidence(docs_split, doc_member), texts),
    ]
    run_rounds(systems, args.rounds)
    labeled_engine.close()
    plain_engine.close()

    rows = []
    for system in systems:
        qps = statistics.median(system.qps)
        rows.append([system.name, f"{qps:,.0f}", f"{1000 / qps:.3f}"])
    print()
    print_table(["turn", "turns/s (median)", "ms/turn"], rows)
    ratio = [statistics.median(system.qps) for system in systems]
    print(
        f"\ntime per turn, labeled / unlabeled: ground {ratio[1] / ratio[0]:.2f}x, "
        f"evidence (sees all) {ratio[2] / ratio[3]:.2f}x, evidence (sees 1/20) "
        f"{ratio[2] / ratio[4]:.2f}x"
    )
    print()
    memory = (
        "n/a" if rss_before is None or rss_after is None else f"{rss_after - rss_before:+.1f} MiB"
    )
    print_table(
        ["one-off cost", "seconds"],
        [
            [
                f"build {len(labeled):,} labeled entries (engine, incl. validation)",
                f"{build_labeled:.2f}",
            ],
            [f"build {len(plain):,} unlabeled entries (engine)", f"{build_plain:.2f}"],
            ["label index (once per snapshot)", f"{index_s:.3f}"],
            [f"all {args.tenants + 1} tenant pools (background, RSS {memory})", f"{pools_s:.2f}"],
            ["one scoped reader (kb.reader)", f"{reader_s:.3f}"],
        ],
    )


if __name__ == "__main__":
    main()
