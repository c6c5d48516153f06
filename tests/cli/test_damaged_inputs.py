"""Every command fed damaged input: one ``error:`` line, a non-zero exit, never a traceback.

Damage: a truncated file, a FIFO, deep nesting, a bit-flipped snapshot, and snapshots
whose manifest was deleted or replaced by a folder or a FIFO (issue 9, defect 9: those
were served as a documents folder of their own array files, exit 0). ``sync`` is fed a
damaged configuration, damaged state (checkpoint store, evidence ledger) and damaged
sources; a damaged snapshot it publishes to is rebuilt from the ledger. The matrix runs
in-process; one case of each kind also runs as a real subprocess (what a user sees). A
hang is caught by the test timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from typer.testing import CliRunner

from groundwire import KnowledgeBase, load_sources
from groundwire.cli import app
from synctools import message, write_config, write_mbox

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
HANDBOOK = ROOT / "examples" / "handbook"
DOCS = ROOT / "examples" / "docs"
DEEP = "[" * 5_000 + "]" * 5_000
LAUNCH = "from groundwire.cli import main; main()"


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def groundwire(*args: str | Path, real: bool = False) -> Ran:
    """Run the CLI: in-process (fast), or with ``real`` as a subprocess, as a user would."""
    argv = [str(arg) for arg in args]
    env = {"OPENAI_API_KEY": "unused", "COLUMNS": "200"}
    if real:
        done = subprocess.run(
            [sys.executable, "-c", LAUNCH, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, **env},
        )
        return Ran(done.returncode, done.stdout, done.stderr)
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return Ran(result.exit_code, result.stdout, result.stderr)


def assert_one_error(done: Ran, *fragments: str) -> str:
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    assert "bug in groundwire" not in output  # reached a real error, not the last resort
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert done.returncode != 0
    for fragment in fragments:
        assert fragment in errors[0]
    return errors[0]


# -- the damaged inputs ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An entries snapshot (handbook) and a documents snapshot (examples/docs)."""
    root = tmp_path_factory.mktemp("snapshots")
    KnowledgeBase.from_sources(load_sources(HANDBOOK)).save(root / "entries")
    done = groundwire("ingest", DOCS, "--out", root / "docs", real=True)
    assert done.returncode == 0, done.stderr
    return {"entries": root / "entries", "docs": root / "docs"}


def _copy(snapshot: Path, into: Path) -> Path:
    target = into / snapshot.name
    shutil.copytree(snapshot, target)
    return target


def bit_flip(snapshot: Path, into: Path, part: str = "links.indptr.*.npy") -> Path:
    target = _copy(snapshot, into)
    [victim] = target.glob(part)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x40  # in the array data, past the .npy header
    victim.write_bytes(bytes(data))
    return target


def truncated(snapshot: Path, into: Path) -> Path:
    target = _copy(snapshot, into)
    [victim] = target.glob("entries.*.jsonl")
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    return target


def manifest_replaced(how: str) -> Callable[[Path, Path], Path]:
    def damage(snapshot: Path, into: Path) -> Path:
        target = _copy(snapshot, into)
        manifest = target / "manifest.json"
        manifest.unlink()
        if how == "folder":
            manifest.mkdir()
        elif how == "fifo":
            os.mkfifo(manifest)
        return target

    return damage


SNAPSHOT_DAMAGE = {
    "bit-flip relations": bit_flip,
    "bit-flip entries": lambda s, into: bit_flip(s, into, "entries.*.jsonl"),
    "truncated entries": truncated,
    "manifest deleted": manifest_replaced("deleted"),
    "manifest a folder": manifest_replaced("folder"),
    "manifest a FIFO": manifest_replaced("fifo"),
}


def source_damage(kind: str, into: Path) -> Path:
    """A knowledge base that cannot be read: truncated, a FIFO, or nested too deep."""
    if kind == "truncated yaml":  # a source file cut off in the middle of an entry
        path = into / "kb.yaml"
        path.write_text("id: kb\nversion: '1'\nentries:\n  - {id: a, title: [Rotate an API")
        return path
    if kind == "fifo source file":
        path = into / "kb.yaml"
        os.mkfifo(path)
        return path
    if kind == "fifo entry":
        folder = into / "kb"
        shutil.copytree(HANDBOOK, folder)
        os.mkfifo(folder / "zz-pipe.md")
        return folder
    if kind == "deep yaml":
        path = into / "kb.yaml"
        path.write_text("id: kb\nversion: '1'\nentries: " + "[" * 5_000, encoding="utf-8")
        return path
    raise AssertionError(kind)


