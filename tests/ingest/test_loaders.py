"""Loaders: every file kind to text with structure, encodings, folders, bounds, extras."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from groundwire import (
    ConfigError,
    LoadedDocument,
    MissingExtraError,
    SourceError,
    load_bytes,
    load_document,
    load_documents,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DOCS = ROOT / "examples" / "docs"


MakePdf = Callable[..., bytes]


@pytest.fixture
def make_pdf(pdf_writer: ModuleType) -> MakePdf:
    """A small real PDF, written by the example script's hand-written PDF writer."""

    def make(pages: list[list[str]], title: str = "A guide") -> bytes:
        data: bytes = pdf_writer.pdf_bytes(pages, title)
        return data

    return make


def heading_at(doc: LoadedDocument, n: int) -> str:
    section = doc.sections[n] if doc.sections else None
    assert section is not None
    return doc.text[section.start : section.start + len(section.title) + 8]


# --- Markdown --------------------------------------------------------------------------------
MARKDOWN = """---
title: Webhook guide
tags: [api, webhooks]
---

# Webhooks

Intro.

## Create an endpoint

Steps.

```bash
# not a heading inside a fence
curl https://api.example
```

Setext heading
--------------

### Deep `code` heading ###
"""


def test_markdown_front_matter_becomes_metadata_and_title() -> None:
    doc = load_bytes(MARKDOWN.encode(), "guide.md")
    assert doc.kind == "markdown"
    assert doc.title == "Webhook guide"
    assert doc.metadata["front_matter"] == {"title": "Webhook guide", "tags": ["api", "webhooks"]}
    assert "tags:" not in doc.text
    assert doc.text.lstrip().startswith("# Webhooks")


def test_markdown_headings_are_sections_outside_fences() -> None:
    doc = load_bytes(MARKDOWN.encode(), "guide.md")
    assert doc.sections is not None
    assert [(s.level, s.title) for s in doc.sections] == [
        (1, "Webhooks"),
        (2, "Create an endpoint"),
        (2, "Setext heading"),
        (3, "Deep code heading"),
    ]
    for section in doc.sections:
        line = doc.text[section.start :].split("\n", 1)[0]
        assert section.title.split()[0] in line


def test_markdown_title_falls_back_to_first_h1_then_file_name() -> None:
    assert load_bytes(b"Intro\n\n# The Title\n\ntext", "a.md").title == "The Title"
    assert load_bytes(b"just text", "docs/setup-guide.md").title == "setup-guide"


def test_markdown_invalid_front_matter_names_the_line() -> None:
    with pytest.raises(SourceError, match=r"bad\.md:3: front matter is not valid YAML"):
        load_bytes(b"---\ntitle: ok\nkey: [unclosed\n---\nbody", "bad.md")


def test_markdown_leading_rule_that_is_not_a_mapping_stays_text() -> None:
    doc = load_bytes(b"---\nJust a paragraph between rules\n---\nMore", "a.md")
    assert "Just a paragraph" in doc.text
    assert "front_matter" not in doc.metadata


def test_mdx_is_markdown() -> None:
    doc = load_bytes(b'import X from "x";\n\n# Hello\n\n<X />\n', "page.mdx")
    assert doc.kind == "markdown"
    assert doc.title == "Hello"


# --- HTML ----------------------------------------------------------------------------------
HTML = b"""<!DOCTYPE html><html><head><title> Rate   limits </title>
<style>body { color: red }</style><script>var secret = "drop me";</script></head>
<body><nav>Home | Docs</nav><h1>API <em>rate</em> limits</h1>
<p>Limits   apply
per key &amp; per plan.</p><noscript>enable javascript</noscript>
<template><p>template text</p></template>
<h2>By plan</h2><table><tr><th>Plan</th><th>Limit</th></tr><tr><td>Free</td><td>60</td></tr></table>
<ul><li>one</li><li>two</li></ul><pre>  keep
    indent</pre><h3>Headers</h3><p>last<br>line</p></body></html>"""


