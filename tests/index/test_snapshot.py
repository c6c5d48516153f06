"""Snapshots on disk: round trips, tampering, atomic writes, killed writers, concurrent reads."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import (
    ConfigError,
    Document,
    GroundingConfig,
    GroundingEngine,
    IndexFormatError,
    IndexSettings,
    KnowledgeBase,
    KnowledgeIndexError,
    Scope,
    load_sources,
)
from groundwire.index.store import digests, storage
from groundwire.index.store import layout as manifest_module
from groundwire.index.store.codecs import (
    HashedStrings,
    StringTable,
    decode_entry,
    encode_entry,
    encode_strings,
    hash_key,
    hash_keys,
    sort_keys,
)
from groundwire.ingest.validate import content_hash

ROOT = Path(__file__).resolve().parents[2]
HANDBOOK = ROOT / "examples" / "handbook"
QUERIES = [
    "how do I rotate an API key",
    "refund policy for annual plans",
    "slack bot not posting",
    "okta saml single sign-on",
    "webhook retries and signature verification",
    "api-keys",
    "invoices",
    "zzz unknown words only",
]
DOC_QUERIES = ["striped horses", "long necks of giraffes", "ocean tides moon", "moon"]


# -- helpers --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def handbook() -> KnowledgeBase:
    return KnowledgeBase.from_sources(load_sources(HANDBOOK))


@pytest.fixture(scope="module")
def handbook_snapshot(handbook: KnowledgeBase, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("snap") / "handbook"
    handbook.save(path)
    return path


def documents() -> list[Document]:
    texts = [
        ("d1", "Zebras", "A zebra is a striped horse of the savanna; striped horses run fast."),
        ("d2", "Giraffes", "Giraffes have long necks and eat leaves from tall trees."),
        ("d3", "Tides", "Ocean tides follow the moon; the moon pulls the ocean twice a day."),
        ("d4", "Moon", "The moon orbits the earth."),
        ("d5", "Horses", "Horses are not striped, but zebras are striped horses."),
    ]
    return [Document(i, t, x, {"n": k}) for k, (i, t, x) in enumerate(texts)]


def assert_same_hits(a: KnowledgeBase, b: KnowledgeBase, query: str, **kwargs: Any) -> None:
    left, right = a.search(query, 10, **kwargs), b.search(query, 10, **kwargs)
    assert [h.id for h in left] == [h.id for h in right], query
    for x, y in zip(left, right, strict=True):
        assert abs(x.score - y.score) <= 1e-12
        assert list(x.breakdown) == list(y.breakdown)
        for key in x.breakdown:
            assert abs(x.breakdown[key] - y.breakdown[key]) <= 1e-12


def manifest_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    return data


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Rewrite a manifest with a valid self-hash (a deliberate, consistent tamper)."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    body["manifest_sha256"] = hashlib.sha256(manifest_module.canonical(body)).hexdigest()
    target = path / "manifest.json"
    target.chmod(0o600)
    target.write_text(json.dumps(body, indent=1), encoding="utf-8")


def records(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every file record of a (one-segment) snapshot manifest by logical name, editable."""
    found: dict[str, dict[str, Any]] = dict(manifest["files"])
    found.update(manifest["segments"][0]["files"])
    return found


def file_of(path: Path, logical: str) -> Path:
    return path / records(manifest_of(path))[logical]["file"]


def replace_file(path: Path, logical: str, data: bytes) -> None:
    """Replace one file's bytes and update the manifest consistently (name, size, hash)."""
    manifest = manifest_of(path)
    entry = records(manifest)[logical]
    old = path / entry["file"]
    digest, _, check = digests.of_chunks([data], digests.split(entry["digest"])[0])
    name = entry["file"].rsplit(".", 2)
    short = digests.split(digest)[1][:12]
    entry.update(file=f"{name[0]}.{short}.{name[2]}", digest=digest, bytes=len(data))
    if "check" in entry:  # a consistent rewrite: the check follows the bytes too
        entry["check"] = check
    old.unlink()
    (path / entry["file"]).write_bytes(data)
    write_manifest(path, manifest)


def copy_snapshot(source: Path, target: Path) -> Path:
    target.mkdir()
    for item in source.iterdir():
        if item.is_file():
            (target / item.name).write_bytes(item.read_bytes())
            (target / item.name).chmod(0o600)
    return target


# -- round trips ----------------------------------------------------------------------------------
def test_round_trip_answers_identically(handbook: KnowledgeBase, handbook_snapshot: Path) -> None:
    loaded = KnowledgeBase.load(handbook_snapshot)
    assert len(loaded) == len(handbook)
    assert loaded.settings == handbook.settings
    assert loaded.issues == handbook.issues
    assert list(loaded.entries) == list(handbook.entries)
    for query in QUERIES:
        assert_same_hits(handbook, loaded, query)
        assert_same_hits(handbook, loaded, query, scope=Scope(("slack",)))
        assert_same_hits(handbook, loaded, query, blocked_domains=("security",))
        assert_same_hits(handbook, loaded, query, exact_boost=0.0, alias_boost=0.0)
        terms = handbook.analyzer.tokens(query)
        assert handbook.phrase_matches(terms) == loaded.phrase_matches(terms)
    target = handbook.entries[3].id
    built, opened = handbook.explain(QUERIES[0], target), loaded.explain(QUERIES[0], target)
    assert abs(built.score - opened.score) <= 1e-12
    assert dict(built.breakdown) == pytest.approx(dict(opened.breakdown), abs=1e-12)


