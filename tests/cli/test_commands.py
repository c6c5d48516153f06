"""The ``groundwire`` command line: output shapes, flags, exit codes, clean errors, docs."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import groundwire
from groundwire.cli import app

ROOT = Path(__file__).resolve().parents[2]
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
    if command in ("index", "ingest"):
        return [command, kb, "--out", kb + "-snapshot"]
    return [command, kb, "api key"] if command in ("ground", "search", "ask") else [command, kb]


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_kb_is_one_clean_error_line(command: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-kb")
    result = run(*_args(command, missing))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert missing in line
    assert "no such file or folder" in line
    assert result.stdout == ""


# ingest reads documents, not entries: a bad front matter skips that file with its reason
# (test_ingest_summary_lists_skipped_files_with_reasons).
@pytest.mark.parametrize("command", [name for name in COMMANDS if name != "ingest"])
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
    bad_flag = _script_run("search", HANDBOOK, "q", "--zzz")
    assert bad_flag.returncode == 2
    assert bad_flag.stderr.splitlines() == ["error: No such option: --zzz"]
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


# -- eval -----------------------------------------------------------------------------------
EVAL_KEYS = {
    "ndcg@10",
    "recall@100",
    "mrr@10",
    "map@100",
    "queries",
    "documents",
    "index_seconds",
    "queries_per_second",
}
EVAL_ROWS = ("nDCG@10", "recall@100", "MRR@10", "MAP@100", "queries", "documents")
RATIO_KEYS = {"ndcg@10", "recall@100", "mrr@10", "map@100", "queries_per_second"}


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.fixture
def tiny_beir(tmp_path: Path) -> str:
    """Six documents, three judged queries: two found at rank 1, one never found."""
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "solar", "title": "Solar panels", "text": "Photovoltaic cells on roofs."},
        {"_id": "wind", "title": "Wind turbines", "text": "Blades spin a generator."},
        {"_id": "hydro", "title": "Hydroelectric dams", "text": "Water drives turbines."},
        {"_id": "coal", "title": "Coal plants", "text": "Burning coal boils water."},
        {"_id": "tide", "title": "Tidal energy", "text": "The moon moves the sea."},
        {"_id": "geo", "title": "Geothermal heat", "text": "Heat from deep rock."},
    ]
    queries = [
        {"_id": "q1", "text": "photovoltaic roofs"},
        {"_id": "q2", "text": "geothermal rock"},
        {"_id": "q3", "text": "nuclear fission"},
        {"_id": "q4", "text": "unjudged"},
    ]
    (root / "corpus.jsonl").write_text(_jsonl(corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text(_jsonl(queries), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tsolar\t1\nq2\tgeo\t2\nq3\tcoal\t1\n", encoding="utf-8"
    )
    return str(root)


def test_eval_json_has_exactly_the_report_keys(tiny_beir: str) -> None:
    data = run_json("eval", tiny_beir)
    assert set(data) == EVAL_KEYS
    # q1 and q2 find their one relevant document first; q3 matches nothing (scores 0).
    # Every metric: (1 + 1 + 0) / 3. q4 has no judgment and is not run.
    for name in ("ndcg@10", "recall@100", "mrr@10", "map@100"):
        assert data[name] == pytest.approx(2 / 3, abs=1e-6)
    assert data["queries"] == 3
    assert data["documents"] == 6
    assert data["index_seconds"] >= 0
    assert data["queries_per_second"] > 0


def test_eval_json_on_the_handbook_finds_its_eval_folder() -> None:
    data = run_json("eval", HANDBOOK)
    assert set(data) == EVAL_KEYS
    assert data["queries"] == 40
    assert data["documents"] == 80
    assert data["recall@100"] == 1.0
    assert 0.8 < data["ndcg@10"] <= 1.0


def test_eval_readable_table(tiny_beir: str) -> None:
    result = run("eval", tiny_beir)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "tiny (BEIR dataset; judgments:" in out
    for label in EVAL_ROWS:
        assert re.search(rf"{re.escape(label)}\s+\S", out), label
    assert re.search(r"nDCG@10\s+0\.6667", out)
    assert re.search(r"documents\s+6", out)
    assert "bm25s" not in out
    assert result.stderr == ""  # no progress bar without a terminal


def test_eval_explicit_queries_and_qrels(tiny_beir: str, tmp_path: Path) -> None:
    qrels = tmp_path / "only-q1.tsv"
    qrels.write_text("q1\tsolar\t1\n", encoding="utf-8")
    data = run_json("eval", tiny_beir, "--qrels", str(qrels))
    assert data["queries"] == 1
    assert data["ndcg@10"] == 1.0
    queries = tmp_path / "q.jsonl"
    queries.write_text(_jsonl([{"_id": "q1", "text": "wind turbines"}]), encoding="utf-8")
    data = run_json("eval", tiny_beir, "--qrels", str(qrels), "--queries", str(queries))
    assert data["ndcg@10"] == 0.0


def test_eval_compare_json_shape(tiny_beir: str) -> None:
    pytest.importorskip("bm25s", reason="bm25s is in the 'bench' extra")
    data = run_json("eval", tiny_beir, "--compare")
    assert set(data) == {"groundwire", "bm25s", "ratios"}
    assert set(data["groundwire"]) == EVAL_KEYS
    assert set(data["bm25s"]) == EVAL_KEYS
    assert set(data["ratios"]) == RATIO_KEYS
    assert data["bm25s"]["queries"] == 3
    assert data["bm25s"]["documents"] == 6
    assert data["bm25s"]["ndcg@10"] == pytest.approx(2 / 3, abs=1e-6)
    assert data["ratios"]["ndcg@10"] == pytest.approx(1.0)
    ours, theirs = data["groundwire"], data["bm25s"]
    assert data["ratios"]["queries_per_second"] == pytest.approx(
        ours["queries_per_second"] / theirs["queries_per_second"], rel=1e-3
    )


def test_eval_compare_readable_shows_both_systems_and_ratios() -> None:
    pytest.importorskip("bm25s", reason="bm25s is in the 'bench' extra")
    result = run("eval", HANDBOOK, "--compare")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"groundwire\s+bm25s\s+groundwire / bm25s", out)
    assert re.search(r"nDCG@10\s+0\.\d{4}\s+0\.\d{4}\s+\d\.\d{3}x", out)
    assert re.search(r"queries/second\s+[\d,]+\s+[\d,]+\s+\d+\.\d{3}x", out)
    # bm25s indexes only the active entries (the ones groundwire can return).
    assert re.search(r"documents\s+80\s+72\s*$", out, flags=re.MULTILINE)


def test_eval_compare_gives_bm25s_groundwires_stop_words(
    tiny_beir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bm25s = pytest.importorskip("bm25s", reason="bm25s is in the 'bench' extra")
    from groundwire.config import document_settings
    from groundwire.text.stopwords import resolve_stopwords

    seen: dict[str, Any] = {}
    original = bm25s.tokenization.Tokenizer

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(bm25s.tokenization, "Tokenizer", spy)
    run_json("eval", tiny_beir, "--compare")
    analyzer = document_settings().analyzer
    assert set(seen["stopwords"]) == resolve_stopwords(analyzer.stopwords, analyzer.language)
    assert seen["stemmer"].stemWord("running") == "run"


def test_eval_compare_without_bm25s_names_the_extra(
    tiny_beir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "bm25s", None)  # makes `import bm25s` fail
    result = run("eval", tiny_beir, "--compare", "--json")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "groundwire eval --compare needs the 'bm25s' package" in line
    assert "pip install 'groundwire[bench]'" in line
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("no-qrels", "no qrels found"),
        ("bad-qrels", "qrels/test.tsv:3: score 'high' is not a number"),
        ("bad-corpus", "corpus.jsonl:2: invalid JSON"),
        ("no-match", "no query with a relevant judgment"),
    ],
)
def test_eval_data_errors_are_one_line_exit_1(tiny_beir: str, change: str, message: str) -> None:
    root = Path(tiny_beir)
    if change == "no-qrels":
        shutil.rmtree(root / "qrels")
    elif change == "bad-qrels":
        (root / "qrels" / "test.tsv").write_text(
            "query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\tb\thigh\n"
        )
    elif change == "bad-corpus":
        (root / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{oops\n')
    else:
        (root / "qrels" / "test.tsv").write_text("zz\tsolar\t1\n")
    result = run("eval", tiny_beir, "--json")
    assert result.exit_code == 1
    assert message in one_error_line(result)
    assert result.stdout == ""


def test_eval_unknown_split_lists_the_splits(tiny_beir: str) -> None:
    result = run("eval", tiny_beir, "--split", "dev")
    assert result.exit_code == 1
    assert "no qrels/dev.tsv; this dataset has splits test" in one_error_line(result)


def test_eval_missing_explicit_file(tiny_beir: str, tmp_path: Path) -> None:
    result = run("eval", tiny_beir, "--queries", str(tmp_path / "none.jsonl"))
    assert result.exit_code == 1
    assert "none.jsonl: no such file; check the --queries path" in one_error_line(result)


def test_eval_of_an_invalid_kb_names_the_first_error(broken_kb: str) -> None:
    eval_dir = Path(broken_kb).parent / "broken-eval"
    eval_dir.mkdir()
    (eval_dir / "queries.jsonl").write_text(_jsonl([{"_id": "q", "text": "one"}]))
    (eval_dir / "qrels.tsv").write_text("q\ta.one\t1\n")
    result = run("eval", broken_kb)
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "integrations-missing" in line
    assert "groundwire validate" in line
    assert result.stdout == ""


def test_eval_help_names_the_measures() -> None:
    text = " ".join(run("eval", "--help").stdout.replace("│", " ").split())
    for part in ("nDCG@10", "recall@100", "MRR@10", "MAP@100", "--compare", "bm25s", "--split"):
        assert part in text
    assert "pip install 'groundwire[bench]'" in text


# -- index and snapshots (issue 5) ------------------------------------------------------------
INDEX_KEYS = {
    "path",
    "format_version",
    "entries",
    "terms",
    "files",
    "bytes",
    "source_manifest_hash",
    "warnings",
    "build_seconds",
    "save_seconds",
}


@pytest.fixture(scope="module")
def handbook_snapshot(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The handbook saved by ``groundwire index``."""
    out = tmp_path_factory.mktemp("cli-snap") / "handbook"
    summary = run_json("index", HANDBOOK, "--out", str(out))
    assert set(summary) == INDEX_KEYS
    assert summary["entries"] == 80
    assert summary["format_version"] == 1
    assert summary["path"] == str(out)
    return str(out)


