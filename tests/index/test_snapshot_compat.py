"""The committed format-version-1 snapshot still opens and answers exactly as when written.

``tests/fixtures/snapshot-v1/`` was made by ``tests/fixtures/make_snapshot_v1.py``. If
this test fails, current code broke compatibility with snapshots already deployed:
fix the reader, or bump the format version and keep reading version 1.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

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