def test_round_trip_keeps_lookups_masks_and_relations(
    handbook: KnowledgeBase, handbook_snapshot: Path
) -> None:
    loaded = KnowledgeBase.load(handbook_snapshot)
    assert loaded.exact_index == handbook.exact_index
    assert loaded.alias_index == handbook.alias_index
    assert loaded.relation_index == handbook.relation_index
    for entry in handbook.entries:
        assert loaded.get(entry.id) == entry
        assert loaded.position(entry.id) == handbook.position(entry.id)
        assert entry.id in loaded
        assert loaded.related(entry.id) == handbook.related(entry.id)
    assert loaded.get("no.such-entry") is None
    assert "no.such-entry" not in loaded
    for scope in (None, Scope(), Scope(("slack",)), Scope(("GitHub", "okta"))):
        for blocked in ((), ("billing",), ("Security", "api")):
            assert np.array_equal(
                loaded.eligibility(scope, blocked), handbook.eligibility(scope, blocked)
            )
    allow: Callable[[Any], bool] = lambda entry: entry.kind != "faq"  # noqa: E731
    assert np.array_equal(
        loaded.eligibility(None, (), allow), handbook.eligibility(None, (), allow)
    )
    assert dict(loaded.lexical.vocabulary) == dict(handbook.lexical.vocabulary)


def test_documents_with_the_bigram_field_round_trip(tmp_path: Path) -> None:
    built = KnowledgeBase.from_documents(documents())
    assert "bigrams" in built.lexical.fields
    built.save(tmp_path / "docs")
    loaded = KnowledgeBase.load(tmp_path / "docs")
    assert loaded.lexical.fields == built.lexical.fields
    for query in DOC_QUERIES:
        assert_same_hits(built, loaded, query)
    hit = loaded.search("striped horses", 1)[0]
    assert hit.breakdown["bigrams"] > 0
    assert loaded.get("d3") == built.get("d3")
    assert loaded.get("d3").metadata == {"n": 2}  # type: ignore[union-attr]


def test_context_through_the_engine_is_identical(
    handbook_snapshot: Path, handbook_path: Path
) -> None:
    config = GroundingConfig(sources=load_sources(handbook_path))
    with (
        GroundingEngine(config) as built,
        GroundingEngine.from_snapshot(handbook_snapshot) as loaded,
    ):
        assert built.ready(30)
        assert loaded.ready(0)
        for query in QUERIES:
            for scope in (None, Scope(("slack",))):
                a = built.ground(query, scope=scope)
                b = loaded.ground(query, scope=scope)
                assert (a.block is None) == (b.block is None), query
                if a.block is not None and b.block is not None:
                    assert a.block.content == b.block.content
                    assert a.block.citations == b.block.citations
                assert a.metadata.selected_ids == b.metadata.selected_ids
                assert a.metadata.expanded_ids == b.metadata.expanded_ids
                assert a.metadata.confidence == b.metadata.confidence
                assert a.metadata.failure_reason == b.metadata.failure_reason
        assert loaded.status().entry_count == built.status().entry_count
        assert loaded.status().validation_issues == built.status().validation_issues


def test_saving_is_deterministic_and_a_loaded_snapshot_saves_the_same_bytes(
    handbook: KnowledgeBase, handbook_snapshot: Path, tmp_path: Path
) -> None:
    handbook.save(tmp_path / "again")
    KnowledgeBase.load(handbook_snapshot).save(tmp_path / "resaved")
    for other in (tmp_path / "again", tmp_path / "resaved"):
        names = sorted(p.name for p in other.iterdir() if p.name != storage.LOCK)
        assert names == sorted(
            p.name for p in handbook_snapshot.iterdir() if p.name != storage.LOCK
        )
        for name in names:
            assert (other / name).read_bytes() == (handbook_snapshot / name).read_bytes()


def test_files_are_plain_npy_json_and_private(handbook_snapshot: Path) -> None:
    manifest = manifest_of(handbook_snapshot)
    assert manifest["magic"] == "groundwire-snapshot"
    assert manifest["format_version"] == 3
    assert manifest["features"] == []
    assert "digest" not in manifest  # version 3: each file record names its algorithm
    assert len(manifest["segments"]) == manifest["counts"]["segments"] == 1
    assert manifest["source_manifest_hash"] == content_hash(
        KnowledgeBase.load(handbook_snapshot).entries
    )
    assert manifest["settings"]["analyzer"]["stopwords"] == "default"
    assert manifest["counts"]["entries"] == 80
    for logical, item in records(manifest).items():
        path = handbook_snapshot / item["file"]
        assert path.stat().st_size == item["bytes"]
        assert item["digest"] == "blake3:" + blake3(path.read_bytes()).hexdigest()
        assert item["file"].split(".")[-2] == item["digest"][7:19]
        assert path.stat().st_mode & 0o777 == 0o600
        if item["file"].endswith(".npy"):  # numpy opens them without pickle
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            assert array.dtype.str == item["dtype"]
            assert list(array.shape) == item["shape"]
        elif logical == "entries":
            lines = path.read_text(encoding="utf-8").splitlines()
            assert [json.loads(line)["id"] for line in lines] == sorted(
                json.loads(line)["id"] for line in lines
            )
    assert handbook_snapshot.stat().st_mode & 0o777 == 0o700