SOURCE_DAMAGE = ["truncated yaml", "fifo source file", "fifo entry", "deep yaml"]


def documents_damage(kind: str, into: Path) -> Path:
    """A documents folder whose only files are unusable: nothing can be indexed."""
    folder = into / "docs"
    folder.mkdir()
    if kind == "deep json":
        (folder / "deep.json").write_text(DEEP, encoding="utf-8")
    elif kind == "fifo":
        os.mkfifo(folder / "pipe.md")
    elif kind == "truncated pdf":
        (folder / "manual.pdf").write_bytes(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog")
    return folder


DOCUMENTS_DAMAGE = ["deep json", "fifo", "truncated pdf"]

# Each command, with what it needs besides KB.
KB_COMMANDS = {
    "ground": ["rotate api key"],
    "search": ["rotate api key"],
    "ask": ["rotate api key", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"],
    "status": [],
    "validate": [],
    # Damaged input fails before any connection; the URI's folder does not exist anyway.
    "export": ["--milvus", "/nonexistent-groundwire-dir/kb.db"],
}
DOCUMENT_COMMANDS = ("ground", "search", "ask")


# -- snapshots: ground, search, ask, status, validate ------------------------------------------
# validate opens both kinds of snapshot alike (no documents-or-entries peek): one suffices.
SNAPSHOT_CASES = [
    (command, which)
    for command in sorted(KB_COMMANDS)
    for which in ("entries", "docs")
    if not (command == "validate" and which == "docs")
]


@pytest.mark.parametrize("damage", sorted(SNAPSHOT_DAMAGE))
@pytest.mark.parametrize(("command", "which"), SNAPSHOT_CASES)
def test_a_damaged_snapshot_is_one_error(
    snapshots: dict[str, Path], tmp_path: Path, command: str, which: str, damage: str
) -> None:
    target = SNAPSHOT_DAMAGE[damage](snapshots[which], tmp_path)
    real = command == "search" and which == "docs"
    done = groundwire(command, target, *KB_COMMANDS[command], real=real)
    line = assert_one_error(done)
    assert "documents" not in line.split(":", 2)[-1] or "snapshot" in line
    assert "no documents to index" not in line  # never read as a documents folder


def test_a_bit_flipped_snapshot_never_answers(snapshots: dict[str, Path], tmp_path: Path) -> None:
    # Old: IndexError traceback from the documents-or-entries peek (format 1 relations).
    target = bit_flip(snapshots["entries"], tmp_path)
    result = groundwire("search", target, "rotate api key")
    assert_one_error(result, "does not match its XXH3-128 check")


@pytest.mark.parametrize("damage", sorted(SNAPSHOT_DAMAGE))
def test_ingest_refuses_a_snapshot_as_documents(
    snapshots: dict[str, Path], tmp_path: Path, damage: str
) -> None:
    target = SNAPSHOT_DAMAGE[damage](snapshots["docs"], tmp_path)
    out = tmp_path / "out"
    assert_one_error(groundwire("ingest", target, "--out", out), "is a snapshot folder")
    assert not out.exists()


# -- knowledge sources: ground, search, ask, status, validate, index ------------------------------
@pytest.mark.parametrize("damage", SOURCE_DAMAGE)
@pytest.mark.parametrize("command", [*sorted(KB_COMMANDS), "index"])
def test_unreadable_knowledge_is_one_error(tmp_path: Path, command: str, damage: str) -> None:
    kb = source_damage(damage, tmp_path)
    if command == "index":
        done = groundwire("index", kb, "--out", tmp_path / "out")
        assert not (tmp_path / "out").exists()
    else:
        done = groundwire(command, kb, *KB_COMMANDS[command], real=command == "validate")
    expected = {
        "truncated yaml": "invalid YAML",
        "fifo source file": "not a regular file (a FIFO)",
        "fifo entry": "not a regular file (a FIFO)",
        "deep yaml": "nested more than 100 levels deep",
    }[damage]
    assert_one_error(done, expected)


# -- documents: ground, search, ask, ingest ------------------------------------------------
@pytest.mark.parametrize("damage", DOCUMENTS_DAMAGE)
@pytest.mark.parametrize("command", [*DOCUMENT_COMMANDS, "ingest"])
def test_documents_that_cannot_be_indexed_are_one_error(
    tmp_path: Path, command: str, damage: str
) -> None:
    folder = documents_damage(damage, tmp_path)
    if command == "ingest":
        done = groundwire("ingest", folder, "--out", tmp_path / "out")
    else:
        done = groundwire(command, folder, *KB_COMMANDS[command], real=command == "ground")
    reason = {
        "deep json": "nested more than 100 levels deep",
        "fifo": "not a regular file (a FIFO)",
        "truncated pdf": "cannot read the PDF",
    }[damage]
    assert_one_error(done, "no documents to index", reason)


def test_a_fifo_given_as_documents_is_one_error(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "notes.md")
    assert_one_error(groundwire("search", tmp_path / "notes.md", "x"), "a FIFO")


# -- eval ------------------------------------------------------------------------------------
def _beir(root: Path, corpus: str) -> Path:
    root.mkdir()
    (root / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "rotate"}\n', encoding="utf-8")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("truncated", "invalid JSON"),
        ("deep", "nested more than 100 levels deep"),
        ("fifo", "a FIFO"),
    ],
)
def test_eval_on_a_damaged_dataset_is_one_error(tmp_path: Path, damage: str, expected: str) -> None:
    good = '{"_id": "d1", "title": "Keys", "text": "rotate api keys"}\n'
    if damage == "truncated":
        root = _beir(tmp_path / "beir", good + good[:25])
    elif damage == "deep":
        root = _beir(tmp_path / "beir", good + '{"_id": "d2", "text": "x", "m": ' + DEEP + "}\n")
    else:
        root = _beir(tmp_path / "beir", good)
        (root / "queries.jsonl").unlink()
        os.mkfifo(root / "queries.jsonl")
    assert_one_error(groundwire("eval", root, real=damage == "fifo"), expected)


