"""Reading a loaded snapshot's labels without decoding its entries (store/views.label_free).

An entry whose stored JSON line holds none of ``tenant``, ``acl`` and ``\\u`` cannot carry
a tenant or ACL label; every other entry is decoded and read as before. The label index
built this way equals the one built by decoding every entry, for every filter.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import groundwire as gw
from groundwire.access.filters import LabelIndex
from groundwire.index.scoped import label_index
from groundwire.index.store.views import LazyEntries, label_free

WORDS = ["alpha", "tenant", "acl", "oracle", "beta", "naïve", "tenants", "x"]
FILTERS = [
    gw.Filter.of(None),
    gw.Filter.of(gw.Principal("acme", "alice", ["eng"])),
    gw.Filter.of(gw.Principal("acme", "bob", ["hr"])),
    gw.Filter.of(gw.Principal("beta", "carol", [])),
]


def masks(index: LabelIndex) -> list[list[bool]]:
    return [index.mask(flt).tolist() for flt in FILTERS]


labels = st.one_of(
    st.just({}),
    st.just({"tenant": "acme"}),
    st.just({"tenant": "beta", "acl": ["group:hr"]}),
    st.just({"acl": ["user:bob"]}),
    st.just({"tenant": "not a tenant"}),  # malformed: visible to nobody
)
document = st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), labels)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(docs=st.lists(document, min_size=1, max_size=20), changes=st.lists(document, max_size=4))
def test_labels_read_without_decoding_equal_labels_of_every_entry(
    tmp_path_factory: Any, docs: list[tuple[list[str], dict[str, Any]]], changes: list[Any]
) -> None:
    path = tmp_path_factory.mktemp("kb") / "kb"
    built = [
        gw.Document(f"d{n:02d}", " ".join(w), " ".join(w), meta) for n, (w, meta) in enumerate(docs)
    ]
    gw.KnowledgeBase.from_documents(built).save(path)
    kb = gw.KnowledgeBase.load(path)
    new = [
        gw.Document(f"d{n:02d}", " ".join(w), "new", meta) for n, (w, meta) in enumerate(changes)
    ]
    for current in (kb, kb.update(new, compact=False)):
        free = label_free(current._entries)
        assert free is not None
        reference = LabelIndex(current.entries)  # every entry decoded
        assert masks(LabelIndex(current._entries, free)) == masks(reference)
        for doc, is_free in zip(current, free.tolist(), strict=True):
            if is_free:
                assert "tenant" not in doc.metadata
                assert "acl" not in doc.metadata
        assert masks(label_index(current)) == masks(reference)


def _lines(*records: bytes) -> LazyEntries:
    blob = b"".join(records)
    offsets = np.cumsum([0, *map(len, records)]).astype(np.int64)
    ids = [json.loads(r)["id"] for r in records]
    return LazyEntries(np.frombuffer(blob, dtype=np.uint8), offsets, ids)


def _record(entry_id: str, metadata: str) -> bytes:
    return (
        f'{{"id":"{entry_id}","title":"t","summary":"s","domain":"","body":"","kind":"","status":"active",'
        '"version":"","integrations":[],"aliases":[],"keywords":[],"related":[],"parent":null,'
        f'"source_id":"","metadata":{metadata}}}\n'
    ).encode()


def test_an_escaped_label_key_is_read() -> None:
    """A key spelled with \\u escapes (a line groundwire never writes) is still decoded."""
    entries = _lines(
        _record("a", '{"\\u0074enant":"acme"}'),
        _record("b", '{"note":"plain"}'),
        _record("c", '{"\\u0061cl":["group:hr"]}'),
    )
    assert label_free(entries).tolist() == [False, True, False]
    index = LabelIndex(entries, label_free(entries))
    assert masks(index) == masks(LabelIndex(list(entries)))
    assert index.mask(gw.Filter.of(None)).tolist() == [False, True, False]


def test_entries_in_memory_are_not_read_from_lines() -> None:
    kb = gw.KnowledgeBase.from_documents([gw.Document("a", "t", "x")])
    assert label_free(kb._entries) is None