def test_html_drops_non_content_and_keeps_text() -> None:
    doc = load_bytes(HTML, "limits.html")
    assert doc.kind == "html"
    for dropped in ("color: red", "drop me", "enable javascript", "template text", "Home"):
        assert dropped not in doc.text
    assert "Limits apply per key & per plan." in doc.text


def test_html_title_headings_and_block_boundaries() -> None:
    doc = load_bytes(HTML, "limits.html")
    assert doc.title == "Rate limits"
    assert doc.sections is not None
    assert [(s.level, s.title) for s in doc.sections] == [
        (1, "API rate limits"),
        (2, "By plan"),
        (3, "Headers"),
    ]
    for section in doc.sections:
        assert doc.text[section.start : section.start + len(section.title)] == section.title
    assert "Plan | Limit\nFree | 60" in doc.text
    assert "one\ntwo" in doc.text
    assert "  keep\n    indent" in doc.text
    assert "last\nline" in doc.text
    assert "\n\nBy plan\n\n" in doc.text


def test_html_title_falls_back_to_first_h1() -> None:
    doc = load_bytes(b"<p>intro</p><h1>Main heading</h1><p>x</p>", "page.htm")
    assert doc.title == "Main heading"


def test_html_without_the_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "selectolax.lexbor", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'groundwire\[html\]'") as info:
        load_bytes(b"<p>x</p>", "a.html")
    assert info.value.extra == "html"
    assert info.value.package == "selectolax"


# --- JSON, LaTeX, plain kinds ---------------------------------------------------------------
def test_json_is_kept_as_written_and_validated() -> None:
    raw = b'{\n  "title": "Config reference",\n  "retries": 8\n}\n'
    doc = load_bytes(raw, "config.json")
    assert doc.kind == "json"
    assert doc.text == raw.decode()
    assert doc.title == "Config reference"
    with pytest.raises(SourceError, match=r"broken\.json:2: invalid JSON"):
        load_bytes(b'{"a": 1,\n "b": }', "broken.json")


LATEX = rb"""\documentclass{article}
\usepackage{amsmath}
\title{Relaybird \emph{internals}}
\begin{document}
\maketitle
% a private comment
\section{Queues}
Runs wait in \textbf{FIFO} order~today\footnote{mostly}. See \cite{knuth} and 50\% more.
\subsection*{Retries}
\begin{itemize}
\item Exponential backoff
\item Jitter, see \href{https://example.org}{the docs}
\end{itemize}
\section{Limits}
At most $n \le 10$ runs.
\end{document}
"""


def test_latex_sections_title_and_cleanup() -> None:
    doc = load_bytes(LATEX, "internals.tex")
    assert doc.kind == "latex"
    assert doc.title == "Relaybird internals"
    assert doc.sections is not None
    assert [(s.level, s.title) for s in doc.sections] == [
        (3, "Queues"),
        (4, "Retries"),
        (3, "Limits"),
    ]
    for section in doc.sections:
        assert doc.text[section.start : section.start + len(section.title)] == section.title
    assert "Runs wait in FIFO order today (mostly). See and 50% more." in doc.text
    assert "- Exponential backoff\n- Jitter, see the docs" in doc.text
    for gone in ("private comment", "usepackage", "knuth", "\\textbf", "documentclass"):
        assert gone not in doc.text
    assert "$n \\le 10$" in doc.text


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("notes.txt", "text"),
        ("table.csv", "csv"),
        ("values.tsv", "csv"),
        ("config.yaml", "yaml"),
        ("config.yml", "yaml"),
        ("feed.xml", "xml"),
        ("settings.toml", "text"),
        ("Makefile", "text"),
    ],
)
def test_plain_kinds_keep_their_text(name: str, kind: str) -> None:
    raw = b"a,b\n1,2\n<x>y</x>\nkey: value\n"
    doc = load_bytes(raw, name)
    assert doc.kind == kind
    assert doc.text == raw.decode()
    assert doc.sections is None


@pytest.mark.parametrize(
    ("name", "language"),
    [("client.py", "python"), ("app.ts", "typescript"), ("main.go", "go"), ("lib.rs", "rust")],
)
def test_source_code_by_extension(name: str, language: str) -> None:
    doc = load_bytes(b"def f():\n    return 1\n", name)
    assert doc.kind == "code"
    assert doc.metadata["language"] == language
    assert doc.title == name


