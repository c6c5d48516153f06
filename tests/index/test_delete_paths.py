"""The paths a delete takes on a delta snapshot: id prefixes for the order check, entry
lines copied run by run, and deletes-only updates equal to a build from scratch."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.index.test_delta import build, same_scores
from tests.index.test_delta_snapshot import corpus, updated_on_disk

from groundwire import IndexFormatError, KnowledgeBase
from groundwire.config import document_settings
from groundwire.index.store.codecs import StringTable
from groundwire.index.store.layout import _prefixes, check_ids
from groundwire.index.store.views import SplicedEntries, gathered_lines


def _reference_prefixes(table: StringTable) -> list[int]:
    return [int.from_bytes(table.raw(i)[:8].ljust(8, b"\0"), "big") for i in range(len(table))]


def _table(strings: list[bytes]) -> StringTable:
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in strings], out=offsets[1:])
    return StringTable(np.frombuffer(b"".join(strings), dtype=np.uint8), offsets)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=30))
def test_prefixes_are_the_first_eight_bytes_big_endian(strings: list[bytes]) -> None:
    table = _table(strings)
    assert _prefixes(table).tolist() == _reference_prefixes(table)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=10), min_size=2, max_size=20))
def test_the_id_order_check_refuses_exactly_unsorted_or_repeated_ids(ids: list[str]) -> None:
    table = _table([i.encode("utf-8", "surrogatepass") for i in ids])
    encoded = [i.encode("utf-8", "surrogatepass") for i in ids]
    ordered = all(a < b for a, b in itertools.pairwise(encoded))
    try:
        check_ids(table, "test")
    except IndexFormatError:
        assert not ordered
    else:
        assert ordered


def test_deletes_on_a_delta_snapshot_copy_stored_lines_and_match_a_rebuild(
    tmp_path: Path,
) -> None:
    content = corpus(80)
    path = tmp_path / "snap"
    build(content, document_settings()).save(path)
    added = {f"n{i:02d}": ("added words", f"fresh text {i}") for i in range(6)}
    updated_on_disk(path, content, added, [])
    gone = ["d003", "d040", "n02", "d079"]
    kb = updated_on_disk(path, content, {}, gone)
    entries = kb._parts.entries
    assert isinstance(entries, SplicedEntries)
    for positions in (np.arange(len(entries)), np.array([5, 1, 1, 70], dtype=np.int64)):
        picks = [
            (entries.old, at) if at >= 0 else (entries._new, -1 - at)
            for at in entries.source[positions].tolist()
        ]
        lines, offsets = entries.lines(positions)
        expected, bounds = gathered_lines(picks)
        assert lines == expected
        assert offsets.tolist() == bounds.tolist()
    loaded = KnowledgeBase.load(path)
    assert [e.id for e in loaded._parts.entries] == sorted(content)
    same_scores(loaded, build(content, document_settings()))
