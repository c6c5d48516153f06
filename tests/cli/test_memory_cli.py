"""``groundwire memory``: add, recall, forget, show, graph, stats; JSON shapes; clean errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from groundwire.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "CLI.md"
SUBCOMMANDS = ("add", "recall", "forget", "show", "graph", "stats", "optimize", "worker", "review")
runner = CliRunner()


def run(*args: str) -> Any:
    result = runner.invoke(app, ["memory", *args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def error_line(result: Any) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = str(tmp_path / "agent.db")
    run_json(
        "add",
        path,
        "Alice works at Acme as a data engineer.",
        "--entity",
        "Alice|person",
        "--relation",
        "Alice|works_at|Acme",
        "--attribute",
        "Alice|employer|Acme|current",
        "--source",
        "turn-1",
    )
    run_json(
        "add",
        path,
        "Alice moved to Globex in May 2024.",
        "--attribute",
        "Alice|employer|Globex|current",
        "--hint",
        "where does alice work",
        "--pin",
    )
    return path


def run_add(store: str, *args: str) -> Any:
    return run_json("add", store, *args)


def test_add_and_recall_with_explain(tmp_path: Path) -> None:
    path = str(tmp_path / "a.db")
    added = run_add(
        path,
        "Alice works at Acme.",
        "--type",
        "fact",
        "--importance",
        "0.8",
        "--source",
        "t1",
        "--created",
        "2024-01-02",
    )
    assert set(added) == {
        "id",
        "content",
        "type",
        "importance",
        "pinned",
        "created_at",
        "updated_at",
        "accessed_at",
        "access_count",
        "sources",
        "metadata",
        "acl",
    }
    assert added["sources"] == ["t1"]
    assert added["importance"] == 0.8
    assert added["created_at"] == 1704153600.0
    found = run_json("recall", path, "alice acme")
    assert set(found) == {
        "query",
        "memories",
        "timed_out",
        "freshness",
        "graph_error",
        "session_id",
        "tracked",
        "duration_ms",
    }
    (item,) = found["memories"]
    assert item["id"] == added["id"]
    assert set(item["explain"]) == {"score", "rank", "channels", "stages", "note"}
    readable = run("recall", path, "alice acme", "--explain")
    assert readable.exit_code == 0
    assert "content" in readable.stdout


def test_currentness_show_graph_and_stats(store: str) -> None:
    found = run_json("recall", store, "alice employer acme globex")
    stale = next(m for m in found["memories"] if "Acme" in m["content"])
    assert "Globex" in stale["explain"]["note"]
    details = run_json("show", store, stale["id"])
    assert [a["status"] for a in details["attributes"]] == ["superseded"]
    assert {e["name"] for e in details["entities"]} == {"Alice", "Acme"}
    graph = run_json("graph", store)
    alice = next(e for e in graph["entities"] if e["name"] == "Alice")
    assert alice["relations"] == [
        {"direction": "out", "type": "works_at", "entity": "Acme", "mentions": 1, "confidence": 1.0}
    ]
    assert run_json("graph", store, "alice")["entities"][0]["name"] == "Alice"
    stats = run_json("stats", store)
    assert (stats["memories"], stats["pinned"], stats["hints"], stats["attributes"]) == (2, 1, 1, 2)
    assert run("stats", store).exit_code == 0
    assert run("graph", store).exit_code == 0
    assert run("show", store, stale["id"]).exit_code == 0


def test_forget_and_scopes(store: str) -> None:
    memory = run_json("recall", store, "data engineer")["memories"][0]
    assert run_json("recall", store, "data engineer", "--tenant", "other")["memories"] == []
    missing = run("forget", store, memory["id"], "--agent", "someone-else")
    assert missing.exit_code == 1
    assert "no memory" in error_line(missing)
    assert run_json("forget", store, memory["id"]) == {"id": memory["id"], "forgotten": True}
    assert all(
        m["id"] != memory["id"] for m in run_json("recall", store, "data engineer")["memories"]
    )
    gone = run("show", store, memory["id"])
    assert gone.exit_code == 1


def test_acl_labels_and_who_asks(tmp_path: Path) -> None:
    path = str(tmp_path / "a.db")
    run_add(path, "Alice's review is in June.", "--acl", "user:alice")
    assert run_json("recall", path, "review june")["memories"] == []
    assert len(run_json("recall", path, "review june", "--user", "alice")["memories"]) == 1


def test_sessions_are_recorded(store: str) -> None:
    found = run_json("recall", store, "where does alice work", "--session", "s1")
    assert found["session_id"] == "s1"
    assert found["tracked"] is True


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["recall", "{missing}", "x"], 1, "no such file or folder"),
        (["add", "{store}", "x", "--type", "rumour"], 2, "type='rumour'"),
        (["add", "{store}", "x", "--relation", "only|two"], 2, "--relation"),
        (["add", "{store}", "x", "--acl", "alice"], 2, "ACL labels"),
        (["add", "{store}", "x", "--created", "next tuesday"], 2, "--created"),
        (["recall", "{store}", "x", "--limit", "0"], 2, "limit"),
        (["recall", "{store}", "x", "--since", "soon"], 2, "--since"),
        (["graph", "{store}", "nobody"], 1, "no entity"),
        (["graph", "{store}", "--limit", "0"], 2, "--limit"),
        (["optimize", "{missing}"], 1, "no such file or folder"),
    ],
)
def test_errors_are_one_line(
    store: str, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    filled = [a.format(store=store, missing=str(tmp_path / "missing.db")) for a in args]
    result = run(*filled)
    assert result.exit_code == code
    assert message in error_line(result)
    assert result.stdout == ""


def test_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 64)
    result = run("stats", str(junk))
    assert result.exit_code == 1
    assert "not a usable memory store" in error_line(result)


def test_optimize_merges_the_text_indexes_and_keeps_recall(store: str, tmp_path: Path) -> None:
    before = run_json("recall", store, "Alice employer")
    merged = run_json("optimize", store)
    assert set(merged) == {"before", "after"}
    assert set(merged["after"]) == {"memories_fts", "memory_hints_fts"}
    assert merged["after"]["memories_fts"] == 1
    assert all(count <= 1 for count in merged["after"].values())
    again = run_json("optimize", store)
    assert again["before"] == again["after"] == merged["after"]
    after = run_json("recall", store, "Alice employer")
    strip = [(m["id"], m["explain"]["score"]) for m in before["memories"]]
    assert [(m["id"], m["explain"]["score"]) for m in after["memories"]] == strip
    text = run("optimize", store)
    assert text.exit_code == 0
    assert "memories_fts: 1 -> 1 segments" in text.stdout
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 64)
    result = run("optimize", str(junk))
    assert result.exit_code == 1
    assert "not a usable memory store" in error_line(result)


def test_every_subcommand_has_help_and_is_documented() -> None:
    group = get_command(app).commands["memory"]  # type: ignore[attr-defined]
    assert sorted(group.commands) == sorted(SUBCOMMANDS)
    docs = DOCS.read_text(encoding="utf-8")
    section = re.split(r"^## ", docs, flags=re.MULTILINE)
    memory_docs = next(s for s in section if s.startswith("`groundwire memory`"))
    for name in SUBCOMMANDS:
        result = run(name, "--help")
        assert result.exit_code == 0
        assert f"groundwire memory {name}" in result.stdout
        assert f"groundwire memory {name}" in memory_docs
        for param in group.commands[name].params:
            for option in param.opts:
                if option.startswith("--") and option != "--help":
                    assert option in memory_docs, f"{option} of memory {name} is not documented"


# -- the write pipeline: worker, review, stats ---------------------------------------------------
def test_worker_once_runs_the_jobs_that_need_no_model(store: str) -> None:
    run("recall", store, "data engineer", "--session", "chat-9")
    from groundwire import MemoryPipeline, MemoryScope, MemoryStore

    with MemoryStore(store) as opened:
        MemoryPipeline(opened).end_session(MemoryScope("default", "default"), "chat-9")
    result = run("worker", store, "--provider", "none", "--once")
    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    assert line.startswith("job 1 session_feedback: done {")
    stats = run_json("stats", store)
    assert stats["jobs"] == {"done": 1, "pending": 1}  # the score waits for a model
    assert stats["pipeline"]["feedback"]["aspects_updated"] == 1
    assert stats["pipeline"]["model_calls"] == {}
    readable = run("stats", store)
    assert "feedback" in readable.stdout
    assert "aspects_updated 1" in readable.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--poll", "0.5"], "expected 1 to 60 seconds"),
        (["--update-policy", "yolo"], "update_policy='yolo' is invalid"),
        (["--lease", "10"], "lease_s=10.0 is invalid"),
        (["--provider", "nope"], "'nope' is not a provider"),
    ],
)
def test_worker_usage_errors(store: str, args: list[str], message: str) -> None:
    result = run("worker", store, "--provider", "none", *args)
    assert result.exit_code == 2
    assert message in error_line(result)


def test_review_lists_and_decides_staged_proposals(store: str) -> None:
    from groundwire import (
        CallableProvider,
        MemoryPipeline,
        MemoryPipelineConfig,
        MemoryScope,
        MemoryStore,
    )

    scope = MemoryScope("default", "default")
    fact = json.dumps({"facts": [{"content": "Alice works at Initech as a data engineer."}]})
    decision = json.dumps({"decisions": [{"fact": 1, "operation": "update", "target": "M1"}]})
    answers = iter([fact, decision])
    with MemoryStore(store) as opened:
        config = MemoryPipelineConfig(update_policy="shadow", semantic_contradiction=False)
        pipeline = MemoryPipeline(opened, CallableProvider(lambda r: next(answers)), config=config)
        pipeline.remember_turns(scope, [("user", "I work at Initech now")])
        assert pipeline.run_pending()[0].state == "done"
    listed = run_json("review", store)["proposals"]
    assert [(p["operation"], p["status"]) for p in listed] == [("update", "shadow")]
    assert "Initech" in run("review", store).stdout
    decided = run_json("review", store, str(listed[0]["id"]), "--approve", "--actor", "ops")
    assert decided["status"] == "approved"
    assert run_json("review", store)["proposals"] == []
    assert run("review", store).stdout.strip() == "no proposal awaits review"
    again = run("review", store, str(listed[0]["id"]), "--reject")
    assert again.exit_code == 1
    assert "is 'approved'" in error_line(again)
    both = run("review", store, "1", "--approve", "--reject")
    assert both.exit_code == 2
