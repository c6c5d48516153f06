"""Delta segments on disk (store/segments.py): a save of an updated snapshot reuses its
base segment's files and writes the change; loading gives back the delta index, with
results equal to a build from scratch to the bit; damage, killed writers and concurrent
readers are handled as for every snapshot."""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.index.test_delta import SETTINGS, batch, build, doc_ids, same_scores, text
from tests.index.test_snapshot import kill_writer_at, write_manifest
from tests.index.test_update import QUERIES, WORDS, same

from groundwire import Document, GroundingEngine, IndexFormatError, KnowledgeBase
from groundwire.config import DELTA_COMPACT_SHARE, document_settings
from groundwire.index.delta import DeltaIndex
from groundwire.index.store import checksums, digests, layout, storage


def corpus(n: int = 60) -> dict[str, tuple[str, str]]:
    return {f"d{i:03d}": (WORDS[i % 10], " ".join(WORDS[i % 7 :])) for i in range(n)}


def docs_of(content: dict[str, tuple[str, str]]) -> list[Document]:
    return [Document(i, t, b) for i, (t, b) in content.items()]


def manifest_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    return data


def listed(path: Path) -> set[str]:
    """Every file name the manifest at ``path`` lists."""
    manifest = manifest_of(path)
    names = {item["file"] for item in manifest["files"].values()}
    for segment in manifest["segments"]:
        names |= {item["file"] for item in segment["files"].values()}
        for section in segment.get("sections", {}).values():
            names |= {item["file"] for item in section["files"].values()}
    return names


def identities(path: Path) -> dict[str, tuple[int, int, int]]:
    return {
        item.name: (item.stat().st_ino, item.stat().st_mtime_ns, item.stat().st_ctime_ns)
        for item in path.iterdir()
        if storage.OBJECT_NAME.fullmatch(item.name)
    }


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, dict[str, tuple[str, str]]]:
    content = corpus()
    path = tmp_path / "snap"
    build(content, document_settings()).save(path)
    return path, content


def updated_on_disk(
    path: Path,
    content: dict[str, tuple[str, str]],
    changes: dict[str, tuple[str, str]],
    deletes: list[str],
) -> KnowledgeBase:
    """Load ``path``, apply the change, save it over ``path``; ``content`` follows."""
    kb = KnowledgeBase.load(path).update(docs_of(changes), deletes, compact=False)
    kb.save(path)
    for doc in deletes:
        del content[doc]
    content.update(changes)
    return kb


def test_a_small_update_saves_a_delta_reusing_the_base_files(
    snapshot: tuple[Path, dict[str, tuple[str, str]]],
) -> None:
    path, content = snapshot
    plain = manifest_of(path)
    entries_file = plain["segments"][0]["files"]["entries"]["file"]
    before = identities(path)
    updated_on_disk(path, content, {"d003": ("omega", "sigma tau"), "new": ("x", "y")}, ["d007"])
    manifest = manifest_of(path)
    assert manifest["features"] == [layout.DELTA_FEATURE]
    assert manifest["format_version"] == layout.FORMAT_VERSION
    base, delta = manifest["segments"]
    assert base["counts"] == plain["segments"][0]["counts"]
    assert set(base["files"]) == set(layout.base_files(len(manifest["fields"])))
    assert base["files"]["entries"]["file"] == entries_file
    after = identities(path)
    for item in base["files"].values():  # not rewritten: same inode, same times
        assert after[item["file"]] == before[item["file"]]
    assert delta["counts"]["stored_entries"] == 2  # the replaced and the new document
    assert delta["counts"]["entries"] == len(content)
    assert set(after) == listed(path)  # files of the old snapshot no longer listed: deleted
    loaded = KnowledgeBase.load(path)
    assert isinstance(loaded._lexical, DeltaIndex)
    scratch = build(content, document_settings())
    same(loaded, scratch)
    same_scores(loaded, scratch)
    same(loaded.compacted(), scratch)
    same(KnowledgeBase.load(path, verify="manifest"), scratch)
    assert [e.id for e in loaded] == sorted(content)
    new = loaded.get("new")
    assert new is not None
    assert new.title == "x"


