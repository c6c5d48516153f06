"""Several processes on one store, and a process killed with SIGKILL in the middle of writes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from memory_helpers import ACME

from groundwire.memory import MemoryStore

pytestmark = pytest.mark.integration

SAFETY_S = 120  # a bound on waiting for children; never reached when the test passes

WRITER = textwrap.dedent(
    """
    import sys
    from groundwire.memory import MemoryScope, MemoryStore
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scope = MemoryScope("acme", "support-bot")
    with MemoryStore(path) as store:
        for i in range(count):
            if i % 2:
                store.remember(scope, f"{name} single memory {i}", entities=[{"name": name}])
            else:
                store.remember_many(scope, [
                    {"content": f"{name} batch memory {i}.{j}", "entities": [{"name": name}]}
                    for j in range(3)
                ])
            store.recall(scope, f"{name} memory {i}", session_id=name)
    print("done", flush=True)
    """
)

LOOPER = textwrap.dedent(
    """
    import sys
    from groundwire.memory import MemoryScope, MemoryStore
    scope = MemoryScope("acme", "support-bot")
    with MemoryStore(sys.argv[1]) as store:
        batch = 0
        while True:
            items = [
                {"content": f"batch {batch} memory {j} " + "words " * 40,
                 "entities": [{"name": f"E{batch}"}, {"name": "Shared"}],
                 "relations": [{"source": f"E{batch}", "type": "near", "target": "Shared"}],
                 "hints": [f"question {batch} {j}"]}
                for j in range(20)
            ]
            written = store.remember_many(scope, items)
            print(" ".join(m.id for m in written), flush=True)
            batch += 1
    """
)


def check_consistent(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")
    conn.execute("INSERT INTO memory_hints_fts (memory_hints_fts) VALUES ('integrity-check')")
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    return conn


def test_processes_write_and_recall_one_store_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    MemoryStore(path).close()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"w{n}", "20"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    for child in children:
        out, err = child.communicate(timeout=SAFETY_S)
        assert child.returncode == 0, err
        assert out.strip() == "done"
    conn = check_consistent(path)
    (count,) = conn.execute("SELECT COUNT(*) FROM memories").fetchone()
    assert count == 3 * (10 * 1 + 10 * 3)
    mentions = dict(conn.execute("SELECT e.name, e.mentions FROM entities e").fetchall())
    assert mentions == {"w0": 40, "w1": 40, "w2": 40}
    conn.close()
    with MemoryStore(path) as store:
        found = store.recall(ACME, "w1 batch memory", limit=50).memories
        batch = [i for i in found if i.memory.content.startswith("w1 batch")]
        assert len(batch) == 30  # every memory one process wrote is found by another


def test_a_killed_writer_loses_nothing_committed_and_leaves_nothing_half_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "killed.db"
    MemoryStore(path).close()
    child = subprocess.Popen(
        [sys.executable, "-c", LOOPER, str(path)], stdout=subprocess.PIPE, text=True
    )
    committed: list[str] = []
    try:
        assert child.stdout is not None
        while len(committed) < 8 * 20:  # eight batches reported committed, then kill
            line = child.stdout.readline()
            assert line, "the writer stopped before it was killed"
            committed += line.split()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=SAFETY_S)
    assert child.returncode == -signal.SIGKILL
    conn = check_consistent(path)
    ids = {row[0] for row in conn.execute("SELECT id FROM memories")}
    assert set(committed) <= ids  # every reported commit survived
    assert len(ids) % 20 == 0  # batches are atomic: no partial batch
    per_memory = conn.execute(
        "SELECT m.id, (SELECT COUNT(*) FROM memory_entity_mentions mm WHERE mm.memory_id = m.id),"
        " (SELECT COUNT(*) FROM memory_hints h WHERE h.memory_id = m.id) FROM memories m"
    ).fetchall()
    assert all(mentions == 2 and hints == 1 for _, mentions, hints in per_memory)
    conn.close()
    with MemoryStore(path) as store:  # and the store opens and works
        assert store.stats()["memories"] == len(ids)
        store.remember(ACME, "after the crash")
