"""The committed format-version-1 snapshot still opens and answers exactly as when written.

``tests/fixtures/snapshot-v1/`` was made by ``tests/fixtures/make_snapshot_v1.py``. If
this test fails, current code broke compatibility with snapshots already deployed:
fix the reader, or bump the format version and keep reading version 1.
"""

from __future__ import annotations

import datetime as dt
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


def test_a_copy_with_one_changed_byte_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(FIXTURE, copy)
    scores = next(copy.glob("lexical.scores.*.npy"))
    data = bytearray(scores.read_bytes())
    data[-3] ^= 0x10
    scores.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="SHA-256"):
        KnowledgeBase.load(copy)


# -- format version 2 ---------------------------------------------------------------------------
FIXTURE_V2 = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot-v2"
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


def test_a_v1_snapshot_saves_as_v2_with_the_same_answers(
    fixture: KnowledgeBase, tmp_path: Path
) -> None:
    fixture.save(tmp_path / "upgraded")
    upgraded = KnowledgeBase.load(tmp_path / "upgraded")
    assert KnowledgeBase.describe_snapshot(tmp_path / "upgraded")["format_version"] == 2
    for query in (QUERY, "greenfly", "frost bot"):
        for a, b in zip(fixture.search(query, 10), upgraded.search(query, 10), strict=True):
            assert (a.id, a.score) == (b.id, b.score)
    assert upgraded.relation_index == fixture.relation_index


def test_a_v2_copy_with_one_changed_byte_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(FIXTURE_V2, copy)
    matrix = next(copy.glob("section.probe.matrix.*.npy"))
    data = bytearray(matrix.read_bytes())
    data[-3] ^= 0x10
    matrix.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="SHA-256"):
        KnowledgeBase.load(copy)