# --- PDF -----------------------------------------------------------------------------------
def test_pdf_pages_become_sections(make_pdf: MakePdf) -> None:
    data = make_pdf([["First page line", "second line"], ["Page two (text)"]], "Ops guide")
    doc = load_bytes(data, "ops.pdf")
    assert doc.kind == "pdf"
    assert doc.title == "Ops guide"
    assert doc.sections is not None
    assert [s.title for s in doc.sections] == ["page 1", "page 2"]
    assert doc.metadata["pages"] == 2
    assert doc.metadata["page_starts"] == tuple(s.start for s in doc.sections)
    second = doc.sections[1].start
    assert "First page line" in doc.text[:second]
    assert doc.text[second:].startswith("Page two (text)")
    assert doc.sha256 == hashlib.sha256(data).hexdigest()


def test_broken_pdf_is_a_source_error() -> None:
    with pytest.raises(SourceError, match=r"broken\.pdf: cannot read the PDF"):
        load_bytes(b"%PDF-1.4\nthis is not really a pdf", "broken.pdf")


def test_pdf_without_the_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, make_pdf: MakePdf
) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'groundwire\[pdf\]'"):
        load_bytes(make_pdf([["x"]]), "a.pdf")


# --- encodings and hashes ------------------------------------------------------------------
def test_utf8_bom_is_dropped_and_newlines_normalized() -> None:
    raw = b"\xef\xbb\xbfline one\r\nline two\rline three"
    doc = load_bytes(raw, "a.txt")
    assert doc.text == "line one\nline two\nline three"
    assert doc.sha256 == hashlib.sha256(raw).hexdigest()
    assert doc.text_sha256 == hashlib.sha256(doc.text.encode()).hexdigest()
    assert doc.version == doc.sha256[:12]


def test_utf16_with_bom_is_decoded() -> None:
    doc = load_bytes("héllo wörld".encode("utf-16"), "a.txt")
    assert doc.text == "héllo wörld"


def test_undecodable_bytes_name_the_file_and_byte() -> None:
    with pytest.raises(SourceError, match=r"latin\.txt: not valid utf-8 text \(byte 3\)"):
        load_bytes(b"caf\xe9 au lait", "latin.txt")


def test_binary_content_is_refused() -> None:
    with pytest.raises(SourceError, match="binary"):
        load_bytes(b"abc\x00def", "blob.txt")


def test_explicit_encoding_is_honoured() -> None:
    assert load_bytes("café".encode("latin-1"), "a.txt", encoding="latin-1").text == "café"


def test_source_id_is_required() -> None:
    with pytest.raises(SourceError, match="source id"):
        load_bytes(b"x", "")


# --- files and folders ---------------------------------------------------------------------
def test_load_document_uses_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text("# Guide\n\nBody")
    doc = load_document(path)
    assert doc.source_id == "guide.md"
    assert doc.title == "Guide"
    with pytest.raises(SourceError, match="over the 4-byte limit"):
        load_document(path, max_bytes=4)


def _tree(root: Path) -> None:
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "intro.md").write_text("# Intro\n\nWelcome.")
    (root / "guide" / "deep").mkdir()
    (root / "guide" / "deep" / "page.html").write_text("<h1>Deep</h1><p>text</p>")
    (root / "api.json").write_text('{"title": "API"}')
    (root / "logo.png").write_bytes(b"\x89PNG\r\n")
    (root / "latin1.txt").write_bytes(b"caf\xe9")
    (root / "empty.md").write_text("   \n")
    (root / ".hidden.md").write_text("# secret notes")
    (root / "node_modules" / "pkg").mkdir(parents=True)
    (root / "node_modules" / "pkg" / "README.md").write_text("# dependency")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]")


def test_folder_ids_are_relative_posix_paths_in_order(tmp_path: Path) -> None:
    _tree(tmp_path)
    result = load_documents(tmp_path)
    assert [d.source_id for d in result.documents] == [
        "api.json",
        "guide/deep/page.html",
        "guide/intro.md",
    ]
    assert all(d.path == d.source_id for d in result.documents)
    assert result.bytes_read == sum(
        (tmp_path / d.source_id).stat().st_size for d in result.documents
    )


