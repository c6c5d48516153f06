"""Entries encoded in bulk (``index/store/lines.py``) are byte for byte what the
reference functions write: ``codecs.encode_entry`` lines and ``entry_digest`` digests,
on generated entries (odd strings, lists, parents, metadata of every stored kind), and
what the reference raises, it raises."""

from __future__ import annotations

import datetime as dt
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire.errors import KnowledgeIndexError
from groundwire.index.store import lines
from groundwire.index.store.codecs import encode_entry
from groundwire.ingest.validate import entry_digest
from groundwire.model import KnowledgeEntry

# Text with JSON's special characters, controls, non-ASCII and line separators.
_TEXT = st.text(
    st.sampled_from(
        [
            "a",
            "Z",
            " ",
            '"',
            "\\",
            "/",
            "\n",
            "\t",
            "\x00",
            "\x1f",
            "é",
            "\u2028",
            "😀",
            "{",
            "}",
            ",",
        ]
    )
    | st.characters(blacklist_categories=("Cs",)),
    max_size=12,
)
_SCALAR = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _TEXT
_VALUE = st.recursive(
    _SCALAR | st.dates() | st.datetimes() | st.binary(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(_TEXT, inner, max_size=3)
        | st.dictionaries(st.integers(0, 5), inner, max_size=2)
        | st.frozensets(st.integers(0, 9), max_size=3)
    ),
    max_leaves=8,
)
_METADATA = st.just({}) | st.just(MappingProxyType({})) | st.dictionaries(_TEXT, _VALUE, max_size=3)
_WORDS = st.lists(_TEXT, max_size=3).map(tuple)


@st.composite
def _entries(draw: st.DrawFn) -> list[KnowledgeEntry]:
    count = draw(st.integers(1, 12))
    shared = draw(st.booleans())  # most fields equal across the batch, as documents are
    out = []
    for n in range(count):
        pick: Any = (lambda s: draw(s)) if not shared else (lambda s: "" if s is _TEXT else ())
        out.append(
            KnowledgeEntry(
                id=f"e{n}{draw(_TEXT)}",
                title=draw(_TEXT),
                summary=pick(_TEXT),
                domain=pick(_TEXT),
                integrations=pick(_WORDS),
                body=draw(_TEXT),
                aliases=pick(_WORDS),
                keywords=pick(_WORDS),
                related=pick(_WORDS),
                parent=draw(st.none() | _TEXT) if not shared else None,
                kind=pick(_TEXT) or "text",
                status=pick(_TEXT) or "active",
                version=pick(_TEXT),
                source_id=pick(_TEXT),
                metadata=draw(_METADATA) if not shared else {},
            )
        )
    return out


def _reference(entries: list[KnowledgeEntry]) -> tuple[bytes, list[int], bytes]:
    encoded = [encode_entry(entry) + b"\n" for entry in entries]
    offsets = [0]
    for line in encoded:
        offsets.append(offsets[-1] + len(line))
    return b"".join(encoded), offsets, b"".join(map(entry_digest, entries))


@settings(max_examples=80, deadline=None)
@given(_entries())
def test_bulk_lines_and_digests_are_the_reference_bytes(entries: list[KnowledgeEntry]) -> None:
    blob, offsets, digests = _reference(entries)
    chunks, got_offsets, got_digests = lines.encoded_entries(entries, True)
    assert b"".join(chunks) == blob
    assert got_offsets.tolist() == offsets
    assert got_digests == digests
    assert lines.entry_digests(entries) == digests
    assert b"".join(lines.encoded_lines(entries)) == blob
    assert lines.encoded_entries(entries, False)[2] == b""


def test_batches_are_spliced_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines, "_BATCH", 3)
    entries = [
        KnowledgeEntry(f"id{n:02d}", f"title {n}", "", "", (), body="é" * n, metadata={"n": n})
        for n in range(11)
    ]
    blob, offsets, digests = _reference(entries)
    chunks, got_offsets, got_digests = lines.encoded_entries(entries, True)
    assert len(chunks) == 4
    assert (b"".join(chunks), got_offsets.tolist(), got_digests) == (blob, offsets, digests)


def _entry(n: int, **fields: Any) -> KnowledgeEntry:
    base: dict[str, Any] = {
        "id": f"x{n}",
        "title": "t",
        "summary": "",
        "domain": "",
        "integrations": (),
    }
    return KnowledgeEntry(**{**base, **fields})


@pytest.mark.parametrize(
    "odd",
    [
        {"title": 5},  # not a string: JSON writes a number
        {"aliases": "ab"},  # a string where a tuple goes: encode_entry lists its characters
        {"related": ("a", 1)},
        {"parent": 3},
        {"metadata": {"when": dt.date(2020, 1, 2), "set": {3, 1}, 2: "two"}},
        {"metadata": [("k", "v")]},  # any mapping-like value dict() takes
    ],
)
def test_unusual_fields_fall_back_to_the_same_bytes(odd: dict[str, Any]) -> None:
    entries = [_entry(1), _entry(2, **odd), _entry(3)]
    blob, offsets, digests = _reference(entries)
    chunks, got_offsets, got_digests = lines.encoded_entries(entries, True)
    assert (b"".join(chunks), got_offsets.tolist(), got_digests) == (blob, offsets, digests)


def test_what_the_reference_refuses_is_refused_the_same_way() -> None:
    deep: Any = "leaf"
    for _ in range(80):
        deep = [deep]
    with pytest.raises(KnowledgeIndexError, match="nests deeper"):
        lines.encoded_entries([_entry(1), _entry(2, metadata={"deep": deep})], False)
    with pytest.raises(KnowledgeIndexError, match="lone surrogate"):
        lines.encoded_entries([_entry(1), _entry(2, body="bad \ud800")], False)
    with pytest.raises(KnowledgeIndexError, match="snapshots store JSON values"):
        lines.encoded_entries([_entry(1), _entry(2, metadata={"x": object()})], False)


def test_validated_entries_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [
        _entry(1, body='a "quoted"\nline', aliases=("A", "b"), parent="x2"),
        _entry(2, metadata={"language": "en", "tags": ["a", "b"], "n": 1.5}),
        _entry(3, related=("x1",), integrations=("web",)),
    ]
    blob, offsets, digests = _reference(entries)

    def unexpected(*_: Any) -> Any:
        raise AssertionError("the reference path ran")

    monkeypatch.setattr(lines, "encode_entry", unexpected)
    monkeypatch.setattr(lines, "entry_digest", unexpected)
    chunks, got_offsets, got_digests = lines.encoded_entries(entries, True)
    assert (b"".join(chunks), got_offsets.tolist(), got_digests) == (blob, offsets, digests)