def test_metadata_values_json_cannot_hold_round_trip(tmp_path: Path) -> None:
    metadata = {
        "date": dt.date(2024, 1, 2),
        "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "pair": (1, "two"),
        "raw": b"\x00\xff",
        "tags": {"b", "a"},
        "frozen": frozenset({3}),
        "numbers": {1: "one", 2.5: [None, True]},
        "$gw": "a key that looks like the tag",
        "nested": {"list": [1, 2.5, "x", {"deep": dt.date(2020, 2, 29)}]},
        "inf": math.inf,
    }
    kb = KnowledgeBase.from_documents([Document("d1", "Title", "text", metadata)])
    kb.save(tmp_path / "meta")
    loaded = KnowledgeBase.load(tmp_path / "meta").get("d1")
    assert loaded is not None
    assert dict(loaded.metadata) == metadata
    nan = decode_entry(
        encode_entry(
            kb.entries[0].__class__(
                **{
                    **{
                        f: getattr(kb.entries[0], f)
                        for f in ("id", "title", "summary", "domain", "integrations")
                    },
                    "metadata": {"x": math.nan},
                }
            )
        ),
        "test",
    )
    assert math.isnan(nan.metadata["x"])


def test_metadata_a_snapshot_cannot_store_is_a_clear_error(tmp_path: Path) -> None:
    kb = KnowledgeBase.from_documents([Document("d1", "Title", "text", {"obj": object()})])
    with pytest.raises(KnowledgeIndexError, match=r"entry 'd1' metadata\.obj is a object"):
        kb.save(tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary folder left behind


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=60))
def test_string_tables_round_trip_and_hash_the_same_vectorized(strings: list[str]) -> None:
    try:
        blob, offsets = encode_strings(strings, "test")
    except KnowledgeIndexError:  # lone surrogates are refused (snapshots store UTF-8)
        assert any(0xD800 <= ord(c) <= 0xDFFF for s in strings for c in s)
        return
    array = np.frombuffer(blob, dtype=np.uint8)
    assert offsets[0] == 0
    assert offsets[-1] == len(blob)
    table = StringTable(array, offsets)
    assert list(table) == strings
    assert len(table) == len(strings)
    keys = hash_keys(array, offsets)
    assert [int(k) for k in keys] == [hash_key(s.encode("utf-8")) for s in strings]
    lookup = HashedStrings(table, *sort_keys(keys))
    for text in strings:
        found = lookup.get(text)
        assert found is not None
        assert strings[found] == text
    assert lookup.get("\x00 not there \x00") is None or "\x00 not there \x00" in strings


# -- tampering ------------------------------------------------------------------------------------
@pytest.fixture
def small_snapshot(tmp_path: Path) -> Path:
    """A documents snapshot (bigrams, metadata) whose files tests may damage."""
    path = tmp_path / "small"
    KnowledgeBase.from_documents(documents()).save(path)
    return path


LOGICAL = sorted([*manifest_module.segment_files(3), "labels", "issues"])  # documents: 3 fields


@pytest.mark.parametrize("logical", LOGICAL)
def test_a_truncated_file_is_rejected(small_snapshot: Path, logical: str) -> None:
    path = file_of(small_snapshot, logical)
    path.chmod(0o600)
    data = path.read_bytes()
    path.write_bytes(data[:-1] if data else b"x")
    for verify in ("full", "manifest"):
        with pytest.raises(IndexFormatError, match=r"bytes, the manifest says"):
            KnowledgeBase.load(small_snapshot, verify=verify)  # type: ignore[arg-type]


@pytest.mark.parametrize("logical", LOGICAL)
def test_a_flipped_byte_is_rejected(small_snapshot: Path, logical: str) -> None:
    path = file_of(small_snapshot, logical)
    data = bytearray(path.read_bytes())
    path.chmod(0o600)
    if not data:  # nothing to flip in an empty blob: a byte appears instead
        path.write_bytes(b"\x00")
        with pytest.raises(IndexFormatError, match="the manifest says"):
            KnowledgeBase.load(small_snapshot)
        return
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="does not match its XXH3-128 check"):
        KnowledgeBase.load(small_snapshot)


