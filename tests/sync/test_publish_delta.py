"""A sync publish of a small change updates the snapshot with a delta segment on disk."""

from __future__ import annotations

import json
from pathlib import Path

from groundwire import KnowledgeBase
from groundwire.config import chunk_settings
from groundwire.index.delta import DeltaIndex
from groundwire.index.store import layout
from groundwire.ingest.chunking import chunks_to_documents
from synctools import syncer, write_config


def test_a_publish_of_one_changed_file_writes_a_delta(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    for n in range(30):
        (tmp_path / "docs" / f"n{n:02d}.md").write_text(f"# Note {n}\n\nInvoice archive {n}.\n")
    config = write_config(tmp_path, [{"id": "docs", "type": "folder", "path": "docs"}])
    with syncer(config) as sync:
        assert sync.run_once().published.mode == "rebuild"  # type: ignore[union-attr]
        (tmp_path / "docs" / "n03.md").write_text("# Note 3\n\nBadge desk salary review.\n")
        report = sync.run_once().published
        assert report is not None
        assert report.mode == "update"
        manifest = json.loads((tmp_path / "kb" / "manifest.json").read_text())
        assert manifest["features"] == [layout.DELTA_FEATURE]
        kb = KnowledgeBase.load(tmp_path / "kb")
        assert isinstance(kb._lexical, DeltaIndex)
        (tmp_path / "docs" / "n04.md").unlink()
        assert sync.run_once().published.mode == "update"  # type: ignore[union-attr]
        chunks = sync.ledger.current_chunks(["docs"])
    rebuilt = KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings())
    kb = KnowledgeBase.load(tmp_path / "kb")
    assert [(e.id, e.body) for e in kb] == [(e.id, e.body) for e in rebuilt]
    for query in ("badge desk salary", "invoice archive 4", "note 3"):
        got, want = kb.search(query, 5), rebuilt.search(query, 5)
        assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in want]
