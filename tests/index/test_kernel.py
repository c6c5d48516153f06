"""The optional C query kernel against a plain numpy reference written here.

The reference sums the rows the way the numpy query path does (concatenate the row slices,
``np.bincount`` with weights), drops excluded and non-positive documents and orders them
with a full ``np.lexsort`` (score descending, document ascending). The kernel must return
the same documents and bit-for-bit the same scores: it adds in the same order.
"""

from __future__ import annotations

import bisect
import ctypes
import gc
import itertools
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import IndexSettings
from groundwire.index import _kernel, _kernel_abi
from groundwire.index.lexical import LexicalIndex
from groundwire.index.lexical_builder import LexicalIndexBuilder

needs_kernel = pytest.mark.skipif(
    not _kernel.available(), reason=f"C kernel unavailable: {_kernel.unavailable_reason()}"
)

Csr = tuple[np.ndarray, np.ndarray, np.ndarray]  # indptr, docs, scores


# -- reference and data -----------------------------------------------------------------------


def reference(
    lo: Sequence[int],
    hi: Sequence[int],
    docs: np.ndarray,
    scores: np.ndarray,
    n_docs: int,
    k: int,
    excluded: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top k by concatenate + bincount + full lexsort."""
    parts = [(docs[a:b], scores[a:b]) for a, b in zip(lo, hi, strict=True)]
    all_docs = np.concatenate([d for d, _ in parts] or [np.empty(0, np.int64)])
    all_scores = np.concatenate([s for _, s in parts] or [np.empty(0, np.float64)])
    dense = np.bincount(all_docs, weights=all_scores, minlength=n_docs)
    if excluded is not None:
        dense[excluded[:n_docs]] = 0.0
    hit = np.flatnonzero(dense > 0.0)
    order = np.lexsort((hit, -dense[hit]))[: max(k, 0)]
    return hit[order], dense[hit][order]


def dense_reference(lo: Sequence[int], hi: Sequence[int], docs: Any, scores: Any, n: int) -> Any:
    return np.bincount(
        np.concatenate([docs[a:b] for a, b in zip(lo, hi, strict=True)] or [np.empty(0, int)]),
        weights=np.concatenate([scores[a:b] for a, b in zip(lo, hi, strict=True)] or [np.empty(0)]),
        minlength=n,
    )


def random_csr(
    rng: np.random.Generator,
    n_docs: int,
    n_terms: int,
    *,
    density: float = 0.3,
    ties: bool = False,
    dtype: Any = np.int64,
) -> Csr:
    """Rows of ascending distinct documents; ``ties`` draws scores from a few exact values."""
    rows = []
    for _ in range(n_terms):
        size = int(rng.binomial(n_docs, density))
        rows.append(np.sort(rng.choice(n_docs, size=size, replace=False)))
    indptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    docs = np.concatenate(rows or [np.empty(0, np.int64)]).astype(dtype)
    if ties:
        scores = rng.integers(1, 4, size=docs.shape[0]) * 0.5
    else:
        # Mixed magnitudes, so that a different addition order would change the last bits.
        scores = rng.random(docs.shape[0]) * 10.0 ** rng.integers(-3, 3, size=docs.shape[0])
    return indptr, docs, scores.astype(np.float64)


def bounds(indptr: np.ndarray, terms: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    terms_array = np.asarray(terms, dtype=np.int64)
    return indptr[terms_array], indptr[terms_array + 1]


def assert_same(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    assert got[0].dtype == np.int64
    assert got[1].dtype == np.float64
    assert got[0].tolist() == want[0].tolist()
    # Bitwise: compare the raw bytes of the float64 scores.
    assert got[1].tobytes() == want[1].astype(np.float64).tobytes()


def check(
    csr: Csr, terms: Sequence[int], n_docs: int, k: int, excluded: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    indptr, docs, scores = csr
    lo, hi = bounds(indptr, terms)
    got = _kernel.score_topk(lo, hi, docs, scores, n_docs, k, excluded)
    assert_same(got, reference(lo, hi, docs, scores, n_docs, k, excluded))
    return got


# -- availability -----------------------------------------------------------------------------


@pytest.mark.skipif(
    os.environ.get("GROUNDWIRE_REQUIRE_KERNEL") != "1",
    reason="GROUNDWIRE_REQUIRE_KERNEL=1 is not set (CI sets it)",
)
def test_kernel_is_built_when_required() -> None:
    assert _kernel.available(), _kernel.unavailable_reason()
    from groundwire.index import _fusion

    assert _fusion.available(), "the fusion kernel (_gwfusion) was not built"
    from groundwire.index import _bulk

    assert _bulk.available(), "the bulk-build kernel (_gwbulk) was not built"


@pytest.mark.integration
def test_no_kernel_env_disables_it() -> None:
    code = (
        "import numpy as np\n"
        "from groundwire.index import _kernel\n"
        "assert not _kernel.available()\n"
        "print(_kernel.unavailable_reason())\n"
        "z = np.zeros(1, np.int64)\n"
        "try:\n"
        "    _kernel.score_topk(z, z, z, np.zeros(1), 1, 1, None)\n"
        "except RuntimeError as exc:\n"
        "    print('raised', exc)\n"
    )
    env = {**os.environ, "GROUNDWIRE_NO_KERNEL": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "disabled by GROUNDWIRE_NO_KERNEL=1"
    assert lines[1].startswith("raised the groundwire C kernel is unavailable")


# -- equivalence ------------------------------------------------------------------------------


@needs_kernel
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_matches_reference_on_random_rows(seed: int, dtype: Any) -> None:
    rng = np.random.default_rng(seed)
    n_docs = int(rng.integers(1, 400))
    csr = random_csr(rng, n_docs, 30, density=float(rng.uniform(0.01, 0.6)), dtype=dtype)
    for _ in range(20):
        terms = rng.integers(0, 30, size=int(rng.integers(1, 12))).tolist()  # repeats count
        for k in (1, 3, 10, 100, 1000):
            check(csr, terms, n_docs, k)


@needs_kernel
@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_docs=st.integers(1, 60),
    n_terms=st.integers(1, 8),
    terms=st.lists(st.integers(0, 7), max_size=10),
    k=st.integers(0, 70),
    ties=st.booleans(),
    exclude=st.floats(0.0, 1.0),
    wide=st.booleans(),
)
def test_matches_reference_property(
    seed: int,
    n_docs: int,
    n_terms: int,
    terms: list[int],
    k: int,
    ties: bool,
    exclude: float,
    wide: bool,
) -> None:
    rng = np.random.default_rng(seed)
    dtype = np.int64 if wide else np.int32
    csr = random_csr(rng, n_docs, n_terms, density=0.4, ties=ties, dtype=dtype)
    query = [t % n_terms for t in terms]
    excluded = rng.random(n_docs) < exclude if exclude > 0.5 else None
    check(csr, query, n_docs, k, excluded)


@needs_kernel
def test_ties_break_by_document_ascending() -> None:
    # Every document scores exactly 1.0 + 2.0 = 3.0 or 1.0: a k cut inside the tie.
    indptr = np.array([0, 6, 9], np.int64)
    docs = np.array([0, 2, 3, 5, 7, 9, 3, 7, 9], np.int64)
    scores = np.array([1.0] * 6 + [2.0] * 3)
    got = check((indptr, docs, scores), [0, 1], 10, 4)
    assert got[0].tolist() == [3, 7, 9, 0]
    assert got[1].tolist() == [3.0, 3.0, 3.0, 1.0]
    rng = np.random.default_rng(7)
    csr = random_csr(rng, 500, 20, density=0.5, ties=True)
    for k in (1, 5, 17, 50, 499, 500, 600):
        check(csr, list(range(20)), 500, k)


@needs_kernel
def test_exclusions() -> None:
    rng = np.random.default_rng(3)
    csr = random_csr(rng, 200, 10)
    excluded = np.zeros(200, bool)
    excluded[::3] = True
    got = check(csr, [0, 1, 2, 3], 200, 50, excluded)
    assert not excluded[got[0]].any()
    everything = np.ones(200, bool)
    assert check(csr, [0, 1, 2, 3], 200, 50, everything)[0].shape == (0,)
    check(csr, [0, 1, 2, 3], 200, 50, np.zeros(200, bool))
    # A longer mask (e.g. one over a larger snapshot) only needs to cover n_docs.
    check(csr, [4, 5], 200, 10, np.r_[excluded, np.ones(10, bool)])


@needs_kernel
def test_k_larger_than_matches_and_k_zero() -> None:
    rng = np.random.default_rng(5)
    csr = random_csr(rng, 100, 5, density=0.05)
    got = check(csr, [0, 1], 100, 10_000)
    assert 0 < got[0].shape[0] < 100
    assert check(csr, [0, 1], 100, 0)[0].shape == (0,)
    assert check(csr, [0, 1], 100, -3)[0].shape == (0,)


@needs_kernel
def test_empty_zero_and_single_rows() -> None:
    indptr = np.array([0, 0, 3, 3, 5], np.int64)  # rows 0 and 2 are empty
    docs = np.array([1, 4, 6, 0, 4], np.int64)
    scores = np.array([0.5, 1.5, 2.5, 3.5, 4.5])
    csr = (indptr, docs, scores)
    assert check(csr, [], 8, 10)[0].shape == (0,)  # zero rows
    assert check(csr, [0], 8, 10)[0].shape == (0,)  # one empty row
    assert check(csr, [0, 2], 8, 10)[0].shape == (0,)
    got = check(csr, [1], 8, 10)  # a single row: its own order by score
    assert got[0].tolist() == [6, 4, 1]
    got = check(csr, [3, 0, 1], 8, 2)
    assert got[0].tolist() == [4, 0]
    assert got[1].tolist() == [4.5 + 1.5, 3.5]
    no_docs = (np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
    assert check(no_docs, [], 0, 10)[0].shape == (0,)
    assert check(no_docs, [], 5, 10)[0].shape == (0,)


@needs_kernel
def test_non_positive_sums_are_dropped() -> None:
    indptr = np.array([0, 3, 5], np.int64)
    docs = np.array([0, 1, 2, 0, 1], np.int64)
    scores = np.array([1.0, 2.0, -1.0, -1.0, 0.5])
    got = check((indptr, docs, scores), [0, 1], 3, 10)
    assert got[0].tolist() == [1]  # 0 sums to 0.0, 2 to -1.0


@needs_kernel
@pytest.mark.parametrize("n_docs", [40, 100_000])  # both strategies
def test_non_finite_scores_follow_the_reference(n_docs: int) -> None:
    # Not produced by BM25, but the kernel must not pick a different set because of them.
    rng = np.random.default_rng(43)
    indptr, docs, scores = random_csr(rng, 40, 6, density=0.5, ties=True)
    special = rng.integers(0, scores.shape[0], size=12)
    scores[special[:4]] = np.inf
    scores[special[4:8]] = -np.inf
    scores[special[8:]] = np.nan
    for k in (1, 3, 10, 40):
        check((indptr, docs, scores), [0, 1, 2, 3, 4, 5], n_docs, k)
        check((indptr, docs, scores), [5, 3], n_docs, k)


@needs_kernel
def test_bounds_given_as_lists_and_other_int_arrays() -> None:
    rng = np.random.default_rng(11)
    indptr, docs, scores = random_csr(rng, 300, 12)
    lo, hi = bounds(indptr, [1, 5, 5, 9])
    want = reference(lo, hi, docs, scores, 300, 20)
    assert_same(_kernel.score_topk(lo.tolist(), hi.tolist(), docs, scores, 300, 20), want)
    assert_same(_kernel.score_topk(lo.astype(np.int32), hi[::1], docs, scores, 300, 20), want)


@needs_kernel
def test_many_rows_and_large_k_grow_the_buffers() -> None:
    rng = np.random.default_rng(13)
    csr = random_csr(rng, 3000, 200, density=0.02)
    check(csr, list(range(200)) * 2, 3000, 2500)  # 400 rows, k beyond the first capacity
    check(csr, [3], 3000, 5)
    check(csr, [3], 3500, 5)  # a larger n_docs reallocates the accumulators
    check(csr, [3, 4], 3000, 5)


@needs_kernel
def test_real_index_matches_query_scores_top() -> None:
    rng = np.random.default_rng(17)
    words = [f"w{i}" for i in range(60)]
    builder = LexicalIndexBuilder(("title", "body"))
    for _ in range(400):
        title = rng.choice(words, size=int(rng.integers(0, 5))).tolist()
        body = rng.choice(words, size=int(rng.integers(0, 40))).tolist()
        builder.add([title, body])
    index = builder.build(IndexSettings())
    indptr = index.indptr
    mask = rng.random(index.doc_count) < 0.8
    for _ in range(40):
        terms = rng.choice([*words, "unknown"], size=int(rng.integers(1, 8))).tolist()
        ids = [index.vocabulary[t] for t in terms if t in index.vocabulary]
        lo, hi = bounds(indptr, ids)
        for k in (1, 10, 100):
            for allowed in (None, mask):
                want = index.score(terms).top(k, allowed)
                got = _kernel.score_topk(
                    lo,
                    hi,
                    index.docs,
                    index.scores,
                    index.doc_count,
                    k,
                    None if allowed is None else ~allowed,
                )
                assert got[0].tolist() == want[0].tolist()
                assert got[1].tobytes() == np.asarray(want[1], np.float64).tobytes()
        scores = index.score(terms)
        for doc in range(0, index.doc_count, 37):
            assert _kernel.score_of(lo, hi, index.docs, index.scores, doc) == scores.score_of(doc)


@needs_kernel
def test_batched_scores_of_documents_match_the_numpy_sums() -> None:
    rng = np.random.default_rng(23)
    words = [f"w{i}" for i in range(40)]
    builder = LexicalIndexBuilder(("title", "body"))
    for _ in range(300):
        builder.add(
            [rng.choice(words, size=int(rng.integers(0, 4))).tolist(),
             rng.choice(words, size=int(rng.integers(0, 30))).tolist()]
        )  # fmt: skip
    index = builder.build(IndexSettings())
    for _ in range(30):
        terms = rng.choice([*words, "unknown"], size=int(rng.integers(1, 8))).tolist()
        ids = index.query_ids(terms)
        docs = np.sort(rng.choice(index.doc_count, size=int(rng.integers(0, 60)), replace=False))
        want = index.score_ids(ids).scores_at(docs.astype(np.int64))
        got = index.scores_of_ids(ids, docs)
        assert got.tobytes() == want.tobytes()  # the same sums, bit for bit
        assert got.tolist() == [index.score_of_ids(ids, int(d)) for d in docs]


@needs_kernel
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("ties", [False, True])
def test_sparse_strategy_over_many_documents(dtype: Any, ties: bool) -> None:
    # Far more documents than postings: the kernel walks the touched documents instead of
    # scanning them all, and (with small k) prunes its candidates several times.
    rng = np.random.default_rng(37)
    n_docs = 50_000
    csr = random_csr(rng, n_docs, 25, density=0.006, ties=ties, dtype=dtype)
    excluded = rng.random(n_docs) < 0.2
    for _ in range(6):
        terms = rng.integers(0, 25, size=int(rng.integers(1, 20))).tolist()
        for k in (1, 2, 10, 100, 300, 5000):
            check(csr, terms, n_docs, k)
            check(csr, terms, n_docs, k, excluded)


@needs_kernel
@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_docs=st.integers(200, 3000),
    density=st.floats(0.001, 0.5),
    k=st.sampled_from([1, 2, 3, 7, 10, 50, 100, 257, 1000]),
    ties=st.booleans(),
    exclude=st.booleans(),
)
def test_matches_reference_on_larger_rows(
    seed: int, n_docs: int, density: float, k: int, ties: bool, exclude: bool
) -> None:
    # Enough candidates for the pruning selections, both strategies, the probe bound.
    rng = np.random.default_rng(seed)
    csr = random_csr(rng, n_docs, 12, density=density, ties=ties)
    excluded = rng.random(n_docs) < 0.3 if exclude else None
    check(csr, rng.integers(0, 12, size=int(rng.integers(1, 9))).tolist(), n_docs, k, excluded)


@needs_kernel
def test_plain_argument_entry_points() -> None:
    # gw_score_topk / gw_score_of (the documented C signatures, trusted int64 input).
    library = _kernel._load()
    assert library is not None
    pointer, int64 = ctypes.c_void_p, ctypes.c_int64
    topk = library.lib.gw_score_topk
    topk.argtypes = [pointer, pointer, int64, pointer, pointer, *[pointer] * 4, int64]
    topk.argtypes += [pointer, pointer]
    topk.restype = int64
    score_of = library.lib.gw_score_of
    score_of.argtypes = [pointer] * 5 + [int64]
    score_of.restype = ctypes.c_double
    rng = np.random.default_rng(41)
    n_docs = 700
    indptr, docs, scores = random_csr(rng, n_docs, 15, density=0.2, ties=True)
    acc, seen = np.zeros(n_docs), np.zeros(n_docs, np.uint8)
    touched = np.zeros(int(indptr[-1]), np.int64)
    excluded = rng.random(n_docs) < 0.25
    for k in (0, 1, 10, 100, 1000):
        for mask in (None, excluded):
            lo, hi = bounds(indptr, rng.integers(0, 15, size=6).tolist())
            out_docs, out_scores = np.zeros(max(k, 1), np.int64), np.zeros(max(k, 1))
            args = [a.ctypes.data for a in (lo, hi)] + [len(lo)]
            args += [a.ctypes.data for a in (docs, scores, acc, seen, touched)]
            args += [None if mask is None else mask.ctypes.data, k]
            args += [out_docs.ctypes.data, out_scores.ctypes.data]
            count = topk(*args)
            got = out_docs[:count], out_scores[:count]
            assert_same(got, reference(lo, hi, docs, scores, n_docs, k, mask))
            assert not acc.any()
            assert not seen.any()
            dense = dense_reference(lo, hi, docs, scores, n_docs)
            for doc in (0, 5, 99, 699):
                got_score = score_of(lo.ctypes.data, hi.ctypes.data, len(lo),
                                     docs.ctypes.data, scores.ctypes.data, doc)  # fmt: skip
                assert np.float64(got_score).tobytes() == dense[doc].tobytes()


# -- score_of ---------------------------------------------------------------------------------


@needs_kernel
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_score_of_matches_dense_sum(dtype: Any) -> None:
    rng = np.random.default_rng(23)
    indptr, docs, scores = random_csr(rng, 150, 15, dtype=dtype)
    for _ in range(10):
        lo, hi = bounds(indptr, rng.integers(0, 15, size=6).tolist())
        dense = dense_reference(lo, hi, docs, scores, 150)
        for doc in range(-2, 152):
            want = float(dense[doc]) if 0 <= doc < 150 else 0.0
            got = _kernel.score_of(lo, hi, docs, scores, doc)
            assert np.float64(got).tobytes() == np.float64(want).tobytes()
    assert _kernel.score_of([], [], docs, scores, 3) == 0.0


# -- scratch, threads, validation -------------------------------------------------------------


@needs_kernel
def test_scratch_returns_to_zero() -> None:
    rng = np.random.default_rng(29)
    csr = random_csr(rng, 250, 10)
    excluded = rng.random(250) < 0.5
    first = check(csr, [0, 1, 2], 250, 5, excluded)
    scratch = _kernel._scratch()
    assert not scratch.acc.any()
    assert not scratch.seen.any()
    second = check(csr, [0, 1, 2], 250, 5, excluded)
    assert_same(second, first)
    check(csr, [0, 1, 2], 250, 0)  # k = 0 still clears what it touched
    assert not scratch.acc.any()
    assert not scratch.seen.any()


@needs_kernel
def test_threads_share_the_arrays() -> None:
    rng = np.random.default_rng(31)
    n_docs = 2000
    indptr, docs, scores = random_csr(rng, n_docs, 40, density=0.2)
    masks = [None, rng.random(n_docs) < 0.3]
    cases = []
    for i in range(60):
        lo, hi = bounds(indptr, rng.integers(0, 40, size=int(rng.integers(1, 10))).tolist())
        k = int(rng.integers(1, 200))
        excluded = masks[i % 2]
        cases.append((lo, hi, k, excluded, reference(lo, hi, docs, scores, n_docs, k, excluded)))
    failures: list[str] = []
    start = threading.Barrier(8)

    def work(offset: int) -> None:
        start.wait()
        for rep in range(30):
            for j in range(len(cases)):
                lo, hi, k, excluded, want = cases[(j + offset + rep) % len(cases)]
                got = _kernel.score_topk(lo, hi, docs, scores, n_docs, k, excluded)
                if got[0].tolist() != want[0].tolist() or got[1].tobytes() != want[1].tobytes():
                    failures.append(f"thread {offset}, case {j}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@needs_kernel
def test_invalid_arguments_raise() -> None:
    indptr = np.array([0, 3], np.int64)
    docs = np.array([0, 4, 9], np.int64)
    scores = np.ones(3)
    lo, hi = indptr[:1], indptr[1:]
    with pytest.raises(ValueError, match=r"outside \[0, n_docs=5\)"):
        _kernel.score_topk(lo, hi, docs, scores, 5, 3)
    with pytest.raises(ValueError, match=r"outside \[0, n_docs=10\)"):
        _kernel.score_topk(lo, hi, np.array([-1, 0, 1], np.int64), scores, 10, 3)
    with pytest.raises(ValueError, match=r"outside \[0, n_docs=13\)"):  # sparse: 13 > 4 * 3
        _kernel.score_topk(lo, hi, np.array([0, 4, 20], np.int64), scores, 13, 3)
    with pytest.raises(TypeError, match="int64 or int32 docs"):
        _kernel.score_topk(lo, hi, docs.astype(np.int16), scores, 10, 3)
    with pytest.raises(TypeError, match="float64 scores"):
        _kernel.score_topk(lo, hi, docs, scores.astype(np.float32), 10, 3)
    with pytest.raises(TypeError, match="int64 or int32 docs"):
        _kernel.score_topk(lo, hi, docs.astype(">i8"), scores, 10, 3)
    with pytest.raises(ValueError, match="C-contiguous"):
        _kernel.score_topk(lo, hi, np.repeat(docs, 2)[::2], np.repeat(scores, 2)[::2], 10, 3)
    with pytest.raises(ValueError, match="must be 1-D, equal"):
        _kernel.score_topk(lo, hi, docs, np.ones(4), 10, 3)
    with pytest.raises(ValueError, match="excluded has 5 entries, expected 10"):
        _kernel.score_topk(lo, hi, docs, scores, 10, 3, np.zeros(5, bool))
    with pytest.raises(TypeError, match="excluded must be a 1-D bool array"):
        _kernel.score_topk(lo, hi, docs, scores, 10, 3, np.zeros(10, np.int64))
    with pytest.raises(ValueError, match="1 row bounds but hi has 2"):
        _kernel.score_topk(lo, [3, 3], docs, scores, 10, 3)
    with pytest.raises(ValueError, match="n_docs must be >= 0"):
        _kernel.score_topk(lo, hi, docs, scores, -1, 3)
    # A failed call leaves the scratch clean: the next one is right.
    check((indptr, docs, scores), [0, 0], 10, 3)
    scratch = _kernel._scratch()
    assert not scratch.acc.any()
    assert not scratch.seen.any()


@needs_kernel
def test_bounds_are_clamped_to_the_arrays() -> None:
    docs = np.array([1, 4, 6, 0, 4], np.int64)
    scores = np.array([0.5, 1.5, 2.5, 3.5, 4.5])
    want = reference([0, 3], [3, 5], docs, scores, 8, 10)
    assert_same(_kernel.score_topk([-7, 3], [3, 99], docs, scores, 8, 10), want)
    assert _kernel.score_topk([4, 9], [2, 12], docs, scores, 8, 10)[0].shape == (0,)
    assert _kernel.score_of([-7, 3], [3, 99], docs, scores, 4) == 1.5 + 4.5
    assert _kernel.score_of([9], [12], docs, scores, 4) == 0.0


# -- rows by term id and query word codes (ABI 2; pruning: ABI 3) ----------------------------


def test_the_loaded_library_has_the_expected_abi() -> None:
    if not _kernel.available():
        pytest.skip(f"C kernel unavailable: {_kernel.unavailable_reason()}")
    library = _kernel._load()
    assert library is not None
    assert library.lib.gw_abi_version() == _kernel_abi.ABI_VERSION == 3


def test_a_library_of_another_abi_is_refused() -> None:
    # A stale library (built before an ABI change) must not be called with the new structs.
    def stale_version() -> int:
        return 1

    stale = SimpleNamespace(gw_abi_version=stale_version)
    with pytest.raises(OSError, match="ABI version 1, expected 3: reinstall groundwire"):
        _kernel._Library(stale)  # type: ignore[arg-type]


def paired_index(rng: np.random.Generator, n_words: int, n_docs: int) -> LexicalIndex:
    """A real index with a pair field over random word sequences (a few words repeat a lot)."""
    words = [f"w{i}" for i in range(n_words)]
    weights = rng.zipf(1.3, size=n_words).astype(float)
    weights /= weights.sum()
    builder = LexicalIndexBuilder(("title", "body"), pair_field="pairs", pair_sources=("body",))
    for _ in range(n_docs):
        title = rng.choice(words, size=int(rng.integers(0, 4)), p=weights).tolist()
        body = rng.choice(words, size=int(rng.integers(0, 30)), p=weights).tolist()
        builder.add([title, body])
    settings_ = IndexSettings(field_weights={"title": 2.0, "body": 1.0, "pairs": 0.5})
    return builder.build(settings_)


def reference_query_ids(index: LexicalIndex, terms: Sequence[str]) -> list[int]:
    """query_ids as it was before word codes: vocabulary lookups, then pair bisection."""
    found = [index.vocabulary.get(term) for term in terms]
    ids = [tid for tid in found if tid is not None]
    keys = index.pair_keys.tolist()
    single = len(index.vocabulary)
    for first, second in itertools.pairwise(found):
        if first is not None and second is not None:
            key = first * single + second
            at = bisect.bisect_left(keys, key)
            if at < len(keys) and keys[at] == key:
                ids.append(single + at)
    return ids


@needs_kernel
@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_words=st.integers(1, 40), n_docs=st.integers(1, 120))
def test_kernel_pair_lookup_matches_python(seed: int, n_words: int, n_docs: int) -> None:
    rng = np.random.default_rng(seed)
    index = paired_index(rng, n_words, n_docs)
    native = index._kernel_index()
    assert native is not None
    n_single = len(index.vocabulary)
    pool = [*range(n_single), _kernel.SKIP, _kernel.UNKNOWN]
    for _ in range(25):
        codes = [int(c) for c in rng.choice(pool, size=int(rng.integers(0, 30)))]
        want = index._python_ids(codes)
        assert _kernel.resolve(native, codes) == want
        assert index.ids_of_codes(codes) == want
    # Against the original lookup over terms (stop words already dropped from terms).
    terms_pool = [*index.vocabulary, "unknown-term"]
    for _ in range(25):
        terms = rng.choice(terms_pool, size=int(rng.integers(0, 20))).tolist()
        assert index.query_ids(terms) == reference_query_ids(index, terms)


@needs_kernel
def test_word_codes_skip_stop_words_and_unknown_words_break_pairs() -> None:
    index = paired_index(np.random.default_rng(5), 30, 300)
    native = index._kernel_index()
    assert native is not None
    n_single = len(index.vocabulary)
    keys = index.pair_keys.tolist()
    first, second = divmod(keys[0], n_single)  # an indexed pair
    pair = n_single
    skip, unknown = _kernel.SKIP, _kernel.UNKNOWN
    for resolve in (lambda c: _kernel.resolve(native, c), index._python_ids):
        assert resolve([first, second]) == [first, second, pair]
        assert resolve([first, skip, skip, second]) == [first, second, pair]  # no place taken
        assert resolve([first, unknown, second]) == [first, second]  # the pair is broken
        assert resolve([skip, unknown]) == []
        assert resolve([]) == []
        assert resolve([second, first]) == [second, first] + (
            [n_single + keys.index(second * n_single + first)]
            if second * n_single + first in keys
            else []
        )


@needs_kernel
@pytest.mark.parametrize("seed", range(6))
def test_top_codes_and_top_rows_match_the_numpy_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    index = paired_index(rng, 50, 600)
    native = index._kernel_index()
    assert native is not None
    pool = [*range(len(index.vocabulary)), _kernel.SKIP, _kernel.UNKNOWN]
    skip = rng.random(index.doc_count) < 0.3
    for _ in range(30):
        codes = [int(c) for c in rng.choice(pool, size=int(rng.integers(1, 14)))]
        ids = index._python_ids(codes)
        for k in (1, 10, 100):
            for excluded in (None, skip):
                want_docs, want_scores = index._numpy_top(ids, k, excluded)
                want = (want_docs.tolist(), want_scores.tolist())
                got_codes = _kernel.top_codes(native, codes, k, excluded)
                got_rows = _kernel.top_rows(native, ids, k, excluded)
                assert got_codes == got_rows == want  # == on floats: bit for bit here
                assert index.top_codes(codes, k, excluded) == want
        dense = index.score_ids(ids)
        for doc in range(0, index.doc_count, 41):
            assert _kernel.rows_score_of(native, ids, doc) == dense.score_of(doc)


@needs_kernel
def test_index_entry_points_validate_their_input() -> None:
    index = paired_index(np.random.default_rng(9), 20, 80)
    native = index._kernel_index()
    assert native is not None
    n_single, n_terms = native.n_single, native.n_terms
    with pytest.raises(ValueError, match="outside the index's terms"):
        _kernel.top_codes(native, [0, n_single], 5)
    with pytest.raises(ValueError, match="outside the index's terms"):
        _kernel.resolve(native, [n_single + 3])
    with pytest.raises(ValueError, match="not below the"):
        index._python_ids([0, n_single])
    with pytest.raises(ValueError, match="outside the index's terms"):
        _kernel.top_rows(native, [0, n_terms], 5)
    with pytest.raises(ValueError, match="outside the index's terms"):
        _kernel.top_rows(native, [-1], 5)
    with pytest.raises(ValueError, match="outside the index's terms"):
        _kernel.rows_score_of(native, [n_terms], 0)
    assert _kernel.top_codes(native, [], 5) == ([], [])
    assert _kernel.top_rows(native, [], 5) == ([], [])
    starts, seconds = index.pair_starts, index.pair_seconds
    args = (index.docs, index.scores, index.doc_count, n_single)
    with pytest.raises(TypeError, match="indptr must be a 1-D int64"):
        _kernel.Index(index.indptr.astype(np.int32), *args, starts, seconds)
    with pytest.raises(ValueError, match="indptr must be C-contiguous"):
        _kernel.Index(np.repeat(index.indptr, 2)[::2], *args, starts, seconds)
    with pytest.raises(TypeError, match="pair_seconds must be a 1-D int32"):
        _kernel.Index(index.indptr, *args, starts, seconds.astype(np.int64))
    with pytest.raises(ValueError, match="pair_starts needs"):
        _kernel.Index(index.indptr, *args, starts[:-1], seconds)
    no_pairs = (np.empty(0, np.int64), np.empty(0, np.int32))
    with pytest.raises(ValueError, match="n_single"):
        _kernel.Index(index.indptr, *args[:3], n_terms + 1, *no_pairs)
    # A document outside [0, n_docs) is refused through the index entry points too.
    bad_docs = index.docs.copy()
    bad_docs[index.indptr[0]] = index.doc_count + 5
    bad = _kernel.Index(index.indptr, bad_docs, *args[1:], starts, seconds)
    row = int(np.searchsorted(index.indptr, index.indptr[0], side="right")) - 1
    with pytest.raises(ValueError, match="outside \\[0, n_docs="):
        _kernel.top_rows(bad, [row], 5)
    scratch = _kernel._scratch()
    assert not scratch.acc.any()
    assert not scratch.seen.any()


@needs_kernel
def test_scratch_switches_between_indexes_and_entry_points() -> None:
    rng = np.random.default_rng(19)
    small, large = paired_index(rng, 20, 50), paired_index(rng, 60, 900)
    cases = []
    for index in (small, large, small, large):
        pool = list(range(len(index.vocabulary)))
        codes = [int(c) for c in rng.choice(pool, size=6)]
        cases.append((index, codes, index.top_codes(codes, 7)))
    for index, codes, want in cases * 3:  # alternate indexes (and n_docs) on one thread
        native = index._kernel_index()
        assert native is not None
        assert _kernel.top_codes(native, codes, 7) == want
        ids = index._python_ids(codes)
        lo, hi = bounds(index.indptr, ids)  # the bounds API in between
        docs, scores = _kernel.score_topk(lo, hi, index.docs, index.scores, index.doc_count, 7)
        assert (docs.tolist(), scores.tolist()) == want


@needs_kernel
def test_a_dropped_index_is_not_kept_alive_by_the_scratch() -> None:
    index = paired_index(np.random.default_rng(21), 20, 60)
    native = index._kernel_index()
    assert native is not None
    _kernel.top_codes(native, [0, 1], 3)
    scores = weakref.ref(index.scores)
    del index, native
    gc.collect()
    assert scores() is None


@needs_kernel
def test_index_entry_points_from_many_threads() -> None:
    rng = np.random.default_rng(23)
    indexes = [paired_index(rng, 40, 400), paired_index(rng, 40, 700)]
    cases = []
    for i in range(40):
        index = indexes[i % 2]
        codes = [int(c) for c in rng.choice(len(index.vocabulary), size=int(rng.integers(1, 9)))]
        cases.append((index, codes, index.top_codes(codes, 10), index._python_ids(codes)))
    failures: list[int] = []
    start = threading.Barrier(6)

    def work(offset: int) -> None:
        start.wait()
        for rep in range(20):
            for j in range(len(cases)):
                index, codes, want, ids = cases[(j + offset + rep) % len(cases)]
                native = index._kernel_index()
                assert native is not None
                if _kernel.top_codes(native, codes, 10) != want:
                    failures.append(j)
                if _kernel.resolve(native, codes) != ids:
                    failures.append(-j)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
