"""``status`` and ``validate``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import (
    HANDBOOK,
    ISSUE_KEYS,
    STATUS_KEYS,
    entry,
    run,
    run_json,
    write_kb,
)

import groundwire


# -- status ---------------------------------------------------------------------------------
def test_status_json_has_exactly_the_status_fields() -> None:
    data = run_json("status", HANDBOOK)
    assert set(data) == STATUS_KEYS
    assert data == {
        "enabled": True,
        "ready": True,
        "entry_count": 80,
        "last_error": None,
        "validation_issues": [],
    }


def test_status_readable() -> None:
    result = run("status", HANDBOOK)
    assert result.exit_code == 0
    assert re.search(r"ready\s+yes", result.stdout)
    assert re.search(r"entries\s+80", result.stdout)
    assert "0 errors, 0 warnings" in result.stdout


def test_status_of_an_invalid_kb_is_not_ready_and_lists_issues(broken_kb: str) -> None:
    data = run_json("status", broken_kb, code=1)
    assert data["ready"] is False
    assert data["entry_count"] == 0
    assert "validation failed" in data["last_error"]
    issues = data["validation_issues"]
    assert {issue["code"] for issue in issues} == {"integrations-missing", "kind-unsupported"}
    for issue in issues:
        assert set(issue) == ISSUE_KEYS
        assert issue["severity"] == "error"
        assert issue["source_id"] == "t"
        assert issue["origin"].endswith(".md")

    readable = run("status", broken_kb)
    assert readable.exit_code == 1
    assert re.search(r"ready\s+no", readable.stdout)
    assert "error [kind-unsupported]" in readable.stdout


def test_status_turns_library_log_records_into_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(groundwire.KnowledgeBase, "__init__", boom)
    kb = write_kb(tmp_path / "kb", {"a.md": entry("logged.entry", "integrations: []\n")})
    result = run("status", kb, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["last_error"] == "RuntimeError: boom"
    assert result.stderr.splitlines() == [
        "error: knowledge index build failed (RuntimeError: boom)"
    ]


# -- validate -------------------------------------------------------------------------------
def test_validate_handbook_is_clean() -> None:
    result = run("validate", HANDBOOK)
    assert result.exit_code == 0
    assert result.stdout.strip() == "ok: 80 valid entries, 0 errors, 0 warnings"
    assert run_json("validate", HANDBOOK) == {"ok": True, "entries": 80, "issues": []}


def test_validate_errors_exit_1_with_one_line_per_issue(broken_kb: str) -> None:
    result = run("validate", broken_kb)
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("error [integrations-missing]")
    for part in ("a.md", "source 't'", "entry 'a.one'", "field 'integrations'"):
        assert part in lines[0]
    assert "entry 'a.two'" in lines[1]
    assert "field 'kind'" in lines[1]
    assert lines[2] == "failed: 0 valid entries, 2 errors, 0 warnings"

    data = run_json("validate", broken_kb, code=1)
    assert set(data) == {"ok", "entries", "issues"}
    assert data["ok"] is False
    assert data["entries"] == 0
    assert [set(issue) for issue in data["issues"]] == [ISSUE_KEYS, ISSUE_KEYS]


def test_validate_warnings_alone_exit_0(warning_kb: str) -> None:
    result = run("validate", warning_kb)
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert [line.split(" ", 2)[:2] for line in lines[:2]] == [
        ["warning", "[field-unknown]"],
        ["warning", "[related-missing]"],
    ]
    assert lines[-1] == "ok: 1 valid entry, 0 errors, 2 warnings"
    data = run_json("validate", warning_kb)
    assert data["ok"] is True
    assert data["entries"] == 1
    assert {issue["severity"] for issue in data["issues"]} == {"warning"}
