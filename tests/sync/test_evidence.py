"""The evidence lifecycle end to end: replay, supersession, withdrawal, citation resolution."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from groundwire import (
    Citation,
    HashingEmbedder,
    KnowledgeBase,
    Principal,
    VectorIndex,
    retrieve_evidence,
    validate_citations,
)
from groundwire.sync.publish import SnapshotChanges
from synctools import search_ids, syncer, write_config

ACME = Principal("acme", "reader")


def _docs(tmp_path: Path, tenant: str | None = "acme") -> Path:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "retention.md").write_text(
        "# Retention\n\nInvoices are kept for ten years in the archive.\n"
    )
    (docs / "badges.md").write_text("# Badges\n\nLost badges are replaced at the front desk.\n")
    source = {"id": "docs", "type": "folder", "path": "docs"}
    if tenant:
        source["tenant"] = tenant
    return write_config(tmp_path, [source])


def _touch(path: Path, text: str) -> None:
    path.write_text(text)
    stamp = path.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(stamp, stamp))


def test_replaying_identical_bytes_with_the_same_plan_adds_no_records(tmp_path: Path) -> None:
    config = _docs(tmp_path)
    with syncer(config) as sync:
        sync.run_once()
        counts = sync.ledger.counts()
        sync.checkpoints.forget("docs")  # the checkpoint is gone: everything is read again
        report = sync.run_once().sources[0]
        assert not report.new
        assert not report.changed
        assert len(report.replayed) == 2
        assert sync.ledger.counts() == counts
        assert report.originals_stored == 0
        assert report.provenance_added == 0


def test_a_new_version_or_plan_supersedes_and_old_citations_are_rejected(tmp_path: Path) -> None:
    config = _docs(tmp_path)
    with syncer(config) as sync:
        sync.run_once()
        old = KnowledgeBase.load(tmp_path / "kb").get("docs/retention.md#0")
        assert old is not None
        _touch(
            tmp_path / "docs" / "retention.md",
            "# Retention\n\nInvoices are kept for seven years.\n",
        )
        report = sync.run_once().sources[0]
        assert report.changed == ["docs/retention.md"]
        states = [r.state for r in sync.ledger.evidence("docs/retention.md")]
        assert states == ["current", "superseded"]
        new = KnowledgeBase.load(tmp_path / "kb").get("docs/retention.md#0")
        assert new is not None
        assert new.version != old.version
        resolver = sync.resolver("acme")
        answer = f"Ten years [KB:{old.id}@{old.version}], now seven [KB:{new.id}@{new.version}]."
        checks = validate_citations(answer, [old, new], resolver=resolver).citations
        assert [c.problem for c in checks] == ["superseded", None]
        assert "is current" in (checks[0].detail or "")
        resolved = resolver.resolve(Citation(new.id, new.version), new)
        assert resolved.ok
        assert resolved.locator == (0, 0, len(new.body))
        assert (
            resolved.originals[0][0] == sync.ledger.evidence("docs/retention.md")[0].originals[0][0]
        )

    # a new extractor plan (here: chunking) supersedes identical bytes too
    config.write_text(
        config.read_text().replace("sources:", "chunking: {size: 400, overlap: 40}\nsources:")
    )
    with syncer(config) as sync:
        sync.checkpoints.forget("docs")
        report = sync.run_once().sources[0]
        assert sorted(report.changed) == ["docs/badges.md", "docs/retention.md"]


def test_foreign_tenant_and_tampered_evidence_is_rejected(tmp_path: Path) -> None:
    config = _docs(tmp_path)
    with syncer(config) as sync:
        sync.run_once()
        chunk = KnowledgeBase.load(tmp_path / "kb").get("docs/badges.md#0")
        assert chunk is not None
        citation = Citation(chunk.id, chunk.version)
        assert sync.resolver("acme").resolve(citation, chunk).ok
        assert sync.resolver("globex").resolve(citation, chunk).problem == "foreign-tenant"
        assert sync.resolver(None).resolve(citation, chunk).problem == "foreign-tenant"
        forged = replace(chunk, body="Lost badges cost 500 EUR.")
        assert sync.resolver("acme").resolve(citation, forged).problem == "tampered"
        assert (
            sync.resolver("acme").resolve(Citation(chunk.id, "000000000000"), chunk).problem
            == "unknown-evidence"
        )

        evidence = retrieve_evidence(
            KnowledgeBase.load(tmp_path / "kb"), "lost badges front desk", principal=ACME
        )
        excerpt = evidence.excerpts[0]
        assert sync.resolver("acme").resolve(Citation(excerpt.id, excerpt.version), excerpt).ok
        assert (
            sync.resolver("acme")
            .resolve(
                Citation(excerpt.id, excerpt.version), replace(excerpt, text="Badges are free.")
            )
            .problem
            == "tampered"
        )

        digest = sync.ledger.evidence("docs/badges.md")[0].originals[0][0]
        original = sync.custody.store.root / "objects" / digest[:2] / digest  # type: ignore[attr-defined]
        os.chmod(original, 0o644)
        original.write_bytes(b"altered original")
        problem = sync.resolver("acme").resolve(citation, chunk)
        assert problem.problem == "tampered"
        assert "altered" in problem.detail

    with sqlite3.connect(tmp_path / "state" / "ledger.sqlite") as db:
        db.execute(
            "UPDATE fragments SET text = 'edited in place' WHERE chunk_id = 'docs/retention.md#0'"
        )
    with syncer(config) as sync:
        retention = KnowledgeBase.load(tmp_path / "kb").get("docs/retention.md#0")
        assert retention is not None
        assert (
            sync.resolver("acme").resolve(Citation(retention.id, retention.version)).problem
            == "tampered"
        )


def test_shared_evidence_resolves_for_every_tenant(tmp_path: Path) -> None:
    with syncer(_docs(tmp_path, tenant=None)) as sync:
        sync.run_once()
        chunk = KnowledgeBase.load(tmp_path / "kb").get("docs/badges.md#0")
        assert chunk is not None
        for tenant in ("acme", "globex", None):
            assert sync.resolver(tenant).resolve(Citation(chunk.id, chunk.version), chunk).ok


def test_a_withdrawn_document_is_unreachable_through_search_evidence_citations_and_vectors(
    tmp_path: Path,
) -> None:
    config = _docs(tmp_path)
    with syncer(config, embedder=HashingEmbedder(64)) as sync:
        sync.run_once()
        kb = KnowledgeBase.load(tmp_path / "kb")
        before = kb.get("docs/retention.md#0")
        assert before is not None
        assert search_ids(tmp_path / "kb", "invoices archive ten years") == ["docs/retention.md"]
        vectors = VectorIndex.from_section(kb)  # the snapshot holds its vectors
        assert vectors is not None
        assert len(vectors) == len(kb) == 2
        assert not (tmp_path / "kb.vectors").exists()  # no side file

        withdrawn = sync.withdraw("docs/retention.md", "legal hold 2026-17")
        assert list(withdrawn) == ["docs/retention.md"]
        # withdrawn first: the ledger refuses the citation before any snapshot is written
        assert (
            sync.resolver("acme").resolve(Citation(before.id, before.version)).problem
            == "withdrawn"
        )
        [record] = sync.ledger.evidence("docs/retention.md")
        assert record.state == "withdrawn"
        assert record.text is None
        assert sync.ledger.fragment(record.id, 0).text is None  # type: ignore[union-attr]

        report = sync.run_once()
        assert report.published is not None
        assert report.published.documents == 1
        kb = KnowledgeBase.load(tmp_path / "kb")
        assert "docs/retention.md#0" not in kb
        assert not search_ids(tmp_path / "kb", "invoices archive ten years")
        evidence = retrieve_evidence(kb, "invoices archive ten years", principal=ACME)
        assert all(e.source_id != "docs/retention.md" for e in evidence.excerpts)
        vectors = VectorIndex.from_section(kb)
        assert vectors is not None
        assert vectors.ids == ("docs/badges.md#0",)  # the withdrawn chunk's row is gone
        check = validate_citations(
            f"Kept ten years [KB:{before.id}@{before.version}].",
            iter([before]),  # offered evidence read once, by the id check and the resolver
            resolver=sync.resolver("acme"),
        )
        assert not check.ok
        assert check.citations[0].problem == "withdrawn"
        assert "legal hold 2026-17" in (check.citations[0].detail or "")

        # a withdrawn document stays withdrawn when its source changes again
        _touch(
            tmp_path / "docs" / "retention.md",
            "# Retention\n\nInvoices are kept for eleven years.\n",
        )
        again = sync.run_once().sources[0]
        assert not again.new
        assert not again.changed
        assert "withdrawn: legal hold 2026-17" in again.skipped[0].reason
        assert sync.ledger.reinstate("docs/retention.md")
        sync.checkpoints.forget("docs")
        assert sync.run_once().sources[0].new == ["docs/retention.md"]


def test_withdrawing_a_whole_source_and_removing_stale_vectors(tmp_path: Path) -> None:
    config = _docs(tmp_path)
    with syncer(config, embedder=HashingEmbedder(64)) as sync:
        sync.run_once()
    assert VectorIndex.from_section(KnowledgeBase.load(tmp_path / "kb")) is not None
    legacy = tmp_path / "kb.vectors"  # a side file an older publisher left beside it
    VectorIndex.build(KnowledgeBase.load(tmp_path / "kb"), HashingEmbedder(64)).save(legacy)
    with syncer(config) as sync:  # no embedder now: the old vectors must not outlive the text
        removed = sync.withdraw("docs", "source retired")
        assert sorted(removed) == ["docs/badges.md", "docs/retention.md"]
        published = sync.run_once().published
        assert published is not None
        assert published.chunks == 0
        assert published.vectors is None
    assert not legacy.exists()
    assert VectorIndex.from_section(KnowledgeBase.load(tmp_path / "kb")) is None
    assert len(KnowledgeBase.load(tmp_path / "kb")) == 0
    with syncer(config) as sync, pytest.raises(Exception, match="neither a configured source"):
        sync.withdraw("docs/nothing.md", "typo")


def test_synced_labels_are_enforced_by_the_access_model(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "salaries.md").write_text("# Salaries\n\nSalary bands are reviewed every April.\n")
    config = write_config(
        tmp_path,
        [{"id": "hr", "type": "folder", "path": "docs", "tenant": "acme", "acl": ["group:hr"]}],
    )
    with syncer(config) as sync:
        sync.run_once()
    kb = KnowledgeBase.load(tmp_path / "kb")
    question = "salary bands reviewed"

    def sources(principal: Principal) -> list[str]:
        return [e.source_id for e in retrieve_evidence(kb, question, principal=principal).excerpts]

    assert sources(Principal("acme", "carol", ("hr",))) == ["hr/salaries.md"]
    assert sources(Principal("acme", "bob", ("eng",))) == []
    assert sources(Principal("globex", "dave", ("hr",))) == []


def test_each_publish_names_what_an_incremental_update_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contract issue 11's ``KnowledgeBase.update`` plugs into: new documents, chunks
    that left (superseded or withdrawn), and the previous snapshot when it is sound."""
    from groundwire.sync import publish

    seen: list[tuple[bool, SnapshotChanges]] = []
    rebuild = publish.updated_knowledge_base

    def spy(previous, ledger, sources, changes, published=None):  # type: ignore[no-untyped-def]
        seen.append((previous is not None and published is not None, changes))
        return rebuild(previous, ledger, sources, changes, published)

    monkeypatch.setattr(publish, "updated_knowledge_base", spy)
    config = _docs(tmp_path)
    with syncer(config) as sync:
        sync.run_once()
        _touch(tmp_path / "docs" / "badges.md", "# Badges\n\nBadges are printed at reception.\n")
        sync.run_once()
        sync.withdraw("docs/retention.md", "legal hold")
        sync.run_once()
        assert sync.run_once().published is None  # nothing changed: nothing published
    first, changed, withdrawn = seen
    assert first == (False, SnapshotChanges(("docs/badges.md", "docs/retention.md"), ()))
    assert changed == (True, SnapshotChanges(("docs/badges.md",), ("docs/badges.md#0",)))
    assert withdrawn == (True, SnapshotChanges((), ("docs/retention.md#0",)))
