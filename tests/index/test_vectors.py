"""Vector indexes: exact search with the mask before top-k, storage types, files, HNSW."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import HashingEmbedder, IndexFormatError, KnowledgeBase, QueryError, VectorIndex
from groundwire.index import _dense
from groundwire.index.vectors import embedding_text
from groundwire.model import KnowledgeEntry

RNG = np.random.default_rng(7)


def _random_index(n: int = 300, d: int = 24, dtype: str = "float32") -> VectorIndex:
    matrix = RNG.standard_normal((n, d)).astype(np.float32)
    return VectorIndex([f"id-{i:04d}" for i in range(n)], matrix, "test-model", dtype=dtype)  # type: ignore[arg-type]


def _exact(index: VectorIndex, query: np.ndarray, k: int, mask: np.ndarray) -> list[int]:
    scores = index.matrix() @ query
    docs = [d for d in range(len(index)) if mask[d]]
    return sorted(docs, key=lambda d: (-scores[d], d))[:k]


@settings(max_examples=30, deadline=None)
@given(share=st.floats(0.0, 1.0), k=st.integers(1, 40), seed=st.integers(0, 1000))
def test_search_equals_brute_force_over_allowed_rows(share: float, k: int, seed: int) -> None:
    index = _random_index()
    rng = np.random.default_rng(seed)
    mask = rng.random(len(index)) < share
    query = index.check_query(rng.standard_normal(index.dimensions))
    docs, scores = index.search(query, k, mask)
    assert docs == _exact(index, query, k, mask)
    assert all(mask[d] for d in docs)  # a denied row never appears nor takes a slot
    assert scores == sorted(scores, reverse=True)


_LARGE = _random_index(3000, 48)  # above 2 x the pool of k = 40: the rescored scan runs


@settings(max_examples=30, deadline=None)
@given(share=st.floats(0.0, 1.0), k=st.integers(1, 40), seed=st.integers(0, 1000))
def test_the_rescored_scan_equals_the_full_scan_bit_for_bit(
    share: float, k: int, seed: int
) -> None:
    """The default scan (int8 codes, a pool rescored in float32) returns the full float32
    scan's hits and scores exactly, and applies the mask before top-k."""
    if not _dense.available():
        pytest.skip(f"dense kernel: {_dense.unavailable_reason()}")
    assert _LARGE.scan == "rescored"
    full = _LARGE.with_scan("full")
    rng = np.random.default_rng(seed)
    mask = rng.random(len(_LARGE)) < share
    query = _LARGE.check_query(rng.standard_normal(_LARGE.dimensions))
    for allowed in (mask, None):
        docs, scores = _LARGE.search(query, k, allowed)
        assert (docs, scores) == full.search(query, k, allowed)
        assert all(allowed is None or allowed[d] for d in docs)  # denied rows take no slot
    assert docs == _exact(_LARGE, query, k, np.ones(len(_LARGE), dtype=bool))


@pytest.mark.parametrize("d", [37, 48, 384, 4100])  # tails of 16 and 32 values, 2048 blocks
def test_a_certified_pool_stops_early_and_equals_the_full_scan(d: int) -> None:
    """Clustered rows (queries near some of them) certify after rescoring part of the
    pool, best code first; hits and scores are the full scan's, masked or not."""
    if not _dense.available():
        pytest.skip(f"dense kernel: {_dense.unavailable_reason()}")
    rng = np.random.default_rng(d)
    centers = rng.standard_normal((20, d)).astype(np.float32)
    matrix = centers[rng.integers(0, 20, 1500)] + 0.3 * rng.standard_normal((1500, d))
    index = VectorIndex([f"r{i:05d}" for i in range(1500)], matrix.astype(np.float32), "m")
    view = index._kernel()
    assert view is not None
    mask = rng.random(1500) < 0.7
    certified_any = False
    for n in range(6):
        query = index.check_query(centers[n] + 0.1 * rng.standard_normal(d))
        for allowed in (None, mask):
            for k in (1, 10):
                rows, scores, certified = _dense.topk_rescored(
                    view, index._code_view(), query, k, 2 * k + 64, allowed
                )
                certified_any |= certified
                want = index.with_scan("full").search(query, k, allowed)
                assert (rows.tolist(), scores.astype(np.float64).tolist()) == want
    assert certified_any


def test_an_uncertified_pool_falls_back_to_the_full_scan() -> None:
    """Rows whose code scores crowd the cutoff cannot be certified: the full scan answers,
    so the result is still exact (here every row scores almost the same)."""
    if not _dense.available():
        pytest.skip(f"dense kernel: {_dense.unavailable_reason()}")
    rng = np.random.default_rng(3)
    base = np.ones((2000, 32), dtype=np.float32)
    matrix = base + 1e-4 * rng.standard_normal(base.shape).astype(np.float32)
    index = VectorIndex([f"r{i:05d}" for i in range(2000)], matrix, "m")
    query = index.check_query(np.ones(32))
    view = index._kernel()
    assert view is not None
    rows, scores, certified = _dense.topk_rescored(view, index._code_view(), query, 10, 84, None)
    assert not certified
    assert (rows.tolist(), scores.astype(np.float64).tolist()) == index.with_scan("full").search(
        query, 10
    )
    with pytest.raises(Exception, match="scan="):
        index.with_scan("approximate")  # type: ignore[arg-type]


