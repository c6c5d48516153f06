"""``groundwire ingest``: the corpus safety rules on documents, and URLs (issue 10 items).

In a real temporary git repository, and against real HTTP servers on 127.0.0.1 (which
the private-address guard refuses unless ``--allow-private-addresses`` is given).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HostileServer, response, serving
from typer.testing import CliRunner

from groundwire import KnowledgeBase
from groundwire.cli import app

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]
KEY_LINE = "-----BEGIN EC " + "PRIVATE KEY-----"  # split: this file carries no marker


def ingest(*args: str | Path) -> Any:
    result = CliRunner().invoke(app, ["ingest", *map(str, args), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "site").mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text("site/\n*.draft.md\n")
    (root / "docs" / "guide.md").write_text("# Guide\n\nRotate keys every 90 days.\n")
    (root / "docs" / "wip.draft.md").write_text("# Draft\n\nNot ready.\n")
    (root / "docs" / "deploy.md").write_text(f"# Deploy\n\n{KEY_LINE}\nMHcCAQEE\n")
    (root / "site" / "index.html").write_text("<h1>Built</h1><p>Generated page.</p>")
    return root


def test_ingest_skips_ignored_files_and_secrets_with_reasons(repo: Path, tmp_path: Path) -> None:
    result = ingest(repo / "docs", repo / "site", "--out", tmp_path / "snap")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    reasons = {item["path"]: item["reason"] for item in summary["skipped"]}
    assert summary["files"] == 1
    assert reasons["wip.draft.md"].startswith("ignored by git (.gitignore:2: *.draft.md)")
    assert reasons["index.html"].startswith("ignored by git (.gitignore:1: site/)")
    assert reasons["deploy.md"].startswith("contains a private key marker (line 3")
    kb = KnowledgeBase.load(tmp_path / "snap")
    assert {entry.metadata["source_id"] for entry in kb} == {"guide.md"}


def test_no_gitignore_ingests_ignored_files_but_never_secrets(repo: Path, tmp_path: Path) -> None:
    result = ingest(repo / "docs", repo / "site", "--out", tmp_path / "snap", "--no-gitignore")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["files"] == 3
    assert [item["path"] for item in summary["skipped"]] == ["deploy.md"]


def test_ground_on_a_documents_folder_applies_the_same_rules(repo: Path) -> None:
    result = CliRunner().invoke(app, ["search", str(repo / "docs"), "deploy key draft"])
    assert result.exit_code == 0
    assert "warning: skipped deploy.md: contains a private key marker" in result.stderr
    assert "warning: skipped wip.draft.md: ignored by git" in result.stderr


# -- URLs ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site() -> Iterator[HostileServer]:
    routes = {
        "/guide.html": response(
            200,
            b"<html><head><title>Webhooks</title></head><body><h1>Webhooks</h1>"
            b"<p>Deliveries retry 8 times over 24 hours.</p></body></html>",
            {"Content-Type": "text/html; charset=utf-8"},
        ),
        "/leak.txt": response(200, b"cache at redis://:hunter2pass@cache.internal:6379"),
    }
    with serving(routes) as server:
        yield server


def test_ingest_refuses_loopback_urls_by_default(site: HostileServer, tmp_path: Path) -> None:
    result = ingest(site.url("/guide.html"), "--out", tmp_path / "snap")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ")
    assert "no documents to index" in line
    assert "127.0.0.1 is a loopback address" in line
    assert not (tmp_path / "snap").exists()
    assert not [c for c in site.connections if c.path == "/guide.html"]


def test_ingest_fetches_urls_when_private_addresses_are_allowed(
    site: HostileServer, tmp_path: Path, repo: Path
) -> None:
    result = ingest(
        site.url("/guide.html"),
        site.url("/leak.txt"),
        repo / "docs" / "guide.md",
        "--out",
        tmp_path / "snap",
        "--allow-private-addresses",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["files"] == 2
    reasons = {item["path"]: item["reason"] for item in summary["skipped"]}
    assert reasons[site.url("/leak.txt")].startswith("contains a URL with a password")
    kb = KnowledgeBase.load(tmp_path / "snap")
    sources = {entry.metadata["source_id"] for entry in kb}
    assert sources == {site.url("/guide.html"), "guide.md"}
    found = CliRunner().invoke(app, ["search", str(tmp_path / "snap"), "deliveries retry"])
    assert site.url("/guide.html") in found.stdout


def test_an_update_fetches_urls_again_with_the_same_guards(
    site: HostileServer, tmp_path: Path, repo: Path
) -> None:
    given = (site.url("/guide.html"), repo / "docs" / "guide.md", "--out", tmp_path / "snap")
    assert ingest(*given, "--allow-private-addresses").exit_code == 0
    same = ingest(*given, "--update", "--allow-private-addresses")
    assert same.exit_code == 0, same.output
    summary = json.loads(same.stdout)
    assert (summary["unchanged"], summary["added"], summary["removed"]) == (2, 0, 0)
    assert summary["chunks_upserted"] == summary["chunks_deleted"] == 0
    # Without --allow-private-addresses the page is refused, as a rebuild refuses it: it
    # is listed with the reason and its chunks go, so the snapshot equals that rebuild.
    refused = json.loads(ingest(*given, "--update").stdout)
    reasons = {item["path"]: item["reason"] for item in refused["skipped"]}
    assert "127.0.0.1 is a loopback address" in reasons[site.url("/guide.html")]
    assert (refused["removed"], refused["unchanged"]) == (1, 1)
    sources = {entry.metadata["source_id"] for entry in KnowledgeBase.load(tmp_path / "snap")}
    assert sources == {"guide.md"}


def test_a_url_that_cannot_be_fetched_is_skipped_with_the_reason(
    site: HostileServer, tmp_path: Path, repo: Path
) -> None:
    result = ingest(
        site.url("/missing"),
        repo / "docs" / "guide.md",
        "--out",
        tmp_path / "snap",
        "--allow-private-addresses",
    )
    assert result.exit_code == 0, result.output
    skipped = json.loads(result.stdout)["skipped"]
    assert skipped == [{"path": site.url("/missing"), "reason": "HTTP 404 Reason; check the URL"}]