@pytest.mark.parametrize("logical", LOGICAL)
def test_without_hashing_damage_is_still_never_an_unexpected_exception(
    small_snapshot: Path, logical: str
) -> None:
    """``verify="manifest"`` may miss a flipped byte, but never fails in another way."""
    path = file_of(small_snapshot, logical)
    data = bytearray(path.read_bytes())
    for at in sorted({0, 9, len(data) // 3, len(data) // 2, len(data) - 1}):
        if not 0 <= at < len(data):
            continue
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            kb = KnowledgeBase.load(small_snapshot, verify="manifest")
            kb.search("striped horses", 3)
        except IndexFormatError:
            pass
    path.write_bytes(bytes(data))


def test_swapped_files_are_rejected(small_snapshot: Path) -> None:
    manifest = manifest_of(small_snapshot)
    a = small_snapshot / records(manifest)["lexical.docs"]["file"]
    b = small_snapshot / records(manifest)["tf.0.counts"]["file"]
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    for verify in ("full", "manifest"):
        with pytest.raises(IndexFormatError):
            KnowledgeBase.load(small_snapshot, verify=verify)  # type: ignore[arg-type]


def test_swapped_files_of_equal_size_are_caught_by_the_checksum(small_snapshot: Path) -> None:
    files = records(manifest_of(small_snapshot))
    a = small_snapshot / files["active"]["file"]
    b = small_snapshot / files["universal"]["file"]
    a.write_bytes(b"\x93NUMPY" + a.read_bytes()[6:-1] + b"\x00")  # same size, other content
    with pytest.raises(IndexFormatError, match="XXH3-128 check"):
        KnowledgeBase.load(small_snapshot)
    assert b.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": 4}, "format version 4 is newer"),
        ({"features": ["segments"]}, "needs features this groundwire does not read"),
        ({"format_version": 0}, "invalid format_version"),
        ({"format_version": "1"}, "invalid format_version"),
        ({"magic": "other-snapshot"}, "not a groundwire snapshot"),
        ({"analyzer_fingerprint": "0" * 64}, "analyzes text differently"),
        ({"fields": ["title", "body"]}, "file table differs"),
        ({"counts": {"entries": 5}}, "malformed counts"),
    ],
)
def test_manifest_changes_are_rejected(
    small_snapshot: Path, change: dict[str, Any], message: str
) -> None:
    manifest = manifest_of(small_snapshot)
    manifest.update(change)
    write_manifest(small_snapshot, manifest)
    with pytest.raises(IndexFormatError, match=message):
        KnowledgeBase.load(small_snapshot)


def test_a_manifest_edited_without_its_hash_is_damaged(small_snapshot: Path) -> None:
    path = small_snapshot / "manifest.json"
    path.chmod(0o600)
    path.write_text(path.read_text().replace('"k1": 1.5', '"k1": 1.2'), encoding="utf-8")
    with pytest.raises(IndexFormatError, match="manifest_sha256 mismatch"):
        KnowledgeBase.load(small_snapshot, verify="manifest")


def test_a_manifest_that_is_not_json_is_rejected(small_snapshot: Path) -> None:
    (small_snapshot / "manifest.json").write_bytes(b"\x00garbage")
    with pytest.raises(IndexFormatError, match="not valid JSON"):
        KnowledgeBase.load(small_snapshot)


def test_a_too_large_manifest_is_rejected(small_snapshot: Path) -> None:
    size = (small_snapshot / "manifest.json").stat().st_size
    with pytest.raises(IndexFormatError, match="over the limit"):
        KnowledgeBase.load(small_snapshot, max_manifest_bytes=size - 1)
    assert len(KnowledgeBase.load(small_snapshot, max_manifest_bytes=size)) == 5


def test_limits_on_entries_and_array_bytes(small_snapshot: Path) -> None:
    with pytest.raises(IndexFormatError, match="over max_entries=4"):
        KnowledgeBase.load(small_snapshot, max_entries=4)
    with pytest.raises(IndexFormatError, match="over max_array_bytes=64"):
        KnowledgeBase.load(small_snapshot, max_array_bytes=64)
    with pytest.raises(ConfigError, match="max_entries"):
        KnowledgeBase.load(small_snapshot, max_entries=0)
    with pytest.raises(ConfigError, match="verify"):
        KnowledgeBase.load(small_snapshot, verify="none")  # type: ignore[arg-type]


def test_an_unlisted_or_missing_file_entry_is_rejected(small_snapshot: Path) -> None:
    manifest = manifest_of(small_snapshot)
    manifest["files"]["extra"] = manifest["files"].pop("issues")
    write_manifest(small_snapshot, manifest)
    with pytest.raises(IndexFormatError, match=r"missing \['issues'\], extra \['extra'\]"):
        KnowledgeBase.load(small_snapshot)


def test_a_missing_file_is_rejected(small_snapshot: Path) -> None:
    file_of(small_snapshot, "lexical.scores").unlink()
    with pytest.raises(IndexFormatError, match=r"listed in manifest.json but missing"):
        KnowledgeBase.load(small_snapshot)


def test_a_symlinked_file_inside_is_rejected(small_snapshot: Path) -> None:
    path = file_of(small_snapshot, "lexical.scores")
    moved = small_snapshot.parent / "elsewhere.npy"
    path.rename(moved)
    path.symlink_to(moved)
    with pytest.raises(IndexFormatError, match="cannot open"):
        KnowledgeBase.load(small_snapshot)


