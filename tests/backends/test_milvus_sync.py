"""Incremental sync to Milvus (library and ``groundwire export``): what changed is written,
what went is deleted, the collection records the snapshot it mirrors; failures are clear."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import load_by_path
from typer.testing import CliRunner

import groundwire as gw
from groundwire.backends.milvus import delete_entries, entries_rows, upsert_entries
from groundwire.backends.milvus import sync as sync_module
from groundwire.backends.milvus.client import connect
from groundwire.backends.milvus.sync import snapshot_digest
from groundwire.cli import app

helpers = load_by_path("backend_helpers", Path(__file__).parent / "backend_helpers.py")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not helpers.HAVE_MILVUS, reason=helpers.MILVUS_MISSING),
]
HANDBOOK = Path(__file__).resolve().parents[2] / "examples" / "handbook"


def entry(entry_id: str, body: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": entry_id,
        "title": entry_id.replace(".", " "),
        "summary": f"about {entry_id}",
        "domain": "ops",
        "integrations": [],
        "body": body,
        **extra,
    }


def kb_of(*sources: tuple[str, list[dict[str, Any]]]) -> gw.KnowledgeBase:
    return gw.KnowledgeBase.from_sources(
        [{"id": sid, "version": "v1", "entries": entries} for sid, entries in sources]
    )


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("sync") / "milvus.db")


@pytest.fixture
def conn(uri: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    connection = connect(uri, f"c_{request.node.name.replace('[', '_').replace(']', '_')}"[:60])
    try:
        yield connection
    finally:
        connection.drop()
        connection.close()


def search_ids(conn: Any, query: str) -> list[str]:
    backend = gw.MilvusBackend("", conn.collection, connection=conn)
    return [hit.id for hit in backend.lexical(query, gw.Filter(), 10)]


def test_a_sync_writes_only_what_changed(conn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    analyzed: list[str] = []
    row_of = sync_module.entry_row

    def counting_row(one: gw.KnowledgeEntry, *args: Any) -> dict[str, Any]:
        analyzed.append(one.id)
        return row_of(one, *args)

    monkeypatch.setattr(sync_module, "entry_row", counting_row)
    a = [entry("a.one", "rotate keys"), entry("a.two", "deploy pods")]
    b = [entry("b.one", "refund invoices"), entry("b.two", "audit logs")]
    first = gw.sync_milvus(kb_of(("a", a), ("b", b)), "", connection=conn)
    assert (first.upserted, first.deleted, first.unchanged) == (4, 0, 0)
    analyzed.clear()
    again = gw.sync_milvus(kb_of(("a", a), ("b", b)), "", connection=conn)
    assert (again.upserted, again.deleted, again.unchanged) == (0, 0, 4)
    assert analyzed == []  # unchanged entries are compared by digest, never analyzed
    assert again.snapshot == first.snapshot
    # One file edited (one entry changed, one added), one source removed.
    edited = [entry("a.one", "rotate webhook secrets"), a[1], entry("a.three", "page oncall")]
    kb = kb_of(("a", edited))
    third = gw.sync_milvus(kb, "", connection=conn)
    assert (third.upserted, third.deleted, third.unchanged) == (2, 2, 1)
    assert analyzed == ["a.one", "a.three"]  # the edited file's changed entries only
    assert third.snapshot != first.snapshot
    backend = gw.MilvusBackend("", conn.collection, connection=conn)
    assert backend.stats().count == 3
    assert (
        backend.stats().snapshot
        == third.snapshot
        == snapshot_digest(kb, entries_rows(kb, kb.entries))
    )
    assert search_ids(conn, "webhook secrets") == ["a.one"]
    assert search_ids(conn, "refund invoices") == []
    assert search_ids(conn, "keys") == []  # the old text is gone


def test_upsert_and_delete_by_id_and_by_source(conn: Any) -> None:
    kb = kb_of(("a", [entry("a.one", "rotate keys")]), ("b", [entry("b.one", "rotate pods")]))
    gw.sync_milvus(kb, "", connection=conn)
    changed = kb_of(("a", [entry("a.one", "rotate certificates")]), ("b", []))
    upsert_entries(conn, entries_rows(changed, changed.entries))
    assert search_ids(conn, "certificates") == ["a.one"]
    delete_entries(conn, sources=["b"])
    assert search_ids(conn, "rotate") == ["a.one"]
    delete_entries(conn, ids=["a.one"])
    assert search_ids(conn, "rotate") == []


def test_a_collection_for_other_settings_is_refused_then_recreated(conn: Any) -> None:
    kb = kb_of(("a", [entry("a.one", "rotate keys")]))
    gw.sync_milvus(kb, "", connection=conn)
    docs = gw.KnowledgeBase.from_documents([gw.Document("d1", "Keys", "rotate keys")])
    with pytest.raises(gw.BackendError, match="recreate"):
        gw.sync_milvus(docs, "", connection=conn)
    vectors = gw.VectorIndex.build(kb, gw.HashingEmbedder(16))
    with pytest.raises(gw.BackendError, match="vector model"):
        gw.sync_milvus(kb, "", vectors=vectors, connection=conn)
    assert search_ids(conn, "rotate") == ["a.one"]  # the refused syncs changed nothing
    report = gw.sync_milvus(docs, "", connection=conn, recreate=True)
    assert report.upserted == 1
    assert search_ids(conn, "rotate") == ["d1"]


def test_opening_what_is_not_there_says_how_to_create_it(uri: str) -> None:
    with pytest.raises(gw.BackendError, match="groundwire export"):
        gw.MilvusBackend(uri, "never_exported")
    with pytest.raises(gw.BackendError, match="collection name"):
        gw.MilvusBackend(uri, "bad-name!")


def test_an_oversized_entry_is_refused_with_the_fix(conn: Any) -> None:
    big = kb_of(("a", [entry("a.big", " ".join(f"w{n}" for n in range(20_000)))]))
    with pytest.raises(gw.BackendError, match="split it"):
        gw.sync_milvus(big, "", connection=conn)


# -- the command line ---------------------------------------------------------------------
def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_export_command(tmp_path: Path) -> None:
    target = str(tmp_path / "kb.db")
    snapshot = tmp_path / "handbook.snapshot"
    kb = gw.KnowledgeBase.from_sources(gw.load_sources(HANDBOOK))
    kb.save(snapshot)
    gw.VectorIndex.build(kb, gw.HashingEmbedder(16)).save(
        snapshot.with_name(snapshot.name + ".vectors")
    )
    first = run("export", str(snapshot), "--milvus", target, "--collection", "hb", "--json")
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert data["upserted"] == len(kb)
    assert data["vectors"].startswith("hashing")
    second = run("export", str(snapshot), "--milvus", target, "--collection", "hb")
    assert second.exit_code == 0
    assert f"0 written, 0 deleted, {len(kb)} unchanged" in second.stdout
    with gw.MilvusBackend(target, "hb") as backend:
        assert backend.stats().snapshot == data["snapshot"]
        assert backend.stats().dimensions == 16
        hits = backend.lexical("rotate an api key", gw.Filter(), 3)
        assert hits[0].id == "security.api-key-rotation"
    # From the sources folder, without vectors: refused, the collection holds vectors.
    refused = run("export", str(HANDBOOK), "--milvus", target, "--collection", "hb")
    assert refused.exit_code == 1
    assert refused.stderr.count("\n") == 1
    assert "--recreate" in refused.stderr
    assert "Traceback" not in refused.output


def test_export_usage_errors(tmp_path: Path) -> None:
    missing = run("export", str(tmp_path / "nope"), "--milvus", str(tmp_path / "x.db"))
    assert missing.exit_code == 1
    assert "no such file" in missing.stderr
    no_uri = run("export", str(HANDBOOK))
    assert no_uri.exit_code == 2
    bad_name = run(
        "export", str(HANDBOOK), "--milvus", str(tmp_path / "x.db"), "--collection", "a-b"
    )
    assert bad_name.exit_code == 1
    assert "collection name" in bad_name.stderr
