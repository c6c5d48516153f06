"""Hostile snapshots (issue 9): deep JSON nesting, FIFOs, out-of-range values without hashing.

Each test here failed on the code before the fix: a RecursionError, a load that never
returned, an IndexError deep in a query. A damaged snapshot is refused with one
IndexFormatError, whatever ``verify`` is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import IndexFormatError, KnowledgeBase, load_sources
from groundwire.index.store.codecs import decode_entry

ROOT = Path(__file__).resolve().parents[2]
HANDBOOK = ROOT / "examples" / "handbook"
FIXTURE_V1 = ROOT / "tests" / "fixtures" / "snapshot-v1"


def _manifest(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    return data


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _seal(path: Path, manifest: dict[str, Any]) -> None:
    """Rewrite a manifest with a valid self-hash (a deliberate, consistent tamper)."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    body["manifest_sha256"] = hashlib.sha256(_canonical(body)).hexdigest()
    (path / "manifest.json").write_text(json.dumps(body, indent=1), encoding="utf-8")


def _file(path: Path, logical: str) -> Path:
    manifest = _manifest(path)
    files = {**manifest["files"], **manifest["segments"][0]["files"]}
    return path / files[logical]["file"]


def _finishes(call: Callable[[], object], seconds: float = 20.0) -> BaseException | None:
    """Run ``call`` in a thread; the exception it raised (None if none). Fails if it hangs."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"still running after {seconds} s (blocked on a FIFO?)"
    return outcome[0]


@pytest.fixture
def handbook_snapshot(tmp_path: Path) -> Path:
    """The handbook (relations, phrases, domains, integrations), saved to damage."""
    path = tmp_path / "handbook"
    KnowledgeBase.from_sources(load_sources(HANDBOOK)).save(path)
    return path


# -- deep nesting -------------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_deeply_nested_manifest_is_refused_cleanly(handbook_snapshot: Path, depth: int) -> None:
    manifest = _manifest(handbook_snapshot)
    manifest["writer"] = json.loads("[" * 10 + "]" * 10)  # shallow nesting is fine JSON
    raw = json.dumps(manifest).replace(
        '"writer": ' + json.dumps(manifest["writer"]), '"writer": ' + "[" * depth + "]" * depth
    )
    (handbook_snapshot / "manifest.json").write_text(raw, encoding="utf-8")
    for verify in ("full", "manifest"):
        with pytest.raises(IndexFormatError, match="nested deeper than"):
            KnowledgeBase.load(handbook_snapshot, verify=verify)  # type: ignore[arg-type]


def test_a_deeply_nested_entry_is_refused_cleanly() -> None:
    deep = b'{"id":"x","metadata":' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    with pytest.raises(IndexFormatError, match="nested deeper than"):
        decode_entry(deep, "entry #1")


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    from groundwire.index.store.codecs import check_json_depth

    check_json_depth(b'{"a": "' + b"[" * 10_000 + b'"}', 8, "here")
    with pytest.raises(IndexFormatError, match="nested deeper than 8"):
        check_json_depth(b'{"a": "\\"", "b": ' + b"[" * 9 + b"]" * 9 + b"}", 8, "here")


# -- FIFOs ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("logical", ["manifest.json", "lexical.docs", "labels", "entries"])
def test_a_fifo_in_place_of_a_snapshot_file_never_blocks(
    handbook_snapshot: Path, logical: str
) -> None:
    target = (
        handbook_snapshot / "manifest.json"
        if logical == "manifest.json"
        else _file(handbook_snapshot, logical)
    )
    target.unlink()
    os.mkfifo(target)
    for verify in ("full", "manifest"):
        error = _finishes(lambda v=verify: KnowledgeBase.load(handbook_snapshot, verify=v))
        assert isinstance(error, IndexFormatError), repr(error)
        assert "not a regular file" in str(error)


# -- out-of-range values without hashing ---------------------------------------------------------
def _rewrite_array(path: Path, logical: str, change: Callable[[np.ndarray], None]) -> None:
    """Change an array's values in place (same size, checksum left stale: manifest mode)."""
    file = _file(path, logical)
    data = file.read_bytes()
    array = np.load(file, allow_pickle=False).copy()
    change(array)
    body = array.tobytes()
    file.write_bytes(data[: len(data) - len(body)] + body)


