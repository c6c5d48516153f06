"""The memory write pipeline's own overhead, and how many model calls it makes.

Usage::

    .venv/bin/python benchmarks/bench_memory_pipeline.py [--sessions 50] [--turns 20]
        [--peer-sessions 10] [--rounds 3] [--no-mem0]

- **Data:** generated from a fixed seed (``--seed``): ``--sessions`` conversations of
  ``--turns`` turns (user and assistant alternating) about 40 people, 30 companies and
  20 cities. A user turn states one fact (works at, lives in, prefers, reports to); one
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
  kind, and the model calls per 100 turns by kind.
- **Side by side with mem0** (``mem0ai``, skipped with an install hint when missing;
  ``--no-mem0``): the first ``--peer-sessions`` sessions, both systems talking to one
  zero-latency OpenAI-wire server on 127.0.0.1 (``_openai_loopback.py``) through their
  own OpenAI clients. groundwire: ``recall`` + ``remember_turns`` per exchange,
  ``end_session`` and a worker drain per session, default configuration (lexical store,
  no embeddings). mem0: ``search`` + ``add`` (``infer=True``) per exchange, its default
  local stack (Qdrant on disk, SQLite history) with the server's hashed 64-d embeddings;
  without spaCy installed mem0 skips its entity linking and lemmatization. Measures: ms
  per exchange (wall and CPU, median of ``--rounds`` interleaved rounds, fresh stores
  each round, after one uncounted warm-up session each), chat calls and embedding
  requests per 100 turns, memories stored, and the ratios mem0/groundwire. The scripted
  extraction answers with the same facts for both.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, source_state, versions
from _openai_loopback import OpenAILoopback
from groundwire import (
    CallableProvider,
    ChatRequest,
    MemoryPipeline,
    MemoryPipelineConfig,
    MemoryScope,
    MemoryStore,
    OpenAIProvider,
)
from groundwire.memory.pipeline.contradiction import SEMANTIC_SYSTEM
from groundwire.memory.pipeline.extract import DECISION_SYSTEM, EXTRACTION_SYSTEM
from groundwire.memory.pipeline.hints import HINTS_SYSTEM
from groundwire.memory.pipeline.session import SCORING_SYSTEM

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
    return answer(kind, request.messages[-1].content)


def answer(kind: str, prompt: str) -> str:
    """The scripted answer to one groundwire call of ``kind`` (shared by both transports)."""
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


# -- side by side with mem0, over one loopback OpenAI-wire server ----------------------------
#: groundwire's call kinds by system prompt (over HTTP the request metadata is not sent).
_GW_SYSTEMS = {
    EXTRACTION_SYSTEM: "extract",
    DECISION_SYSTEM: "decision",
    SEMANTIC_SYSTEM: "contradiction",
    HINTS_SYSTEM: "prospective_index",
    SCORING_SYSTEM: "continuity_score",
}
_ANY_FACT = re.compile(r"(\w+) (works at|lives in|prefers to be contacted by|reports to) (\w+)\.")
DIMS = 64
UNBOUNDED = {"max_calls_per_minute": 1_000_000}  # the zero-latency model is no API


def loopback_script(system: str, prompt: str) -> tuple[str, str]:
    """Answer either system's call: mem0's additive extraction, or a groundwire kind."""
    for known, kind in _GW_SYSTEMS.items():
        if system.startswith(known.split("{", 1)[0]):  # templates: compare the fixed head
            return f"groundwire {kind}", answer(kind, prompt)
    if "## New Messages" in prompt:  # mem0's additive extraction (its one call per add)
        new = prompt.split("## New Messages", 1)[1].split("## Observation Date", 1)[0]
        facts = [{"text": f"{p} {verb} {v}."} for p, verb, v in _ANY_FACT.findall(new)]
        return "mem0 extract", json.dumps({"memory": facts})
    raise AssertionError(f"unknown system prompt {system[:80]!r}")


def groundwire_http(url: str, data: list[list[tuple[str, str]]], tmp: Path) -> int:
    provider = OpenAIProvider("bench-model", api_key="unused", base_url=url)
    config = MemoryPipelineConfig(**UNBOUNDED)  # type: ignore[arg-type]
    with MemoryStore(tmp / "m.db") as store, MemoryPipeline(store, provider, config=config) as p:
        for number, session in enumerate(data):
            sid = f"s{number}"
            for i in range(0, len(session), 2):
                store.recall(SCOPE, session[i][1], session_id=sid)
                p.remember_turns(SCOPE, session[i : i + 2], session_id=sid)
            p.end_session(SCOPE, sid)
            failed = [o for o in p.run_pending() if o.state != "done"]
            assert not failed, failed[:3]
        return int(store.stats(SCOPE)["memories"])


def mem0_http(url: str, data: list[list[tuple[str, str]]], tmp: Path) -> int:
    from mem0 import Memory

    llm = {"model": "bench-model", "api_key": "unused", "openai_base_url": url}
    embed = {"model": "bench-embed", "api_key": "unused", "openai_base_url": url}
    memory = Memory.from_config(
        {
            "llm": {"provider": "openai", "config": llm},
            "embedder": {"provider": "openai", "config": {**embed, "embedding_dims": DIMS}},
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "bench",
                    "path": str(tmp / "qdrant"),
                    "embedding_model_dims": DIMS,
                    "on_disk": True,
                },
            },
            "history_db_path": str(tmp / "history.db"),
        }
    )
    user = {"user_id": "bench"}
    for number, session in enumerate(data):
        for i in range(0, len(session), 2):
            memory.search(session[i][1], filters=user, top_k=10)
            turns = [{"role": role, "content": text} for role, text in session[i : i + 2]]
            memory.add(turns, user_id="bench", run_id=f"s{number}")
    stored = len(memory.get_all(filters=user, top_k=100_000)["results"])
    memory.close()
    return stored


def side_by_side(data: list[list[tuple[str, str]]], rounds: int) -> None:
    systems = {"groundwire": groundwire_http, "mem0": mem0_http}
    turns = sum(len(s) for s in data)
    exchanges = turns // 2
    runs: dict[str, list[tuple[float, float, Counter[str], int]]] = {n: [] for n in systems}
    with OpenAILoopback(loopback_script, dims=DIMS) as server:
        for run_one in systems.values():  # warm-up, not counted: imports, clients, caches
            with tempfile.TemporaryDirectory() as tmp:
                run_one(server.base_url, data[:1], Path(tmp))
        for r in range(rounds):
            for name in list(systems)[:: 1 if r % 2 == 0 else -1]:
                before = Counter(server.counts)
                with tempfile.TemporaryDirectory() as tmp:
                    w0, c0 = time.perf_counter(), time.process_time()
                    stored = systems[name](server.base_url, data, Path(tmp))
                    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                runs[name].append((wall, cpu, server.counts - before, stored))
    rows, per = [], {}
    for name, done in runs.items():
        wall = statistics.median(w for w, _, _, _ in done) * 1000 / exchanges
        cpu = statistics.median(c for _, c, _, _ in done) * 1000 / exchanges
        counts, stored = done[-1][2], done[-1][3]
        chat = sum(v for k, v in counts.items() if k.startswith(name))
        embeds = counts["embedding requests"]
        per[name] = (wall, cpu, chat, embeds)
        calls, requests = f"{100 * chat / turns:.1f}", f"{100 * embeds / turns:.1f}"
        rows.append([name, f"{wall:.2f}", f"{cpu:.2f}", calls, requests, stored])
    print(f"\nSide by side over one loopback OpenAI-wire server ({len(data)} sessions, "
          f"{turns} turns, median of {rounds} interleaved rounds):\n")  # fmt: skip
    headers = ["system", "ms/exchange (wall)", "ms/exchange (CPU)", "chat calls /100 turns"]
    print_table([*headers, "embedding requests /100 turns", "memories"], rows)
    gw, m0 = per["groundwire"], per["mem0"]
    print(
        f"\nmem0/groundwire: wall {m0[0] / gw[0]:.2f}x, CPU {m0[1] / gw[1]:.2f}x, "
        f"chat calls {m0[2] / gw[2]:.2f}x"
    )
    kinds = sorted(k for k in runs["groundwire"][-1][2] if k.startswith("groundwire"))
    print("groundwire chat calls by kind:", {k: runs["groundwire"][-1][2][k] for k in kinds})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--peer-sessions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-mem0", action="store_true", help="skip the side-by-side part")
    args = parser.parse_args()
    peers = ["jsonschema", "openai", "mem0ai", "qdrant-client"]
    print(versions(peers), f"sqlite {sqlite3.sqlite_version}")
    print(source_state(Path(__file__).resolve().parents[1]))
    data = conversations(args.sessions, args.turns, args.seed)
    print(f"data: {args.sessions} sessions x {args.turns} turns (seed {args.seed})\n")
    results = [
        run("defaults (hints off, updates blocked)", MemoryPipelineConfig(**UNBOUNDED), data),
        run(
            "everything on (hints, apply, semantic checks)",
            MemoryPipelineConfig(hints=True, update_policy="apply", **UNBOUNDED),
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
    if args.no_mem0:
        return 0
    if importlib.util.find_spec("mem0") is None:
        print("\nmem0 side by side skipped: pip install mem0ai")
        return 0
    # mem0 reads these when imported: no telemetry, its user file in a temporary folder.
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(MEM0_TELEMETRY="False", MEM0_DIR=home, NO_PROXY="127.0.0.1")
        side_by_side(data[: args.peer_sessions], args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
