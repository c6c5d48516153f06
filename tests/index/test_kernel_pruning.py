"""The kernel's pruned top-k (``_kernel_pruned.h``) gives the unpruned kernel's results.

Pruning skips rows whose largest scores cannot lift a document into the top k, then
recomputes the survivors' sums in row order, so documents and scores (bit for bit) must
equal both the unpruned kernel's and the numpy reference's, whatever the rows, ties,
exclusions and k. The data here is shaped so that every step runs: short rows of high
scores (rare terms) beside long rows of low scores (frequent terms), which the pruning
stops before, and equal scores at the edge of the top k.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.index.test_kernel import paired_index, reference

from groundwire.index import _kernel
from groundwire.index.lexical import LexicalIndex

needs_kernel = pytest.mark.skipif(
    not _kernel.available(), reason=f"C kernel unavailable: {_kernel.unavailable_reason()}"
)
NO_STARTS, NO_SECONDS = np.empty(0, np.int64), np.empty(0, np.int32)


def skewed_rows(
    rng: np.random.Generator,
    n_docs: int,
    n_rows: int,
    *,
    ties: bool = False,
    dtype: Any = np.int32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR rows as BM25 makes them: the longer a row, the lower its scores (a low idf)."""
    rows, values = [], []
    for _ in range(n_rows):
        share = float(rng.choice([0.002, 0.02, 0.1, 0.4, 0.8]))
        size = max(1, int(rng.binomial(n_docs, share)))
        rows.append(np.sort(rng.choice(n_docs, size=size, replace=False)))
        idf = np.log(1.0 + n_docs / size)
        if ties:
            values.append(idf * rng.integers(1, 4, size=size) * 0.5)
        else:
            values.append(idf * (0.2 + 2.3 * rng.random(size)))
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    return indptr, np.concatenate(rows).astype(dtype), np.concatenate(values)


def index_of(csr: tuple[np.ndarray, np.ndarray, np.ndarray], n_docs: int, prune: int) -> Any:
    indptr, docs, scores = csr
    n_terms = len(indptr) - 1
    return _kernel.Index(indptr, docs, scores, n_docs, n_terms, NO_STARTS, NO_SECONDS, prune=prune)


def want(csr: Any, rows: list[int], n_docs: int, k: int, excluded: Any) -> tuple[list, list]:
    indptr, docs, scores = csr
    lo, hi = indptr[rows], indptr[np.asarray(rows) + 1]
    ref_docs, ref_scores = reference(lo, hi, docs.astype(np.int64), scores, n_docs, k, excluded)
    return ref_docs.tolist(), ref_scores.tolist()


def assert_zero_scratch() -> None:
    scratch = _kernel._scratch()
    assert not scratch.acc.any()
    assert not scratch.seen.any()


@needs_kernel
@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_docs=st.integers(50, 3000),
    n_rows=st.integers(2, 12),
    ties=st.booleans(),
    wide=st.booleans(),
    k=st.sampled_from([1, 2, 5, 10, 40, 200]),
    exclude=st.sampled_from([0.0, 0.3, 0.95]),
)
def test_pruned_equals_unpruned_and_the_reference(
    seed: int, n_docs: int, n_rows: int, ties: bool, wide: bool, k: int, exclude: float
) -> None:
    rng = np.random.default_rng(seed)
    csr = skewed_rows(rng, n_docs, n_rows, ties=ties, dtype=np.int64 if wide else np.int32)
    pruned = index_of(csr, n_docs, _kernel.PRUNE_ALWAYS)
    plain = index_of(csr, n_docs, _kernel.PRUNE_OFF)
    excluded = rng.random(n_docs) < exclude if exclude else None
    for _ in range(6):
        rows = rng.choice(n_rows, size=int(rng.integers(2, 9))).tolist()  # repeats allowed
        expected = want(csr, rows, n_docs, k, excluded)
        assert _kernel.top_rows(plain, rows, k, excluded) == expected
        assert _kernel.top_rows(pruned, rows, k, excluded) == expected  # bit for bit
    assert_zero_scratch()