OUT_OF_RANGE = [
    ("links.offsets", lambda a: a.__setitem__(1, a[-1] + 5)),
    ("links.indptr", lambda a: a.__setitem__(1, a[-1] + 5)),
    ("terms.offsets", lambda a: a.__setitem__(2, 0)),
    ("exact.docs", lambda a: a.__setitem__(0, 2**30)),
    ("alias.docs", lambda a: a.__setitem__(-1, -1)),
    ("terms.order", lambda a: a.__setitem__(0, 2**30)),
    ("terms.offsets", lambda a: a.__setitem__(1, a[-1] + 9)),
    ("ids.offsets", lambda a: a.__setitem__(2, 1)),
    ("entries.offsets", lambda a: a.__setitem__(1, a[-1] + 3)),
    ("domain_codes", lambda a: a.__setitem__(0, 99)),
    ("lexical.docs", lambda a: a.__setitem__(len(a) // 2, 2**30)),
]
#: Sized by the postings: range-checked when a query reads a row, not at load (see docs).
CHECKED_ON_READ = frozenset({"lexical.docs"})


@pytest.mark.parametrize(("logical", "change"), OUT_OF_RANGE, ids=[o[0] for o in OUT_OF_RANGE])
def test_values_out_of_range_are_refused_even_without_hashing(
    handbook_snapshot: Path, logical: str, change: Callable[[np.ndarray], None]
) -> None:
    """``verify="manifest"`` does not hash, but a damaged index or offset never crashes."""
    _rewrite_array(handbook_snapshot, logical, change)
    with pytest.raises(IndexFormatError, match="XXH3-128 check"):
        KnowledgeBase.load(handbook_snapshot)  # full: the checksum catches it first

    def use() -> None:
        kb = KnowledgeBase.load(handbook_snapshot, verify="manifest")
        # Whatever load let through must fail cleanly on use, never with IndexError.
        for query in ("rotate an API key", "refund policy", "sso"):
            for hit in kb.search(query, 5):
                dict(hit.breakdown)
            kb.explain(query, kb.entries[0].id)
        dict(kb.relation_index)
        dict(kb.exact_index)
        dict(kb.alias_index)
        list(kb.entries)
        kb.eligibility(blocked_domains=("billing",))

    if logical in CHECKED_ON_READ:
        with contextlib.suppress(IndexFormatError):
            use()
        return
    with pytest.raises(IndexFormatError):
        KnowledgeBase.load(handbook_snapshot, verify="manifest")


@pytest.mark.parametrize("kernel", [True, False])
def test_a_damaged_posting_is_refused_when_a_query_reads_it(
    handbook_snapshot: Path, kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = KnowledgeBase.load(handbook_snapshot)
    term = kb.lexical.vocabulary["refund"]
    first = int(kb.lexical.indptr[term])
    _rewrite_array(handbook_snapshot, "lexical.docs", lambda a: a.__setitem__(first, 2**30))
    damaged = KnowledgeBase.load(handbook_snapshot, verify="manifest")
    if not kernel:
        monkeypatch.setattr("groundwire.index._kernel.available", lambda: False)
    with pytest.raises(IndexFormatError, match="document number out of range"):
        damaged.search("refund", 5)
    with pytest.raises(IndexFormatError, match="document number out of range"):
        damaged.search_ids("refund", 5, exact_boost=0, alias_boost=0)


def test_a_bit_flip_in_relation_targets_is_refused_under_manifest_mode(tmp_path: Path) -> None:
    """The case the probe found, on a format-1 snapshot: one flipped bit in
    ``relations.targets`` gave an IndexError at load."""
    copy = tmp_path / "v1"
    shutil.copytree(FIXTURE_V1, copy)
    (copy / ".lock").unlink(missing_ok=True)
    manifest = _manifest(copy)
    target = copy / manifest["files"]["relations.targets"]["file"]
    data = target.read_bytes()
    array = np.load(target, allow_pickle=False).copy()
    array[0] ^= 1 << 20
    body = array.tobytes()
    target.write_bytes(data[: len(data) - len(body)] + body)
    with pytest.raises(IndexFormatError, match=r"relations\.targets"):
        KnowledgeBase.load(copy, verify="manifest")
    with pytest.raises(IndexFormatError, match="SHA-256"):
        KnowledgeBase.load(copy)


_REFERENCE_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _reference_depth(data: bytes) -> int:
    """Nesting depth the way the scan defines it: strings (with their escapes) removed,
    then the running count of openers minus closers."""
    depth = deepest = 0
    for byte in _REFERENCE_STRING.sub(b"", data):
        depth += (byte in b"[{") - (byte in b"]}")
        deepest = max(deepest, depth)
    return deepest


_TEXTS = st.text(alphabet='[]{}"\\ab\n\u00e9', max_size=6)
_JSON = st.recursive(
    st.one_of(st.none(), st.integers(-5, 5), _TEXTS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_TEXTS, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(value=_JSON, ascii_only=st.booleans(), limit=st.integers(0, 6))
def test_the_nesting_scan_measures_valid_json_like_its_definition(
    value: Any, ascii_only: bool, limit: int
) -> None:
    from groundwire.index.store.codecs import check_json_depth

    data = json.dumps(value, ensure_ascii=ascii_only).encode()
    refused = False
    try:
        check_json_depth(data, limit, "here")
    except IndexFormatError:
        refused = True
    assert refused is (_reference_depth(data) > limit)
