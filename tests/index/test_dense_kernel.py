"""The C dense kernel against a numpy reference written here: top-k, masks, ties, int8."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import groundwire as gw
from groundwire.index import _dense

pytestmark = pytest.mark.skipif(not _dense.available(), reason="dense kernel not built")


def _reference(scores: np.ndarray, allowed: np.ndarray, k: int) -> list[int]:
    rows = np.flatnonzero(allowed)
    order = np.lexsort((rows, -scores[rows]))  # score descending, then row
    return rows[order][:k].tolist()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    d=st.integers(1, 70),
    k=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    share=st.floats(0.0, 1.0),
    ties=st.booleans(),
)
def test_float32_topk_is_the_exact_masked_top_k(
    n: int, d: int, k: int, seed: int, share: float, ties: bool
) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, d)).astype(np.float32)
    if ties:  # repeated rows: equal scores, broken by row
        matrix = matrix[rng.integers(0, max(1, n // 3), n)]
    query = rng.standard_normal(d).astype(np.float32)
    mask = rng.random(n) < share
    valid = rng.random(n) < 0.9
    view = _dense.Matrix.of(matrix, None, valid)
    assert view is not None
    rows, values = _dense.topk(view, query, k, mask)
    expected = (matrix.astype(np.float64) @ query.astype(np.float64)).astype(np.float32)
    assert set(rows.tolist()) <= set(np.flatnonzero(mask & valid).tolist())
    assert len(rows) == min(k, int((mask & valid).sum()))
    np.testing.assert_allclose(values, expected[rows], rtol=1e-5, atol=1e-5)
    # The kernel's own scores order the rows exactly: descending, ties by row.
    own = _dense.rows(view, query, np.arange(n, dtype=np.int64))
    assert rows.tolist() == _reference(own, mask & valid, k)
    assert values.tolist() == own[rows].tolist()


def test_int8_scores_follow_the_row_scales() -> None:
    rng = np.random.default_rng(7)
    unit = rng.standard_normal((50, 384)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    index = gw.VectorIndex([f"e{n:02d}" for n in range(50)], unit, "m", dtype="int8")
    query = unit[3]
    rows, scores = index.search(query, 5)
    assert rows[0] == 3
    exact = unit @ query
    assert scores == pytest.approx(exact[rows].tolist(), abs=0.01)
    assert index.scores(query, [3, 4]).tolist() == pytest.approx(exact[[3, 4]], abs=0.01)


def test_rows_outside_the_matrix_are_refused() -> None:
    index = gw.VectorIndex(["a", "b"], np.eye(2, dtype=np.float32), "m")
    with pytest.raises(gw.QueryError, match="within the 2 vectors"):
        index.scores(np.ones(2, dtype=np.float32), [0, 2])


def test_search_without_the_kernel_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((400, 32)).astype(np.float32)
    ids = [f"e{n:03d}" for n in range(400)]
    mask = rng.random(400) < 0.3
    query = rng.standard_normal(32).astype(np.float32)
    with_kernel = gw.VectorIndex(ids, matrix, "m").search(query, 20, mask)
    monkeypatch.setattr(_dense.Matrix, "of", classmethod(lambda cls, *args: None))
    plain = gw.VectorIndex(ids, matrix, "m").search(query, 20, mask)
    assert with_kernel[0] == plain[0]
    assert with_kernel[1] == pytest.approx(plain[1], abs=1e-6)
