"""``groundwire sync``: summary, JSON, withdrawal, watch runs, clean errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from groundwire.cli import app
from synctools import message, write_config, write_mbox

runner = CliRunner()


def run(*args: str):  # type: ignore[no-untyped-def]
    result = runner.invoke(app, list(args))
    assert "Traceback" not in (result.stdout or "") + (result.stderr or "")
    return result


def _setup(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "wifi.md").write_text("# Wi-Fi\n\nThe guest network password rotates weekly.\n")
    (docs / "secret.txt").write_text("db: postgres://admin:hunter2@db.internal/app\n")
    write_mbox(
        tmp_path / "help.mbox",
        [message("1@acme", "Desk booking", "Book desks in the app before 9.")],
    )
    return write_config(
        tmp_path,
        [
            {"id": "docs", "type": "folder", "path": "docs", "tenant": "acme"},
            {
                "id": "mail",
                "type": "mbox",
                "path": "help.mbox",
                "tenant": "acme",
                "owner": "helpdesk",
            },
        ],
    )


def test_sync_prints_a_summary_with_skip_reasons_then_the_snapshot_answers(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    result = run("sync", str(config))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "docs" in out
    assert "mail" in out
    assert "2 new, 0 changed, 0 removed" in " ".join(out.split())
    assert "skipped docs secret.txt: contains a URL with a password" in " ".join(out.split())
    as_acme = ("--tenant", "acme", "--subject", "ann")
    search = run("search", str(tmp_path / "kb"), "guest network password", "--json", *as_acme)
    assert search.exit_code == 0
    assert "docs/wifi.md#0" in search.stdout
    # the access model applies to synced documents: another tenant sees nothing
    other = run(
        "search",
        str(tmp_path / "kb"),
        "guest network",
        "--json",
        "--tenant",
        "globex",
        "--subject",
        "x",
    )
    assert "docs/wifi.md#0" not in other.stdout


def test_sync_json_withdraw_and_watch_runs(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    first = run("sync", str(config), "--json")
    data = json.loads(first.stdout)
    assert data["totals"]["new"] == 2
    assert data["snapshot"]["documents"] == 2
    assert (data["snapshot"]["publish"], data["snapshot"]["rebuild_reason"]) == (
        "rebuild",
        "no snapshot yet",
    )
    assert {s["source"] for s in data["sources"]} == {"docs", "mail"}

    refused = run("sync", str(config), "--withdraw", "docs/wifi.md")
    assert refused.exit_code == 2
    assert "--reason" in refused.stderr

    withdrawn = run(
        "sync",
        str(config),
        "--withdraw",
        "docs/wifi.md",
        "--reason",
        "wrong password policy",
        "--json",
    )
    data = json.loads(withdrawn.stdout)
    assert data["withdrawn"] == ["docs/wifi.md"]
    assert data["snapshot"]["documents"] == 1
    assert data["snapshot"]["publish"] == "update"  # the withdrawal is an incremental delete
    assert (
        "docs/wifi.md#0"
        not in run("search", str(tmp_path / "kb"), "guest network password", "--json").stdout
    )

    watched = run(
        "sync",
        str(config),
        "--watch",
        "--interval",
        "0.1",
        "--max-runs",
        "2",
        "--source",
        "mail",
        "--json",
    )
    assert watched.exit_code == 0
    runs = [json.loads(chunk) for chunk in watched.stdout.replace("}\n{", "}\0{").split("\0")]
    assert len(runs) == 2
    assert all(r["snapshot"] is None for r in runs)
    assert [s["source"] for s in runs[0]["sources"]] == ["mail"]


def test_sync_errors_are_one_line_and_failed_sources_exit_1(tmp_path: Path) -> None:
    missing = run("sync", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: ")
    assert "nope.yaml: cannot open (No such file or directory)" in missing.stderr
    bad = write_config(tmp_path, [{"id": "x", "type": "mbox", "path": "m.mbox", "pasword": "x"}])
    typo = run("sync", str(bad))
    assert typo.exit_code == 2
    assert "unknown key 'pasword'" in typo.stderr
    inline = write_config(
        tmp_path,
        [
            {
                "id": "x",
                "type": "imap",
                "host": "h",
                "username": "u",
                "password": "p",
                "password_env": "P",
            }
        ],
    )
    secret = run("sync", str(inline))
    assert secret.exit_code == 2
    assert "name it with 'password_env'" in secret.stderr
    gone = write_config(tmp_path, [{"id": "m", "type": "mbox", "path": "missing.mbox"}])
    failed = run("sync", str(gone))
    assert failed.exit_code == 1
    assert "error m: " in failed.stdout
    assert "no such mbox file" in failed.stdout
    assert "some sources failed" in failed.stderr