def _without_durations(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _without_durations(v) for k, v in data.items() if k != "duration_ms"}
    return data


def test_index_readable_summary(tmp_path: Path) -> None:
    result = run("index", HANDBOOK, "--out", str(tmp_path / "snap"))
    assert result.exit_code == 0, result.output
    for label in ("snapshot", "entries", "80", "terms", "files", "source hash", "build", "save"):
        assert label in result.stdout
    assert (tmp_path / "snap" / "manifest.json").is_file()


def test_every_command_answers_the_same_from_a_snapshot(handbook_snapshot: str) -> None:
    for args in (
        ("search", "rotate an api key", "-n", "5"),
        ("search", SLACK_QUERY, "--integration", "slack"),
        ("ground", "how do I rotate an API key", "--max-tokens", "600"),
        ("ground", SLACK_QUERY, "--integration", "slack", "--blocked-domain", "security"),
        ("status",),
        ("validate",),
    ):
        command, rest = args[0], args[1:]
        from_folder = run_json(command, HANDBOOK, *rest)
        from_snapshot = run_json(command, handbook_snapshot, *rest)
        assert _without_durations(from_snapshot) == _without_durations(from_folder), args


def test_readable_commands_accept_a_snapshot(handbook_snapshot: str) -> None:
    result = run("ground", handbook_snapshot, "rotate an api key")
    assert result.exit_code == 0
    assert ROTATION_TAG in result.stdout
    result = run("validate", handbook_snapshot)
    assert result.exit_code == 0
    assert "snapshot verified" in result.stdout


