"""Fuzz: every document loader, and folders of hostile files, never crash.

``load_bytes`` raises SourceError (or MissingExtraError) or returns a document whose
text chunks; ``load_documents`` never raises for a file's content: it skips the file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from fuzz_support import FUZZ, NASTY, VALUES, deep, flow, mutated, ran
from hypothesis import given
from hypothesis import strategies as st

from groundwire import (
    ChunkingConfig,
    MissingExtraError,
    SourceError,
    chunk_document,
    load_bytes,
    load_documents,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SAMPLES = {
    "markdown": b"---\ntitle: Guide\ntags: [a, b]\n---\n# Guide\n\n## Install\n\n```py\nx\n```\n",
    "html": b"<html><head><title>T</title></head><body><h1>A</h1><p>x &amp; y</p>"
    b"<table><tr><td>1</td><td>2</td></tr></table><pre>  code </pre></body></html>",
    "json": b'{"title": "Limits", "plans": [{"name": "free", "rpm": 60}]}',
    "latex": b"\\documentclass{article}\\title{T}\\begin{document}\\section{A} text $x^2$ "
    b"\\subsection*{B} more \\cite{k} \\end{document}",
    "text": b"plain text\r\nwith lines\n",
    "csv": b"a,b,c\n1,2,3\n",
    "yaml": b"key: value\nlist: [1, 2]\n",
    "xml": b"<?xml version='1.0'?><feed><title>x</title></feed>",
    "python": b"import os\n\n@dec\nclass A:\n    def f(self):\n        return 1\n",
    "go": b"package main\n\nfunc main() {\n}\n",
    "pdf": None,
}
KINDS = sorted(SAMPLES)


@pytest.fixture(scope="module", autouse=True)
def _pdf_sample(pdf_writer: object) -> None:
    SAMPLES["pdf"] = pdf_writer.pdf_bytes(["Page one text", "Page two text"], "Manual")  # type: ignore[attr-defined]


@st.composite
def documents(draw: st.DrawFn, kinds: tuple[str, ...] = tuple(KINDS)) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(kinds))
    sample = SAMPLES[kind]
    assert sample is not None
    data = draw(
        mutated(sample)
        | st.binary(max_size=300)
        | st.sampled_from(NASTY).map(lambda nasty: sample + nasty * 3)
        | (deep(VALUES).map(lambda v: flow(v).encode()) if kind == "json" else st.just(sample))
        | st.text(max_size=200).map(str.encode)
    )
    return kind, data


@pytest.mark.parametrize("loader", KINDS)
@FUZZ
@given(data=st.data(), encoding=st.sampled_from([None, "latin-1", "utf-16", "x-unknown"]))
def test_every_loader(loader: str, data: st.DataObject, encoding: str | None) -> None:
    kind, payload = data.draw(documents((loader,)))
    ran(f"load_bytes: {kind}")
    try:
        document = load_bytes(payload, f"doc.{kind}", kind=kind, encoding=encoding)
    except (SourceError, MissingExtraError):
        return
    assert isinstance(document.text, str)
    for section in document.sections or ():
        assert 0 <= section.start <= len(document.text)
    try:
        chunks = chunk_document(document, ChunkingConfig(size=200, overlap=20))
    except SourceError:  # too many chunks is the only refusal
        return
    for chunk in chunks:
        assert document.text[chunk.start : chunk.end] == chunk.text


@FUZZ
@given(st.lists(documents(), min_size=1, max_size=4))
def test_folders_of_hostile_files(cases: list[tuple[str, bytes]]) -> None:
    ran("load_documents: folders")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        names = []
        for n, (kind, data) in enumerate(cases):
            suffix = {"python": "py", "markdown": "md", "latex": "tex"}.get(kind, kind)
            name = f"f{n}.{suffix}"
            (root / name).write_bytes(data)
            names.append(name)
        result = load_documents(root, gitignore=False)
        seen = sorted([d.source_id for d in result.documents] + [s.path for s in result.skipped])
        assert seen == sorted(names)