# -- memory: add, recall, forget, show, graph, stats, review, worker ---------------------------
MEMORY_COMMANDS = {
    "add": ["Rotate the API key every 90 days."],
    "recall": ["api key"],
    "forget": ["mem-1"],
    "show": ["mem-1"],
    "graph": [],
    "stats": [],
    "review": [],
    "worker": ["--once", "--provider", "none"],
}


@pytest.fixture(scope="module")
def memory_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("memory") / "agent.db"
    for text in ("Alice rotates the API keys.", "Webhooks retry eight times."):
        done = groundwire("memory", "add", store, text)
        assert done.returncode == 0, done.stderr
    return store


def memory_damage(kind: str, store: Path, into: Path) -> Path:
    target = into / "agent.db"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    elif kind == "truncated":
        target.write_bytes(store.read_bytes()[:100])
    elif kind == "bit-flip header":
        data = bytearray(store.read_bytes())
        data[0] ^= 0x20  # "SQLite format 3" no more
        target.write_bytes(bytes(data))
    return target


@pytest.mark.parametrize("damage", ["fifo", "folder", "truncated", "bit-flip header"])
@pytest.mark.parametrize("command", sorted(MEMORY_COMMANDS))
def test_a_damaged_memory_store_is_one_error(
    memory_store: Path, tmp_path: Path, command: str, damage: str
) -> None:
    target = memory_damage(damage, memory_store, tmp_path)
    real = command == "add" and damage == "fifo"
    assert_one_error(groundwire("memory", command, target, *MEMORY_COMMANDS[command], real=real))


# -- sync: the configuration, the state folder, the sources, the snapshot ----------------------
SYNC_CONFIG_DAMAGE = {
    "truncated yaml": "invalid YAML",
    "fifo": "not a regular file (a FIFO)",
    "folder": "not a regular file (a folder)",
    "deep yaml": "nested more than 100 levels deep",
    "not utf-8": "not valid UTF-8",
}


