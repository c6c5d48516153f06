"""``groundwire memory worker`` as a real process against the loopback model server: it runs
jobs as they come, stops cleanly on SIGTERM (a running call handed back), and a worker
killed with SIGKILL mid-job leaves the job to be retried after its lease — applied once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from memory_helpers import ACME

from groundwire import MemoryPipeline, MemoryStore, OpenAIProvider, RetryPolicy

pytestmark = pytest.mark.integration

SAFETY_S = 120.0  # a bound on waiting for the child; never reached when the test passes
FACTS = json.dumps(
    {
        "facts": [
            {
                "content": "Alice works at Acme as a data engineer.",
                "entities": [{"name": "Alice"}, {"name": "Acme"}],
            }
        ]
    }
)
TURNS = [("user", "I'm Alice and I work at Acme as a data engineer.")]


def start_worker(path: Path, fake: Any, *extra: str) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-c",
        "from groundwire.cli import main; main()",
        "memory",
        "worker",
        str(path),
        "--provider",
        "openai",
        "--model",
        "gpt-test",
        "--base-url",
        fake.openai.base_url,
        "--poll",
        "1",
        "--json",
        *extra,
    ]
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SAFETY_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with MemoryStore(path) as store, store._read() as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def test_a_worker_killed_mid_job_leaves_it_to_be_retried_and_applied_once(
    tmp_path: Path, fake: Any
) -> None:
    path = tmp_path / "agent.db"
    with MemoryStore(path) as store:
        MemoryPipeline(store).remember_turns(ACME, TURNS)
    gate = threading.Event()
    fake.openai.enqueue_text(FACTS, wait=gate)  # the first attempt hangs in the model call
    worker = start_worker(path, fake, "--lease", "200")
    try:
        wait_for(lambda: fake.openai.request_count == 1, "the worker's extraction call")
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(SAFETY_S) == -signal.SIGKILL
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate(timeout=SAFETY_S)
    gate.set()
    assert query(path, "SELECT state, attempts FROM memory_jobs") == [("leased", 1)]
    assert query(path, "SELECT outcome FROM model_calls") == [(None,)]  # died during the call
    assert query(path, "SELECT COUNT(*) FROM memories") == [(1,)]  # nothing half applied
    fake.openai.enqueue_text(FACTS)
    later = MemoryStore(path, clock=lambda: time.time() + 201.0)  # the lease has run out
    provider = OpenAIProvider(
        "gpt-test", api_key="k", base_url=fake.openai.base_url, retry=RetryPolicy(attempts=1)
    )
    with later, MemoryPipeline(later, provider) as pipeline:
        [outcome] = pipeline.run_pending()
        assert (outcome.state, outcome.result) == (
            "done",
            {"facts": 1, "flagged": 0, "applied": 1, "add": 1},
        )
        assert pipeline.run_pending() == []
        best = later.recall(ACME, "where does alice work").memories[0]
        assert best.memory.content == "Alice works at Acme as a data engineer."
    assert query(path, "SELECT state, attempts FROM memory_jobs") == [("done", 2)]
    assert query(path, "SELECT COUNT(*) FROM memories") == [(2,)]
    assert query(path, "SELECT COUNT(*) FROM memory_proposals") == [(1,)]
    assert query(path, "SELECT operation FROM memory_audit") == [("add",)]
    assert query(path, "SELECT COUNT(*), SUM(mentions) FROM entities") == [(2, 2)]


def test_the_worker_runs_jobs_as_they_come_and_stops_cleanly_on_sigterm(
    tmp_path: Path, fake: Any
) -> None:
    path = tmp_path / "agent.db"
    MemoryStore(path).close()
    worker = start_worker(path, fake)
    try:
        assert worker.stderr is not None
        assert worker.stdout is not None
        assert worker.stderr.readline().startswith("worker ")  # it is up and polling
        with MemoryStore(path) as store:
            MemoryPipeline(store).end_session(ACME, "s1")  # feedback and score jobs
        first = json.loads(worker.stdout.readline())
        second = json.loads(worker.stdout.readline())
        assert (first["kind"], first["state"]) == ("session_feedback", "done")
        assert (second["kind"], second["state"]) == ("continuity_score", "done")
        gate = threading.Event()
        fake.openai.enqueue_text(FACTS, wait=gate)  # a call that will not end by itself
        with MemoryStore(path) as store:
            MemoryPipeline(store).remember_turns(ACME, TURNS)
        wait_for(lambda: fake.openai.request_count == 1, "the extraction call")
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=SAFETY_S)
        gate.set()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=SAFETY_S)
    assert worker.returncode == 0
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "stopped after 3 job(s)"
    released = json.loads(out.strip().splitlines()[-1])
    assert (released["kind"], released["state"]) == ("extract", "released")
    assert query(path, "SELECT kind, state, attempts FROM memory_jobs ORDER BY id") == [
        ("session_feedback", "done", 1),
        ("continuity_score", "done", 1),
        ("extract", "pending", 0),
    ]
    assert query(path, "SELECT outcome FROM model_calls") == [("abandoned",)]