def test_a_symlinked_snapshot_is_rejected(small_snapshot: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(small_snapshot)
    with pytest.raises(IndexFormatError, match="symlink"):
        KnowledgeBase.load(link)
    kb = KnowledgeBase.load(small_snapshot)
    with pytest.raises(IndexFormatError, match="symlink"):
        kb.save(link)
    assert len(KnowledgeBase.load(small_snapshot)) == 5  # the link's target is untouched


def test_a_parent_that_is_not_a_folder_is_rejected(small_snapshot: Path, tmp_path: Path) -> None:
    kb = KnowledgeBase.load(small_snapshot)
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexFormatError, match="is not a folder"):
        kb.save(tmp_path / "file" / "snap")
    with pytest.raises(IndexFormatError, match="does not exist"):
        kb.save(tmp_path / "missing" / "snap")
    with pytest.raises(IndexFormatError, match="not a snapshot folder"):
        KnowledgeBase.load(tmp_path / "file" / "snap")
    with pytest.raises(IndexFormatError, match="no such snapshot folder"):
        KnowledgeBase.load(tmp_path / "missing")


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dupes"
    KnowledgeBase.from_documents([Document("a1", "x", "one"), Document("a2", "y", "two")]).save(
        path
    )
    replace_file(path, "ids.bytes", b"a1a1")
    with pytest.raises(IndexFormatError, match="duplicate entry id 'a1'"):
        KnowledgeBase.load(path)


def test_ids_out_of_order_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "order"
    KnowledgeBase.from_documents([Document("a1", "x", "one"), Document("b1", "y", "two")]).save(
        path
    )
    replace_file(path, "ids.bytes", b"b1a1")
    with pytest.raises(IndexFormatError, match="entry ids out of order 'a1'"):
        KnowledgeBase.load(path)


def test_statistics_that_disagree_with_lengths_are_rejected(small_snapshot: Path) -> None:
    manifest = manifest_of(small_snapshot)
    manifest["segments"][0]["stats"]["field_lengths"][0] += 1
    write_manifest(small_snapshot, manifest)
    with pytest.raises(IndexFormatError, match="field lengths and field statistics disagree"):
        KnowledgeBase.load(small_snapshot)


def test_out_of_range_doc_ids_are_rejected(small_snapshot: Path) -> None:
    docs = np.load(file_of(small_snapshot, "lexical.docs"), allow_pickle=False).copy()
    docs[0] = 99
    header = file_of(small_snapshot, "lexical.docs").read_bytes()[:128]
    replace_file(small_snapshot, "lexical.docs", header + docs.tobytes())
    with pytest.raises(IndexFormatError, match=r"outside 0..4"):
        KnowledgeBase.load(small_snapshot)


def test_decreasing_pointers_are_rejected(small_snapshot: Path) -> None:
    path = file_of(small_snapshot, "lexical.indptr")
    indptr = np.load(path, allow_pickle=False).copy()
    indptr[1], indptr[2] = indptr[2] + 1, indptr[1]
    replace_file(small_snapshot, "lexical.indptr", path.read_bytes()[:128] + indptr.tobytes())
    with pytest.raises(IndexFormatError, match=r"decreases|not strictly ascending"):
        KnowledgeBase.load(small_snapshot)


def test_row_bounds_are_checked_even_without_hashing(small_snapshot: Path) -> None:
    """The query kernel trusts ``lexical.indptr`` like slice bounds: never unchecked."""
    path = file_of(small_snapshot, "lexical.indptr")
    indptr = np.load(path, allow_pickle=False).copy()
    indptr[1] = indptr[-1] + 1000  # a row past the end of the postings
    path.write_bytes(path.read_bytes()[:128] + indptr.tobytes())  # same size, no re-hash
    with pytest.raises(IndexFormatError, match=r"lexical\.indptr decreases"):
        KnowledgeBase.load(small_snapshot, verify="manifest")


def test_an_object_dtype_array_is_never_unpickled(small_snapshot: Path) -> None:
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    replace_file(small_snapshot, "lexical.lengths", buffer.getvalue())
    with pytest.raises(IndexFormatError, match="expected <i4"):
        KnowledgeBase.load(small_snapshot)


def test_expected_manifest_hash(small_snapshot: Path) -> None:
    expected = manifest_of(small_snapshot)["source_manifest_hash"]
    assert len(KnowledgeBase.load(small_snapshot, expected)) == 5
    with pytest.raises(IndexFormatError, match="differs from the expected"):
        KnowledgeBase.load(small_snapshot, "0" * 64)


def test_expected_manifest_hash_checks_the_entries_themselves(small_snapshot: Path) -> None:
    expected = manifest_of(small_snapshot)["source_manifest_hash"]
    lines = file_of(small_snapshot, "entries").read_bytes()
    replace_file(small_snapshot, "entries", lines.replace(b"savanna", b"SAVANNA"))
    KnowledgeBase.load(small_snapshot)  # consistent checksums: only the content hash knows
    with pytest.raises(IndexFormatError, match="do not hash to the recorded"):
        KnowledgeBase.load(small_snapshot, expected)


def test_manifest_mode_checks_structure_but_not_content(small_snapshot: Path) -> None:
    """The documented trade-off: ``verify="manifest"`` does not hash file contents."""
    path = file_of(small_snapshot, "lexical.scores")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    KnowledgeBase.load(small_snapshot, verify="manifest")
    with pytest.raises(IndexFormatError, match="XXH3-128 check"):
        KnowledgeBase.load(small_snapshot, verify="full")