def test_updates_of_a_delta_snapshot_keep_the_first_base(
    snapshot: tuple[Path, dict[str, tuple[str, str]]],
) -> None:
    path, content = snapshot
    base = manifest_of(path)["segments"][0]["files"]
    updated_on_disk(path, content, {"n1": ("alpha", "beta")}, ["d001"])
    updated_on_disk(path, content, {"n1": ("gamma", "delta"), "d002": ("x", "y")}, ["d004"])
    updated_on_disk(path, content, {}, ["d005", "n1"])
    manifest = manifest_of(path)
    assert manifest["segments"][0]["files"]["entries"] == base["entries"]
    assert manifest["segments"][0]["files"]["lexical.scores"] == base["lexical.scores"]
    loaded = KnowledgeBase.load(path)
    same(loaded, build(content, document_settings()))
    info = KnowledgeBase.describe_snapshot(path)
    assert info["segments"] == 2
    assert info["entries"] == len(content)
    assert info["terms"] == len(loaded._lexical.vocabulary)  # the current vocabulary
    assert info["files"] == len(listed(path)) + 1


def test_past_the_share_a_save_writes_the_compaction(
    snapshot: tuple[Path, dict[str, tuple[str, str]]],
) -> None:
    path, content = snapshot
    count = int(len(content) * DELTA_COMPACT_SHARE) + 2
    changes = {f"n{i}": ("kappa", "rho") for i in range(count)}
    kb = KnowledgeBase.load(path).update(docs_of(changes), compact=False)  # kept as a delta
    assert isinstance(kb._lexical, DeltaIndex)
    assert kb.delta_share > DELTA_COMPACT_SHARE
    kb.save(path)
    content.update(changes)
    assert manifest_of(path)["features"] == []
    loaded = KnowledgeBase.load(path)
    assert not isinstance(loaded._lexical, DeltaIndex)
    same(loaded, build(content, document_settings()))


def test_an_update_built_in_memory_or_compacted_saves_one_segment(tmp_path: Path) -> None:
    content = corpus(30)
    kb = build(content, document_settings()).update([Document("n", "a", "b")], compact=False)
    kb.save(tmp_path / "memory")  # no stored base: the compaction
    assert manifest_of(tmp_path / "memory")["features"] == []
    kb.save(tmp_path / "again")
    loaded = KnowledgeBase.load(tmp_path / "memory")
    delta = loaded.update([Document("m", "c", "d")], compact=False)
    delta.compacted().save(tmp_path / "memory")
    assert manifest_of(tmp_path / "memory")["features"] == []


def test_a_delta_saved_to_another_folder_copies_its_base(
    snapshot: tuple[Path, dict[str, tuple[str, str]]], tmp_path: Path
) -> None:
    path, content = snapshot
    kb = KnowledgeBase.load(path).update([Document("n", "alpha", "omega")], ["d002"])
    other = tmp_path / "other"
    kb.save(other)
    (tmp_path / "existing").mkdir()
    kb.save(tmp_path / "existing")
    content.update({"n": ("alpha", "omega")})
    del content["d002"]
    scratch = build(content, document_settings())
    for folder in (other, tmp_path / "existing"):
        assert manifest_of(folder)["features"] == [layout.DELTA_FEATURE]
        checksums.forget_verdicts()
        same(KnowledgeBase.load(folder), scratch)
    assert len(KnowledgeBase.load(path)) == 60  # the source is untouched


