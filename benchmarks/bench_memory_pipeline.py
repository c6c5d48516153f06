"""The memory write pipeline's own overhead, and how many model calls it makes.

Usage::

    .venv/bin/python benchmarks/bench_memory_pipeline.py [--sessions 50] [--turns 20]

- **Data:** generated from a fixed seed (``--seed``): ``--sessions`` conversations of
  ``--turns`` turns (user and assistant alternating) about 40 people, 30 companies and
  20 cities. A user turn states one fact (works at, lives in, prefers, manages); one
  user turn in four restates an earlier fact of the same person with a new value, so
  the decision step sees similar memories. Every exchange (two turns) is remembered
  with ``remember_turns``; every exchange also recalls, as a host would before
  answering, in the session; every session ends with ``end_session``.
- **Model:** a scripted, zero-latency model (:class:`~groundwire.CallableProvider`)
  that answers each call kind the way a good model would: the facts stated in the
  exchange (with entities, a relation and a claim attribute), ``update`` of the first
  similar memory of the same person and aspect (else ``add``), no contradiction, three
  hints, a score. Its time is counted in, and is a few microseconds: what remains is
  the pipeline (queue, budgets, call records, validation, similarity recall, writes).
- **Measures:** for two configurations — the defaults (hints off, updates blocked) and
  everything on (hints, ``update_policy="apply"``, semantic contradiction checks) — the
  jobs/s of one worker draining the queue (``run_pending``; wall and CPU time), by job
  kind, and the model calls per 100 turns by kind. No peer runs side by side: a peer's
  write path (mem0's, say) needs its own embedding model and vector store and cannot be
  driven offline with the same scripted model; its call count per turn is discussed in
  docs/BENCHMARKS.md instead.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, source_state, versions
from groundwire import (
    CallableProvider,
    ChatRequest,
    MemoryPipeline,
    MemoryPipelineConfig,
    MemoryScope,
    MemoryStore,
)

SCOPE = MemoryScope("bench", "assistant")
PEOPLE = [f"Person{n:02d}" for n in range(40)]
COMPANIES = [f"Company{n:02d}" for n in range(30)]
CITIES = [f"City{n:02d}" for n in range(20)]
CONTACTS = ["email", "phone", "chat", "letters"]
#: aspect → (sentence template, values)
ASPECTS: dict[str, tuple[str, list[str]]] = {
    "employer": ("{p} works at {v}.", COMPANIES),
    "home": ("{p} lives in {v}.", CITIES),
    "contact": ("{p} prefers to be contacted by {v}.", CONTACTS),
    "manager": ("{p} reports to {v}.", PEOPLE),
}
_STATED = re.compile(
    r"^user: (\w+) (works at|lives in|prefers to be contacted by|reports to) "
    r"(\w+)\.$",
    re.MULTILINE,
)
_VERB_ASPECT = {
    "works at": "employer",
    "lives in": "home",
    "prefers to be contacted by": "contact",
    "reports to": "manager",
}


def conversations(sessions: int, turns: int, seed: int) -> list[list[tuple[str, str]]]:
    """Deterministic sessions of alternating user/assistant turns."""
    rng = random.Random(seed)
    said: list[tuple[str, str]] = []  # (person, aspect) already stated
    out = []
    for _ in range(sessions):
        session = []
        for _ in range(turns // 2):
            if said and rng.random() < 0.25:
                person, aspect = rng.choice(said)  # a restatement with a new value
            else:
                person, aspect = rng.choice(PEOPLE), rng.choice(list(ASPECTS))
                said.append((person, aspect))
            template, values = ASPECTS[aspect]
            session.append(("user", template.format(p=person, v=rng.choice(values))))
            session.append(("assistant", f"Thanks, I will remember that about {person}."))
        out.append(session)
    return out


def scripted_model(request: ChatRequest) -> str:
    """Zero-latency answers per call kind, as a good model would give them."""
    kind = str(request.metadata.get("groundwire", "")).removeprefix("memory-")
    prompt = request.messages[-1].content
    if kind == "extract":
        facts = []
        for person, verb, value in _STATED.findall(prompt):
            aspect = _VERB_ASPECT[verb]
            facts.append(
                {
                    "content": f"{person} {verb} {value}.",
                    "entities": [{"name": person, "type": "person"}, {"name": value}],
                    "relations": [{"source": person, "type": aspect, "target": value}],
                    "attributes": [
                        {"entity": person, "aspect": aspect, "value": value, "claim_key": "current"}
                    ],
                }
            )
        return json.dumps({"facts": facts})
    if kind == "decision":
        decisions = []
        for block in prompt.split("Fact ")[1:]:
            number = int(block.split(":", 1)[0])
            head = block.split("\n", 1)[0].split(": ", 1)[1]
            person, verb = head.split(" ")[0], " ".join(head.split(" ")[1:-1])
            same = [
                line.split(":", 1)[0].strip()
                for line in block.splitlines()[2:]
                if line.strip().split(": ", 1)[-1].startswith(f"{person} {verb} ")
            ]
            decision = {
                "fact": number,
                "operation": "update" if same else "add",
                "reason": "newer value" if same else "new",
            }
            if same:
                decision["target"] = same[0]
            decisions.append(decision)
        return json.dumps({"decisions": decisions})
    if kind == "contradiction":
        return '{"contradicts": false, "confidence": 0.9, "reasoning": "a newer value"}'
    if kind == "prospective_index":
        return "1. Where does this person work?\n2. Who is this about?\n3. How to reach them?"
    if kind == "continuity_score":
        return '{"score": 0.8, "confidence": 0.7, "memories_used": 1, "per_memory": []}'
    raise AssertionError(f"unexpected call kind {kind!r}")


def run(
    label: str, config: MemoryPipelineConfig, data: list[list[tuple[str, str]]]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, MemoryStore(Path(tmp) / "m.db") as store:
        pipeline = MemoryPipeline(store, CallableProvider(scripted_model), config=config)
        turns = 0
        jobs: Counter[str] = Counter()
        wall = cpu = 0.0
        for number, session in enumerate(data):
            sid = f"s{number}"
            for i in range(0, len(session), 2):
                exchange = session[i : i + 2]
                store.recall(SCOPE, exchange[0][1], session_id=sid)
                pipeline.remember_turns(SCOPE, exchange, session_id=sid)
                turns += len(exchange)
            pipeline.end_session(SCOPE, sid)
            # Drain after each session, as a worker keeping up would.
            w0, c0 = time.perf_counter(), time.process_time()
            outcomes = pipeline.run_pending()
            wall += time.perf_counter() - w0
            cpu += time.process_time() - c0
            jobs.update(o.kind for o in outcomes)
            failed = [o for o in outcomes if o.state != "done"]
            assert not failed, failed[:3]
        status = pipeline.status(SCOPE)
        pipeline.close()
        return {
            "label": label,
            "turns": turns,
            "jobs": jobs,
            "wall": wall,
            "cpu": cpu,
            "calls": status["model_calls_by_kind"],
            "memories": store.stats(SCOPE)["memories"],
            "proposals": status["proposals"],
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(versions(["jsonschema"]), f"sqlite {sqlite3.sqlite_version}")
    print(source_state(Path(__file__).resolve().parents[1]))
    data = conversations(args.sessions, args.turns, args.seed)
    print(f"data: {args.sessions} sessions x {args.turns} turns (seed {args.seed})\n")
    unbounded = {"max_calls_per_minute": 1_000_000}  # the zero-latency model is no API
    results = [
        run("defaults (hints off, updates blocked)", MemoryPipelineConfig(**unbounded), data),
        run(
            "everything on (hints, apply, semantic checks)",
            MemoryPipelineConfig(hints=True, update_policy="apply", **unbounded),
            data,
        ),
    ]
    rows = []
    for r in results:
        total = sum(r["jobs"].values())
        rows.append(
            [
                r["label"],
                total,
                f"{total / r['wall']:,.0f}",
                f"{total / r['cpu']:,.0f}",
                f"{1000 * r['wall'] / total:.2f}",
                r["memories"],
            ]
        )
    print("Worker throughput (one worker, zero-latency scripted model):\n")
    print_table(
        ["configuration", "jobs", "jobs/s (wall)", "jobs/s (CPU)", "ms/job", "memories"], rows
    )
    print("\nJobs by kind:\n")
    kinds = sorted({k for r in results for k in r["jobs"]})
    print_table(
        ["configuration", *kinds], [[r["label"], *(r["jobs"][k] for k in kinds)] for r in results]
    )
    print("\nModel calls per 100 turns:\n")
    call_kinds = sorted({k for r in results for k in r["calls"]})
    print_table(
        ["configuration", "total", *call_kinds],
        [
            [
                r["label"],
                f"{100 * sum(r['calls'].values()) / r['turns']:.1f}",
                *(f"{100 * r['calls'].get(k, 0) / r['turns']:.1f}" for k in call_kinds),
            ]
            for r in results
        ],
    )
    print("\nProposals:", "; ".join(f"{r['label']}: {dict(r['proposals'])}" for r in results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