def test_folder_reports_what_it_skipped_and_why(tmp_path: Path) -> None:
    _tree(tmp_path)
    reasons = {s.path: s.reason for s in load_documents(tmp_path).skipped}
    assert "unsupported file type '.png'" in reasons["logo.png"]
    assert "not valid utf-8" in reasons["latin1.txt"]
    assert reasons["empty.md"] == "no text after extraction"
    assert reasons[".hidden.md"] == "hidden file"
    assert "folder (not walked)" in reasons["node_modules"]
    assert "folder (not walked)" in reasons[".git"]
    assert not any(path.startswith("node_modules/") for path in reasons)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_folder_does_not_follow_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# outside")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "real.md").write_text("# real")
    (docs / "link.md").symlink_to(outside / "secret.md")
    (docs / "linked-dir").symlink_to(outside, target_is_directory=True)
    result = load_documents(docs)
    assert [d.source_id for d in result.documents] == ["real.md"]
    assert {s.path: s.reason for s in result.skipped} == {
        "link.md": "symlink (not followed)",
        "linked-dir": "symlink (not followed)",
    }


def test_files_over_the_per_file_bound_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "small.txt").write_text("small")
    (tmp_path / "big.txt").write_text("x" * 100)
    result = load_documents(tmp_path, max_file_bytes=50)
    assert [d.source_id for d in result.documents] == ["small.txt"]
    assert "100 bytes is over the 50-byte limit" in result.skipped[0].reason


def test_total_bytes_and_document_count_are_bounded(tmp_path: Path) -> None:
    for n in range(3):
        (tmp_path / f"f{n}.txt").write_text("x" * 40)
    with pytest.raises(SourceError, match="max_total_bytes=100"):
        load_documents(tmp_path, max_total_bytes=100)
    with pytest.raises(SourceError, match="3 files to load, over max_documents=2"):
        load_documents(tmp_path, max_documents=2)
    with pytest.raises(ConfigError, match="max_documents=0"):
        load_documents(tmp_path, max_documents=0)


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file or folder"):
        load_documents(tmp_path / "nope")


def test_several_inputs_and_duplicate_ids(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "same.md").write_text(f"# {name}")
    single = tmp_path / "single.txt"
    single.write_text("one file")
    calls: list[tuple[int, int]] = []
    result = load_documents(
        [tmp_path / "a", tmp_path / "b", single], progress=lambda d, t: calls.append((d, t))
    )
    assert [d.source_id for d in result.documents] == ["same.md", "single.txt"]
    assert result.documents[1].path == single.as_posix()
    assert "duplicate source id 'same.md'" in result.skipped[0].reason
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_a_missing_extra_skips_the_file_in_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_pdf: MakePdf
) -> None:
    (tmp_path / "guide.pdf").write_bytes(make_pdf([["hello"]]))
    (tmp_path / "notes.txt").write_text("notes")
    monkeypatch.setitem(sys.modules, "pypdf", None)
    result = load_documents(tmp_path)
    assert [d.source_id for d in result.documents] == ["notes.txt"]
    assert "groundwire[pdf]" in result.skipped[0].reason


def test_example_docs_load_completely() -> None:
    result = load_documents(EXAMPLE_DOCS)
    assert result.skipped == ()
    kinds = {d.source_id: d.kind for d in result.documents}
    assert {"markdown", "html", "json", "code", "pdf"} <= set(kinds.values())
    assert kinds["api/webhooks.md"] == "markdown"
    pdf = next(d for d in result.documents if d.kind == "pdf")
    assert "Frankfurt" in pdf.text
    assert pdf.sha256 == hashlib.sha256((EXAMPLE_DOCS / pdf.source_id).read_bytes()).hexdigest()


def test_example_pdf_is_reproducible(tmp_path: Path, pdf_writer: ModuleType) -> None:
    module = pdf_writer
    committed = (EXAMPLE_DOCS / "operations-guide.pdf").read_bytes()
    assert module.pdf_bytes(module.PAGES, module.TITLE) == committed
