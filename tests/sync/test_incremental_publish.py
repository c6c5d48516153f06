"""Publishing by incremental update equals a rebuild from the ledger, whatever happened."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundwire import KnowledgeBase, Principal, retrieve_evidence
from groundwire.config import chunk_settings
from groundwire.ingest.chunking import chunks_to_documents
from groundwire.sync.publish import PublishReport
from synctools import syncer, write_config

WORDS = ("invoice", "badge", "archive", "retention", "desk", "salary", "april", "laptop", "vpn")
NAMES = ("a", "b", "c", "d")
PRINCIPALS = (
    Principal("acme", "carol", ("hr",)),
    Principal("acme", "bob"),
    Principal("globex", "dave"),
)
QUERIES = ("invoice archive", "badge desk salary", "vpn laptop travel april")

# add or edit a file (name, words), delete it, withdraw it (then a crash or a publish),
# or a run whose process dies after the sources committed and before publishing
OPS = st.one_of(
    st.tuples(
        st.just("write"),
        st.sampled_from(NAMES),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
    ),
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just([])),
    st.tuples(st.just("withdraw"), st.sampled_from(NAMES), st.booleans().map(lambda c: [c])),
    st.tuples(st.just("crash"), st.just(""), st.just([])),
)


_CLOCK = [0]


def _write(path: Path, words: list[str]) -> None:
    path.write_text(f"# {words[0].title()}\n\n" + " ".join(words) + ".\n" * 3)
    _CLOCK[0] = max(path.stat().st_mtime_ns, _CLOCK[0]) + 10**9  # every write is seen
    os.utime(path, ns=(_CLOCK[0], _CLOCK[0]))


def _rebuilt(sync: object, folder: Path) -> Path:
    """A snapshot rebuilt from scratch from the ledger's current chunks."""
    ledger = sync.ledger  # type: ignore[attr-defined]
    chunks = ledger.current_chunks(["hr", "pub"])
    out = folder / "rebuilt"
    KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings()).save(out)
    return out


def _same(published: Path, rebuilt: Path) -> None:
    assert (
        KnowledgeBase.describe_snapshot(published)["source_manifest_hash"]
        == KnowledgeBase.describe_snapshot(rebuilt)["source_manifest_hash"]
    )
    a, b = KnowledgeBase.load(published), KnowledgeBase.load(rebuilt)
    assert [(e.id, e.body, e.metadata) for e in a] == [(e.id, e.body, e.metadata) for e in b]
    for principal in PRINCIPALS:
        for query in QUERIES:
            got = retrieve_evidence(a, query, principal=principal).excerpts
            want = retrieve_evidence(b, query, principal=principal).excerpts
            assert [(x.id, x.score) for x in got] == [(x.id, x.score) for x in want]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(OPS, min_size=1, max_size=7))
def test_updated_snapshots_equal_a_rebuild_from_the_ledger(
    tmp_path_factory: object, ops: list[tuple[str, str, list[object]]]
) -> None:
    folder: Path = tmp_path_factory.mktemp("sync")  # type: ignore[attr-defined]
    for name in ("hr", "pub"):
        (folder / name).mkdir()
    _write(folder / "hr" / "a.md", ["salary", "april", "review"])
    _write(folder / "pub" / "a.md", ["invoice", "archive", "retention"])
    config = write_config(
        folder,
        [
            {"id": "hr", "type": "folder", "path": "hr", "tenant": "acme", "acl": ["group:hr"]},
            {"id": "pub", "type": "folder", "path": "pub", "tenant": "acme"},
        ],
    )
    with syncer(config) as sync:
        first = sync.run_once().published
        assert first is not None
        assert first.mode == "rebuild"
    modes: list[str] = []
    for at, (op, name, args) in enumerate(ops):
        source = "hr" if at % 2 else "pub"
        path = folder / source / f"{name}.md"
        with syncer(config) as sync:
            if op == "write":
                _write(path, [str(w) for w in args])
            elif op == "delete" and path.exists():
                path.unlink()
            elif op == "withdraw" and sync.ledger.evidence(f"{source}/{name}.md"):
                sync.withdraw(f"{source}/{name}.md", "legal hold")
                if args[0]:
                    continue  # the process dies before publishing: the next run must catch up
            if op == "crash":
                _write(folder / "pub" / "b.md", ["badge", "desk", str(at)])
                sync.run_once(publish=False)  # committed, never published
                continue
            report: PublishReport | None = sync.run_once().published
            if report is not None:
                modes.append(report.mode)
            _same(folder / "kb", _rebuilt(sync, folder))
    with syncer(config) as sync:
        sync.run_once()
        _same(folder / "kb", _rebuilt(sync, folder))
    assert set(modes) <= {"update"}


def test_a_damaged_or_foreign_snapshot_is_rebuilt_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    _write(tmp_path / "docs" / "a.md", ["invoice", "archive"])
    config = write_config(tmp_path, [{"id": "docs", "type": "folder", "path": "docs"}])
    with syncer(config) as sync:
        assert sync.run_once().published.reason == "no snapshot yet"  # type: ignore[union-attr]
        _write(tmp_path / "docs" / "b.md", ["badge", "desk"])
        report = sync.run_once().published
        assert report is not None
        assert (report.mode, report.reason) == ("update", None)
        # something else wrote the snapshot: it is not the one last published
        KnowledgeBase.from_documents(
            [{"id": "x", "title": "X", "text": "other"}], chunk_settings()
        ).save(tmp_path / "kb")
        _write(tmp_path / "docs" / "b.md", ["badge", "printed"])
        report = sync.run_once().published
        assert report is not None
        assert report.mode == "rebuild"
        assert report.reason == "the snapshot is damaged or not the one last published"
        (tmp_path / "state" / "published.json").write_text("{not json")
        report = sync.publish(force=True)
        assert report is not None
        assert (report.mode, report.reason) == ("rebuild", "no record of the last publish")
        assert sync.publish(force=True).mode == "update"  # type: ignore[union-attr]
        _same(tmp_path / "kb", _rebuilt_docs(sync, tmp_path))


def _rebuilt_docs(sync: object, folder: Path) -> Path:
    chunks = sync.ledger.current_chunks(["docs"])  # type: ignore[attr-defined]
    out = folder / "rebuilt"
    KnowledgeBase.from_documents(chunks_to_documents(chunks), chunk_settings()).save(out)
    return out