def test_a_groundwire_without_the_feature_refuses_clearly(
    snapshot: tuple[Path, dict[str, tuple[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, content = snapshot
    updated_on_disk(path, content, {"n": ("a", "b")}, [])
    monkeypatch.setattr(layout, "FEATURES", frozenset())
    with pytest.raises(IndexFormatError, match=r"needs features .*delta-segment.*upgrade"):
        KnowledgeBase.load(path)


def test_a_base_reused_by_name_is_checked_when_this_process_did_not_verify_it(
    snapshot: tuple[Path, dict[str, tuple[str, str]]],
) -> None:
    """A base file damaged on disk after the load is rewritten from the loaded bytes,
    not reused: the saved snapshot is sound."""
    path, content = snapshot
    kb = KnowledgeBase.load(path).update([Document("n", "alpha", "omega")], ["d002"])
    scores = path / manifest_of(path)["segments"][0]["files"]["lexical.scores"]["file"]
    data = bytearray(scores.read_bytes())
    mapped = bytes(data)
    data[-1] ^= 0x01
    os.unlink(scores)  # the loaded base keeps its mapping of the old inode
    scores.write_bytes(bytes(data))
    kb.save(path)
    assert scores.read_bytes() == mapped
    checksums.forget_verdicts()
    content.update({"n": ("alpha", "omega")})
    del content["d002"]
    same(KnowledgeBase.load(path), build(content, document_settings()))


# -- damage ------------------------------------------------------------------------------------
def delta_snapshot(tmp_path: Path) -> Path:
    content = corpus(60)
    path = tmp_path / "snap"
    build(content, document_settings()).save(path)
    changes = {"d003": ("omega omega", "sigma"), "new": ("alpha", "tau " * 300)}
    updated_on_disk(path, content, changes, ["d009"])
    assert manifest_of(path)["features"] == [layout.DELTA_FEATURE]
    return path


def delta_slots(path: Path) -> list[tuple[int, str]]:
    manifest = manifest_of(path)
    return [(i, logical) for i in (0, 1) for logical in manifest["segments"][i]["files"]]


def test_a_flipped_byte_in_any_file_of_a_delta_snapshot_is_refused(tmp_path: Path) -> None:
    path = delta_snapshot(tmp_path)
    for segment, logical in delta_slots(path):
        name = manifest_of(path)["segments"][segment]["files"][logical]["file"]
        target = path / name
        original = target.read_bytes()
        if not original:
            continue
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 0x20
        target.write_bytes(bytes(damaged))
        with pytest.raises(IndexFormatError, match="does not match its"):
            KnowledgeBase.load(path)
        target.write_bytes(original)
    KnowledgeBase.load(path)


def replace_array(path: Path, segment: int, logical: str, array: np.ndarray[Any, Any]) -> None:
    """Replace one array of a segment, consistently (name, size, digest, manifest hash)."""
    manifest = manifest_of(path)
    entry = manifest["segments"][segment]["files"][logical]
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    raw = buffer.getvalue()
    digest = hashlib.sha256(raw).hexdigest()
    name = f"{logical}.{digest[:12]}.npy"
    entry.update(file=name, digest=f"sha256:{digest}", bytes=len(raw), shape=list(array.shape))
    entry.pop("check", None)  # a record without a check: its SHA-256 digest is verified
    (path / entry["file"]).write_bytes(raw)
    write_manifest(path, manifest)


@pytest.mark.parametrize("verify", ["full", "manifest"])
@pytest.mark.parametrize(
    ("value", "message"),
    [(10_000, "base_to_now"), (-5, "base_to_now"), ("swap", "base_to_now")],
)
def test_a_damaged_tombstone_map_is_refused(
    tmp_path: Path, verify: str, value: Any, message: str
) -> None:
    path = delta_snapshot(tmp_path)
    manifest = manifest_of(path)
    name = manifest["segments"][1]["files"]["base_to_now"]["file"]
    tombstones = np.load(path / name).copy()
    if value == "swap":
        tombstones[[1, 2]] = tombstones[[2, 1]]  # live positions no longer ascending
    else:
        tombstones[0] = value
    replace_array(path, 1, "base_to_now", tombstones)
    with pytest.raises(IndexFormatError, match=message):
        KnowledgeBase.load(path, verify=verify)  # type: ignore[arg-type]


@pytest.mark.parametrize("verify", ["full", "manifest"])
def test_damaged_delta_rows_are_refused_and_counts_must_agree(tmp_path: Path, verify: str) -> None:
    path = delta_snapshot(tmp_path)
    manifest = manifest_of(path)
    name = manifest["segments"][1]["files"]["lexical.indptr"]["file"]
    indptr = np.load(path / name).copy()
    indptr[-1] += 7  # past the postings: the C kernel would read out of bounds
    replace_array(path, 1, "lexical.indptr", indptr)
    with pytest.raises(IndexFormatError, match=r"lexical\.indptr"):
        KnowledgeBase.load(path, verify=verify)  # type: ignore[arg-type]
    (tmp_path / "second").mkdir()
    path = delta_snapshot(tmp_path / "second")
    manifest = manifest_of(path)
    manifest["segments"][1]["counts"]["stored_entries"] += 1
    write_manifest(path, manifest)
    with pytest.raises(IndexFormatError, match="entries"):
        KnowledgeBase.load(path, verify=verify)  # type: ignore[arg-type]
    manifest["counts"]["segments"] = 1
    write_manifest(path, manifest)
    with pytest.raises(IndexFormatError, match="2 segment"):
        KnowledgeBase.load(path, verify=verify)  # type: ignore[arg-type]


def test_out_of_range_delta_documents_are_refused(tmp_path: Path) -> None:
    path = delta_snapshot(tmp_path)
    name = manifest_of(path)["segments"][1]["files"]["lexical.docs"]["file"]
    docs = np.load(path / name).copy()
    docs[0] = 10_000
    replace_array(path, 1, "lexical.docs", docs)
    with pytest.raises(IndexFormatError, match="outside"):
        KnowledgeBase.load(path)
    loaded = KnowledgeBase.load(path, verify="manifest")  # found when a query reads the row
    index = loaded._lexical
    assert isinstance(index, DeltaIndex)
    row = int(np.searchsorted(index.delta.indptr, 0, side="right")) - 1  # posting 0's row
    with pytest.raises(IndexFormatError, match="out of range"):
        index.top([row], 5)


def test_a_delta_vocabulary_that_does_not_extend_the_base_is_refused(tmp_path: Path) -> None:
    path = delta_snapshot(tmp_path)
    manifest = manifest_of(path)
    name = manifest["segments"][1]["files"]["terms.bytes"]["file"]
    data = bytearray((path / name).read_bytes())
    data[0] = ord("z") if data[0] != ord("z") else ord("y")
    entry = manifest["segments"][1]["files"]["terms.bytes"]
    digest = hashlib.sha256(bytes(data)).hexdigest()
    entry.update(file=f"terms.bytes.{digest[:12]}.bin", digest=f"sha256:{digest}")
    entry.pop("check", None)
    (path / entry["file"]).write_bytes(bytes(data))
    write_manifest(path, manifest)
    with pytest.raises(IndexFormatError, match="vocabulary does not begin"):
        KnowledgeBase.load(path)


def test_a_delta_save_that_fails_verification_is_not_installed(
    snapshot: tuple[Path, dict[str, tuple[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, content = snapshot
    kb = KnowledgeBase.load(path).update([Document("n", "alpha", "omega")], compact=False)
    before = set(os.listdir(path))
    real = storage.write_files

    def corrupting(folder: Path, payloads: Any, *reuse: Any) -> dict[str, dict[str, Any]]:
        table = real(folder, payloads, *reuse)
        target = folder / table["base_to_now"]["file"]
        data = bytearray(target.read_bytes())
        data[-1] ^= 0x01  # the disk lied: the verification before the swap catches it
        target.write_bytes(bytes(data))
        return table

    monkeypatch.setattr(storage, "write_files", corrupting)
    with pytest.raises(IndexFormatError, match="does not match its"):
        kb.save(path)
    assert set(os.listdir(path)) == before  # nothing of the failed save is left
    assert manifest_of(path)["features"] == []
    same(KnowledgeBase.load(path), build(content, document_settings()))


# -- killed writers and concurrent readers --------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize(
    "hook", ["_write_file", "move_objects", "write_manifest", "swap_manifest", "collect_garbage"]
)
def test_a_delta_save_killed_at_any_step_leaves_the_previous_snapshot(
    tmp_path: Path, hook: str
) -> None:
    """The previous snapshot is itself a delta; a writer updating it again (load, update,
    save a delta) is SIGKILLed: what a reader loads is the previous one, or, past the
    manifest swap, the new one, each whole."""
    path = tmp_path / "snap"
    KnowledgeBase.from_documents(  # 80 documents: both updates stay within the share
        [Document(f"d{i}", f"doc {i}", f"zebra grass {WORDS[i % 10]}") for i in range(1, 81)]
    ).save(path)
    KnowledgeBase.load(path).update([Document("x", "x", "zebra night")], ["d6"]).save(path)
    assert manifest_of(path)["features"] == [layout.DELTA_FEATURE]
    old = KnowledgeBase.load(path)
    old_ids = [e.id for e in old]
    old_hits = [(h.id, h.score) for h in old.search("zebra grass night", 5)]
    kill_writer_at(hook, path, 3, 1, deletes="d1,d2")
    checksums.forget_verdicts()
    loaded = KnowledgeBase.load(path)
    ids = [e.id for e in loaded]
    if hook == "collect_garbage":  # killed after the swap: the update is in
        assert ids == sorted({*old_ids, "c0", "c1", "c2"} - {"d1", "d2"})
        assert manifest_of(path)["features"] == [layout.DELTA_FEATURE]
    else:
        assert ids == old_ids
        assert [(h.id, h.score) for h in loaded.search("zebra grass night", 5)] == old_hits
    loaded.update([Document("y", "y", "grass")], compact=False).save(path)  # cleans up
    assert {n for n in os.listdir(path) if storage.OBJECT_NAME.fullmatch(n)} == listed(path)
    assert not [n for n in os.listdir(path) if n.startswith(".tmp-")]


@pytest.mark.integration
def test_readers_during_delta_saves_see_one_snapshot_or_the_other(tmp_path: Path) -> None:
    """A writer keeps updating the live snapshot with delta saves while readers load it
    (fresh readers: some snapshot whole, never a mix) and one reader keeps a snapshot it
    loaded before all of them (it keeps answering as it did)."""
    path = tmp_path / "live"
    content = corpus(150)  # six updates stay within the share: every save is a delta
    build(content, document_settings()).save(path)
    held = KnowledgeBase.load(path)
    held_hits = {q: [(h.id, h.score) for h in held.search(q, 8)] for q in QUERIES}
    versions: dict[str, list[tuple[str, float]]] = {}
    states = []
    state = dict(content)
    for n in range(6):
        state = dict(state)
        state[f"v{n}"] = (f"version {n}", WORDS[n] + " zebra")
        state.pop(f"d{n:03d}")
        states.append(state)
        versions[f"version {n}"] = [
            (h.id, h.score) for h in build(state, document_settings()).search("zebra", 8)
        ]
    versions["none"] = [
        (h.id, h.score) for h in build(content, document_settings()).search("zebra", 8)
    ]
    stop = threading.Event()
    seen: list[str] = []
    errors: list[BaseException] = []

    def reader(verify: str) -> None:
        while not stop.is_set():
            try:
                kb = KnowledgeBase.load(path, verify=verify)  # type: ignore[arg-type]
                latest = max((e.id for e in kb if e.id.startswith("v")), default=None)
                name = "none" if latest is None else kb.get(latest).title  # type: ignore[union-attr]
                assert [(h.id, h.score) for h in kb.search("zebra", 8)] == versions[name]
                seen.append(name)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader, args=(v,)) for v in ("full", "manifest")]
    for thread in threads:
        thread.start()
    try:
        for n in range(6):
            change = [Document(f"v{n}", f"version {n}", WORDS[n] + " zebra")]
            KnowledgeBase.load(path).update(change, [f"d{n:03d}"], compact=False).save(path)
            assert manifest_of(path)["features"] == [layout.DELTA_FEATURE]
            for q in QUERIES:  # the held snapshot's files are gone from the folder: mapped
                assert [(h.id, h.score) for h in held.search(q, 8)] == held_hits[q]
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors[0]
    assert seen
    same(KnowledgeBase.load(path), build(states[-1], document_settings()))


# -- random sequences with save/load round trips --------------------------------------------------
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    start=st.dictionaries(doc_ids, st.tuples(text, text), max_size=16),
    steps=st.lists(batch, min_size=1, max_size=6),
    scoring=st.sampled_from(sorted(SETTINGS)),
    reload=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_random_updates_saved_and_loaded_equal_a_build_from_scratch(
    tmp_path_factory: pytest.TempPathFactory,
    start: dict[str, tuple[str, str]],
    steps: list[tuple[list[tuple[str, str, str]], list[str], bool | None]],
    scoring: str,
    reload: list[bool],
) -> None:
    index = SETTINGS[scoring]
    path = tmp_path_factory.mktemp("random") / "snap"
    content = {**corpus(80), **start}  # 80 others: small batches stay deltas on disk
    build(content, index).save(path)
    kb = KnowledgeBase.load(path)
    for (upserts, deletes, compact), again in zip(steps, reload, strict=False):
        fresh = {i: (t, b) for i, t, b in upserts}
        gone = sorted({i for i in deletes if i in content and i not in fresh})
        for i in gone:
            del content[i]
        content.update(fresh)
        kb = kb.update(docs_of(fresh), gone, compact=compact)
        kb.save(path)
        if again:
            kb = KnowledgeBase.load(path, verify="full" if compact is None else "manifest")
        scratch = build(content, index)
        same(kb, scratch)
        same_scores(kb, scratch)
        loaded = KnowledgeBase.load(path)
        same(loaded, scratch)
        assert {e.id for e in loaded} == set(content)


def test_an_engine_reload_serves_the_delta_and_hashes_only_new_files(
    snapshot: tuple[Path, dict[str, tuple[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's reload (``GroundingEngine.reload``) of a snapshot updated on disk by
    this process hashes no file again: the base's were verified when loaded, the new
    ones by the save's verification, where they are now."""
    path, content = snapshot
    engine = GroundingEngine.from_snapshot(path)
    try:
        base = manifest_of(path)["segments"][0]["files"]
        kb = KnowledgeBase.load(path).update([Document("n", "alpha", "omega")], ["d002"])
        kb.save(path)
        content.update({"n": ("alpha", "omega")})
        del content["d002"]
        hashed: list[int] = []
        real = digests.of_file

        def counting(fd: int, mapped: Any, algorithm: str) -> str:
            hashed.append(os.fstat(fd).st_ino)
            return real(fd, mapped, algorithm)

        monkeypatch.setattr(digests, "of_file", counting)
        assert engine.reload().last_error is None
        served = engine.knowledge_base
        assert served is not None
        assert isinstance(served._lexical, DeltaIndex)
        reused = manifest_of(path)["segments"][0]["files"]
        assert all(base[logical] == item for logical, item in reused.items())
        assert not hashed  # the base was verified at load, the new files by the save
        same(served, build(content, document_settings()))
    finally:
        engine.close()
