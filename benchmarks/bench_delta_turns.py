"""Grounding turns on a snapshot holding a delta segment: first turn and per-turn cost.

Data: the synthetic corpus of ``bench_synthetic_1m.py`` (same generator, ``--docs``
documents, 200k by default), built, saved, then updated with 1% new documents and 1,000
deletes and saved again: the save writes a delta snapshot (the change is below
``DELTA_COMPACT_SHARE``). The compacted twin (``KnowledgeBase.compacted``, equal to a
build from scratch) is saved beside it.

Measures, each in a fresh process (``--measure``), so that nothing is cached:

* ``first``: ``GroundingEngine.from_snapshot`` of the delta snapshot (load), then the
  first and second ``ground`` turns (``timeout_ms`` 600 s, so the turn's true cost
  shows), wall and CPU seconds (``time.process_time``: every thread of the process, the
  engine's background warm-up included), and whether the turn compacted the delta; the
  same for the compacted snapshot; then the delta's first turn with the default turn
  timeout (its failure reason); then a reload: an engine serving the compacted snapshot
  (warm) reloads the delta one (wall and CPU seconds of ``reload``, which warms the new
  snapshot before the swap) and its first turn with the default timeout;
* ``turns``: ``--queries`` realistic turns (2-6 words, no top-100 word) on the delta
  snapshot and on the compacted one, interleaved ``--rounds`` times, p50/p90 wall and
  median CPU milliseconds per turn, and whether both return the same blocks.

Run from the repository root: ``.venv/bin/python benchmarks/bench_delta_turns.py``
(``--docs 1000000`` for the 1M corpus; ``--folder`` keeps the snapshots between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import source_state, versions
from bench_synthetic_1m import make_corpus, make_queries, make_vocabulary, zipf_cdf

REPO = Path(__file__).resolve().parents[1]


def prepare(folder: Path, n_docs: int, seed: int) -> None:
    """Build, save, update (1% added, 1,000 deleted) and save again; save the compacted twin."""
    import groundwire

    if (folder / "compacted" / "manifest.json").exists():
        print(f"snapshots kept in {folder}", file=sys.stderr)
        return
    rng = np.random.default_rng(seed)
    words = make_vocabulary(rng, 200_000)
    cdf = zipf_cdf(len(words), 1.1)
    docs = make_corpus(n_docs, words, cdf, rng)
    start = time.perf_counter()
    kb = groundwire.KnowledgeBase.from_documents(docs)
    print(f"built {n_docs:,} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    kb.save(folder / "delta")
    extra = make_corpus(max(n_docs // 100, 1), words, cdf, rng)
    for n, doc in enumerate(extra):
        doc["id"] = f"n{n:07d}"
    gone = [docs[i]["id"] for i in range(0, n_docs, max(n_docs // 1000, 1))][:1000]
    updated = groundwire.KnowledgeBase.load(folder / "delta").update(extra, gone)
    updated.save(folder / "delta")
    print(f"delta share {updated.delta_share:.4f}", file=sys.stderr)
    updated.compacted().save(folder / "compacted")


def queries(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed + 7)
    words = make_vocabulary(np.random.default_rng(seed), 200_000)
    return make_queries(rng, words, zipf_cdf(len(words), 1.1, skip=100), n)


def _compacted(kb: Any) -> bool:
    state = getattr(kb._lexical, "_state", None)
    return state is not None and "compacted" in state


def measure_first(folder: Path, seed: int) -> dict[str, Any]:
    """The first and second turns after ``from_snapshot`` of the delta snapshot and of
    its compacted twin (each in this fresh process), then the delta's first turn with
    the default timeout."""
    from groundwire import GroundingConfig, GroundingEngine

    query = queries(1, seed)[0]
    out: dict[str, Any] = {"query": query, "load_avg": os.getloadavg()}
    for name in ("delta", "compacted"):
        start, cpu = time.perf_counter(), time.process_time()
        config = GroundingConfig(timeout_ms=600_000)
        engine = GroundingEngine.from_snapshot(folder / name, config)
        row: dict[str, Any] = {"load_s": time.perf_counter() - start}
        row["load_cpu_s"] = time.process_time() - cpu
        kb = engine.knowledge_base
        row["delta_share"] = kb.delta_share
        start, cpu = time.perf_counter(), time.process_time()
        outcome = engine.ground(query)
        row["first_s"], row["first_cpu_s"] = time.perf_counter() - start, time.process_time() - cpu
        row["first_reason"] = outcome.metadata.failure_reason
        row["first_selected"] = len(outcome.metadata.selected_ids)
        row["compacted_after_first"] = _compacted(kb)
        start, cpu = time.perf_counter(), time.process_time()
        engine.ground(queries(2, seed)[1])
        row["second_s"] = time.perf_counter() - start
        row["second_cpu_s"] = time.process_time() - cpu
        engine.close()
        out[name] = row
    default = GroundingEngine.from_snapshot(folder / "delta")
    start, cpu = time.perf_counter(), time.process_time()
    outcome = default.ground(query)
    out["default_first_s"] = time.perf_counter() - start
    out["default_first_cpu_s"] = time.process_time() - cpu
    out["default_first_reason"] = outcome.metadata.failure_reason
    default.close()
    # A server's reload: the compacted snapshot serves (warm), the delta one replaces it.
    # The reload warms the new snapshot before the swap, so its first turn pays nothing.
    with GroundingEngine.from_snapshot(folder / "compacted") as engine:
        engine.warm()
        start, cpu = time.perf_counter(), time.process_time()
        engine.reload(folder / "delta")
        out["reload_s"] = time.perf_counter() - start
        out["reload_cpu_s"] = time.process_time() - cpu
        start, cpu = time.perf_counter(), time.process_time()
        outcome = engine.ground(query)
        out["after_reload_first_s"] = time.perf_counter() - start
        out["after_reload_first_cpu_s"] = time.process_time() - cpu
        out["after_reload_first_reason"] = outcome.metadata.failure_reason
        out["after_reload_first_selected"] = len(outcome.metadata.selected_ids)
    return out


def measure_turns(folder: Path, seed: int, n: int, rounds: int) -> dict[str, Any]:
    from groundwire import GroundingConfig, GroundingEngine

    texts = queries(n, seed)
    engines = {
        name: GroundingEngine.from_snapshot(folder / name, GroundingConfig(timeout_ms=600_000))
        for name in ("delta", "compacted")
    }
    blocks: dict[str, list[Any]] = {}
    for name, engine in engines.items():  # warm: the rows and noise level once
        found = [engine.ground(q) for q in texts]
        blocks[name] = [(o.metadata.selected_ids, o.block) for o in found]
    wall: dict[str, list[float]] = {name: [] for name in engines}
    cpu: dict[str, list[float]] = {name: [] for name in engines}
    for r in range(rounds):
        order = list(engines) if r % 2 == 0 else list(engines)[::-1]
        for name in order:
            engine = engines[name]
            for q in texts:
                start, used = time.perf_counter(), time.process_time()
                engine.ground(q)
                wall[name].append((time.perf_counter() - start) * 1e3)
                cpu[name].append((time.process_time() - used) * 1e3)
    out: dict[str, Any] = {"load_avg": os.getloadavg()}
    out["same_blocks"] = blocks["delta"] == blocks["compacted"]
    out["selected_turns"] = sum(1 for ids, _ in blocks["delta"] if ids)
    out["compacted_during_turns"] = _compacted(engines["delta"].knowledge_base)
    for name in engines:
        values = sorted(wall[name])
        out[name] = {
            "p50_ms": statistics.median(values),
            "p90_ms": values[int(0.9 * (len(values) - 1))],
            "cpu_p50_ms": statistics.median(cpu[name]),
        }
        engines[name].close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=200_000, help="documents to generate")
    parser.add_argument("--seed", type=int, default=20240601, help="random seed")
    parser.add_argument("--queries", type=int, default=200, help="turns per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--folder", type=Path, default=None, help="keep the snapshots here")
    parser.add_argument("--measure", choices=("first", "turns"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # one measurement in this (fresh) process; JSON on stdout
        if args.measure == "first":
            result = measure_first(args.folder, args.seed)
        else:
            result = measure_turns(args.folder, args.seed, args.queries, args.rounds)
        print(json.dumps(result))
        return
    print(versions(["groundwire"]))
    print(source_state(REPO))
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        prepare(folder, args.docs, args.seed)
        for what in ("first", "turns"):
            command = [sys.executable, __file__, "--measure", what, "--folder", str(folder)]
            command += ["--seed", str(args.seed), "--queries", str(args.queries)]
            command += ["--rounds", str(args.rounds)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            print(f"{what}: {done.stdout.strip()}")


if __name__ == "__main__":
    main()
