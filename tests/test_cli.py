"""The ``groundwire`` command line: output shapes, flags, exit codes, clean errors, docs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import groundwire
from groundwire.cli import app

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = str(ROOT / "examples" / "handbook")
DOCS = ROOT / "docs" / "CLI.md"
ROTATION = "security.api-key-rotation"
ROTATION_TAG = "[KB:security.api-key-rotation@2026-11-15]"
SLACK_ONLY = "troubleshooting.slack-bot-not-posting"  # integrations: [slack]
SLACK_QUERY = "slack bot not posting"

GROUND_KEYS = {"block", "metadata"}
BLOCK_KEYS = {"kind", "trusted", "content", "citations", "metadata"}
METADATA_KEYS = {
    "selected_ids",
    "expanded_ids",
    "candidate_count",
    "context_tokens",
    "truncated",
    "duration_ms",
    "confidence",
    "failure_reason",
}
STATUS_KEYS = {"enabled", "ready", "entry_count", "last_error", "validation_issues"}
ISSUE_KEYS = {"severity", "code", "message", "source_id", "entry_id", "field", "origin"}
BREAKDOWN_KEYS = {"title", "aliases", "keywords", "summary", "body", "exact", "alias"}
COMMANDS = sorted(get_command(app).commands)  # type: ignore[attr-defined]

runner = CliRunner()


def run(*args: str) -> Any:
    """Invoke the CLI in-process; never a traceback, never an escaped exception."""
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def run_json(*args: str, code: int = 0) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def one_error_line(result: Any) -> str:
    """The single ``error:`` line a failing command writes to stderr."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def write_kb(root: Path, entries: dict[str, str], manifest: str = 'id: t\nversion: "1"\n') -> str:
    """A Markdown knowledge base folder: source.yaml plus one file per entry."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "source.yaml").write_text(manifest, encoding="utf-8")
    for name, text in entries.items():
        (root / name).write_text(text, encoding="utf-8")
    return str(root)


def entry(entry_id: str, extra: str = "", body: str = "Body text.") -> str:
    return (
        f"---\nid: {entry_id}\ntitle: {entry_id} title\nsummary: Summary of {entry_id}.\n"
        f"domain: {entry_id.split('.')[0]}\n{extra}---\n{body}\n"
    )


@pytest.fixture
def broken_kb(tmp_path: Path) -> str:
    """Two entries with blocking errors (missing integrations, unsupported kind)."""
    return write_kb(
        tmp_path / "broken",
        {
            "a.md": entry("a.one"),  # no integrations → integrations-missing
            "b.md": entry("a.two", "integrations: []\nkind: weird\n"),
        },
    )


@pytest.fixture
def warning_kb(tmp_path: Path) -> str:
    """One valid entry with two warnings (unknown key, missing related id)."""
    return write_kb(
        tmp_path / "warn",
        {"a.md": entry("a.one", "integrations: []\nrelated: [a.nope]\ncolour: red\n")},
    )


# -- ground ---------------------------------------------------------------------------------
def test_ground_json_has_exactly_the_documented_fields() -> None:
    data = run_json("ground", HANDBOOK, "how do I rotate an API key")
    assert set(data) == GROUND_KEYS
    assert set(data["block"]) == BLOCK_KEYS
    assert set(data["metadata"]) == METADATA_KEYS
    block, meta = data["block"], data["metadata"]
    assert block["kind"] == "knowledge"
    assert block["trusted"] is True
    assert block["citations"][0] == ROTATION_TAG
    assert ROTATION_TAG in block["content"]
    assert block["metadata"] == {"confidence": "high"}
    assert meta["selected_ids"][0] == ROTATION
    assert meta["confidence"] == "high"
    assert meta["failure_reason"] is None
    assert 0 < meta["context_tokens"] <= 4000


def test_ground_readable_shows_block_citations_and_metadata() -> None:
    result = run("ground", HANDBOOK, "how do I rotate an API key")
    assert result.exit_code == 0
    out = result.stdout
    for heading in ("Knowledge block", "Citations", "Metadata"):
        assert heading in out
    assert ROTATION_TAG in out
    assert "<knowledge_context>" in out
    assert "Settings → Developer → API keys" in out
    assert re.search(r"selected\s+security\.api-key-rotation", out)
    assert re.search(r"confidence\s+high", out)
    assert re.search(r"failure reason\s+-", out)


def test_ground_includes_integration_entries_only_with_their_integration() -> None:
    without = run_json("ground", HANDBOOK, SLACK_QUERY)["metadata"]
    assert SLACK_ONLY not in without["selected_ids"] + without["expanded_ids"]
    for name in ("slack", "SLACK"):  # integration names are case-insensitive
        with_slack = run_json("ground", HANDBOOK, SLACK_QUERY, "--integration", name)
        assert with_slack["metadata"]["selected_ids"][0] == SLACK_ONLY
    other = run_json("ground", HANDBOOK, SLACK_QUERY, "--integration", "jira")["metadata"]
    assert SLACK_ONLY not in other["selected_ids"]


def test_ground_blocked_domain_removes_the_domain() -> None:
    meta = run_json(
        "ground", HANDBOOK, "how do I rotate an API key", "--blocked-domain", "Security"
    )["metadata"]
    ids = meta["selected_ids"] + meta["expanded_ids"]
    assert ids
    assert not [i for i in ids if i.startswith("security.")]


def test_ground_turns_are_folded_into_the_query() -> None:
    args = ("ground", HANDBOOK, "how do I fix it", "--integration", "slack")
    assert SLACK_ONLY not in run_json(*args)["metadata"]["selected_ids"]
    turned = run_json(
        *args, "--turn", "user:the slack bot is not posting", "--turn", "ASSISTANT:ok"
    )
    assert turned["metadata"]["selected_ids"][0] == SLACK_ONLY


@pytest.mark.parametrize("value", ["bob:hi", "user", "user:", "  :text", "system:be nice"])
def test_ground_rejects_a_bad_turn_with_one_usage_error(value: str) -> None:
    result = run("ground", HANDBOOK, "api key", "--turn", value)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "--turn" in line
    assert "user or assistant" in line
    assert result.stdout == ""


def test_ground_small_budget_truncates_and_tiny_budget_is_exhausted() -> None:
    small = run_json("ground", HANDBOOK, "how do I rotate an API key", "--max-tokens", "200")
    assert small["block"] is not None
    assert small["metadata"]["truncated"] is True
    assert 0 < small["metadata"]["context_tokens"] <= 200
    assert small["block"]["citations"] == [ROTATION_TAG]

    tiny = run_json("ground", HANDBOOK, "how do I rotate an API key", "--max-tokens", "10")
    assert tiny["block"] is None
    assert tiny["metadata"]["failure_reason"] == "budget-exhausted"
    assert tiny["metadata"]["selected_ids"][0] == ROTATION

    readable = run("ground", HANDBOOK, "how do I rotate an API key", "--max-tokens", "10")
    assert readable.exit_code == 0
    assert "No knowledge block (budget-exhausted)" in readable.stdout


def test_ground_no_match_is_reported_not_failed() -> None:
    data = run_json("ground", HANDBOOK, "zzzqqq xyzzy")
    assert data["block"] is None
    assert data["metadata"]["failure_reason"] == "no-match"


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_ground_rejects_a_bad_max_tokens(value: str) -> None:
    result = run("ground", HANDBOOK, "api key", "--max-tokens", value)
    assert result.exit_code == 2
    assert "--max-tokens" in one_error_line(result)


def test_ground_over_long_query_is_a_usage_error() -> None:
    result = run("ground", HANDBOOK, "a" * 9_000)
    assert result.exit_code == 2
    assert "9,000 characters" in one_error_line(result)


def test_ground_on_an_invalid_kb_reports_index_not_ready(broken_kb: str) -> None:
    result = run("ground", broken_kb, "one", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["block"] is None
    assert data["metadata"]["failure_reason"] == "index-not-ready"
    line = one_error_line(result)
    assert "integrations-missing" in line
    assert "a.md" in line
    assert "groundwire validate" in line


# -- search ---------------------------------------------------------------------------------
def test_search_json_is_a_list_of_hits_with_breakdowns() -> None:
    hits = run_json("search", HANDBOOK, "how do I rotate an API key", "--limit", "3")
    assert len(hits) == 3
    for hit in hits:
        assert set(hit) == {"id", "score", "breakdown"}
        assert set(hit["breakdown"]) == BREAKDOWN_KEYS
    assert hits[0]["id"] == ROTATION
    assert hits[0]["breakdown"]["exact"] > 0
    scores = [hit["score"] for hit in hits]
    assert scores == sorted(scores, reverse=True)


def test_search_readable_table_shows_rank_id_score_title_and_fields() -> None:
    result = run("search", HANDBOOK, "how do I rotate an API key", "-n", "2")
    assert result.exit_code == 0
    out = result.stdout
    for header in ("#", "id / title", "score", "top fields"):
        assert header in out
    assert re.search(r"1\s+security\.api-key-rotation\s+\d+\.\d\d\s+exact 100\.0", out)
    assert "Rotate an API key" in out
    assert "security.api-key-scopes" not in out  # third hit, cut by --limit 2


def test_search_without_integration_does_not_filter_by_integration() -> None:
    ids = [hit["id"] for hit in run_json("search", HANDBOOK, SLACK_QUERY)]
    assert ids[0] == SLACK_ONLY
    jira = [hit["id"] for hit in run_json("search", HANDBOOK, SLACK_QUERY, "--integration", "jira")]
    assert SLACK_ONLY not in jira
    slack = run_json("search", HANDBOOK, SLACK_QUERY, "--integration", "slack")
    assert slack[0]["id"] == SLACK_ONLY


def test_search_blocked_domain_removes_the_domain() -> None:
    ids = [
        hit["id"] for hit in run_json("search", HANDBOOK, "api key", "--blocked-domain", "security")
    ]
    assert ids
    assert not [i for i in ids if i.startswith("security.")]


def test_search_reads_a_json_source_file(tmp_path: Path) -> None:
    source = {
        "id": "faq",
        "version": "v2",
        "entries": [
            {
                "id": "billing.refunds",
                "title": "Refunds",
                "summary": "Refunds take five days.",
                "domain": "billing",
                "integrations": [],
            }
        ],
    }
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(source), encoding="utf-8")
    assert [hit["id"] for hit in run_json("search", str(path), "refunds")] == ["billing.refunds"]


def test_search_on_an_invalid_kb_exits_1_with_the_first_error(broken_kb: str) -> None:
    result = run("search", broken_kb, "one")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "2 error(s)" in line
    assert "integrations-missing" in line
    assert "groundwire validate" in line
    assert result.stdout == ""


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


# -- errors common to every command ----------------------------------------------------------
def _args(command: str, kb: str) -> list[str]:
    return [command, kb, "api key"] if command in ("ground", "search") else [command, kb]


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_kb_is_one_clean_error_line(command: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-kb")
    result = run(*_args(command, missing))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert missing in line
    assert "no such file or folder" in line
    assert result.stdout == ""


@pytest.mark.parametrize("command", COMMANDS)
def test_malformed_front_matter_names_the_file(command: str, tmp_path: Path) -> None:
    kb = write_kb(tmp_path / "kb", {"broken.md": "---\nid: x.y\ntitle: [unclosed\n---\nbody\n"})
    result = run(*_args(command, kb))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "broken.md" in line
    assert "invalid YAML" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ground", HANDBOOK, "q", "--bogus"], "No such option: --bogus"),
        (["ground", HANDBOOK], "Missing argument 'QUERY'"),
        (["search", HANDBOOK, "q", "--limit", "0"], "--limit"),
        (["nosuch"], "No such command 'nosuch'"),
        (["ground", HANDBOOK, "q", "--blocked-domain", ""], "blocked_domains"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert message in one_error_line(result)
    assert result.stdout == ""


def test_version_and_help() -> None:
    version = run("--version")
    assert version.exit_code == 0
    assert version.stdout.strip() == f"groundwire {groundwire.__version__}"
    listing = run("--help")
    assert listing.exit_code == 0
    for command in COMMANDS:
        assert command in listing.stdout
    bare = run()
    assert bare.exit_code == 0
    assert "Usage" in bare.stdout


def test_ground_help_explains_the_integration_rule() -> None:
    result = run("ground", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "only included when you pass --integration NAME" in text
    search_help = " ".join(run("search", "--help").stdout.replace("│", " ").split())
    assert "does not filter by integration" in search_help


# -- the installed console script -------------------------------------------------------------
def _script() -> str:
    bindir = Path(sys.executable).parent
    found = shutil.which("groundwire", path=str(bindir))
    if found is None:
        pytest.skip(f"the groundwire console script is not installed in {bindir}")
    return found


def _script_run(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [_script(), *args], capture_output=True, text=True, encoding="utf-8", timeout=120
    )
    assert "Traceback" not in result.stdout + result.stderr
    return result


@pytest.mark.integration
def test_script_grounds_the_handbook() -> None:
    result = _script_run("ground", HANDBOOK, "how do I rotate an API key", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["metadata"]["selected_ids"][0] == ROTATION
    assert ROTATION_TAG in data["block"]["citations"]
    assert result.stderr == ""


@pytest.mark.integration
def test_script_validate_and_usage_errors(broken_kb: str) -> None:
    invalid = _script_run("validate", broken_kb)
    assert invalid.returncode == 1
    assert "failed: 0 valid entries, 2 errors, 0 warnings" in invalid.stdout
    bad_flag = _script_run("search", HANDBOOK, "q", "--nope")
    assert bad_flag.returncode == 2
    assert bad_flag.stderr.splitlines() == ["error: No such option: --nope"]
    assert _script_run("--version").stdout.strip() == f"groundwire {groundwire.__version__}"


# -- documentation (every command documented, every --help works) ------------------------------
def test_every_command_is_documented_with_its_options() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    sections = re.split(r"^## ", docs, flags=re.MULTILINE)
    for name in COMMANDS:
        matching = [s for s in sections if s.startswith(f"`groundwire {name}")]
        assert matching, f"docs/CLI.md has no '## `groundwire {name}`' section"
        command = get_command(app).commands[name]  # type: ignore[attr-defined]
        for param in command.params:
            for option in param.opts:
                if option.startswith("--") and option != "--help":
                    assert option in matching[0], f"{option} of {name} is not documented"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0
    assert f"groundwire {command}" in result.stdout
