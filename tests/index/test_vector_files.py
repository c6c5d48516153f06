"""Vectors kept in the snapshot's section, legacy side files still read, and updates that
embed only what changed (counted at the embedder)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.ground.test_engine_hybrid import Counting  # counts the texts it embeds

import groundwire as gw
from groundwire.index.vector_files import (
    remove_side_file,
    saved_vectors,
    snapshot_vectors,
    vectors_path,
    with_vectors,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _kb(bodies: dict[str, str]) -> gw.KnowledgeBase:
    return gw.KnowledgeBase.from_documents(
        [{"id": key, "title": key.title(), "text": text} for key, text in bodies.items()]
    )


BODIES = {f"doc{n}": f"Document {n} is about topic {n} and the tides." for n in range(6)}


def test_a_legacy_side_file_is_still_served(tmp_path: Path) -> None:
    """The compat fixture: a ``.vectors`` file written by the old writer (7182cd5)."""
    snapshot = tmp_path / "snapshot-v2"
    shutil.copytree(FIXTURES / "snapshot-v2", snapshot)
    shutil.copy(FIXTURES / "snapshot-v2.vectors", vectors_path(snapshot))
    kb = gw.KnowledgeBase.load(snapshot)
    counting = Counting(16)
    vectors = snapshot_vectors(kb, snapshot, counting)
    assert counting.documents == 0  # read, not embedded
    assert vectors.model_id == "hashing-fnv1a-16"
    assert vectors.matches(kb)
    query = counting.embed_query("water the drip lines in the morning")
    rows, scores = vectors.search(query, 3)
    assert rows == [5, 7, 9]  # as make_vectors_v1.py printed
    assert scores == pytest.approx([0.9681958556175232, 0.9571219086647034, 0.9142780303955078])
    assert np.array_equal(vectors.matrix(), gw.VectorIndex.build(kb, counting).matrix())
    # another model: the file does not fit, so it is embedded; no model asked: served
    assert saved_vectors(kb, snapshot, "another-model") is None
    assert saved_vectors(kb, snapshot) is not None
    # a damaged side file is refused, never served
    side = vectors_path(snapshot)
    data = bytearray(side.read_bytes())
    data[-1] ^= 0xFF
    side.write_bytes(bytes(data))
    with pytest.raises(gw.IndexFormatError, match="checksum mismatch"):
        saved_vectors(kb, snapshot)
    remove_side_file(snapshot)
    assert not side.exists()
    remove_side_file(snapshot)  # nothing there: nothing to do


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_vectors_saved_in_the_snapshot_are_checksummed_and_read_first(
    tmp_path: Path, dtype: str
) -> None:
    kb = _kb(BODIES)
    counting = Counting(16)
    vectors = gw.VectorIndex.build(kb, counting, dtype=dtype)  # type: ignore[arg-type]
    path = tmp_path / "snap"
    with_vectors(kb, vectors).save(path)
    other = gw.VectorIndex.build(kb, gw.HashingEmbedder(16), dtype=dtype)  # type: ignore[arg-type]
    other.save(vectors_path(path))  # a side file too: the section is read first
    loaded = gw.KnowledgeBase.load(path)
    held = saved_vectors(loaded, path)
    assert held is not None
    assert (held.dtype, held.ids) == (dtype, vectors.ids)
    assert np.array_equal(held.matrix(), vectors.matrix())
    assert counting.documents == len(kb)
    assert snapshot_vectors(loaded, path, counting).ids == vectors.ids
    assert counting.documents == len(kb)  # nothing embedded again
    assert with_vectors(loaded, None).sections.get("vectors") is None
    section = next(path.glob("section.vectors.matrix.*.npy"))  # one checksummed file
    data = bytearray(section.read_bytes())
    data[-1] ^= 0xFF
    section.write_bytes(bytes(data))
    with pytest.raises(gw.IndexFormatError):
        gw.KnowledgeBase.load(path)
    with pytest.raises(gw.KnowledgeIndexError, match="another knowledge base"):
        with_vectors(_kb({"x": "other"}), vectors)


@pytest.mark.parametrize("dtype", ["float32", "int8", "float16"])
def test_an_update_embeds_only_new_and_changed_entries(dtype: str) -> None:
    kb = _kb(BODIES)
    counting = Counting(16)
    vectors = gw.VectorIndex.build(kb, counting, dtype=dtype)  # type: ignore[arg-type]
    changed = {**BODIES, "doc2": "Document two now covers moons.", "doc9": "A new page."}
    del changed["doc4"]
    updated_kb = kb.update(
        [{"id": key, "title": key.title(), "text": changed[key]} for key in ("doc2", "doc9")],
        ["doc4"],
    )
    before = counting.documents
    updated = vectors.updated(kb, updated_kb, counting)
    assert counting.documents - before == 2  # doc2 (changed) and doc9 (new), nothing else
    rebuilt = gw.VectorIndex.build(_kb(changed), gw.HashingEmbedder(16), dtype=dtype)  # type: ignore[arg-type]
    assert updated.ids == rebuilt.ids
    assert updated.dtype == dtype
    assert np.array_equal(updated.matrix(), rebuilt.matrix())  # as a rebuild, bit for bit
    assert updated.search(counting.embed_query("moons"), 3) == rebuilt.search(
        counting.embed_query("moons"), 3
    )
    # nothing changed: no embedder needed, every row kept
    same = updated.updated(updated_kb, updated_kb, None)
    assert np.array_equal(same.matrix(), updated.matrix())
    # something changed and no embedder: a clear error
    with pytest.raises(gw.KnowledgeIndexError, match="2 entries are new or changed"):
        vectors.updated(kb, updated_kb, None)
    # another model: everything is embedded with it
    other = Counting(32)
    assert vectors.updated(kb, updated_kb, other).dimensions == 32
    assert other.documents == len(updated_kb)
    with pytest.raises(gw.KnowledgeIndexError, match="another knowledge base"):
        vectors.updated(updated_kb, updated_kb, counting)


def test_a_metadata_only_change_keeps_the_vector() -> None:
    kb = gw.KnowledgeBase.from_documents([{"id": "a", "title": "A", "text": "Tides."}])
    vectors = gw.VectorIndex.build(kb, Counting(16))
    moved = kb.update([{"id": "a", "title": "A", "text": "Tides.", "metadata": {"k": 1}}])
    assert vectors.updated(kb, moved, None).ids == ("a",)  # the embedded text is the same
