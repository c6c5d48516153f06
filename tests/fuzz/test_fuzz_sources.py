"""Fuzz: knowledge source loading and validation never crash.

``load_sources`` may raise SourceError (naming the file) and nothing else;
``normalize_and_validate`` never raises: every problem is an issue in the report.
Whatever validates builds, saves and reloads.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from fuzz_support import FUZZ, VALUES, deep, flow, mutated, ran
from hypothesis import given
from hypothesis import strategies as st

from groundwire import (
    IndexSettings,
    KnowledgeBase,
    SourceError,
    load_sources,
    normalize_and_validate,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ENTRY = {"id": "a.one", "title": "One", "summary": "First.", "domain": "a", "integrations": []}


def _as_text(value: object, suffix: str, block: bool) -> bytes:
    """JSON (which is YAML flow style too), or YAML block style when it is shallow."""
    if suffix == ".yaml" and block:
        try:
            return yaml.safe_dump(value, allow_unicode=True).encode()
        except RecursionError:
            pass
    return flow(value).encode()


@st.composite
def source_files(draw: st.DrawFn) -> tuple[str, bytes]:
    suffix = draw(st.sampled_from([".json", ".yaml"]))
    entries = draw(
        st.lists(
            st.fixed_dictionaries({}, optional=dict.fromkeys(ENTRY, VALUES))
            | st.just(ENTRY)
            | VALUES,
            max_size=3,
        )
    )
    value = draw(
        st.fixed_dictionaries(
            {"id": st.just("kb") | VALUES, "entries": st.just(entries) | VALUES},
            optional={"version": VALUES},
        )
        | deep()
    )
    data = _as_text(value, suffix, draw(st.booleans()))
    return suffix, draw(st.just(data) | mutated(data) | st.binary(max_size=200))


def _validate_and_build(sources: list[object], where: Path) -> None:
    report = normalize_and_validate(sources)  # type: ignore[arg-type]
    assert all(issue.describe() for issue in report.issues)
    if report.ok and report.entries:
        kb = KnowledgeBase(report.entries, IndexSettings())
        kb.search("one first")
        kb.save(where / "snap")
        assert len(KnowledgeBase.load(where / "snap")) == len(kb)


@FUZZ
@given(source_files())
def test_source_files(case: tuple[str, bytes]) -> None:
    ran("load_sources: .json/.yaml files")
    suffix, data = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"kb{suffix}"
        path.write_bytes(data)
        try:
            sources = load_sources(path)
        except SourceError as exc:
            message = str(exc)
        else:
            _validate_and_build(list(sources), Path(folder))
            return
        assert str(path) in message


@st.composite
def front_matter_files(draw: st.DrawFn) -> bytes:
    meta = draw(st.fixed_dictionaries({}, optional=dict.fromkeys(ENTRY, VALUES)) | deep())
    text = b"---\n" + _as_text(meta, ".yaml", draw(st.booleans())) + b"\n---\n"
    text += draw(st.text(max_size=80)).encode()
    return draw(st.just(text) | mutated(text))


@FUZZ
@given(st.lists(front_matter_files(), min_size=1, max_size=3), mutated(b"id: kb\nversion: '1'\n"))
def test_markdown_folders(files: list[bytes], manifest: bytes) -> None:
    ran("load_sources: Markdown folders")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "kb"
        root.mkdir()
        (root / "source.yaml").write_bytes(manifest)
        for n, data in enumerate(files):
            (root / f"e{n}.md").write_bytes(data)
        try:
            sources = load_sources(root)
        except SourceError:
            return
        _validate_and_build(list(sources), Path(folder))


@FUZZ
@given(
    st.lists(
        VALUES
        | deep()
        | st.fixed_dictionaries(
            {
                "id": VALUES,
                "entries": st.lists(VALUES | st.just(ENTRY) | deep(), max_size=3) | VALUES,
            },
            optional={"version": VALUES},
        ),
        max_size=3,
    )
)
def test_validation_of_any_value(sources: list[object]) -> None:
    ran("normalize_and_validate: any value")
    with tempfile.TemporaryDirectory() as folder:
        _validate_and_build(sources, Path(folder))