def test_index_of_several_sources(tmp_path: Path) -> None:
    source = tmp_path / "extra.json"
    source.write_text(
        json.dumps({"id": "extra", "version": "1", "entries": [json.loads(_EXTRA_ENTRY)]}),
        encoding="utf-8",
    )
    summary = run_json("index", HANDBOOK, str(source), "--out", str(tmp_path / "snap"))
    assert summary["entries"] == 81
    hits = run_json("search", str(tmp_path / "snap"), "zebra crossing", "-n", "1")
    assert hits[0]["id"] == "extra.zebra"


_EXTRA_ENTRY = json.dumps(
    {
        "id": "extra.zebra",
        "title": "Zebra crossing",
        "summary": "How to cross.",
        "domain": "extra",
        "integrations": [],
    }
)


def test_index_of_an_invalid_kb_writes_nothing(broken_kb: str, tmp_path: Path) -> None:
    out = tmp_path / "snap"
    result = run("index", broken_kb, "--out", str(out))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "integrations-missing" in line
    assert "groundwire validate" in line
    assert not out.exists()


def test_index_refuses_a_folder_that_is_not_a_snapshot(tmp_path: Path) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    result = run("index", HANDBOOK, "--out", str(out))
    assert result.exit_code == 1
    assert "not part of a snapshot (keep.txt)" in one_error_line(result)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_index_replaces_an_existing_snapshot(tmp_path: Path, warning_kb: str) -> None:
    out = str(tmp_path / "snap")
    assert run_json("index", HANDBOOK, "--out", out)["entries"] == 80
    summary = run_json("index", warning_kb, "--out", out)
    assert summary["entries"] == 1
    assert summary["warnings"] == 2
    report = run_json("validate", out)
    assert report["ok"] is True
    assert report["entries"] == 1
    assert len(report["issues"]) == 2