def test_is_snapshot(small_snapshot: Path, tmp_path: Path) -> None:
    assert KnowledgeBase.is_snapshot(small_snapshot)
    assert not KnowledgeBase.is_snapshot(HANDBOOK)
    assert not KnowledgeBase.is_snapshot(tmp_path / "missing")
    assert not KnowledgeBase.is_snapshot(HANDBOOK / "source.yaml")


@pytest.mark.integration
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_worker_loads_after_its_parent_did(
    small_snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preload in a parent, fork, load again in the child: the hashing threads restart
    (and the posting passes started ahead on them)."""
    from groundwire.index.store import bounds, checksums

    monkeypatch.setattr(checksums, "_PARALLEL_HASH_BYTES", 0)  # always use the threads
    monkeypatch.setattr(checksums, "_THREAD_FILE_BYTES", 0)  # for every file
    monkeypatch.setattr(bounds, "AHEAD_BYTES", 0)  # and the posting passes
    KnowledgeBase.load(small_snapshot)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if the load works
        code = 1
        try:
            checksums.forget_verdicts()  # hash again, on the child's own threads
            loaded = len(KnowledgeBase.load(small_snapshot)) == 5
            code = 0 if loaded and not bounds._AHEAD else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# -- atomic writes --------------------------------------------------------------------------------
def names(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


def test_replacing_swaps_everything_and_collects_old_files(tmp_path: Path) -> None:
    path = tmp_path / "snap"
    first = KnowledgeBase.from_documents(documents()[:3])
    second = KnowledgeBase.from_documents(documents())
    first.save(path)
    second.save(path)
    loaded = KnowledgeBase.load(path)
    assert [e.id for e in loaded] == [d.id for d in documents()]
    listed = {item["file"] for item in records(manifest_of(path)).values()}
    assert names(path) == listed | {"manifest.json", ".lock"}
    assert [p.name for p in tmp_path.iterdir()] == ["snap"]


def test_saving_refuses_folders_that_are_not_snapshots(tmp_path: Path) -> None:
    kb = KnowledgeBase.from_documents(documents())
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(IndexFormatError, match=r"not part of a snapshot \(notes.txt\)"):
        kb.save(folder)
    assert names(folder) == {"notes.txt"}
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexFormatError, match="not a folder"):
        kb.save(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    kb.save(empty)
    assert len(KnowledgeBase.load(empty)) == 5


def test_a_failed_write_leaves_the_previous_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "snap"
    KnowledgeBase.from_documents(documents()[:2]).save(path)
    before = {name: (path / name).read_bytes() for name in names(path)}
    calls = {"n": 0}
    real = storage._write_file

    def failing(dir_fd: int, name: str, chunks: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 10:
            raise OSError(28, "No space left on device")
        real(dir_fd, name, chunks)

    monkeypatch.setattr(storage, "_write_file", failing)
    with pytest.raises(IndexFormatError, match=r"No space left on device.*unchanged"):
        KnowledgeBase.from_documents(documents()).save(path)
    assert {name: (path / name).read_bytes() for name in names(path)} == before
    assert len(KnowledgeBase.load(path)) == 2
    monkeypatch.setattr(storage, "_write_file", real)
    KnowledgeBase.from_documents(documents()).save(path)
    assert len(KnowledgeBase.load(path)) == 5


def test_a_write_that_fails_validation_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "snap"
    KnowledgeBase.from_documents(documents()[:2]).save(path)
    real = storage.write_files

    def corrupting(folder: Path, payloads: Any, *reuse: Any) -> dict[str, dict[str, Any]]:
        table = real(folder, payloads, *reuse)
        target = folder / table["lexical.scores"]["file"]
        target.chmod(0o600)
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF  # the disk lied: read-back verification must catch it
        target.write_bytes(bytes(data))
        return table

    monkeypatch.setattr(storage, "write_files", corrupting)
    with pytest.raises(IndexFormatError, match="XXH3-128 check"):
        KnowledgeBase.from_documents(documents()).save(path)
    assert len(KnowledgeBase.load(path)) == 2
    assert not [n for n in names(path) if n.startswith(".tmp-")]


_CHILD = r"""
import sys
from groundwire import Document, KnowledgeBase
from groundwire.index.store import storage
hook, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
real = getattr(storage, hook)
calls = {"n": 0}

def pause(*args):
    calls["n"] += 1
    if calls["n"] == int(sys.argv[4]):
        print("ready", flush=True)  # the parent kills us now; never returns
        sys.stdin.read()
    return real(*args)

setattr(storage, hook, pause)
docs = [Document(f"c{i}", f"title {i}", f"new text number {i}") for i in range(count)]
if len(sys.argv) > 5:  # an incremental update of the snapshot at path, saved over it
    updated = KnowledgeBase.load(path).update(docs, deletes=sys.argv[5].split(","), compact=False)
    updated.save(path)  # a delta segment (index/delta.py), saved compacted
else:
    KnowledgeBase.from_documents(docs).save(path)
print("finished", flush=True)
"""


def kill_writer_at(
    hook: str, path: Path, count: int, call: int = 1, deletes: str | None = None
) -> None:
    """Run a writer in a subprocess, stop it at ``hook`` (call number ``call``), SIGKILL it.

    With ``deletes`` (comma-separated ids) the writer updates the snapshot at ``path``."""
    extra = [deletes] if deletes is not None else []
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, hook, str(path), str(count), str(call), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("hook", "call"),
    [("swap_manifest", 1), ("move_objects", 1), ("_write_file", 7), ("write_manifest", 1)],
)
def test_a_writer_killed_mid_replace_leaves_the_old_snapshot(
    tmp_path: Path, hook: str, call: int
) -> None:
    path = tmp_path / "snap"
    KnowledgeBase.from_documents(documents()).save(path)
    kill_writer_at(hook, path, 7, call)
    old = KnowledgeBase.load(path)
    assert [e.id for e in old] == [d.id for d in documents()]
    assert [n for n in names(path) if n.startswith(".tmp-")]  # the dead writer's leftovers
    KnowledgeBase.from_documents(documents()[:2]).save(path)  # the next save cleans up
    assert [e.id for e in KnowledgeBase.load(path)] == ["d1", "d2"]
    listed = {item["file"] for item in records(manifest_of(path)).values()}
    assert names(path) == listed | {"manifest.json", ".lock"}


@pytest.mark.integration
@pytest.mark.parametrize("hook", ["swap_manifest", "move_objects", "write_manifest"])
def test_an_update_killed_mid_save_leaves_the_old_snapshot(tmp_path: Path, hook: str) -> None:
    path = tmp_path / "snap"
    KnowledgeBase.from_documents(documents()).save(path)
    before = KnowledgeBase.load(path).search_ids("striped horses", 5)
    kill_writer_at(hook, path, 3, 1, deletes="d1,d2")
    old = KnowledgeBase.load(path)
    assert [e.id for e in old] == [d.id for d in documents()]
    assert old.search_ids("striped horses", 5) == before
    updated = old.update(
        [Document("c0", "title 0", "new text")], deletes=["d1", "d2"], compact=False
    )
    updated.save(path)  # the next save cleans up and installs the update
    loaded = KnowledgeBase.load(path)
    assert [e.id for e in loaded] == ["c0", "d3", "d4", "d5"]
    listed = {item["file"] for item in records(manifest_of(path)).values()}
    assert names(path) == listed | {"manifest.json", ".lock"}


@pytest.mark.integration
def test_a_writer_killed_before_a_first_install_leaves_nothing_confusing(tmp_path: Path) -> None:
    path = tmp_path / "snap"
    kill_writer_at("install_new", path, 3)
    assert not path.exists()
    with pytest.raises(IndexFormatError, match="no such snapshot folder"):
        KnowledgeBase.load(path)
    stale = [p.name for p in tmp_path.iterdir()]
    assert len(stale) == 1
    assert stale[0].startswith(".snap.tmp-")
    KnowledgeBase.from_documents(documents()).save(path)
    assert len(KnowledgeBase.load(path)) == 5
    assert [p.name for p in tmp_path.iterdir()] == ["snap"]  # the stale folder is gone


# -- concurrent readers ---------------------------------------------------------------------------
def versioned(version: str, body: str) -> list[dict[str, Any]]:
    entries = [
        {
            "id": f"zoo.{name}",
            "title": f"{name.title()} facts",
            "summary": f"What keepers know about the {name}.",
            "domain": "zoo",
            "integrations": [],
            "body": f"The {name} {body}",
        }
        for name in ("zebra", "giraffe", "okapi", "lion")
    ]
    return [{"id": "zoo", "version": version, "entries": entries}]


@pytest.fixture
def two_snapshots(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    KnowledgeBase.from_sources(versioned("v1", "eats grass in the morning.")).save(a)
    KnowledgeBase.from_sources(versioned("v2", "sleeps standing up at night.")).save(b)
    return a, b


@pytest.mark.integration
@pytest.mark.parametrize("verify", ["full", "manifest"])
def test_readers_during_replaces_see_one_snapshot_or_the_other(
    tmp_path: Path, two_snapshots: tuple[Path, Path], verify: str
) -> None:
    kbs = [KnowledgeBase.load(p) for p in two_snapshots]
    expected = {kb.entries[0].version: kb.search("zebra grass night", 4) for kb in kbs}
    path = tmp_path / "live"
    kbs[0].save(path)
    stop = threading.Event()
    seen: list[str] = []
    errors: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                kb = KnowledgeBase.load(path, verify=verify)  # type: ignore[arg-type]
                versions = {entry.version for entry in kb}
                assert len(versions) == 1
                version = versions.pop()
                hits = kb.search("zebra grass night", 4)
                want = expected[version]
                assert [h.id for h in hits] == [h.id for h in want]
                assert [h.score for h in hits] == [h.score for h in want]
                seen.append(version)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for n in range(12):
            kbs[(n + 1) % 2].save(path)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors[0]
    assert seen


@pytest.mark.integration
def test_readers_during_updates_see_one_snapshot_or_the_other(tmp_path: Path) -> None:
    """A writer updates the live snapshot (load, update, save) while readers open it."""
    path = tmp_path / "live"
    base = [Document(f"d{n}", f"doc {n}", f"zebra grass number {n}") for n in range(6)]
    KnowledgeBase.from_documents(base).save(path)
    variants = {
        "even": [Document("v", "variant", "zebra zebra night even")],
        "odd": [Document("v", "variant", "grass night odd")],
    }
    expected = {
        name: KnowledgeBase.from_documents([*base, *docs]).search("zebra grass night", 5)
        for name, docs in variants.items()
    }
    expected["base"] = KnowledgeBase.from_documents(base).search("zebra grass night", 5)
    stop = threading.Event()
    seen: list[str] = []
    errors: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                kb = KnowledgeBase.load(path, verify="manifest")
                entry = kb.get("v")
                name = "base" if entry is None else entry.body.split()[-1]
                hits = kb.search("zebra grass night", 5)
                want = expected[name]
                assert [(h.id, h.score) for h in hits] == [(h.id, h.score) for h in want]
                seen.append(name)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for n in range(8):
            variant = variants["even" if n % 2 else "odd"]
            KnowledgeBase.load(path).update(variant, compact=n % 3 == 0).save(path)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors[0]
    assert seen


@pytest.fixture
def engine_from(two_snapshots: tuple[Path, Path]) -> Iterator[GroundingEngine]:
    # Turns are not under test for time: a loaded machine can exceed the 800 ms default,
    # and a turn past its deadline fails open with no block.
    engine = GroundingEngine.from_snapshot(two_snapshots[0], GroundingConfig(timeout_ms=60_000))
    yield engine
    engine.close()


def test_engine_starts_from_a_snapshot_and_reloads(
    engine_from: GroundingEngine, two_snapshots: tuple[Path, Path], tmp_path: Path
) -> None:
    assert engine_from.ready(0)
    first = engine_from.ground("zebra")
    assert first.block is not None
    assert "@v1]" in first.block.citations[0].tag
    status = engine_from.reload(two_snapshots[1])
    assert status.ready
    assert status.last_error is None
    second = engine_from.ground("zebra")
    assert second.block is not None
    assert "@v2]" in second.block.citations[0].tag
    broken = copy_snapshot(two_snapshots[0], tmp_path / "broken")
    file_of(broken, "lexical.scores").write_bytes(b"")
    status = engine_from.reload(broken)
    assert status.ready
    assert status.last_error is not None
    assert "IndexFormatError" in status.last_error
    third = engine_from.ground("zebra")
    assert third.block is not None
    assert "@v2]" in third.block.citations[0].tag
    assert engine_from.reload().last_error is None  # the served path (b) again
    assert engine_from.rebuild().last_error is None  # no sources: rebuild reloads


def test_engine_from_snapshot_rejects_sources_and_bad_snapshots(
    two_snapshots: tuple[Path, Path], tmp_path: Path, handbook_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"leave GroundingConfig.sources empty"):
        GroundingEngine.from_snapshot(
            two_snapshots[0], GroundingConfig(sources=load_sources(handbook_path))
        )
    with pytest.raises(IndexFormatError):
        GroundingEngine.from_snapshot(tmp_path / "missing")
    with GroundingEngine(GroundingConfig()) as engine, pytest.raises(ConfigError, match="reload"):
        engine.reload()


@pytest.mark.integration
def test_turns_during_reloads_each_use_one_snapshot(
    engine_from: GroundingEngine, two_snapshots: tuple[Path, Path]
) -> None:
    expected = {}
    for path in two_snapshots:
        with GroundingEngine.from_snapshot(path) as single:
            outcome = single.ground("zebra grass night")
            assert outcome.block is not None
            version = outcome.block.citations[0].version
            expected[version] = (outcome.block.content, outcome.block.citations)
    assert set(expected) == {"v1", "v2"}
    stop = threading.Event()
    seen: list[str] = []
    errors: list[BaseException] = []

    def turns() -> None:
        while not stop.is_set():
            try:
                outcome = engine_from.ground("zebra grass night")
                assert outcome.block is not None, outcome.metadata
                versions = {c.version for c in outcome.block.citations}
                assert len(versions) == 1
                version = versions.pop()
                assert (outcome.block.content, outcome.block.citations) == expected[version]
                seen.append(version)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=turns) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for n in range(40):
            status = engine_from.reload(two_snapshots[(n + 1) % 2])
            assert status.last_error is None
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors[0]
    assert {"v1", "v2"} <= set(seen) or len(seen) > 0


def test_index_settings_survive_exactly(tmp_path: Path) -> None:
    from groundwire import AnalyzerConfig

    settings = IndexSettings(
        field_weights={"title": 2.0, "bigrams": 0.5, "body": 1.0},
        k1=1.2,
        b=0.6,
        scoring="bm25f",
        analyzer=AnalyzerConfig(stopwords=frozenset({"the", "of"}), fold_diacritics=True),
    )
    kb = KnowledgeBase.from_documents(documents(), settings)
    kb.save(tmp_path / "s")
    loaded = KnowledgeBase.load(tmp_path / "s")
    assert loaded.settings == settings
    assert loaded.settings.key() == settings.key()
    assert loaded.lexical.fields == kb.lexical.fields
    for query in DOC_QUERIES:
        assert_same_hits(kb, loaded, query)
