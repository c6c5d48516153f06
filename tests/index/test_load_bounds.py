"""The posting checks of a full load: one C pass (``store/bounds.py``) or numpy, same verdicts.

The C pass only ever accepts; anything it does not accept is judged (and named) by numpy.
So for every input the verdict and the error message must be those of numpy alone, and
sound arrays must actually be accepted by the C pass (or it would never save anything).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.index.test_snapshot import file_of, replace_file

from groundwire import IndexFormatError, KnowledgeBase
from groundwire.index import _kernel
from groundwire.index.store import bounds, checksums, layout

needs_kernel = pytest.mark.skipif(
    _kernel.library() is None or _kernel.library().check_rows is None,  # type: ignore[union-attr]
    reason=f"C kernel unavailable: {_kernel.unavailable_reason()}",
)


def _numpy_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_kernel, "library", lambda: None)


def _verdict(call: Any) -> str | None:
    try:
        call()
    except IndexFormatError as exc:
        return str(exc)
    return None


def _reference_rows(ptr: list[int], values: list[int], upper: int) -> bool:
    """Rows sound by definition: offsets from 0 to len(values), never decreasing, each row
    strictly ascending within 0..upper - 1."""
    if ptr[0] != 0 or ptr[-1] != len(values) or any(b < a for a, b in itertools.pairwise(ptr)):
        return False
    rows = [values[a:b] for a, b in itertools.pairwise(ptr)]
    return all(
        all(0 <= v < upper for v in row) and all(x < y for x, y in itertools.pairwise(row))
        for row in rows
    )


@st.composite
def csr(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """Rows of ascending distinct values, sometimes damaged (a value or an offset moved)."""
    upper = draw(st.integers(1, 40))
    rows = draw(st.lists(st.sets(st.integers(0, upper - 1), max_size=6).map(sorted), max_size=12))
    values = [v for row in rows for v in row]
    ptr = [0]
    for row in rows:
        ptr.append(ptr[-1] + len(row))
    damage = draw(st.sampled_from(["none", "value", "offset"]))
    if damage == "value" and values:
        at = draw(st.integers(0, len(values) - 1))
        values[at] = draw(st.integers(-3, upper + 3))
    elif damage == "offset":
        at = draw(st.integers(0, len(ptr) - 1))
        ptr[at] = draw(st.integers(-2, len(values) + 2))
    return ptr, values, upper


@needs_kernel
@settings(max_examples=300, deadline=None)
@given(csr())
def test_the_c_row_check_accepts_exactly_the_sound_rows(
    case: tuple[list[int], list[int], int],
) -> None:
    ptr, values, upper = case
    verdict = bounds.rows_ascending(
        np.array(ptr, dtype=np.int64), np.array(values, dtype=np.int32), upper
    )
    assert verdict is _reference_rows(ptr, values, upper)


@settings(max_examples=200, deadline=None)
@given(csr())
def test_row_checks_refuse_alike_with_and_without_the_kernel(
    case: tuple[list[int], list[int], int],
) -> None:
    ptr, values, upper = case
    arrays = np.array(ptr, dtype=np.int64), np.array(values, dtype=np.int32)

    def check() -> None:
        layout.check_pointers("snap", "p", arrays[0], len(ptr) - 1, len(values))
        layout.check_ascending_rows("snap", "v", *arrays, upper, True)

    with_kernel = _verdict(check)
    with pytest.MonkeyPatch.context() as patch:
        _numpy_only(patch)
        assert _verdict(check) == with_kernel
    if with_kernel is None:
        assert _reference_rows(ptr, values, upper)


SPECIAL = [0.0, -0.0, -1.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(min_value=1e-300, max_value=1e300), st.sampled_from(SPECIAL)),
        max_size=40,
    )
)
def test_score_checks_agree_with_and_without_the_kernel(scores: list[float]) -> None:
    array = np.array(scores, dtype=np.float64)
    expected = all(s > 0 and math.isfinite(s) for s in scores)
    fast = bounds.positive_finite(array)
    assert fast is None or fast is expected
    with_kernel = _verdict(lambda: layout.check_scores("snap", "s", array, True))
    assert (with_kernel is None) is expected
    with pytest.MonkeyPatch.context() as patch:
        _numpy_only(patch)
        assert _verdict(lambda: layout.check_scores("snap", "s", array, True)) == with_kernel


def test_arrays_the_c_code_cannot_read_are_left_to_numpy() -> None:
    ptr = np.array([0, 2], dtype=np.int64)
    assert bounds.rows_ascending(ptr, np.array([1, 2], dtype=np.int64), 5) is None
    assert bounds.rows_ascending(ptr, np.array([1, 9, 2, 9], dtype=np.int32)[::2], 5) is None
    assert bounds.rows_ascending(ptr.astype(">i8"), np.array([1, 2], dtype=np.int32), 5) is None
    assert bounds.positive_finite(np.array([1.0], dtype=np.float32)) is None


# -- whole snapshots -------------------------------------------------------------------------------
def _snapshot(tmp_path: Path) -> Path:
    docs = [
        {"id": f"d{i:02}", "title": f"title {i}", "text": f"alpha beta gamma delta {i} {i % 3}"}
        for i in range(30)
    ]
    path = tmp_path / "kb"
    KnowledgeBase.from_documents(docs).save(path)
    return path


def _damage(path: Path, logical: str, change: Any) -> None:
    """Change one array in place of its file, manifest resealed (checksums consistent)."""
    target = file_of(path, logical)
    array = np.load(target, allow_pickle=False).copy()
    change(array)
    header = target.read_bytes()[: target.stat().st_size - array.nbytes]
    replace_file(path, logical, header + array.tobytes())


def _row_of_two(path: Path) -> int:
    ptr = np.load(file_of(path, "lexical.indptr"))
    return int(ptr[np.flatnonzero(np.diff(ptr) >= 2)[0]])


DAMAGE = {
    "a document out of range": ("lexical.docs", lambda a, at: a.__setitem__(at, 30), "outside"),
    "a row out of order": (
        "lexical.docs",
        lambda a, at: a.__setitem__(slice(at, at + 2), a[at : at + 2][::-1].copy()),
        "not strictly ascending",
    ),
    "a NaN score": ("lexical.scores", lambda a, at: a.__setitem__(at, np.nan), "non-finite"),
    "a zero score": ("lexical.scores", lambda a, at: a.__setitem__(at, 0.0), "non-positive"),
    "an infinite score": ("lexical.scores", lambda a, at: a.__setitem__(-1, np.inf), "non-fin"),
}


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("what", sorted(DAMAGE))
def test_damaged_postings_are_refused_with_the_same_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str, kernel: bool
) -> None:
    if not kernel:
        _numpy_only(monkeypatch)
    path = _snapshot(tmp_path)
    _assert_refused_once_damaged(path, what)
    assert len(KnowledgeBase.load(path, verify="manifest")) == 30  # bounds only under full


def _assert_refused_once_damaged(path: Path, what: str) -> None:
    logical, change, message = DAMAGE[what]
    at = _row_of_two(path)
    _damage(path, logical, lambda array: change(array, at))
    checksums.forget_verdicts()
    with pytest.raises(IndexFormatError, match=message):
        KnowledgeBase.load(path)


def test_a_sound_snapshot_loads_alike_with_and_without_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _snapshot(tmp_path)
    checksums.forget_verdicts()
    fast = KnowledgeBase.load(path)
    _numpy_only(monkeypatch)
    checksums.forget_verdicts()
    slow = KnowledgeBase.load(path)
    assert [e.id for e in fast.entries] == [e.id for e in slow.entries]
    one, other = (kb.lexical.score(["alpha", "7"]).top(5) for kb in (fast, slow))
    assert len(one[0]) == 5
    assert one[0].tolist() == other[0].tolist()
    assert one[1].tolist() == other[1].tolist()


# -- passes started ahead (on the hashing threads) ---------------------------------------------
def _sound_rows() -> tuple[np.ndarray, np.ndarray]:
    return np.array([0, 2, 3], dtype=np.int64), np.array([1, 4, 2], dtype=np.int32)


def test_a_pass_started_ahead_answers_for_exactly_its_arrays() -> None:
    ptr, values = _sound_rows()
    calls: list[str] = []

    def submit(check: Any, *args: Any) -> Any:
        calls.append(check.__name__)
        future: Any = checksums.Future()
        future.set_result(False)  # a verdict the arrays would not get: proves it was taken
        return future

    keys = bounds.ahead(submit, [("rows_ascending", (ptr, values, 5))])
    assert calls == ["_rows_ascending"]
    assert bounds.rows_ascending(ptr.copy(), values, 5) is not False  # equal, not the same
    assert bounds.rows_ascending(ptr, values, 6) is not False  # another bound
    assert bounds.rows_ascending(ptr, values, 5) is False  # taken once...
    assert bounds.rows_ascending(ptr, values, 5) is not False  # ...then asked again
    bounds.settle(keys)
    assert not bounds._AHEAD


def test_passes_no_check_took_are_settled(tmp_path: Path) -> None:
    scores = np.array([1.0, 2.0])
    keys = bounds.ahead(checksums.submit, [("positive_finite", (scores,))])
    assert bounds._AHEAD
    bounds.settle(keys)
    assert not bounds._AHEAD
    assert bounds.positive_finite(scores) in (True, None)


@pytest.mark.parametrize("what", sorted(DAMAGE))
def test_damaged_postings_are_refused_when_checked_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    monkeypatch.setattr(bounds, "AHEAD_BYTES", 0)  # a small snapshot's postings too
    started: list[str] = []
    ahead = bounds.ahead

    def spy(submit: Any, passes: Any) -> Any:
        passes = list(passes)
        started.extend(name for name, _ in passes)
        return ahead(submit, passes)

    monkeypatch.setattr(bounds, "ahead", spy)
    path = _snapshot(tmp_path)  # a save verifies what it wrote: a full load too
    checksums.forget_verdicts()
    started.clear()
    sound = KnowledgeBase.load(path)
    assert started == ["rows_ascending", "positive_finite"]
    assert not bounds._AHEAD
    _assert_refused_once_damaged(path, what)
    assert not bounds._AHEAD
    assert len(sound) == 30
