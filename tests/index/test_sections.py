"""Optional snapshot sections: format version 2's extension point (e.g. dense vectors).

A section is JSON ``meta`` plus numeric arrays, stored and verified like every other
file, memory-mapped on load and carried through saves by code that does not know it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from groundwire import Document, IndexFormatError, KnowledgeBase, KnowledgeIndexError
from groundwire import SnapshotSection as Section
from groundwire.index import parts as parts_module
from groundwire.index.parts import register_section
from groundwire.index.store import layout


def docs() -> list[Document]:
    return [
        Document(f"d{n}", f"title {n}", f"body text number {n} with words {n % 3}")
        for n in range(6)
    ]


def vectors(n: int, dim: int = 8) -> np.ndarray:
    return (np.arange(n * dim, dtype=np.float32).reshape(n, dim) - 7) / 3


def manifest_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    return data


def seal(path: Path, manifest: dict[str, Any]) -> None:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    body["manifest_sha256"] = hashlib.sha256(layout.canonical(body)).hexdigest()
    (path / "manifest.json").write_text(json.dumps(body), encoding="utf-8")


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    kb = KnowledgeBase.from_documents(docs())
    section = Section(
        "dense",
        {"model": "dummy-8d", "dims": 8, "dtype": "float32"},
        {"matrix": vectors(len(kb)), "norms": np.ones(len(kb), dtype=np.float16)},
    )
    kb.with_section(section).save(tmp_path / "snap")
    return tmp_path / "snap"


def test_a_section_round_trips_mapped_and_verified(saved: Path) -> None:
    for verify in ("full", "manifest"):
        kb = KnowledgeBase.load(saved, verify=verify)  # type: ignore[arg-type]
        section = kb.sections["dense"]
        assert section.meta == {"model": "dummy-8d", "dims": 8, "dtype": "float32"}
        assert np.array_equal(section.arrays["matrix"], vectors(6))
        assert section.arrays["norms"].dtype == np.float16
        assert not section.arrays["matrix"].flags.writeable  # mapped read-only
    names = {p.name.split(".")[0] + "." + p.name.split(".")[1] for p in saved.glob("section.*")}
    assert names == {"section.dense"}


def test_a_section_is_carried_through_load_and_save(saved: Path, tmp_path: Path) -> None:
    KnowledgeBase.load(saved).save(tmp_path / "again")
    first = sorted(p.name for p in saved.iterdir() if p.name != ".lock")
    second = sorted(p.name for p in (tmp_path / "again").iterdir() if p.name != ".lock")
    assert first == second  # the same bytes, content-addressed
    kb = KnowledgeBase.load(tmp_path / "again").without_section("dense")
    kb.save(tmp_path / "plain")
    assert KnowledgeBase.load(tmp_path / "plain").sections == {}


def test_a_damaged_section_file_is_refused(saved: Path) -> None:
    path = next(saved.glob("section.dense.matrix.*.npy"))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="does not match its XXH3-128 check"):
        KnowledgeBase.load(saved)
    path.write_bytes(bytes(data[:-4]))
    with pytest.raises(IndexFormatError, match="the manifest says"):
        KnowledgeBase.load(saved, verify="manifest")


def test_a_required_section_opens_only_where_it_is_understood(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts_module, "_KNOWN_SECTIONS", set())
    kb = KnowledgeBase.from_documents(docs()).with_section(
        Section("musthave", {"v": 1}, {}, required=True)
    )
    with pytest.raises(KnowledgeIndexError, match="required but not registered"):
        kb.save(tmp_path / "s")
    register_section("musthave")
    kb.save(tmp_path / "s")
    assert KnowledgeBase.load(tmp_path / "s").sections["musthave"].required
    monkeypatch.setattr(parts_module, "_KNOWN_SECTIONS", set())  # an older reader
    with pytest.raises(IndexFormatError, match="requires section 'musthave'"):
        KnowledgeBase.load(tmp_path / "s")


def test_sections_declared_and_provided_must_agree(saved: Path) -> None:
    manifest = manifest_of(saved)
    del manifest["segments"][0]["sections"]["dense"]
    seal(saved, manifest)
    with pytest.raises(IndexFormatError, match="declared and provided differ"):
        KnowledgeBase.load(saved, verify="manifest")


def test_a_section_file_with_another_dtype_is_refused(saved: Path) -> None:
    manifest = manifest_of(saved)
    record = manifest["segments"][0]["sections"]["dense"]["files"]["matrix"]
    record["dtype"] = "|O"
    seal(saved, manifest)
    with pytest.raises(IndexFormatError, match="bad file 'matrix'"):
        KnowledgeBase.load(saved)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Section("Bad-Name"), "section name"),
        (lambda: Section("ok", {}, {"bad.name": np.zeros(2)}), "array name"),
        (lambda: Section("ok", {}, {"x": np.array(["a"], dtype=object)}), "plain numbers"),
        (lambda: Section("ok", {}, {"x": np.array([1 + 2j])}), "plain numbers"),
        (lambda: Section("ok", [1, 2]), "meta must be a mapping"),  # type: ignore[arg-type]
    ],
)
def test_bad_sections_are_refused_when_made(make: Any, message: str) -> None:
    with pytest.raises(KnowledgeIndexError, match=message):
        make()


def test_section_meta_must_be_json(tmp_path: Path) -> None:
    kb = KnowledgeBase.from_documents(docs())
    with pytest.raises(KnowledgeIndexError, match="meta must be JSON"):
        kb.with_section(Section("s", {"when": object()})).save(tmp_path / "a")
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(KnowledgeIndexError, match="meta must be JSON"):
        kb.with_section(Section("s", {"deep": deep})).save(tmp_path / "b")
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists()


def test_big_endian_arrays_are_stored_little_endian(tmp_path: Path) -> None:
    kb = KnowledgeBase.from_documents(docs())
    big = np.arange(6, dtype=">i4")
    kb.with_section(Section("s", {}, {"x": big})).save(tmp_path / "s")
    loaded = KnowledgeBase.load(tmp_path / "s").sections["s"].arrays["x"]
    assert loaded.dtype.str == "<i4"
    assert loaded.tolist() == list(range(6))


def test_with_section_keeps_answers(saved: Path) -> None:
    plain = KnowledgeBase.from_documents(docs())
    loaded = KnowledgeBase.load(saved)
    for query in ("title 3", "words 1", "body text"):
        assert plain.search_ids(query, 6) == loaded.search_ids(query, 6)
