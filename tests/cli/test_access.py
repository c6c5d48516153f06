"""The command line as a principal: --tenant/--subject/--group and --access."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from groundwire import KnowledgeBase
from groundwire.cli import app

runner = CliRunner()

SOURCE = {
    "id": "kb",
    "version": "v1",
    "entries": [
        {"id": "acme.keys", "title": "Rotate keys", "summary": "rotate signing keys",
         "domain": "ops", "integrations": [], "tenant": "acme"},
        {"id": "acme.payroll", "title": "Payroll keys", "summary": "rotate payroll keys",
         "domain": "ops", "integrations": [], "tenant": "acme", "acl": ["group:hr"]},
        {"id": "shared.keys", "title": "Keys in general", "summary": "how keys rotate",
         "domain": "ops", "integrations": []},
    ],
}  # fmt: skip
POLICY = """
rules:
  - paths: ["hr/**"]
    tenant: acme
    acl: [group:hr]
  - paths: ["**"]
    tenant: acme
"""


def run(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def kb(tmp_path: Path) -> str:
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(SOURCE), encoding="utf-8")
    return str(path)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "hr").mkdir(parents=True)
    (folder / "hr" / "pay.md").write_text("# Pay\nRotate payroll keys quarterly.", encoding="utf-8")
    (folder / "guide.md").write_text("# Guide\nRotate signing keys monthly.", encoding="utf-8")
    (folder / "access.yaml").write_text(POLICY, encoding="utf-8")  # inside: never indexed
    return folder


def ids(output: str) -> list[str]:
    return [hit["id"] for hit in json.loads(output)]


def test_search_sees_what_the_principal_may_see(kb: str) -> None:
    anonymous = run("search", kb, "rotate keys", "--json")
    assert ids(anonymous.output) == ["shared.keys"]
    alice = run("search", kb, "rotate keys", "--tenant", "acme", "--subject", "alice", "--json")
    assert sorted(ids(alice.output)) == ["acme.keys", "shared.keys"]
    hr = run("search", kb, "rotate keys", "--tenant", "acme", "--subject", "h", "--group", "hr",
             "--json")  # fmt: skip
    assert sorted(ids(hr.output)) == ["acme.keys", "acme.payroll", "shared.keys"]
    beta = run("search", kb, "rotate keys", "--tenant", "beta", "--subject", "b", "--json")
    assert ids(beta.output) == ["shared.keys"]


def test_ground_runs_the_turn_as_the_principal(kb: str) -> None:
    alice = run(
        "ground", kb, "rotate payroll keys", "--gate", "off", "--tenant", "acme", "--subject", "a",
        "--json",
    )  # fmt: skip
    assert alice.exit_code == 0
    meta = json.loads(alice.output)["metadata"]
    assert "acme.payroll" not in meta["selected_ids"]
    assert "acme.keys" in meta["selected_ids"]
    assert meta["authorization_errors"] == []
    hr = run("ground", kb, "rotate payroll keys", "--tenant", "acme", "--subject", "h",
             "--group", "hr", "--json")  # fmt: skip
    assert json.loads(hr.output)["metadata"]["selected_ids"][0] == "acme.payroll"


def test_documents_are_labeled_by_the_access_policy(docs: Path) -> None:
    policy = str(docs / "access.yaml")
    hr = run("ground", str(docs), "rotate keys", "--access", policy, "--tenant", "acme",
             "--subject", "h", "--group", "hr", "--json")  # fmt: skip
    data = json.loads(hr.output)
    assert sorted(e["source"] for e in data["excerpts"]) == ["guide.md", "hr/pay.md"]
    assert data["documents"]["files"] == 2  # access.yaml itself is not a document
    staff = run("search", str(docs), "rotate keys", "--access", policy, "--tenant", "acme",
                "--subject", "s", "--json")  # fmt: skip
    assert ids(staff.output) == ["guide.md#0"]
    anonymous = run("ground", str(docs), "rotate keys", "--access", policy, "--json")
    assert json.loads(anonymous.output)["status"] == "insufficient"


def test_ingest_saves_the_labels_in_the_snapshot(docs: Path, tmp_path: Path) -> None:
    out = tmp_path / "snap"
    ingested = run("ingest", str(docs), "--out", str(out), "--access", str(docs / "access.yaml"),
                   "--json")  # fmt: skip
    assert ingested.exit_code == 0, ingested.output
    assert json.loads(ingested.output)["files"] == 2
    hr = run("search", str(out), "payroll", "--tenant", "acme", "--subject", "h", "--group",
             "hr", "--json")  # fmt: skip
    assert ids(hr.output) == ["hr/pay.md#0"]
    staff = run("search", str(out), "payroll", "--tenant", "acme", "--subject", "s", "--json")
    assert ids(staff.output) == []
    relabel = run("search", str(out), "payroll", "--access", str(docs / "access.yaml"))
    assert relabel.exit_code == 2
    assert "labels given at ingest" in relabel.output


def test_files_no_rule_matches_are_skipped_with_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("rotate keys", encoding="utf-8")
    (folder / "b.md").write_text("rotate keys", encoding="utf-8")
    policy = tmp_path / "access.yaml"
    policy.write_text('rules:\n  - paths: ["a.md"]\n', encoding="utf-8")
    out = tmp_path / "snap"
    result = run("ingest", str(folder), "--out", str(out), "--access", str(policy), "--json")
    data = json.loads(result.output)
    assert (data["files"], data["chunks"]) == (1, 1)
    assert data["skipped"][0]["path"] == "b.md"
    assert "no rule of the access policy" in data["skipped"][0]["reason"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--tenant", "acme"], "--tenant and --subject go together"),
        (["--subject", "alice"], "--tenant and --subject go together"),
        (["--group", "hr"], "needs --tenant and --subject"),
        (["--tenant", "acme corp", "--subject", "a"], "Principal.tenant"),
        (["--tenant", "acme", "--subject", "a", "--group", "a,b"], "Principal.groups"),
    ],
)
def test_incomplete_or_malformed_principals_are_usage_errors(
    kb: str, args: list[str], fragment: str
) -> None:
    for command in ("ground", "search"):
        result = run(command, kb, "rotate", *args)
        assert result.exit_code == 2
        assert fragment in result.output


def test_access_applies_to_documents_only(kb: str, docs: Path) -> None:
    result = run("search", kb, "rotate", "--access", str(docs / "access.yaml"))
    assert result.exit_code == 2
    assert "applies to documents only" in result.output
    result = run("ground", kb, "rotate", "--access", str(docs / "access.yaml"))
    assert result.exit_code == 2


def test_a_malformed_policy_is_one_error_line(docs: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - paths: [a]\n    acls: [group:x]\n", encoding="utf-8")
    for args in (
        ["ingest", str(docs), "--out", str(tmp_path / "o"), "--access", str(bad)],
        ["ground", str(docs), "rotate", "--access", str(bad)],
    ):
        result = run(*args)
        assert result.exit_code == 1
        lines = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(lines) == 1
        assert "unknown key 'acls'; did you mean 'acl'?" in lines[0]
        assert str(bad) in lines[0]
    assert not (tmp_path / "o").exists()


def test_search_by_channels_sees_only_the_principals_view(kb: str, tmp_path: Path) -> None:
    cache = str(tmp_path / "embeddings.sqlite")
    for mode in ("dense", "hybrid"):
        result = run(
            *("search", kb, "rotate payroll keys", "--mode", mode, "--model", "hashing"),
            *("--embedding-cache", cache, "--tenant", "acme", "--subject", "a", "--json"),
        )
        assert result.exit_code == 0, result.output
        hits = [hit["id"] for hit in json.loads(result.output)["hits"]]
        assert set(hits) == {"acme.keys", "shared.keys"}


# -- ingest --update on a labeled snapshot ---------------------------------------------------
def _ingest(docs: Path, out: Path, policy: Path, *more: str) -> dict[str, Any]:
    done = run("ingest", str(docs), "--out", str(out), "--access", str(policy), *more, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.output)  # type: ignore[no-any-return]


def _searches(snapshot: Path) -> list[list[str]]:
    """What three principals find for two queries in ``snapshot``."""
    principals = [
        ["--tenant", "acme", "--subject", "h", "--group", "hr"],
        ["--tenant", "acme", "--subject", "s"],
        ["--tenant", "beta", "--subject", "b"],
    ]
    return [
        ids(run("search", str(snapshot), query, *who, "--json").output)
        for query in ("rotate keys", "payroll bonus")
        for who in principals
    ]


def test_an_update_labels_new_and_changed_files_as_a_rebuild_does(
    docs: Path, tmp_path: Path
) -> None:
    policy, out, rebuilt = docs / "access.yaml", tmp_path / "snap", tmp_path / "rebuilt"
    _ingest(docs, out, policy)
    (docs / "hr" / "bonus.md").write_text("# Bonus\nPayroll bonus keys.", encoding="utf-8")
    (docs / "guide.md").write_text("# Guide\nRotate signing keys weekly.", encoding="utf-8")
    updated = _ingest(docs, out, policy, "--update")
    assert (updated["added"], updated["changed"], updated["unchanged"]) == (1, 1, 1)
    assert updated["relabeled"] == 0  # the same policy: unchanged chunks keep their labels
    fresh = _ingest(docs, rebuilt, policy)
    assert updated["source_manifest_hash"] == fresh["source_manifest_hash"]  # labels included
    assert _searches(out) == _searches(rebuilt)
    assert ids(run("search", str(out), "payroll bonus", "--tenant", "acme", "--subject", "s",
                   "--json").output) == []  # fmt: skip


def test_a_labeled_snapshot_is_not_updated_without_its_policy(docs: Path, tmp_path: Path) -> None:
    out = tmp_path / "snap"
    before = _ingest(docs, out, docs / "access.yaml")
    (docs / "hr" / "bonus.md").write_text("# Bonus\nPayroll bonus keys.", encoding="utf-8")
    done = run("ingest", str(docs), "--out", str(out), "--update")
    assert done.exit_code == 1
    assert "labeled by an access policy" in done.output
    after = KnowledgeBase.describe_snapshot(out)
    assert after["source_manifest_hash"] == before["source_manifest_hash"]  # left intact


def test_an_update_with_another_policy_relabels_like_a_rebuild(docs: Path, tmp_path: Path) -> None:
    out, rebuilt = tmp_path / "snap", tmp_path / "rebuilt"
    _ingest(docs, out, docs / "access.yaml")
    other = tmp_path / "other.yaml"  # hr moves to tenant beta; guide.md is matched by no rule
    other.write_text('rules:\n  - paths: ["hr/**"]\n    tenant: beta\n', encoding="utf-8")
    updated = _ingest(docs, out, other, "--update")
    assert (updated["relabeled"], updated["removed"], updated["added"]) == (1, 0, 0)
    assert updated["entries"] == 1  # guide.md's chunk is deleted, with the reason
    assert any("guide.md" in s["path"] and "no rule" in s["reason"] for s in updated["skipped"])
    fresh = _ingest(docs, rebuilt, other)
    assert updated["source_manifest_hash"] == fresh["source_manifest_hash"]
    assert _searches(out) == _searches(rebuilt)
    assert ids(run("search", str(out), "payroll", "--tenant", "beta", "--subject", "b",
                   "--json").output) == ["hr/pay.md#0"]  # fmt: skip


def test_ground_by_channels_sees_only_the_principals_view(kb: str, tmp_path: Path) -> None:
    cache = str(tmp_path / "embeddings.sqlite")
    for mode in ("dense", "hybrid"):
        result = run(
            *("ground", kb, "rotate payroll keys", "--mode", mode, "--model", "hashing"),
            *("--embedding-cache", cache, "--tenant", "acme", "--subject", "a", "--json"),
        )
        assert result.exit_code == 0, result.output
        meta = json.loads(result.output)["metadata"]
        assert meta["channels"]["used"] == mode
        assert set(meta["selected_ids"]) <= {"acme.keys", "shared.keys"}
        assert set(meta["channels"]["hits"]) == set(meta["selected_ids"])
    documents = tmp_path / "docs"
    documents.mkdir()
    (documents / "a.md").write_text("# Keys\nRotate keys.\n", encoding="utf-8")
    result = run("ground", str(documents), "rotate keys", "--mode", "hybrid")
    assert result.exit_code == 2
    assert "'--mode': it applies to knowledge bases only" in result.output
