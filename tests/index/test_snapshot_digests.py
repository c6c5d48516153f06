"""Format 3: every file record names its digest algorithm (``store/digests.py``).

New files are BLAKE3; a snapshot may mix them with SHA-256 records (files kept from a
version-2 snapshot), each verified with its own algorithm. Records written now also hold
an XXH3-128 check, which a full load verifies instead of the digest; a record without
one (or with one this groundwire does not know) is verified by its digest. Unknown
algorithms, malformed records and a missing ``blake3`` package are refused clearly;
nothing is left unhashed by a full load.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import xxhash
from tests.index.test_snapshot import manifest_of, write_manifest

from groundwire import IndexFormatError, KnowledgeBase
from groundwire.index.store import checksums, digests

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DOCS = [
    {"id": f"d{i:02}", "title": f"title {i}", "text": f"alpha beta gamma delta {i} {i % 3}"}
    for i in range(30)
]


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "kb"
    KnowledgeBase.from_documents(DOCS).save(path)
    checksums.forget_verdicts()
    return path


def _seal(path: Path, manifest: dict[str, Any]) -> None:
    write_manifest(path, manifest)
    checksums.forget_verdicts()


def _segment_files(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = manifest["segments"][0]["files"]
    return files


def _as_sha256(path: Path, manifest: dict[str, Any], logical: str) -> Path:
    """Record one file as SHA-256 (named by it), as a file kept from version 2 would be."""
    record = _segment_files(manifest)[logical]
    data = (path / record["file"]).read_bytes()
    hex_digest = hashlib.sha256(data).hexdigest()
    stem, _, ext = record["file"].rsplit(".", 2)
    name = f"{stem}.{hex_digest[:12]}.{ext}"
    (path / record["file"]).rename(path / name)
    record.update(file=name, digest=f"sha256:{hex_digest}")
    record.pop("check", None)
    return path / name


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_files_hashed_with_either_algorithm_load_and_answer_alike(snapshot: Path) -> None:
    before = [(h.id, h.score) for h in KnowledgeBase.load(snapshot).search("alpha 3", 10)]
    manifest = manifest_of(snapshot)
    for logical in ("lexical.scores", "lexical.docs", "entries"):
        _as_sha256(snapshot, manifest, logical)
    _seal(snapshot, manifest)
    kept = {r["digest"].partition(":")[0] for r in _segment_files(manifest).values()}
    assert kept == {"sha256", "blake3"}
    after = [(h.id, h.score) for h in KnowledgeBase.load(snapshot).search("alpha 3", 10)]
    assert after == before


@pytest.mark.parametrize(
    ("logical", "label"),
    [
        ("lexical.scores", "SHA-256 digest"),
        ("lexical.docs", "XXH3-128 check"),
        ("entries", "BLAKE3 digest"),
    ],
)
def test_damage_is_refused_under_each_files_own_algorithm(
    snapshot: Path, logical: str, label: str
) -> None:
    manifest = manifest_of(snapshot)
    _as_sha256(snapshot, manifest, "lexical.scores")
    _segment_files(manifest)["entries"].pop("check")  # verified by its BLAKE3 digest
    _seal(snapshot, manifest)
    _flip_last_byte(snapshot / _segment_files(manifest)[logical]["file"])
    with pytest.raises(IndexFormatError, match=f"does not match its {label}"):
        KnowledgeBase.load(snapshot)


def test_new_records_hold_a_check_of_the_same_bytes(snapshot: Path) -> None:
    records = _segment_files(manifest_of(snapshot)).values()
    for record in records:
        data = (snapshot / record["file"]).read_bytes()
        assert record["check"] == "xxh3-128:" + xxhash.xxh3_128(data).hexdigest()
        assert digests.split(record["digest"])[0] == "blake3"


@pytest.mark.parametrize(
    "check",
    ["xxh3-128:" + "0" * 31, "xxh3-128:" + "0" * 32 + "\n", "XXH3-128:" + "0" * 32, 12, ""],
)
@pytest.mark.parametrize("verify", ["full", "manifest"])
def test_a_malformed_check_is_refused_in_both_modes(
    snapshot: Path, check: object, verify: str
) -> None:
    manifest = manifest_of(snapshot)
    _segment_files(manifest)["lexical.docs"]["check"] = check
    _seal(snapshot, manifest)
    with pytest.raises(IndexFormatError, match=r"bad check for 'lexical\.docs'"):
        KnowledgeBase.load(snapshot, verify=verify)  # type: ignore[arg-type]


def test_a_check_of_another_algorithm_is_skipped_for_the_digest(snapshot: Path) -> None:
    """A check this groundwire does not know (a later writer's) is not trusted and not
    refused: the file is verified by its digest, and damage is still found."""
    manifest = manifest_of(snapshot)
    record = _segment_files(manifest)["lexical.docs"]
    record["check"] = "xxh4-256:" + "ab" * 32
    _seal(snapshot, manifest)
    assert len(KnowledgeBase.load(snapshot)) == 30
    checksums.forget_verdicts()
    _flip_last_byte(snapshot / record["file"])
    with pytest.raises(IndexFormatError, match="does not match its BLAKE3 digest"):
        KnowledgeBase.load(snapshot)


def test_a_wrong_check_is_refused(snapshot: Path) -> None:
    manifest = manifest_of(snapshot)
    _segment_files(manifest)["lexical.docs"]["check"] = "xxh3-128:" + "0" * 32
    _seal(snapshot, manifest)
    with pytest.raises(IndexFormatError, match="does not match its XXH3-128 check"):
        KnowledgeBase.load(snapshot)


def test_without_the_xxhash_package_files_are_verified_by_their_digests(
    snapshot: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(digests, "_xxh3", None)
    assert len(KnowledgeBase.load(snapshot)) == 30
    checksums.forget_verdicts()
    _flip_last_byte(snapshot / _segment_files(manifest_of(snapshot))["lexical.docs"]["file"])
    with pytest.raises(IndexFormatError, match="does not match its BLAKE3 digest"):
        KnowledgeBase.load(snapshot)
    path = tmp_path / "plain"
    KnowledgeBase.from_documents(DOCS).save(path)  # written without checks
    assert all("check" not in r for r in _segment_files(manifest_of(path)).values())
    monkeypatch.undo()
    checksums.forget_verdicts()
    assert len(KnowledgeBase.load(path)) == 30


def test_a_sha256_digest_recorded_as_blake3_is_refused(snapshot: Path) -> None:
    """The algorithm is part of what is verified: the right hex under the wrong name fails."""
    manifest = manifest_of(snapshot)
    _as_sha256(snapshot, manifest, "lexical.scores")
    record = _segment_files(manifest)["lexical.scores"]
    record["digest"] = "blake3:" + record["digest"].partition(":")[2]
    _seal(snapshot, manifest)
    with pytest.raises(IndexFormatError, match="does not match its BLAKE3 digest"):
        KnowledgeBase.load(snapshot)


@pytest.mark.parametrize(
    ("digest", "message"),
    [
        ("md5:" + "0" * 64, "digested with 'md5', which this groundwire does not know"),
        ("xxh3:" + "0" * 64, "digested with 'xxh3'"),
        ("0" * 64, "bad file entry"),  # version 3 never records a bare hex digest
        ("blake3:" + "0" * 63, "bad file entry"),
        ("blake3:" + "0" * 64 + "\n", "bad file entry"),
        ("BLAKE3:" + "0" * 64, "bad file entry"),
        (None, "bad file entry"),
    ],
)
@pytest.mark.parametrize("verify", ["full", "manifest"])
def test_malformed_or_unknown_digests_are_refused_in_both_modes(
    snapshot: Path, digest: str | None, message: str, verify: str
) -> None:
    manifest = manifest_of(snapshot)
    _segment_files(manifest)["lexical.docs"]["digest"] = digest
    _seal(snapshot, manifest)
    with pytest.raises(IndexFormatError, match=message):
        KnowledgeBase.load(snapshot, verify=verify)  # type: ignore[arg-type]


def test_a_version_2_manifest_keeps_its_rules(tmp_path: Path) -> None:
    """Version 2: one top-level ``digest`` (``sha256``) and bare hex records, as written."""
    for change, message in (
        (lambda m: m.update(digest="md5"), "unknown checksum 'md5'"),
        (lambda m: m.pop("digest"), "unknown checksum None"),
        (
            lambda m: _segment_files(m)["lexical.docs"].update(
                digest="sha256:" + _segment_files(m)["lexical.docs"]["digest"]
            ),
            "bad file entry",
        ),
    ):
        copy = tmp_path / f"v2-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(FIXTURES / "snapshot-v2", copy)
        manifest = manifest_of(copy)
        change(manifest)
        _seal(copy, manifest)
        with pytest.raises(IndexFormatError, match=message):
            KnowledgeBase.load(copy)


def test_without_the_blake3_package_a_full_load_refuses_with_an_install_hint(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records with checks are verified by them (no BLAKE3 needed); one without a check
    needs its digest's package."""
    monkeypatch.setattr(digests, "_blake3", None)
    assert len(KnowledgeBase.load(snapshot)) == 30
    checksums.forget_verdicts()
    manifest = manifest_of(snapshot)
    _segment_files(manifest)["lexical.docs"].pop("check")
    _seal(snapshot, manifest)
    with pytest.raises(IndexFormatError, match=r"needs the 'blake3' package.*pip install blake3"):
        KnowledgeBase.load(snapshot)
    assert len(KnowledgeBase.load(snapshot, verify="manifest")) == 30  # asked not to hash
    assert len(KnowledgeBase.load(FIXTURES / "snapshot-v2")) == 10  # all SHA-256: verified


def test_without_the_blake3_package_files_are_written_with_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(digests, "_blake3", None)
    monkeypatch.setattr(digests, "WRITE", "sha256")
    path = tmp_path / "kb"
    KnowledgeBase.from_documents(DOCS).save(path)  # verified on write: SHA-256 only
    monkeypatch.undo()
    manifest = manifest_of(path)
    assert manifest["format_version"] == 3
    records = _segment_files(manifest).values()
    assert {r["digest"].partition(":")[0] for r in records} == {"sha256"}
    for record in records:
        hex_digest = hashlib.sha256((path / record["file"]).read_bytes()).hexdigest()
        assert record["digest"] == f"sha256:{hex_digest}"
        assert record["file"].split(".")[-2] == hex_digest[:12]
    checksums.forget_verdicts()
    assert len(KnowledgeBase.load(path)) == 30


def test_verdicts_are_remembered_per_algorithm(snapshot: Path) -> None:
    """A remembered BLAKE3 verdict does not vouch for a SHA-256 record of the same file."""
    KnowledgeBase.load(snapshot)  # every file verified and remembered
    manifest = manifest_of(snapshot)
    record = _segment_files(manifest)["lexical.scores"]
    record["digest"] = "sha256:" + record["digest"].partition(":")[2]  # same name, wrong hex
    record.pop("check")  # else the check is what a load verifies
    write_manifest(snapshot, manifest)
    with pytest.raises(IndexFormatError, match="does not match its SHA-256 digest"):
        KnowledgeBase.load(snapshot)  # verdicts kept: the file is hashed again, with SHA-256


@pytest.mark.parametrize("logical", ["lexical.scores", "ids.bytes"], ids=["threads", "loader"])
def test_damage_is_refused_whichever_thread_hashes_the_file(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, logical: str
) -> None:
    """Large files hash on the threads, small ones on the loading thread: both are checked."""
    manifest = manifest_of(snapshot)
    sizes = {name: record["bytes"] for name, record in _segment_files(manifest).items()}
    assert sizes["lexical.scores"] > 1000 > sizes["ids.bytes"]
    monkeypatch.setattr(checksums, "_PARALLEL_HASH_BYTES", 0)
    monkeypatch.setattr(checksums, "_THREAD_FILE_BYTES", 1000)
    assert len(KnowledgeBase.load(snapshot)) == 30
    checksums.forget_verdicts()
    _flip_last_byte(snapshot / _segment_files(manifest)[logical]["file"])
    with pytest.raises(IndexFormatError, match="does not match its XXH3-128 check"):
        KnowledgeBase.load(snapshot)


def test_a_check_verdict_vouches_only_for_its_own_record(snapshot: Path) -> None:
    """A file verified by its check is remembered for that (digest, check) record: a record
    of the same file whose digest was changed is hashed again, by that digest."""
    KnowledgeBase.load(snapshot)
    manifest = manifest_of(snapshot)
    record = _segment_files(manifest)["lexical.scores"]
    hex_digest = record["digest"].partition(":")[2]
    record["digest"] = "blake3:" + hex_digest[:12] + "0" * 52  # same name, wrong digest
    record.pop("check")
    write_manifest(snapshot, manifest)
    with pytest.raises(IndexFormatError, match="does not match its BLAKE3 digest"):
        KnowledgeBase.load(snapshot)


def test_an_update_saved_over_a_v2_snapshot_keeps_its_files_sha256_records(
    tmp_path: Path,
) -> None:
    """The reused base segment keeps its SHA-256 records; the delta's new files are BLAKE3;
    each is verified with its own algorithm."""
    path = tmp_path / "kb"
    shutil.copytree(FIXTURES / "snapshot-v2", path)
    kb = KnowledgeBase.load(path)
    new = {"id": "zz.new", "title": "New tip", "text": "water the roses at dawn"}
    kb.update([new], compact=False).save(path)
    manifest = manifest_of(path)
    assert manifest["format_version"] == 3
    base, delta = manifest["segments"]
    assert {r["digest"].partition(":")[0] for r in base["files"].values()} == {"sha256"}
    assert {r["digest"].partition(":")[0] for r in delta["files"].values()} == {"blake3"}
    checksums.forget_verdicts()
    assert len(KnowledgeBase.load(path)) == 11
    _flip_last_byte(path / base["files"]["lexical.scores"]["file"])
    with pytest.raises(IndexFormatError, match="does not match its SHA-256 digest"):
        KnowledgeBase.load(path)
