"""Recall equivalence harness: dump every field of many recalls, or compare two dumps.

Usage::

    .venv/bin/python benchmarks/compare_memory_recall.py dump OUT.json [--memories N] [--optimize]
    .venv/bin/python benchmarks/compare_memory_recall.py compare A.json B.json

``dump`` builds the benchmark's synthetic store (``bench_memory_latency.synthesize``) with
a ticking clock and a frozen graph timer (no deadline, so runs are deterministic), plus
memories of another agent and a small ACL store with hashing vectors, then records every
field of each recall: ids, order, scores, channels, stages, notes, the memories' rows,
graph result, session flags; after the recalls, every session row and every memory's
access count and time. Run it with two versions of groundwire (``PYTHONPATH=<src>``) and
``compare`` the dumps: floats must agree to 1e-12, everything else exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sqlite3
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import groundwire
from bench_memory_latency import SCOPE, synthesize
from groundwire import HashingEmbedder, MemoryRecallConfig
from groundwire.memory import MemoryScope, MemoryStore

OTHER = MemoryScope("bench", "other-agent")
STAGES = ("graph", "facets", "gravity", "hub", "resolution", "currentness", "importance", "hints")
EPOCH = 1_780_000_000.0


class Ticking:
    """A clock that advances ``step`` seconds per call: every write and recall differs."""

    def __init__(self, step: float) -> None:
        self.now, self.step = EPOCH, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def recall_record(result: Any) -> dict[str, Any]:
    return {
        "query": result.query,
        "timed_out": result.timed_out,
        "freshness": result.freshness,
        "tracked": result.tracked,
        "session_id": result.session_id,
        "graph": [
            list(result.graph.entity_ids),
            list(result.graph.neighbour_ids),
            sorted(result.graph.memory_ids),
            result.graph.error,
        ],
        "memories": [
            {
                "score": r.score,
                "rank": r.rank,
                "channels": dict(r.channels),
                "stages": dict(r.stages),
                "note": r.note,
                "explain": r.explain,
                "memory": {
                    f: (list(v) if isinstance(v, tuple) else v)
                    for f in r.memory.__slots__
                    for v in [getattr(r.memory, f)]
                },
            }
            for r in result.memories
        ],
    }


def tables(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    out = {
        name: [list(row) for row in conn.execute(f"SELECT * FROM {name} ORDER BY 1, 2, 3")]
        for name in ("sessions", "session_memories")
    }
    out["memory_access"] = [list(r) for r in conn.execute("SELECT * FROM memory_access ORDER BY 1")]
    conn.close()
    return out


LEXICAL = replace(
    MemoryRecallConfig(), graph=False, facets=False, gravity=False, hub=False,
    resolution=False, freshness=False, currentness=False, importance=False,
)  # fmt: skip


def dump(out: Path, memories: int, optimize: bool = False) -> int:
    items, queries = synthesize(memories, 7)
    rng = random.Random(11)
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.db"
        clock = Ticking(0.37)
        # written with a ticking clock: every memory has its own creation time
        with MemoryStore(path, clock=clock, timer=lambda: 0.0) as store:
            for start in range(0, len(items), 500):
                store.remember_many(SCOPE, items[start : start + 500])
            store.remember_many(
                OTHER, [dict(i, content=i["content"] + " other") for i in items[:500]]
            )
            if optimize:  # merged text indexes must give the very same recalls
                store.optimize()
        clock.step = 3_600.0 * 7  # recalls days apart: decay and freshness differ per recall
        with MemoryStore(path, clock=clock, timer=lambda: 0.0) as store:
            configs = [
                ("default", {}),
                ("read-only", {"touch": False}),
                ("lexical", {"config": LEXICAL, "touch": False}),
                ("limit-30", {"limit": 30}),
            ]
            for kind in ("realistic", "frequent"):
                for i, q in enumerate(queries[kind][:1000]):
                    name, kwargs = configs[i % len(configs)]
                    kwargs = dict(kwargs)
                    if i % 3 == 0:
                        kwargs["session_id"] = f"s-{i % 7}"
                    records.append(
                        {"config": name, **recall_record(store.recall(SCOPE, q, **kwargs))}
                    )
            words = ("latest", "current", "recent", "today", "this week", "now")
            created = [m.created_at for m in store.memories(SCOPE, limit=10_000)]
            lo, hi = min(created), max(created)
            for i, q in enumerate(queries["realistic"][1000:1600]):
                q = f"{words[i % len(words)]} {q}"
                kwargs: dict[str, Any] = {"session_id": "fresh"} if i % 2 else {}
                if i % 3 == 1:
                    kwargs["since"] = lo + (hi - lo) * rng.random()
                elif i % 3 == 2:
                    kwargs["until"] = lo + (hi - lo) * rng.random()
                records.append(
                    {"config": "fresh", **recall_record(store.recall(SCOPE, q, **kwargs))}
                )
            records.extend(
                {"config": "other", **recall_record(store.recall(OTHER, q))}
                for q in queries["realistic"][2000:2200]
            )
            # every stage off, one at a time
            for j, stage in enumerate(STAGES):
                cfg = replace(MemoryRecallConfig(), **{stage: False})
                records.extend(
                    {"config": f"no-{stage}", **recall_record(store.recall(SCOPE, q, config=cfg))}
                    for q in queries["frequent"][2200 + 25 * j : 2225 + 25 * j]
                )
        state = tables(path)
        acl_path = Path(tmp) / "acl.db"
        clock2 = Ticking(11.0)
        principals = [
            MemoryScope("t", "a", "alice", ("eng",)),
            MemoryScope("t", "a", "bob", ("ops",)),
            MemoryScope("t", "a", "carol", ()),
            MemoryScope("t", "a"),
        ]
        labels = [(), ("user:alice",), ("group:eng",), ("group:ops", "user:carol"), ("user:bob",)]
        with MemoryStore(
            acl_path, embedder=HashingEmbedder(256), clock=clock2, timer=lambda: 0.0
        ) as acl:
            batch = [
                dict(it, acl=list(labels[k % len(labels)])) for k, it in enumerate(items[:2000])
            ]
            acl.remember_many(principals[0], batch)
            for i, q in enumerate(queries["realistic"][3000:3500]):
                kwargs = {"session_id": "acl"} if i % 4 == 0 else {}
                result = acl.recall(principals[i % 4], q, touch=i % 2 == 0, **kwargs)
                records.append({"config": f"acl-{i % 4}", **recall_record(result)})
        acl_state = tables(acl_path)
    out.write_text(
        json.dumps(
            {
                "groundwire": groundwire.__file__,
                "records": records,
                "tables": state,
                "acl_tables": acl_state,
            }
        )
    )
    print(f"{len(records)} recalls dumped to {out} (groundwire from {groundwire.__file__})")
    return 0


def same(a: Any, b: Any, where: str, problems: list[str]) -> None:
    if isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, int | float) and isinstance(b, int | float)) or not (
            a == b or math.isclose(a, b, rel_tol=0.0, abs_tol=1e-12)
        ):
            problems.append(f"{where}: {a!r} != {b!r}")
    elif isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            problems.append(f"{where}: keys {list(a)} != {list(b)}")
        for k in a:
            if k in b:
                same(a[k], b[k], f"{where}.{k}", problems)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            problems.append(f"{where}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            same(x, y, f"{where}[{i}]", problems)
    elif a != b:
        problems.append(f"{where}: {a!r} != {b!r}")


def compare(first: Path, second: Path) -> int:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    problems: list[str] = []
    for key in ("records", "tables", "acl_tables"):
        same(a[key], b[key], key, problems)
    configs: dict[str, int] = {}
    for r in a["records"]:
        configs[r["config"]] = configs.get(r["config"], 0) + 1
    print(f"{len(a['records'])} recalls compared ({a['groundwire']} vs {b['groundwire']})")
    print("by configuration:", ", ".join(f"{k} {v}" for k, v in configs.items()))
    print("memories returned:", sum(len(r["memories"]) for r in a["records"]))
    for p in problems[:20]:
        print("DIFF", p)
    print("identical" if not problems else f"{len(problems)} differences")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--memories", type=int, default=10_000)
    d.add_argument("--optimize", action="store_true", help="MemoryStore.optimize() after writing")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.cmd == "dump":
        return dump(args.out, args.memories, args.optimize)
    return compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