def test_index_requires_out_and_sources() -> None:
    assert run("index", HANDBOOK).exit_code == 2
    assert run("index", "--out", "x").exit_code == 2


def test_a_damaged_snapshot_is_one_error_line(handbook_snapshot: str, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(handbook_snapshot, damaged)
    scores = next(damaged.glob("lexical.scores.*.npy"))
    data = bytearray(scores.read_bytes())
    data[-1] ^= 0x01
    scores.write_bytes(bytes(data))
    for args in (("search", "api key"), ("ground", "api key"), ("validate",)):
        result = run(args[0], str(damaged), *args[1:])
        assert result.exit_code == 1, args
        assert "does not match its SHA-256" in one_error_line(result)
    state = run_json("status", str(damaged), code=1)
    assert state["ready"] is False
    assert "IndexFormatError" in state["last_error"]


# -- documents: ground, search and ingest ------------------------------------------------------
EVIDENCE_KEYS = {
    "status",
    "reason",
    "block",
    "citations",
    "excerpts",
    "metadata",
    "settings",
    "documents",
}
EXCERPT_KEYS = {
    "id",
    "chunk_ids",
    "source",
    "path",
    "heading",
    "span",
    "version",
    "sha256",
    "score",
    "cut",
    "text",
}
EVIDENCE_METADATA_KEYS = {
    "tokens",
    "max_tokens",
    "candidate_count",
    "candidates_truncated",
    "context_truncated",
    "sources",
    "duration_ms",
}
MIXED_MD = """---
title: Quokka handbook
---
# Quokka handbook

Intro paragraph about the project.

## Feeding

Every quokka eats leaves twice a day; the keeper logs each quokka feeding.
"""
MIXED_HTML = """<html><head><title>Quokka habitat</title>
<script>var quokka = "script text must not be indexed";</script></head>
<body><h1>Habitat</h1><p>The quokka lives on Rottnest Island in dense scrub.</p></body></html>
"""
MIXED_PY = '''"""Tools for the quokka census."""


def count_quokka(sightings):
    """Count every quokka sighting once."""
    return len(set(sightings))
'''


@pytest.fixture
def mixed_docs(tmp_path: Path, pdf_writer: ModuleType) -> Path:
    """A folder mixing Markdown, HTML, PDF and Python, each mentioning quokkas."""
    root = tmp_path / "docs"
    (root / "web").mkdir(parents=True)
    (root / "guide.md").write_text(MIXED_MD, encoding="utf-8")
    (root / "web" / "habitat.html").write_text(MIXED_HTML, encoding="utf-8")
    (root / "census.py").write_text(MIXED_PY, encoding="utf-8")
    pdf = pdf_writer.pdf_bytes([["Quokka survey", "Each quokka was counted at dawn."]], "Survey")
    (root / "survey.pdf").write_bytes(pdf)
    return root


def _check_excerpt(root: Path, excerpt: dict[str, Any]) -> None:
    """The excerpt's span points at its text in the file's extracted text; version pins it."""
    path = root / excerpt["source"]
    document = groundwire.load_document(path)
    start, end = excerpt["span"]
    assert document.text[start:end] == excerpt["text"]
    assert excerpt["version"] == hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    assert excerpt["id"].startswith(excerpt["source"] + "#")
    assert excerpt["sha256"] == hashlib.sha256(excerpt["text"].encode()).hexdigest()


def test_ground_on_a_mixed_folder_returns_cited_excerpts_with_spans(mixed_docs: Path) -> None:
    data = run_json("ground", str(mixed_docs), "quokka", "-n", "10")
    assert set(data) == EVIDENCE_KEYS
    assert set(data["metadata"]) == EVIDENCE_METADATA_KEYS
    assert (data["status"], data["reason"]) == ("ready", None)
    sources = {excerpt["source"] for excerpt in data["excerpts"]}
    assert sources == {"guide.md", "web/habitat.html", "survey.pdf", "census.py"}
    assert data["documents"] == {"files": 4, "chunks": data["documents"]["chunks"], "skipped": []}
    for excerpt, citation in zip(data["excerpts"], data["citations"], strict=True):
        assert set(excerpt) == EXCERPT_KEYS
        assert citation == f"[KB:{excerpt['id']}@{excerpt['version']}]"
        _check_excerpt(mixed_docs, excerpt)
        line = json.dumps(
            {"id": excerpt["id"], "source": excerpt["source"]}, ensure_ascii=False
        ).removesuffix("}")
        assert line in data["block"]
    guide = next(e for e in data["excerpts"] if e["source"] == "guide.md")
    assert guide["heading"] == "Quokka handbook"  # the file's heading trail
    assert "script text" not in data["block"]
    assert data["block"].startswith("<untrusted_evidence>")
    assert data["metadata"]["tokens"] <= data["metadata"]["max_tokens"] == 4000
    # Round-robin: the first four excerpts come from four different files.
    assert len({e["source"] for e in data["excerpts"][:4]}) == 4


def test_ground_cuts_long_excerpts_and_keeps_their_spans(mixed_docs: Path) -> None:
    data = run_json("ground", str(mixed_docs), "quokka feeding keeper", "--max-excerpt-chars", "40")
    assert data["status"] == "ready"
    for excerpt in data["excerpts"]:
        assert len(excerpt["text"]) <= 40
        _check_excerpt(mixed_docs, excerpt)
    assert any(excerpt["cut"] for excerpt in data["excerpts"])


def test_ground_readable_on_documents(mixed_docs: Path) -> None:
    result = run("ground", str(mixed_docs), "rottnest island scrub")
    assert result.exit_code == 0, result.output
    for label in ("Evidence block", "Citations", "Metadata", "status", "ready", "documents"):
        assert label in result.stdout
    assert "web/habitat.html" in result.stdout
    assert "[KB:web/habitat.html#0@" in result.stdout


def test_ground_on_documents_insufficient_is_an_answer_not_an_error(mixed_docs: Path) -> None:
    data = run_json("ground", str(mixed_docs), "rottnest scrub", "--min-sources", "2")
    assert (data["status"], data["reason"]) == ("insufficient", "too-few-sources")
    assert data["block"] is None
    assert data["excerpts"] == []
    assert data["citations"] == []
    assert run_json("ground", str(mixed_docs), "zzyzx")["reason"] == "no-match"
    huge = run_json("ground", str(mixed_docs), "quokka", "--min-score", "1000")
    assert huge["reason"] == "below-min-score"
    tight = run_json("ground", str(mixed_docs), "quokka", "--max-tokens", "60")
    assert tight["reason"] == "budget-exhausted"
    result = run("ground", str(mixed_docs), "zzyzx")
    assert result.exit_code == 0
    assert "No evidence (no-match)" in result.stdout


def test_ground_on_a_single_document_file(mixed_docs: Path) -> None:
    data = run_json("ground", str(mixed_docs / "guide.md"), "keeper logs feeding")
    assert data["status"] == "ready"
    assert data["documents"]["files"] == 1
    [excerpt] = data["excerpts"]
    assert excerpt["source"] == "guide.md"
    document = groundwire.load_document(mixed_docs / "guide.md")
    assert document.text[excerpt["span"][0] : excerpt["span"][1]] == excerpt["text"]


@pytest.mark.parametrize(
    ("kind", "args", "option"),
    [
        ("docs", ["--turn", "user:hi"], "--turn"),
        ("docs", ["--integration", "slack"], "--integration"),
        ("docs", ["--blocked-domain", "x"], "--blocked-domain"),
        ("kb", ["--min-score", "1"], "--min-score"),
        ("kb", ["--limit", "2"], "--limit"),
        ("kb", ["--max-excerpt-chars", "50"], "--max-excerpt-chars"),
        ("kb", ["--min-sources", "1"], "--min-sources"),
    ],
)
def test_options_of_the_other_kind_of_kb_are_usage_errors(
    mixed_docs: Path, kind: str, args: list[str], option: str
) -> None:
    kb = str(mixed_docs) if kind == "docs" else HANDBOOK
    result = run("ground", kb, "quokka", *args)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert option in line
    assert "applies to" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "0"], "limit=0"),
        (["--min-sources", "9"], "min_sources=9"),
        (["--max-excerpt-chars", "0"], "max_excerpt_chars=0"),
        (["--min-score", "-1"], "min_score=-1"),
    ],
)
def test_bad_evidence_options_are_usage_errors(
    mixed_docs: Path, args: list[str], message: str
) -> None:
    result = run("ground", str(mixed_docs), "quokka", *args)
    assert result.exit_code == 2
    assert message in one_error_line(result)