@needs_kernel
@pytest.mark.parametrize("seed", range(4))
def test_real_index_word_codes_pruned_equal_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    index: LexicalIndex = paired_index(rng, 60, 2500)
    native = index._kernel_index()
    assert native is not None
    pruned = _kernel.Index(
        index.indptr,
        index.docs,  # type: ignore[arg-type]
        index.scores,
        index.doc_count,
        len(index.vocabulary),
        index.pair_starts,
        index.pair_seconds,
        prune=_kernel.PRUNE_ALWAYS,
    )
    pool = [*range(len(index.vocabulary)), _kernel.SKIP]
    skip = rng.random(index.doc_count) < 0.2
    for _ in range(40):
        codes = [int(c) for c in rng.choice(pool, size=int(rng.integers(2, 12)))]
        ids = index._python_ids(codes)
        for k in (1, 10, 100):
            for excluded in (None, skip):
                docs, scores = index._numpy_top(ids, k, excluded)
                assert _kernel.top_codes(pruned, codes, k, excluded) == (
                    docs.tolist(),
                    scores.tolist(),
                )
    assert_zero_scratch()


@needs_kernel
def test_default_pruning_on_a_large_index_sparse_and_dense_queries() -> None:
    """PRUNE_AUTO prunes only past 131,072 documents; a dense query may go back to the
    unpruned path part way (its scratch cleared first): results are the same."""
    n_docs = 140_000
    rng = np.random.default_rng(11)
    csr = skewed_rows(rng, n_docs, 14)
    auto = index_of(csr, n_docs, _kernel.PRUNE_AUTO)
    plain = index_of(csr, n_docs, _kernel.PRUNE_OFF)
    excluded = rng.random(n_docs) < 0.1
    lengths = np.diff(csr[0])
    long_rows = np.flatnonzero(lengths > n_docs // 4).tolist()
    assert long_rows  # some queries are dense
    queries = [rng.choice(14, size=int(rng.integers(2, 7))).tolist() for _ in range(40)]
    queries += [[*long_rows, int(np.argmin(lengths))], long_rows[:1] * 2]
    for rows in queries:
        for k in (10, 100):
            for mask in (None, excluded):
                got = _kernel.top_rows(auto, rows, k, mask)
                assert got == _kernel.top_rows(plain, rows, k, mask)
                assert got == want(csr, rows, n_docs, k, mask)
    assert_zero_scratch()


@needs_kernel
def test_a_dense_query_whose_check_fails_goes_back_to_the_unpruned_path() -> None:
    """Two short rows of high scores on different documents could outscore the two long
    rows (their tops say so) but do not (no document holds both): the check fails, and the
    dense query is answered by the unpruned path, its scratch cleared first."""
    n_docs = 140_000
    rng = np.random.default_rng(12)
    short_a, short_b = np.arange(0, 80, 2), np.arange(1, 80, 2)
    long_c, long_d = np.arange(0, n_docs, 2), np.arange(1, n_docs, 2)
    rows = [short_a, short_b, long_c, long_d]
    indptr = np.zeros(5, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    docs = np.concatenate(rows).astype(np.int32)
    scores = np.concatenate(
        [np.full(40, 10.0), np.full(40, 10.0), 5.0 * rng.random(len(long_c)) + 1e-3,
         5.0 * rng.random(len(long_d)) + 1e-3]
    )  # fmt: skip
    csr = (indptr, docs, scores)
    auto = index_of(csr, n_docs, _kernel.PRUNE_AUTO)
    for k in (10, 100):
        assert _kernel.top_rows(auto, [0, 1, 2, 3], k) == want(csr, [0, 1, 2, 3], n_docs, k, None)
    assert_zero_scratch()


@needs_kernel
def test_row_tops_are_remembered_rounded_up() -> None:
    rng = np.random.default_rng(3)
    n_docs = 4000
    indptr, _docs, scores = csr = skewed_rows(rng, n_docs, 10)
    index = index_of(csr, n_docs, _kernel.PRUNE_ALWAYS)
    assert not index.row_tops.any()
    for first in range(10):
        _kernel.top_rows(index, [first, (first + 1) % 10, (first + 3) % 10], 10)
    for row in range(10):
        a, b = int(indptr[row]), int(indptr[row + 1])
        remembered = float(index.row_tops[row])
        if b - a < 32:  # short rows are scanned each time, never remembered
            assert remembered == 0.0
            continue
        exact = float(scores[a:b].max())
        assert remembered >= exact
        below = np.nextafter(np.float32(remembered), np.float32(0.0))
        assert float(below) < exact  # the nearest float32 at or above the maximum


@needs_kernel
def test_a_row_with_a_non_positive_score_takes_the_unpruned_path() -> None:
    rng = np.random.default_rng(4)
    n_docs = 3000
    indptr, docs, scores = skewed_rows(rng, n_docs, 6)
    for bad in (0.0, -1.5, np.nan, np.inf):
        damaged = scores.copy()
        damaged[int(indptr[2]) + 1] = bad  # row 2
        csr = (indptr, docs, damaged)
        pruned = index_of(csr, n_docs, _kernel.PRUNE_ALWAYS)
        plain = index_of(csr, n_docs, _kernel.PRUNE_OFF)
        for rows in ([0, 1, 2], [2, 3, 4, 5], [1, 3]):
            assert _kernel.top_rows(pruned, rows, 10) == _kernel.top_rows(plain, rows, 10)
    assert_zero_scratch()


@needs_kernel
def test_a_document_out_of_range_is_refused_and_the_scratch_cleared() -> None:
    """A damaged posting the pruned path reads fails the query, as unpruned; one in a row it
    skips or gallops through is never used (a loaded snapshot's rows are checked whole at
    load): no result is ever out of range, and the scratch is left zero either way."""
    rng = np.random.default_rng(5)
    n_docs = 3000
    indptr, docs, scores = skewed_rows(rng, n_docs, 8, dtype=np.int64)
    shortest = int(np.argmin(np.diff(indptr)))
    refused = 0
    for row in range(8):
        damaged = docs.copy()
        damaged[int(indptr[row + 1]) - 1] = n_docs + 7  # still ascending, out of range
        index = index_of((indptr, damaged, scores), n_docs, _kernel.PRUNE_ALWAYS)
        try:
            found, _ = _kernel.top_rows(index, list(range(8)), 10)
        except _kernel.BadDocumentError:
            refused += 1
        else:
            assert row != shortest  # the shortest row is always read whole
            assert all(0 <= doc < n_docs for doc in found)
        assert_zero_scratch()
    assert refused >= 1


@needs_kernel
def test_prune_mode_is_checked() -> None:
    rng = np.random.default_rng(6)
    with pytest.raises(ValueError, match="prune must be"):
        index_of(skewed_rows(rng, 100, 3), 100, 3)


@needs_kernel
def test_threads_prune_the_same_index() -> None:
    rng = np.random.default_rng(8)
    n_docs = 5000
    csr = skewed_rows(rng, n_docs, 16)
    index = index_of(csr, n_docs, _kernel.PRUNE_ALWAYS)
    queries = [rng.choice(16, size=int(rng.integers(2, 8))).tolist() for _ in range(60)]
    expected = [want(csr, rows, n_docs, 10, None) for rows in queries]
    failures: list[str] = []

    def work() -> None:
        for _ in range(3):
            for rows, wanted in zip(queries, expected, strict=True):
                if _kernel.top_rows(index, rows, 10) != wanted:
                    failures.append(repr(rows))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
