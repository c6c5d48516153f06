"""``groundwire index --update`` and ``ingest --update`` save a small change as a delta
segment on disk (the base segment's files reused), equal to a rebuild."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_helpers import HANDBOOK, run_json

from groundwire import KnowledgeBase
from groundwire.index.delta import DeltaIndex
from groundwire.index.store import layout


def features(path: Path) -> list[str]:
    data: list[str] = json.loads((path / "manifest.json").read_text())["features"]
    return data


def base_entries(path: Path) -> str:
    name: str = json.loads((path / "manifest.json").read_text())["segments"][0]["files"]["entries"][
        "file"
    ]
    return name


def test_index_update_of_one_entry_saves_a_delta(tmp_path: Path) -> None:
    source = tmp_path / "handbook"
    shutil.copytree(HANDBOOK, source)
    out = tmp_path / "snap"
    run_json("index", str(source), "--out", str(out))
    entries = base_entries(out)
    page = source / "api.pagination.md"
    page.write_text(page.read_text().replace("cursor", "bookmark token"))
    summary = run_json("index", str(source), "--out", str(out), "--update")
    assert (summary["upserted"], summary["deleted"]) == (1, 0)
    assert features(out) == [layout.DELTA_FEATURE]
    assert base_entries(out) == entries  # the base's entry lines are the old file
    assert (out / entries).exists()
    assert isinstance(KnowledgeBase.load(out)._lexical, DeltaIndex)
    again = run_json("index", str(source), "--out", str(out), "--update")  # nothing changed
    assert again["upserted"] == 0
    rebuilt = run_json("index", str(source), "--out", str(tmp_path / "rebuilt"))
    assert summary["source_manifest_hash"] == rebuilt["source_manifest_hash"]
    for query in ("bookmark token", "pagination cursor", "api error codes"):
        got = run_json("search", str(out), query)
        want = run_json("search", str(tmp_path / "rebuilt"), query)
        assert got == want, query


def test_ingest_update_of_one_file_saves_a_delta(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(40):
        (docs / f"page{n:02d}.md").write_text(f"# Page {n}\n\nAbout topic {n} and tides.\n")
    out = tmp_path / "snap"
    run_json("ingest", str(docs), "--out", str(out))
    (docs / "page01.md").write_text("# Page 1\n\nNow about moons and orbits.\n")
    summary = run_json("ingest", str(docs), "--out", str(out), "--update")
    assert summary["changed"] == 1
    assert features(out) == [layout.DELTA_FEATURE]
    (docs / "page02.md").unlink()
    summary = run_json("ingest", str(docs), "--out", str(out), "--update")  # a delta again
    assert summary["removed"] == 1
    assert features(out) == [layout.DELTA_FEATURE]
    rebuilt = tmp_path / "rebuilt"
    run_json("ingest", str(docs), "--out", str(rebuilt))
    for query in ("moons orbits", "tides", "topic 2", "page 1"):
        assert run_json("search", str(out), query) == run_json("search", str(rebuilt), query)