def test_search_on_a_docs_folder(mixed_docs: Path) -> None:
    (mixed_docs / "logo.png").write_bytes(b"\x89PNG\r\n")
    result = run("search", str(mixed_docs), "count_quokka", "--json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert hits[0]["id"].startswith("census.py#")
    assert set(hits[0]["breakdown"]) == {"title", "body", "symbols", "bigrams", "exact", "alias"}
    assert hits[0]["breakdown"]["symbols"] > 0  # the name the chunk defines
    assert result.stderr.splitlines() == ["warning: skipped logo.png: unsupported file type '.png'"]
    table = run("search", str(mixed_docs), "quokka habitat", "-n", "2")
    assert table.exit_code == 0
    assert "web/habitat.html#0" in table.stdout


def test_kb_folders_and_source_files_stay_knowledge_bases(tmp_path: Path) -> None:
    # A source.yaml in a subfolder still makes the folder a knowledge base.
    write_kb(
        tmp_path / "outer" / "inner",
        {"a.md": entry("team.quokka", "integrations: []\n", body="Quokka care.")},
    )
    hits = run_json("search", str(tmp_path / "outer"), "quokka")
    assert [hit["id"] for hit in hits] == ["team.quokka"]
    assert set(hits[0]["breakdown"]) == BREAKDOWN_KEYS
    grounded = run_json("ground", str(tmp_path / "outer"), "quokka care")
    assert set(grounded) == GROUND_KEYS


def test_ingest_summary_lists_skipped_files_with_reasons(mixed_docs: Path, tmp_path: Path) -> None:
    (mixed_docs / "logo.png").write_bytes(b"\x89PNG\r\n")
    (mixed_docs / ".secret.md").write_text("hidden", encoding="utf-8")
    (mixed_docs / "draft.md").write_text("---\ntitle: [oops\n---\nbody\n", encoding="utf-8")
    (mixed_docs / "node_modules").mkdir()
    (mixed_docs / "node_modules" / "dep.js").write_text("x", encoding="utf-8")
    out = tmp_path / "docs.snapshot"
    summary = run_json("ingest", str(mixed_docs), "--out", str(out))
    assert set(summary) == {
        "path",
        "files",
        "chunks",
        "bytes_read",
        "skipped",
        "terms",
        "source_manifest_hash",
        "load_seconds",
        "index_seconds",
        "save_seconds",
    }
    assert summary["files"] == 4
    assert summary["chunks"] >= 4
    reasons = {item["path"]: item["reason"] for item in summary["skipped"]}
    assert reasons["logo.png"] == "unsupported file type '.png'"
    assert reasons[".secret.md"] == "hidden file"
    assert "node_modules" in reasons
    assert "dependency/VCS/build folder" in reasons["node_modules"]
    assert "draft.md:2: front matter is not valid YAML" in reasons["draft.md"]
    assert (out / "manifest.json").is_file()
    # The snapshot answers exactly as the folder does.
    from_folder = run_json("ground", str(mixed_docs), "quokka", "-n", "10")
    from_snapshot = run_json("ground", str(out), "quokka", "-n", "10")
    for data in (from_folder, from_snapshot):
        data["metadata"].pop("duration_ms")
        data.pop("documents")
    assert from_snapshot == from_folder
    hits = run_json("search", str(out), "count_quokka")
    assert hits[0]["id"].startswith("census.py#")
    readable = run("ingest", str(mixed_docs), "--out", str(out))
    assert readable.exit_code == 0, readable.output
    for label in ("snapshot", "files", "chunks", "skipped", "source hash"):
        assert label in readable.stdout
    assert "skipped logo.png: unsupported file type '.png'" in readable.stdout


def test_ingest_chunking_options(mixed_docs: Path, tmp_path: Path) -> None:
    default = run_json("ingest", str(mixed_docs), "--out", str(tmp_path / "a"))
    small = run_json(
        "ingest",
        str(mixed_docs),
        "--out",
        str(tmp_path / "b"),
        "--chunk-size",
        "60",
        "--chunk-overlap",
        "10",
    )
    assert small["chunks"] > default["chunks"]
    bad = run("ingest", str(mixed_docs), "--out", str(tmp_path / "c"), "--chunk-overlap", "900")
    assert bad.exit_code == 2
    assert "overlap=900" in one_error_line(bad)
    assert not (tmp_path / "c").exists()


def test_ingest_with_nothing_to_index_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n")
    out = tmp_path / "snap"
    result = run("ingest", str(folder), "--out", str(out))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "no documents to index" in line
    assert "logo.png: unsupported file type '.png'" in line
    assert not out.exists()
    assert run("ground", str(folder), "quokka").exit_code == 1


def test_ingest_requires_out_and_paths() -> None:
    assert run("ingest", HANDBOOK).exit_code == 2
    assert run("ingest", "--out", "x").exit_code == 2


# -- ask (real SDKs against the scripted fake servers of tests/llm/fake_servers.py) ----------
ASK_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
)
ASK_KEYS = {
    "kb_kind",
    "status",
    "reason",
    "answer",
    "citations",
    "citations_ok",
    "offered",
    "provider",
    "model",
}


