"""The load fast paths: strict .npy header regex, reloads of a snapshot proven before, and
the analyzer fingerprint with one stemmer call."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import groundwire as gw
from groundwire.config import AnalyzerConfig
from groundwire.errors import IndexFormatError
from groundwire.index.store import checksums, digests, layout, storage
from groundwire.text import Analyzer
from groundwire.text.stopwords import resolve_stopwords

DTYPES = ["<i8", "<i4", "|u1", "|b1", "<f8", "<u8"]


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 9), max_size=3).map(tuple),
    dtype=st.sampled_from(DTYPES),
    version=st.sampled_from([(1, 0), (2, 0)]),
)
def test_fast_header_reads_what_numpy_reads(
    shape: tuple[int, ...], dtype: str, version: tuple[int, int]
) -> None:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros(shape, dtype=dtype), version=version)
    head = buffer.getvalue()
    reader = io.BytesIO(head)
    np.lib.format.read_magic(reader)
    read = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    expected_shape, _, _ = read(reader)
    assert storage._npy_header_fast(head, dtype) == (expected_shape, reader.tell())
    other = next(d for d in DTYPES if d != dtype)
    assert storage._npy_header_fast(head, other) is None  # numpy's parser then names the error


@pytest.mark.parametrize("shape", [b"(007,)", b"(5)", b"(,)", b"( 5,)", b"(5, )", b"(-1,)"])
def test_fast_header_leaves_anything_unusual_to_numpy(shape: bytes) -> None:
    body = b"{'descr': '<i8', 'fortran_order': False, 'shape': " + shape + b", }"
    body += b" " * (117 - len(body)) + b"\n"
    head = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body
    assert storage._npy_header_fast(head, "<i8") is None


def _snapshot(tmp_path: Path) -> Path:
    docs = [
        {"id": f"d{i}", "title": f"title {i}", "text": f"alpha beta gamma {i}"} for i in range(40)
    ]
    path = tmp_path / "kb"
    gw.KnowledgeBase.from_documents(docs).save(path)
    return path


def test_a_reload_of_a_proven_snapshot_still_refuses_a_changed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _snapshot(tmp_path)
    checksums.forget_verdicts()
    gw.KnowledgeBase.load(path)  # full verification: proven from now on

    def no_hash(*args: object) -> None:
        raise AssertionError("a proven snapshot was hashed again")

    def no_full_check(*args: object) -> None:
        assert args[-1] is False, "a proven snapshot was bounds-checked again"

    with monkeypatch.context() as patch:
        patch.setattr(digests, "of_file", no_hash)
        patch.setattr(layout, "check_ascending_rows", no_full_check)
        assert len(gw.KnowledgeBase.load(path)) == 40  # only stat-ed
    scores = next(path.glob("lexical.scores.*.npy"))
    data = bytearray(scores.read_bytes())
    data[-1] ^= 0x01  # same size, other bytes: a new mtime and ctime
    before = os.stat(scores)
    with scores.open("r+b") as handle:
        handle.write(data)
    os.utime(scores, ns=(before.st_atime_ns, before.st_mtime_ns))  # ctime still moves
    with pytest.raises(IndexFormatError, match="XXH3-128 check"):
        gw.KnowledgeBase.load(path)


def test_a_manifest_load_proves_nothing(tmp_path: Path) -> None:
    path = _snapshot(tmp_path)
    checksums.forget_verdicts()
    gw.KnowledgeBase.load(path, verify="manifest")
    docs = next(path.glob("lexical.docs.*.npy"))
    array = np.load(docs)
    array[-1] = 10_000  # out of range, same size; checksum made to match below
    replaced = docs.with_name("x.npy")
    np.save(replaced, array)
    os.replace(replaced, docs)
    with pytest.raises(IndexFormatError):
        gw.KnowledgeBase.load(path)  # full: hashed (new inode) and refused


def _fingerprint_word_by_word(analyzer: Analyzer) -> str:
    """The fingerprint's definition: every stop word analyzed on its own."""
    config = analyzer.config
    stop = sorted(resolve_stopwords(config.stopwords, config.language))
    probe = [analyzer.tokens(layout._PROBE), [analyzer.tokens(word) for word in stop]]
    return hashlib.sha256(json.dumps(probe, ensure_ascii=False).encode()).hexdigest()


@settings(max_examples=40, deadline=None)
@given(
    words=st.frozensets(st.text(st.sampled_from("aeéiouyrstn-'.日本 3"), max_size=8), max_size=12),
    language=st.sampled_from(["english", "french", "german", "russian"]),
    stem=st.booleans(),
)
def test_the_batched_analyzer_fingerprint_is_the_word_by_word_one(
    words: frozenset[str], language: str, stem: bool
) -> None:
    for stopwords in ("default", words):
        config = AnalyzerConfig(language=language, stem=stem, stopwords=stopwords)
        expected = _fingerprint_word_by_word(Analyzer(config))
        assert layout.analyzer_fingerprint(Analyzer(config)) == expected


def test_the_config_fingerprint_is_the_analyzer_fingerprint() -> None:
    for config in (AnalyzerConfig(), AnalyzerConfig(stem=False, stopwords=None)):
        assert layout.config_fingerprint(config) == layout.analyzer_fingerprint(Analyzer(config))


def test_a_header_longer_than_the_first_read_is_still_mapped(tmp_path: Path) -> None:
    array = np.arange(7, dtype="<i8")
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    data = buffer.getvalue()
    length = int.from_bytes(data[8:10], "little")
    # numpy's reader accepts any padding: a header padded past the first 512-byte read
    head = data[10 : 10 + length].rstrip(b"\n") + b" " * 1000 + b"\n"
    padded = data[:8] + len(head).to_bytes(2, "little") + head + data[10 + length :]
    (tmp_path / "a.npy").write_bytes(padded)
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        opened = storage.open_file(dir_fd, "a.npy", len(padded), len(padded), "snap")
        try:
            mapped = storage.map_file(opened, "snap", "<i8")
            assert mapped.tolist() == array.tolist()
            assert not mapped.flags.writeable
            with pytest.raises(IndexFormatError, match="holds <i8, expected <i4"):
                storage.map_file(opened, "snap", "<i4")
        finally:
            opened.close()
    finally:
        os.close(dir_fd)


def test_mapped_arrays_are_read_only_with_their_shapes(tmp_path: Path) -> None:
    path = tmp_path / "kb"
    docs = [{"id": f"d{i}", "title": f"t {i}", "text": f"alpha beta {i}"} for i in range(5)]
    gw.KnowledgeBase.from_documents(docs).save(path)
    checksums.forget_verdicts()
    lexical = gw.KnowledgeBase.load(path).lexical
    assert lexical.lengths.shape == (3, 5)
    for array in (lexical.indptr, lexical.docs, lexical.scores, lexical.lengths):
        assert not array.flags.writeable