def _sync_setup(root: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "keys.md").write_text("# Keys\n\nRotate the API keys every 90 days.\n")
    write_mbox(root / "help.mbox", [message("1@acme", "Desks", "Book desks before 9.")])
    return write_config(
        root,
        [
            {"id": "docs", "type": "folder", "path": "docs"},
            {"id": "mail", "type": "mbox", "path": "help.mbox"},
        ],
    )


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a configuration, its state and its published snapshot."""
    root = tmp_path_factory.mktemp("synced") / "site"
    done = groundwire("sync", _sync_setup(root))
    assert done.returncode == 0, done.stderr
    return root


@pytest.mark.parametrize("damage", sorted(SYNC_CONFIG_DAMAGE))
def test_sync_of_a_damaged_configuration_is_one_error(tmp_path: Path, damage: str) -> None:
    config = _sync_setup(tmp_path)
    text = config.read_text(encoding="utf-8")
    config.unlink()
    if damage == "truncated yaml":  # cut off inside a flow mapping
        config.write_text(text + "chunking: {size: 800, overl", encoding="utf-8")
    elif damage == "fifo":
        os.mkfifo(config)
    elif damage == "folder":
        config.mkdir()
    elif damage == "deep yaml":
        config.write_text("sources: " + "[" * 5_000, encoding="utf-8")
    else:
        config.write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    done = groundwire("sync", config, real=damage == "fifo")
    assert_one_error(done, SYNC_CONFIG_DAMAGE[damage])
    assert not (tmp_path / "state").exists()
    assert not (tmp_path / "kb").exists()


@pytest.mark.parametrize("damage", ["fifo", "folder", "truncated", "bit-flip header"])
@pytest.mark.parametrize("store", ["checkpoints", "ledger"])
def test_sync_with_a_damaged_state_store_is_one_error_and_keeps_the_snapshot(
    synced: Path, tmp_path: Path, store: str, damage: str
) -> None:
    site = tmp_path / "site"
    shutil.copytree(synced, site)
    database = site / "state" / f"{store}.sqlite"
    good = tmp_path / "good.sqlite"
    database.rename(good)
    memory_damage(damage, good, site / "state").rename(database)  # the same four damages
    (site / "docs" / "new.md").write_text("# New\n\nA change that must not be published.\n")
    before = sorted(p.name for p in (site / "kb").iterdir())
    done = groundwire("sync", site / "sync.yaml", real=damage == "fifo" and store == "ledger")
    word = "checkpoint store" if store == "checkpoints" else "evidence ledger"
    assert_one_error(done, f"{store}.sqlite", f"cannot open the {word}")
    assert sorted(p.name for p in (site / "kb").iterdir()) == before
    assert len(KnowledgeBase.load(site / "kb")) == 2


@pytest.mark.parametrize("damage", ["fifo", "folder", "missing"])
def test_sync_of_a_damaged_source_names_it_and_syncs_the_others(
    tmp_path: Path, damage: str
) -> None:
    config = _sync_setup(tmp_path)
    mbox = tmp_path / "help.mbox"
    mbox.unlink()
    if damage == "fifo":
        os.mkfifo(mbox)
    elif damage == "folder":
        mbox.mkdir()
    done = groundwire("sync", config, real=damage == "fifo")
    assert_one_error(done, "some sources failed")
    reason = {
        "fifo": "not a regular file (a FIFO)",
        "folder": "not a regular file (a folder)",
        "missing": "no such mbox file",
    }[damage]
    assert f"error mail: {mbox}: {reason}" in " ".join(done.stdout.split())
    assert [str(e.metadata["source_id"]) for e in KnowledgeBase.load(tmp_path / "kb")] == [
        "docs/keys.md"
    ]


def test_a_fifo_in_a_synced_folder_is_skipped_with_its_reason(tmp_path: Path) -> None:
    config = _sync_setup(tmp_path)
    os.mkfifo(tmp_path / "docs" / "pipe.md")
    done = groundwire("sync", config, "--json")
    assert done.returncode == 0, done.stderr
    [docs] = [s for s in json.loads(done.stdout)["sources"] if s["source"] == "docs"]
    assert docs["skipped"] == [{"path": "pipe.md", "reason": "not a regular file (a FIFO)"}]


def _documents(snapshot: Path) -> list[str]:
    kb = KnowledgeBase.load(snapshot, verify="full")
    return sorted(str(entry.metadata["source_id"]) for entry in kb)


@pytest.mark.parametrize("damage", sorted(SNAPSHOT_DAMAGE))
def test_sync_rebuilds_a_damaged_snapshot_from_the_ledger(
    synced: Path, tmp_path: Path, damage: str
) -> None:
    site = tmp_path / "site"
    shutil.copytree(synced, site)
    broken = SNAPSHOT_DAMAGE[damage](site / "kb", tmp_path)
    shutil.rmtree(site / "kb")
    shutil.move(broken, site / "kb")
    (site / "docs" / "new.md").write_text("# New\n\nWebhooks retry eight times.\n")
    done = groundwire("sync", site / "sync.yaml")
    if damage == "manifest a folder":  # not ours to delete: refused, reported, retried
        assert_one_error(done, "the snapshot was not published")
        assert "error snapshot: " in done.stdout
        assert "docs " in done.stdout  # the summary of the sources still prints
        shutil.rmtree(site / "kb")
        done = groundwire("sync", site / "sync.yaml")  # nothing new: the publish is retried
    assert done.returncode == 0, done.stderr
    documents = _documents(site / "kb")
    assert documents[:2] == ["docs/keys.md", "docs/new.md"]
    assert len(documents) == 3
    assert documents[2].startswith("mail/threads/")
