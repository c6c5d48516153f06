"""``ground`` and ``search`` on knowledge bases and documents."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import (
    BLOCK_KEYS,
    BREAKDOWN_KEYS,
    GROUND_KEYS,
    HANDBOOK,
    METADATA_KEYS,
    ROOT,
    ROTATION,
    ROTATION_TAG,
    SLACK_ONLY,
    SLACK_QUERY,
    entry,
    one_error_line,
    run,
    run_json,
    write_kb,
)

import groundwire

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
    "truncated_query",
}


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
    unnamed = "bot not posting, error not_in_channel"  # slack's entry, without naming slack
    without = run_json("ground", HANDBOOK, unnamed)["metadata"]
    assert SLACK_ONLY not in without["selected_ids"] + without["expanded_ids"]
    fixed = run_json("ground", HANDBOOK, SLACK_QUERY, "--gate", "off")["metadata"]
    assert SLACK_ONLY not in fixed["selected_ids"] + fixed["expanded_ids"]  # scope as given
    for name in ("slack", "SLACK"):  # integration names are case-insensitive
        with_slack = run_json("ground", HANDBOOK, SLACK_QUERY, "--integration", name)
        assert with_slack["metadata"]["selected_ids"][0] == SLACK_ONLY
    other = run_json("ground", HANDBOOK, unnamed, "--integration", "jira")["metadata"]
    assert SLACK_ONLY not in other["selected_ids"]


def test_ground_lets_integrations_the_query_names_join_the_turn() -> None:
    data = run_json("ground", HANDBOOK, SLACK_QUERY)["metadata"]
    assert data["named_integrations"] == ["slack"]
    assert data["selected_ids"][0] == SLACK_ONLY
    assert data["out_of_scope_count"] == 0
    readable = run("ground", HANDBOOK, SLACK_QUERY).stdout
    assert "note: the query names slack, so its entries joined this turn's scope" in readable
    enabled = run_json("ground", HANDBOOK, SLACK_QUERY, "--integration", "slack")["metadata"]
    assert enabled["named_integrations"] == []
    assert enabled["selected_ids"] == data["selected_ids"]


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


def test_ground_cuts_an_over_long_query_and_says_so() -> None:
    pasted = "how do I rotate an API key " + "and then " * 1_200 + "it still fails"
    data = run_json("ground", HANDBOOK, pasted)
    assert data["metadata"]["truncated_query"] is True
    assert data["block"] is not None
    result = run("ground", HANDBOOK, pasted)
    assert result.exit_code == 0
    assert "the query was longer than the limit and was cut" in result.stdout
    docs = run_json("ground", str(ROOT / "examples" / "docs"), "webhook retries " * 800)
    assert docs["metadata"]["truncated_query"] is True


def test_ground_on_an_invalid_kb_reports_index_not_ready(broken_kb: str) -> None:
    result = run("ground", broken_kb, "one", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["block"] is None
    assert data["metadata"]["failure_reason"] == "index-not-ready"
    lines = result.stderr.splitlines()
    assert len(lines) == 3  # each validation error, then what to do
    assert all(line.startswith("error: ") for line in lines)
    assert "integrations-missing" in lines[0]
    assert "a.md" in lines[0]
    assert "kind" in lines[1]
    assert "groundwire validate" in lines[2]
    readable = run("ground", broken_kb, "one")
    assert "integrations-missing" in readable.stderr


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
    data = run_json("ground", str(mixed_docs), "quokka", "-n", "10", "--gate", "off")
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


def test_entry_files_without_source_yaml_are_documents_with_a_warning(tmp_path: Path) -> None:
    folder = tmp_path / "entries"
    folder.mkdir()
    for n in range(2):
        (folder / f"e{n}.md").write_text(
            entry(f"team.quokka{n}", "integrations: []\n", body="Quokka care."), encoding="utf-8"
        )
    (folder / "README.md").write_text("# About\n", encoding="utf-8")
    result = run("ground", str(folder), "quokka care", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["status"] == "ready"  # read as documents, as it says
    (warning,) = result.stderr.splitlines()
    assert warning.startswith("warning: ")
    assert "read as documents" in warning
    assert "2 of 2 Markdown files carry knowledge entry front matter" in warning
    assert str(folder / "source.yaml") in warning
    ingest = run("ingest", str(folder), "--out", str(tmp_path / "snap"), "--json")
    assert ingest.exit_code == 0
    assert "read as documents" in ingest.stderr


def test_plain_documents_folders_get_no_entry_warning(mixed_docs: Path) -> None:
    result = run("search", str(mixed_docs), "quokka", "--json")
    assert result.exit_code == 0
    assert "front matter" not in result.stderr


def test_ground_low_relevance_lists_candidates_and_gate_off_restores_the_fixed_count() -> None:
    result = run("ground", HANDBOOK, "what is the capital of France")
    assert result.exit_code == 0
    assert "No knowledge block (low-relevance)" in result.stdout
    assert "Candidates (not sent)" in result.stdout
    data = run_json("ground", HANDBOOK, "what is the capital of France")
    assert data["block"] is None
    assert data["metadata"]["failure_reason"] == "low-relevance"
    assert data["metadata"]["confidence"] == "none"
    assert data["candidates"]
    assert all(item["coverage"] == 0.0 for item in data["candidates"])
    fixed = run_json("ground", HANDBOOK, "what is the capital of France", "--gate", "off")
    assert len(fixed["metadata"]["selected_ids"]) == 8
    assert all(item["coverage"] is None for item in fixed["candidates"])
    assert run("ground", HANDBOOK, "x", "--gate", "sometimes").exit_code == 2


def test_ground_hints_at_integrations_whose_entries_matched() -> None:
    query = "bot messages not showing up, step error says not_in_channel"  # slack not named
    data = run_json("ground", HANDBOOK, query)
    assert data["metadata"]["out_of_scope_count"] >= 1
    assert "slack" in data["metadata"]["out_of_scope_integrations"]
    readable = run("ground", HANDBOOK, query)
    assert "pass --integration slack to include them" in readable.stdout
    enabled = run_json("ground", HANDBOOK, query, "--integration", "slack")
    assert SLACK_ONLY in enabled["metadata"]["selected_ids"]
    assert enabled["metadata"]["out_of_scope_count"] == 0
    assert "hint:" not in run("ground", HANDBOOK, query, "--integration", "slack").stdout
