"""``index``/``ingest --embed``: vectors stored in the snapshot, updates that embed only
what changed (counted by the summary's ``embedded``: texts sent to the model), and
snapshots with a legacy ``.vectors`` file beside them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from cli_helpers import HANDBOOK, one_error_line, run, run_json

import groundwire as gw
from groundwire.index.vector_files import vectors_path

MODEL = "hashing:32"


def _vectors(snapshot: Path) -> gw.VectorIndex:
    held = gw.VectorIndex.from_section(gw.KnowledgeBase.load(snapshot))
    assert held is not None
    return held


def test_index_embed_stores_the_vectors_in_the_snapshot(tmp_path: Path) -> None:
    out, cache = tmp_path / "snap", str(tmp_path / "cache.sqlite")
    legacy = vectors_path(out)
    legacy.write_bytes(b"stale")  # what an older --embed left beside it
    summary = run_json("index", HANDBOOK, "--out", str(out), "--embed", MODEL,
                       "--embedding-cache", cache)  # fmt: skip
    assert (summary["vectors"], summary["embedded"], summary["kept"]) == (80, 80, 0)
    assert summary["model"] == "hashing-fnv1a-32"
    assert not legacy.exists()  # one snapshot, nothing beside it
    vectors = _vectors(out)
    assert len(vectors) == summary["entries"] == 80
    again = run_json("index", HANDBOOK, "--out", str(tmp_path / "b"), "--embed", MODEL,
                     "--embedding-cache", cache)  # fmt: skip
    assert (again["embedded"], again["reused"]) == (0, 80)  # all from the cache
    hits = run_json("search", str(out), "rotate an api key", "--mode", "hybrid",
                    "--model", MODEL, "--embedding-cache", cache)["hits"]  # fmt: skip
    assert hits[0]["id"] == "security.api-key-rotation"
    plain = run_json("index", HANDBOOK, "--out", str(out))  # no --embed: no vectors
    assert "vectors" not in plain
    assert gw.VectorIndex.from_section(gw.KnowledgeBase.load(out)) is None


def test_index_update_embeds_only_changed_entries_and_keeps_the_rest(tmp_path: Path) -> None:
    handbook = tmp_path / "handbook"
    shutil.copytree(HANDBOOK, handbook)
    out = tmp_path / "snap"
    run_json("index", str(handbook), "--out", str(out), "--embed", MODEL,
             "--embedding-cache", str(tmp_path / "first.sqlite"))  # fmt: skip
    before = _vectors(out)
    page = handbook / "billing.invoices.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nInvoices also list tax ids.\n")
    (handbook / "billing.free-trial.md").unlink()
    fresh_cache = str(tmp_path / "empty.sqlite")  # nothing cached: only the model can help
    summary = run_json("index", str(handbook), "--out", str(out), "--update",
                       "--embed", MODEL, "--embedding-cache", fresh_cache)  # fmt: skip
    assert (summary["upserted"], summary["deleted"]) == (1, 1)
    assert (summary["embedded"], summary["kept"], summary["vectors"]) == (1, 78, 79)
    after = _vectors(out)
    assert after.ids == tuple(i for i in before.ids if i != "billing.free-trial")
    rebuilt = tmp_path / "rebuilt"
    run_json("index", str(handbook), "--out", str(rebuilt), "--embed", MODEL,
             "--embedding-cache", fresh_cache)  # fmt: skip
    assert np.array_equal(after.matrix(), _vectors(rebuilt).matrix())  # as a rebuild
    # --update without --embed: unchanged text keeps the vectors ...
    same = run_json("index", str(handbook), "--out", str(out), "--update")
    assert (same["embedded"], same["kept"]) == (0, 79)
    assert np.array_equal(_vectors(out).matrix(), after.matrix())
    # ... changed text needs the model: refused, the snapshot left as it was
    page.write_text(page.read_text(encoding="utf-8") + "\nAnd the currency.\n")
    refused = run("index", str(handbook), "--out", str(out), "--update")
    assert refused.exit_code == 1
    assert "--embed MODEL" in one_error_line(refused)
    assert np.array_equal(_vectors(out).matrix(), after.matrix())


def test_ingest_update_re_embeds_only_the_changed_document(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(4):
        (docs / f"page{n}.md").write_text(f"# Page {n}\n\nAbout topic {n} and tides.\n")
    out = tmp_path / "snap"
    first = run_json("ingest", str(docs), "--out", str(out), "--embed", MODEL,
                     "--embedding-cache", str(tmp_path / "a.sqlite"))  # fmt: skip
    assert (first["vectors"], first["embedded"]) == (4, 4)
    (docs / "page1.md").write_text("# Page 1\n\nNow about moons and orbits.\n")
    summary = run_json("ingest", str(docs), "--out", str(out), "--update", "--embed", MODEL,
                       "--embedding-cache", str(tmp_path / "b.sqlite"))  # fmt: skip
    assert (summary["changed"], summary["embedded"], summary["kept"]) == (1, 1, 3)
    hits = run_json("search", str(out), "moons orbits", "--mode", "dense", "--model", MODEL,
                    "--embedding-cache", str(tmp_path / "b.sqlite"))["hits"]  # fmt: skip
    assert hits[0]["id"] == "page1.md#0"
    assert not vectors_path(out).exists()


def test_a_snapshot_with_a_legacy_vectors_file_is_read_and_moved_into_the_snapshot(
    tmp_path: Path,
) -> None:
    out, cache = tmp_path / "snap", str(tmp_path / "cache.sqlite")
    run_json("index", HANDBOOK, "--out", str(out))
    kb = gw.KnowledgeBase.load(out)
    legacy = gw.VectorIndex.build(kb, gw.HashingEmbedder(32))
    legacy.save(vectors_path(out))  # as the old --embed wrote it
    hits = run_json("search", str(out), "rotate an api key", "--mode", "hybrid",
                    "--model", MODEL, "--embedding-cache", cache)["hits"]  # fmt: skip
    assert hits[0]["id"] == "security.api-key-rotation"
    refused = run("index", HANDBOOK, "--out", str(out), "--update")
    assert refused.exit_code == 1
    assert "legacy file" in one_error_line(refused)
    assert vectors_path(out).exists()  # left as it was
    moved = run_json("index", HANDBOOK, "--out", str(out), "--update", "--embed", MODEL,
                     "--embedding-cache", cache)  # fmt: skip
    assert moved["vectors"] == 80
    assert not vectors_path(out).exists()
    assert np.array_equal(_vectors(out).matrix(), legacy.matrix())


def test_a_failing_embedder_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "snap"
    run_json("index", HANDBOOK, "--out", str(out))
    before = gw.KnowledgeBase.describe_snapshot(out)["source_manifest_hash"]
    missing = tmp_path / "no-such-model"  # fails when the first text is embedded
    failed = run("index", HANDBOOK, "--out", str(out), "--embed", f"st:{missing}")
    assert failed.exit_code != 0
    assert str(missing) in one_error_line(failed)
    assert gw.KnowledgeBase.describe_snapshot(out)["source_manifest_hash"] == before
    assert gw.VectorIndex.from_section(gw.KnowledgeBase.load(out)) is None