@pytest.fixture
def fake(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_servers_module: ModuleType
) -> Iterator[Any]:
    """A fake OpenAI/Anthropic server on 127.0.0.1; no real provider settings leak in."""
    for name in ASK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic-config"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = fake_servers_module.FakeLLMServer()
    yield server
    server.close()


@pytest.fixture
def quokka_docs(tmp_path: Path) -> str:
    root = tmp_path / "quokka-docs"
    root.mkdir()
    (root / "care.md").write_text(
        "# Quokka care\n\nEvery quokka eats leaves twice a day at dawn and dusk.\n",
        encoding="utf-8",
    )
    (root / "island.txt").write_text(
        "Quokkas live on Rottnest Island in dense scrub.\n", encoding="utf-8"
    )
    return str(root)


def _first_excerpt_id(kb: str, question: str) -> str:
    data = run_json("ground", kb, question)
    assert data["status"] == "ready"
    return str(data["excerpts"][0]["id"])


def _openai_env(monkeypatch: pytest.MonkeyPatch, fake: Any) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.openai.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "gpt-fake")


def test_ask_documents_streams_a_checked_answer(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    question = "what does a quokka eat"
    cited = _first_excerpt_id(quokka_docs, question)
    fake.openai.enqueue_text(f"Quokkas eat leaves twice a day [evidence:{cited}].")
    result = run("ask", quokka_docs, question)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Quokkas eat leaves twice a day [evidence:{cited}].\n")
    assert f"valid    [evidence:{cited}]  care.md" in result.stdout
    (sent,) = fake.openai.requests
    assert sent.stream  # streamed from the model, buffered by the assistant
    body = sent.json
    assert body["model"] == "gpt-fake"
    system, user = body["messages"]
    assert system["role"] == "system"
    assert "[evidence:ID]" in system["content"]
    assert "<untrusted_evidence>" in user["content"]
    assert f'"id": "{cited}"' in user["content"]


def test_ask_documents_insufficient_evidence_makes_no_request(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    result = run("ask", quokka_docs, "zebra migration")
    assert result.exit_code == 0
    assert "No answer (insufficient evidence: no-match)" in result.stdout
    assert "the model was not called" in result.stdout
    assert fake.openai.request_count == 0
    data = run_json("ask", quokka_docs, "zebra migration")
    assert set(data) == ASK_KEYS
    assert (data["status"], data["reason"], data["answer"]) == ("insufficient", "no-match", "")
    assert fake.openai.request_count == 0


def test_ask_documents_rejects_an_answer_citing_outside_the_evidence(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_text("Quokkas eat bread [evidence:secret.md#0].")
    result = run("ask", quokka_docs, "what does a quokka eat")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "rejected and not shown" in line
    assert "[evidence:secret.md#0]" in line
    assert "bread" not in result.stdout  # nothing of the answer was shown
    fake.openai.enqueue_text("Quokkas eat leaves.")  # cites nothing
    data = run_json("ask", quokka_docs, "what does a quokka eat", code=1)
    assert (data["status"], data["reason"], data["answer"]) == ("rejected", "no-citation", "")
    assert data["citations_ok"] is False


def test_ask_documents_json(fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _openai_env(monkeypatch, fake)
    question = "where do quokkas live"
    cited = _first_excerpt_id(quokka_docs, question)
    fake.openai.enqueue_text(f"On Rottnest Island [evidence:{cited}].")
    data = run_json("ask", quokka_docs, question)
    assert set(data) == ASK_KEYS
    assert (data["kb_kind"], data["status"], data["reason"]) == ("documents", "answered", None)
    assert data["answer"] == f"On Rottnest Island [evidence:{cited}]."
    assert data["citations"] == [
        {
            "tag": f"[evidence:{cited}]",
            "kind": "evidence",
            "id": cited,
            "version": None,
            "valid": True,
            "problem": None,
        }
    ]
    assert data["citations_ok"] is True
    assert data["provider"] == "openai"
    assert not fake.openai.last_request.stream  # --json asks for one whole answer


def test_ask_knowledge_base_puts_the_block_in_the_system_prompt(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_text(
        f"Create the new key first {ROTATION_TAG}, then revoke the old one [KB:made.up@1]."
    )
    result = run("ask", HANDBOOK, "how do I rotate an API key")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Create the new key first")
    assert f"valid    {ROTATION_TAG}" in result.stdout
    assert "INVALID  [KB:made.up@1]" in result.stdout
    (system, user) = fake.openai.last_request.json["messages"]
    assert "<knowledge_context>" in system["content"]
    assert ROTATION_TAG in system["content"]
    assert user == {"role": "user", "content": "how do I rotate an API key"}


def test_ask_knowledge_base_json_and_fail_open(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_text(f"Rotate it {ROTATION_TAG}.")
    data = run_json("ask", HANDBOOK, "how do I rotate an API key")
    assert (data["kb_kind"], data["status"], data["citations_ok"]) == (
        "knowledge",
        "answered",
        True,
    )
    assert ROTATION_TAG in data["offered"]
    fake.openai.enqueue_text("No idea.")
    result = run("ask", HANDBOOK, "xyzzy plugh")  # nothing matches: answered, not grounded
    assert result.exit_code == 0
    assert "warning: no knowledge block (no-match)" in result.stderr
    assert "none: the answer cites nothing" in result.stdout
    assert "<knowledge_context>" not in fake.openai.last_request.json["messages"][0]["content"]


def test_ask_with_anthropic(fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    question = "what does a quokka eat"
    cited = _first_excerpt_id(quokka_docs, question)
    fake.anthropic.enqueue_text(f"Leaves [evidence:{cited}].")
    result = run(
        "ask",
        quokka_docs,
        question,
        "--provider",
        "anthropic",
        "--model",
        "claude-fake",
        "--base-url",
        fake.anthropic.base_url,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Leaves [evidence:{cited}].")
    assert fake.anthropic.last_request.json["model"] == "claude-fake"
    assert fake.openai.request_count == 0


def test_ask_configuration_errors_are_one_line(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_model = run("ask", quokka_docs, "quokka")
    assert no_model.exit_code == 2
    assert "pass --model NAME or set OPENAI_MODEL" in one_error_line(no_model)
    no_key = run("ask", quokka_docs, "quokka", "--model", "gpt-4o-mini")
    assert no_key.exit_code == 2
    assert "OPENAI_API_KEY" in one_error_line(no_key)
    no_anthropic_key = run("ask", quokka_docs, "quokka", "--provider", "anthropic", "--model", "c")
    assert no_anthropic_key.exit_code == 2
    assert "ANTHROPIC_API_KEY" in one_error_line(no_anthropic_key)
    unknown = run("ask", quokka_docs, "quokka", "--provider", "gemini", "--model", "g")
    assert unknown.exit_code == 2
    assert "'gemini' is not a provider" in one_error_line(unknown)
    assert fake.openai.request_count == 0


def test_ask_provider_error_is_one_line(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_error(401, "bad key")
    result = run("ask", quokka_docs, "what does a quokka eat")
    assert result.exit_code == 1
    assert "401" in one_error_line(result)
    assert result.stdout == ""
