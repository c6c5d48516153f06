"""``index`` (snapshots) and ``ingest`` (documents)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import (
    HANDBOOK,
    ROTATION_TAG,
    SLACK_QUERY,
    one_error_line,
    run,
    run_json,
)

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
    assert summary["format_version"] == 3
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
        assert "does not match its XXH3-128 check" in one_error_line(result)
    state = run_json("status", str(damaged), code=1)
    assert state["ready"] is False
    assert "IndexFormatError" in state["last_error"]


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


def test_ingest_update_chunks_only_what_changed(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(4):
        (docs / f"page{n}.md").write_text(f"# Page {n}\n\nAbout topic {n} and tides.\n")
    out = tmp_path / "snap"
    run_json("ingest", str(docs), "--out", str(out))
    (docs / "page1.md").write_text("# Page 1\n\nNow about moons and orbits.\n")
    (docs / "page2.md").unlink()
    (docs / "page9.md").write_text("# Page 9\n\nA new page on comets.\n")
    summary = run_json("ingest", str(docs), "--out", str(out), "--update")
    assert summary["updated"] is True
    assert (summary["added"], summary["changed"], summary["removed"]) == (1, 1, 1)
    assert summary["unchanged"] == 2
    rebuilt = tmp_path / "rebuilt"
    run_json("ingest", str(docs), "--out", str(rebuilt))
    for query in ("moons orbits", "tides", "comets", "topic 2"):
        updated = run_json("search", str(out), query, "--json")
        fresh = run_json("search", str(rebuilt), query, "--json")
        assert updated == fresh, query
    other = run("ingest", str(docs), "--out", str(out), "--update", "--chunk-size", "1000")
    assert other.exit_code == 1
    assert "chunked with options" in one_error_line(other)


def test_index_update_analyzes_only_changed_entries(tmp_path: Path) -> None:
    out = tmp_path / "snap"
    run_json("index", HANDBOOK, "--out", str(out))
    same = run_json("index", HANDBOOK, "--out", str(out), "--update")
    assert (same["upserted"], same["deleted"], same["unchanged"]) == (0, 0, 80)
    assert same["entries"] == 80
    rebuilt = run_json("index", HANDBOOK, "--out", str(tmp_path / "again"))
    assert same["source_manifest_hash"] == rebuilt["source_manifest_hash"]
