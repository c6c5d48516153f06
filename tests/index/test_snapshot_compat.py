"""The committed snapshots of format versions 1, 2 and 3 still open and answer exactly as
when written.

``tests/fixtures/snapshot-v<N>/`` was made by ``tests/fixtures/make_snapshot_v<N>.py``.
If this test fails, current code broke compatibility with snapshots already deployed:
fix the reader, or bump the format version and keep reading the older versions.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from groundwire import (
    GroundingConfig,
    GroundingEngine,
    IndexFormatError,
    KnowledgeBase,
    RetrievalConfig,
    Scope,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot-v1"
FIXTURE_V2 = FIXTURE.with_name("snapshot-v2")
FIXTURE_V3 = FIXTURE.with_name("snapshot-v3")
FIXTURE_V3_CHECKS = FIXTURE.with_name("snapshot-v3-checks")
QUERY = "how do I water drip lines in the morning"
#: Printed by make_snapshot_v1.py when the fixture was written.
EXPECTED = [
    ("water.drip-irrigation", 101.14477454826314),
    ("water.schedule", 20.829108690155024),
    ("pests.aphids", 4.492615946474377),
]
SOURCE_HASH = "5a268ce5a0f76a72aad22116dbae1f9cebd262f8757e7c0467905b3716ea6b26"


@pytest.fixture(scope="module")
def fixture() -> KnowledgeBase:
    return KnowledgeBase.load(FIXTURE, SOURCE_HASH, verify="full")


def test_the_v1_fixture_answers_the_known_query(fixture: KnowledgeBase) -> None:
    hits = fixture.search(QUERY, 5)
    assert [hit.id for hit in hits] == [hit_id for hit_id, _ in EXPECTED]
    for hit, (_, score) in zip(hits, EXPECTED, strict=True):
        assert abs(hit.score - score) <= 1e-12
        assert abs(sum(hit.breakdown.values()) - hit.score) <= 1e-9
    top = hits[0].breakdown
    assert top["alias"] == 60.0
    assert top["exact"] == 0.0
    assert abs(top["bigrams"] - 1.420869388186171) <= 1e-12


def test_the_v1_fixture_keeps_phrases_relations_masks_and_entries(fixture: KnowledgeBase) -> None:
    assert len(fixture) == 10
    assert fixture.settings.field_weights["bigrams"] == 0.5
    assert fixture.search("greenfly", 1)[0].id == "pests.aphids"  # alias phrase
    assert fixture.exact_index["make compost"] == ("soil.compost",)
    assert fixture.relation_index == {
        "pests.aphids": ("pests.ladybirds",),
        "soil.compost": ("soil.mulch",),
        "soil.mulch": ("soil.compost",),
        "water.drip-irrigation": ("water.schedule", "soil.mulch"),
    }
    assert [h.id for h in fixture.search("frost bot", 3, scope=Scope(("slack",)))] == [
        "tools.slack-alerts"
    ]
    assert fixture.search("frost bot", 3, scope=Scope()) == []
    assert fixture.search("rain barrels", 3) == []  # a draft is never retrieved
    compost = fixture.get("soil.compost")
    assert compost is not None
    assert dict(compost.metadata) == {"reviewed": dt.date(2026, 3, 1), "zones": (5, 6, 7)}
    assert compost.version == "2026-03-01"
    assert compost.aliases == ("composting", "compost heap")


def test_the_v1_fixture_grounds_through_the_engine() -> None:
    fixed_count = GroundingConfig(retrieval=RetrievalConfig(gate="off"))  # the seed's selection
    with GroundingEngine.from_snapshot(
        FIXTURE, fixed_count, expected_manifest_hash=SOURCE_HASH
    ) as engine:
        outcome = engine.ground(QUERY)
    assert outcome.block is not None
    assert [c.tag for c in outcome.block.citations][:2] == [
        "[KB:water.drip-irrigation@2026-03-01]",
        "[KB:water.schedule@2026-03-01]",
    ]
    assert outcome.metadata.expanded_ids == ("soil.mulch", "pests.ladybirds")


# -- format version 2 ---------------------------------------------------------------------------
#: Printed by make_snapshot_v2.py when the fixture was written.
SOURCE_HASH_V2 = "ea3a638712d39384281ba3ef46760db7477825b9c5060d2bbc935c5d51787133"


@pytest.fixture(scope="module")
def fixture_v2() -> KnowledgeBase:
    return KnowledgeBase.load(FIXTURE_V2, SOURCE_HASH_V2, verify="full")


def test_the_v2_fixture_answers_exactly_as_the_v1_fixture(
    fixture: KnowledgeBase, fixture_v2: KnowledgeBase
) -> None:
    hits = fixture_v2.search(QUERY, 5)
    assert [hit.id for hit in hits] == [hit_id for hit_id, _ in EXPECTED]
    for hit, (_, score) in zip(hits, EXPECTED, strict=True):
        assert abs(hit.score - score) <= 1e-12
    for query in (QUERY, "greenfly", "frost bot", "make compost", "soil ph lime"):
        for a, b in zip(fixture.search(query, 10), fixture_v2.search(query, 10), strict=True):
            assert (a.id, a.score) == (b.id, b.score)
            assert dict(a.breakdown) == pytest.approx(dict(b.breakdown), abs=1e-12)
    assert fixture_v2.relation_index == fixture.relation_index
    assert fixture_v2.exact_index == fixture.exact_index
    assert fixture_v2.alias_index == fixture.alias_index
    assert fixture_v2.entries == fixture.entries


def test_the_v2_fixture_keeps_its_section(fixture_v2: KnowledgeBase) -> None:
    section = fixture_v2.sections["probe"]
    assert section.meta == {"model": "probe-4d", "dims": 4, "dtype": "float32"}
    assert not section.required
    matrix = section.arrays["matrix"]
    assert matrix.dtype == np.float32
    assert matrix.shape == (10, 4)
    assert float(matrix[9, 3]) == 39 / 8


def test_the_v2_fixture_grounds_through_the_engine() -> None:
    fixed_count = GroundingConfig(retrieval=RetrievalConfig(gate="off"))  # the seed's selection
    with GroundingEngine.from_snapshot(
        FIXTURE_V2, fixed_count, expected_manifest_hash=SOURCE_HASH_V2
    ) as eng:
        outcome = eng.ground(QUERY)
    assert outcome.block is not None
    assert outcome.metadata.expanded_ids == ("soil.mulch", "pests.ladybirds")


def test_a_v1_snapshot_saves_as_v3_with_the_same_answers(
    fixture: KnowledgeBase, tmp_path: Path
) -> None:
    fixture.save(tmp_path / "upgraded")
    upgraded = KnowledgeBase.load(tmp_path / "upgraded")
    assert KnowledgeBase.describe_snapshot(tmp_path / "upgraded")["format_version"] == 3
    for query in (QUERY, "greenfly", "frost bot"):
        for a, b in zip(fixture.search(query, 10), upgraded.search(query, 10), strict=True):
            assert (a.id, a.score) == (b.id, b.score)
    assert upgraded.relation_index == fixture.relation_index


# -- format version 3 ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixture_v3() -> KnowledgeBase:
    return KnowledgeBase.load(FIXTURE_V3, SOURCE_HASH_V2, verify="full")  # same content


def test_the_v3_fixture_names_blake3_per_file() -> None:
    manifest = json.loads((FIXTURE_V3 / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["format_version"] == 3
    assert "digest" not in manifest
    records = [*manifest["files"].values(), *manifest["segments"][0]["files"].values()]
    records += manifest["segments"][0]["sections"]["probe"]["files"].values()
    assert len(records) == len(list(FIXTURE_V3.glob("*.*.*"))) == 51
    assert {record["digest"].partition(":")[0] for record in records} == {"blake3"}


def test_the_v3_fixture_answers_exactly_as_the_v2_fixture(
    fixture_v2: KnowledgeBase, fixture_v3: KnowledgeBase
) -> None:
    for query in (QUERY, "greenfly", "frost bot", "make compost", "soil ph lime"):
        for a, b in zip(fixture_v2.search(query, 10), fixture_v3.search(query, 10), strict=True):
            assert (a.id, a.score) == (b.id, b.score)
            assert dict(a.breakdown) == dict(b.breakdown)
    assert fixture_v3.relation_index == fixture_v2.relation_index
    assert fixture_v3.entries == fixture_v2.entries
    assert fixture_v3.sections["probe"].meta == fixture_v2.sections["probe"].meta
    assert np.array_equal(
        fixture_v3.sections["probe"].arrays["matrix"], fixture_v2.sections["probe"].arrays["matrix"]
    )


def test_a_v2_snapshot_saves_as_v3_byte_for_byte_but_blake3_named(
    fixture_v2: KnowledgeBase, tmp_path: Path
) -> None:
    fixture_v2.save(tmp_path / "upgraded")
    names = sorted(p.name for p in (tmp_path / "upgraded").glob("*.*.*"))
    assert names == sorted(p.name for p in FIXTURE_V3.glob("*.*.*"))
    for name in names:
        assert (tmp_path / "upgraded" / name).read_bytes() == (FIXTURE_V3 / name).read_bytes()


def test_the_v3_fixture_with_checks_holds_the_same_files_and_answers_alike(
    fixture_v3: KnowledgeBase,
) -> None:
    """Records with an XXH3-128 check beside the BLAKE3 digest (this writer's): the same
    files as snapshot-v3 (only the manifest differs), verified by their checks."""
    manifest = json.loads((FIXTURE_V3_CHECKS / "manifest.json").read_text(encoding="utf-8"))
    records = [*manifest["files"].values(), *manifest["segments"][0]["files"].values()]
    records += manifest["segments"][0]["sections"]["probe"]["files"].values()
    assert len(records) == 51
    assert all(record["check"].startswith("xxh3-128:") for record in records)
    for path in FIXTURE_V3_CHECKS.glob("*.*.*"):
        assert path.read_bytes() == (FIXTURE_V3 / path.name).read_bytes()
    checked = KnowledgeBase.load(FIXTURE_V3_CHECKS, SOURCE_HASH_V2, verify="full")
    for query in (QUERY, "greenfly", "frost bot"):
        for a, b in zip(fixture_v3.search(query, 10), checked.search(query, 10), strict=True):
            assert (a.id, a.score) == (b.id, b.score)
    assert checked.entries == fixture_v3.entries


@pytest.mark.parametrize(
    ("folder", "pattern", "digest"),
    [
        (FIXTURE, "lexical.scores.*.npy", "SHA-256 digest"),
        (FIXTURE_V2, "section.probe.matrix.*.npy", "SHA-256 digest"),
        (FIXTURE_V3, "lexical.scores.*.npy", "BLAKE3 digest"),
        (FIXTURE_V3_CHECKS, "lexical.scores.*.npy", "XXH3-128 check"),
    ],
    ids=["v1", "v2", "v3", "v3-checks"],
)
def test_a_copy_with_one_changed_byte_is_refused(
    tmp_path: Path, folder: Path, pattern: str, digest: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    victim = next(copy.glob(pattern))
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x10
    victim.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match=f"does not match its {digest}"):
        KnowledgeBase.load(copy)