def test_ties_break_on_position_and_zero_vectors_never_return() -> None:
    matrix = np.array([[1, 0], [1, 0], [0, 0], [0, 1]], dtype=np.float32)
    index = VectorIndex(["a", "b", "c", "d"], matrix, "m")
    docs, _ = index.search(np.array([1, 0], dtype=np.float32), 4)
    assert docs == [0, 1, 3]


@pytest.mark.parametrize(("dtype", "min_recall"), [("float16", 0.99), ("int8", 0.9)])
def test_compact_storage_keeps_the_ranking(dtype: str, min_recall: float) -> None:
    exact = _random_index(2000, 64)
    compact = VectorIndex(exact.ids, exact.matrix(), "m", dtype=dtype)  # type: ignore[arg-type]
    assert compact.nbytes < exact.nbytes
    recalls = []
    for _ in range(20):
        query = exact.check_query(RNG.standard_normal(64))
        truth = set(exact.search(query, 10)[0])
        recalls.append(len(truth & set(compact.search(query, 10)[0])) / 10)
    assert np.mean(recalls) >= min_recall


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_save_and_load_round_trip(tmp_path: Path, dtype: str) -> None:
    index = _random_index(50, 8, dtype)
    path = tmp_path / "kb.vectors"
    index.save(path)
    loaded = VectorIndex.load(path)
    assert (loaded.ids, loaded.model_id, loaded.dtype) == (index.ids, index.model_id, dtype)
    np.testing.assert_array_equal(loaded.matrix(), index.matrix())
    query = index.check_query(RNG.standard_normal(8))
    assert loaded.search(query, 5) == index.search(query, 5)


def test_tampered_truncated_and_foreign_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "v"
    _random_index(20, 4).save(path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="checksum"):
        VectorIndex.load(path)
    path.write_bytes(bytes(data[:-4]))
    with pytest.raises(IndexFormatError, match="truncated"):
        VectorIndex.load(path)
    path.write_bytes(b"hello")
    with pytest.raises(IndexFormatError, match="not a groundwire vectors file"):
        VectorIndex.load(path)


def test_a_failed_save_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v"
    old = _random_index(10, 4)
    old.save(path)

    def broken(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("groundwire.index.vectors.os.replace", broken)
    with pytest.raises(IndexFormatError, match="No space left"):
        _random_index(12, 4).save(path)
    assert VectorIndex.load(path).ids == old.ids
    assert [p.name for p in tmp_path.iterdir()] == ["v"]


def test_built_from_a_knowledge_base_and_checked_against_it() -> None:
    kb = KnowledgeBase.from_documents(
        [
            {"id": "b", "title": "Beta", "text": "second"},
            {"id": "a", "title": "Alpha", "text": "first"},
        ]
    )
    index = VectorIndex.build(kb, HashingEmbedder())
    assert index.ids == ("a", "b")
    assert index.matches(kb)
    other = KnowledgeBase.from_documents([{"id": "a", "title": "A", "text": "x"}])
    with pytest.raises(Exception, match="another knowledge base"):
        index.check_for(other)
    with pytest.raises(QueryError, match="dimensions"):
        index.check_query(np.ones(3))


def test_embedding_text_per_kind() -> None:
    entry = KnowledgeEntry(
        "x", "Rotate keys", "Settings then rotate.", "security", (), body="Body."
    )
    assert embedding_text(entry) == "Rotate keys\nSettings then rotate.\nBody."
    doc = KnowledgeEntry("d", "Guide > Install", "", "", (), body="Run it.")
    assert embedding_text(doc) == "Guide > Install\nRun it."


def test_hnsw_keeps_recall_at_every_visible_share(monkeypatch: pytest.MonkeyPatch) -> None:
    from groundwire.index import ann

    monkeypatch.setattr(ann, "DEFAULT_ANN_THRESHOLD", 100)  # small data, ANN path on
    monkeypatch.setattr("groundwire.index.vectors.DEFAULT_ANN_THRESHOLD", 100)
    base = _random_index(3000, 16)
    graph = ann.HnswIndex.build(base)
    index = base.with_ann(graph)
    rng = np.random.default_rng(3)
    for share in (0.01, 0.1, 1.0):
        mask = rng.random(len(index)) < share
        recalls = []
        for _ in range(20):
            query = index.check_query(rng.standard_normal(16))
            got = index.search(query, 10, None if share == 1.0 else mask)[0]
            assert all(mask[d] for d in got) or share == 1.0
            truth = _exact(index, query, 10, mask if share < 1.0 else np.ones(len(index), bool))
            recalls.append(len(set(got) & set(truth)) / 10)
        assert np.mean(recalls) >= 0.9, share
