"""Chunking: properties of every strategy (hypothesis) and the behaviour of each one."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundwire import (
    Chunk,
    Chunker,
    ChunkingConfig,
    ChunkSpan,
    ConfigError,
    IndexSettings,
    KnowledgeBase,
    LoadedDocument,
    RetrievalConfig,
    Section,
    SourceError,
    chunk_document,
    chunk_text,
    chunker_for,
    chunks_to_documents,
    load_bytes,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DOCS = ROOT / "examples" / "docs"

# --- properties --------------------------------------------------------------------------------
# Text made of pieces that exercise every splitter rule: headings, fences, JSON punctuation,
# code definitions, sentence ends, paragraph breaks, runs without spaces, CJK and emoji.
PIECES = st.sampled_from(
    [
        "# Title\n",
        "## Sub\n",
        "Heading\n=====\n",
        "```\n# not a heading\n```\n",
        "\n\n",
        "\n",
        " ",
        "  \t",
        "word ",
        "Sentence ends here. ",
        "Why? ",
        "超长的中文句子没有空格。",
        "🙂",
        "x" * 37,
        '{"key": [1, 2, {"k": "v,}"}], ',
        "}",
        '"a\\"b": 3,',
        "def f():\n    return 1\n",
        "class C:\n    def m(self):\n        pass\n",
        "@decorator\n",
        "# comment\n",
        "function g() {}\n",
        "\\section{Intro}\n",
        "\\subsection*{Deeper}\n",
    ]
)
TEXTS = st.one_of(
    st.lists(PIECES, max_size=40).map("".join),
    st.text(max_size=300),
)
KINDS = st.sampled_from(["text", "markdown", "json", "python", "javascript", "latex"])


@st.composite
def configs(draw: st.DrawFn) -> ChunkingConfig:
    size = draw(st.integers(min_value=1, max_value=120))
    overlap = draw(st.integers(min_value=0, max_value=(size - 1) // 2))
    return ChunkingConfig(size=size, overlap=overlap, max_chunks=1_000_000)


def check_chunks(text: str, chunks: Sequence[Chunk], config: ChunkingConfig, sid: str) -> None:
    covered = bytearray(len(text))
    for n, chunk in enumerate(chunks):
        assert chunk.id == f"{sid}#{n}"
        assert chunk.number == n
        assert text[chunk.start : chunk.end] == chunk.text
        assert chunk.text
        assert chunk.text == chunk.text.strip()
        assert len(chunk.text) <= config.size
        assert chunk.sha256 == hashlib.sha256(chunk.text.encode()).hexdigest()
        covered[chunk.start : chunk.end] = b"\x01" * (chunk.end - chunk.start)
        if n:
            previous = chunks[n - 1]
            assert chunk.start > previous.start
            assert previous.end - chunk.start <= config.overlap
    missed = [i for i, char in enumerate(text) if not covered[i] and not char.isspace()]
    assert missed == []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, config=configs(), kind=KINDS)
def test_chunks_cover_reconstruct_and_respect_bounds(
    text: str, config: ChunkingConfig, kind: str
) -> None:
    chunks = chunk_text(text, "doc", kind=kind, config=config)
    check_chunks(text, chunks, config, "doc")


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, config=configs(), kind=KINDS)
def test_chunking_is_deterministic(text: str, config: ChunkingConfig, kind: str) -> None:
    assert chunk_text(text, "d", kind=kind, config=config) == chunk_text(
        text, "d", kind=kind, config=config
    )


@settings(max_examples=150, deadline=None)
@given(
    text=TEXTS,
    config=configs(),
    starts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    levels=st.lists(st.integers(min_value=1, max_value=4), min_size=8, max_size=8),
)
def test_loader_sections_keep_the_properties(
    text: str, config: ChunkingConfig, starts: list[int], levels: list[int]
) -> None:
    sections = tuple(Section(s, lvl, f"h{s}") for s, lvl in zip(starts, levels, strict=False))
    doc = LoadedDocument("page.html", "page.html", "html", "", text, "0" * 64, "0" * 64, sections)
    chunks = chunk_document(doc, config, chunker=chunker_for("html", config))
    check_chunks(text, chunks, config, "page.html")


def test_ids_and_hashes_are_stable_across_processes() -> None:
    script = (
        "import json, sys\n"
        "from groundwire import chunk_text, ChunkingConfig\n"
        "text = open(sys.argv[1], encoding='utf-8').read()\n"
        "chunks = chunk_text(text, 'guide.md', kind='md', config=ChunkingConfig(200, 40))\n"
        "print(json.dumps([[c.id, c.start, c.end, c.sha256, c.version] for c in chunks]))\n"
    )
    source = ROOT / "examples" / "docs" / "api" / "webhooks.md"
    outputs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script, str(source)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1
    rows = json.loads(outputs.pop())
    assert len(rows) > 5
    assert rows[0][0] == "guide.md#0"


# --- configuration -----------------------------------------------------------------------------
def test_config_validates_sizes() -> None:
    assert ChunkingConfig().size == 1_600
    with pytest.raises(ConfigError, match="overlap=50 is invalid: expected less than half"):
        ChunkingConfig(size=100, overlap=50)
    with pytest.raises(ConfigError, match="size=0"):
        ChunkingConfig(size=0, overlap=0)
    with pytest.raises(ConfigError, match="overlap=-1"):
        ChunkingConfig(size=10, overlap=-1)
    with pytest.raises(ConfigError, match="max_chunks=0"):
        ChunkingConfig(max_chunks=0)
    ChunkingConfig(size=100, overlap=49)


def test_too_many_chunks_is_an_error_not_a_cut() -> None:
    text = "word " * 200
    with pytest.raises(SourceError, match=r"big\.txt: splits into \d+ chunks, over max_chunks=3"):
        chunk_text(text, "big.txt", config=ChunkingConfig(size=50, overlap=0, max_chunks=3))


# --- the factory and the protocol --------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "strategy"),
    [
        ("docs/guide.md", "markdown"),
        (".md", "markdown"),
        ("md", "markdown"),
        ("markdown", "markdown"),
        ("page.mdx", "markdown"),
        ("index.HTML", "html"),
        ("report.pdf", "pdf"),
        ("paper.tex", "latex"),
        ("config.json", "json"),
        ("client.py", "code"),
        ("python", "code"),
        ("app.tsx", "code"),
        ("notes.txt", "text"),
        ("data.csv", "text"),
        ("config.yaml", "text"),
        ("feed.xml", "text"),
        ("mystery.unknown", "text"),
        ("README", "text"),
    ],
)
def test_chunker_for_picks_a_strategy(name: str, strategy: str) -> None:
    chunker = chunker_for(name)
    assert isinstance(chunker, Chunker)
    assert getattr(chunker, "name", None) == strategy


def test_a_custom_chunker_is_used_and_checked() -> None:
    class Halves:
        def split(self, text: str, sections: Sequence[Section] | None = None) -> list[ChunkSpan]:
            middle = len(text) // 2
            return [ChunkSpan(0, middle, ("first",)), ChunkSpan(middle, len(text))]

    doc = load_bytes(b"abcdefgh", "a.txt")
    chunks = chunk_document(doc, chunker=Halves())
    assert [c.text for c in chunks] == ["abcd", "efgh"]
    assert chunks[0].headings == ("first",)

    class Broken:
        def split(self, text: str, sections: Sequence[Section] | None = None) -> list[ChunkSpan]:
            return [ChunkSpan(0, len(text) + 5)]

    with pytest.raises(ConfigError, match="outside the text"):
        chunk_document(doc, chunker=Broken())


# --- records -------------------------------------------------------------------------------
def test_chunk_records_carry_source_version_and_citation() -> None:
    raw = b"# Guide\n\nHello world.\n"
    doc = load_bytes(raw, "docs/guide.md")
    (chunk,) = chunk_document(doc)
    version = hashlib.sha256(raw).hexdigest()[:12]
    assert chunk.id == "docs/guide.md#0"
    assert chunk.source_id == "docs/guide.md"
    assert chunk.path == "docs/guide.md"
    assert chunk.title == "Guide"
    assert chunk.kind == "markdown"
    assert chunk.version == version == doc.version
    assert chunk.citation.tag == f"[KB:docs/guide.md#0@{version}]"
    assert (chunk.start, chunk.end) == (0, len("# Guide\n\nHello world."))
    assert chunk.heading == "Guide"


# --- markdown ------------------------------------------------------------------------------
GUIDE = """# Guide

Intro paragraph.

## Install

Install with pip. {install}

### Linux

Use the package manager.

## Configure

Set `RELAYBIRD_KEY`.

```python
# not a heading
x = 1
```
"""


def test_markdown_splits_at_headings_with_trails() -> None:
    text = GUIDE.format(install="More install words. " * 12)
    chunks = chunk_text(text, "guide.md", kind="md", config=ChunkingConfig(size=160, overlap=30))
    assert [c.headings for c in chunks] == [
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install"),
        ("Guide",),  # "Linux" and "Configure" fit together: their common trail
    ]
    assert chunks[0].text == "# Guide\n\nIntro paragraph."
    assert chunks[1].text.startswith("## Install\n\nInstall with pip.")
    assert chunks[3].text.startswith("### Linux")
    assert "## Configure" in chunks[3].text
    assert "# not a heading" in chunks[3].text
    bigger = chunk_text(text, "guide.md", kind="md", config=ChunkingConfig(size=60, overlap=0))
    linux = next(c for c in bigger if c.text.startswith("### Linux"))
    assert linux.headings == ("Guide", "Install", "Linux")
    configure = next(c for c in bigger if c.text.startswith("## Configure"))
    assert configure.headings == ("Guide", "Configure")


def test_markdown_packs_small_sections_under_their_common_heading() -> None:
    text = "# Guide\n\nA.\n\n## One\n\nB.\n\n## Two\n\nC.\n"
    (chunk,) = chunk_text(text, "g.md", kind="md", config=ChunkingConfig(size=200, overlap=0))
    assert chunk.headings == ("Guide",)
    (chunk,) = chunk_text(text[9:], "g.md", kind="md", config=ChunkingConfig(size=200, overlap=0))
    assert chunk.headings == ()


def test_markdown_long_section_overlaps_within_itself_only() -> None:
    body = " ".join(f"word{n}" for n in range(120))
    text = f"# A\n\n{body}\n\n# B\n\nshort"
    config = ChunkingConfig(size=100, overlap=20)
    chunks = chunk_text(text, "a.md", kind="md", config=config)
    in_a = [c for c in chunks if c.headings == ("A",)]
    assert len(in_a) > 3
    overlaps = [prev.end - nxt.start for prev, nxt in itertools.pairwise(in_a)]
    assert all(0 < o <= 20 for o in overlaps)
    last_a, first_b = in_a[-1], chunks[len(in_a)]
    assert first_b.headings == ("B",)
    assert first_b.start >= last_a.end


def test_front_matter_never_reaches_chunks() -> None:
    doc = load_bytes(b"---\ntitle: T\nsecret: s3cr3t\n---\n# T\n\nbody", "t.md")
    assert all("s3cr3t" not in c.text for c in chunk_document(doc))


# --- HTML, PDF, LaTeX ----------------------------------------------------------------------
def test_html_chunks_follow_the_page_structure() -> None:
    html = (
        "<title>Limits</title><h1>Limits</h1><p>" + "Intro words. " * 10 + "</p>"
        "<h2>Plans</h2><p>Free 60.</p><h2>Headers</h2><p>RateLimit-Limit.</p>"
    ).encode()
    doc = load_bytes(html, "limits.html")
    chunks = chunk_document(doc, ChunkingConfig(size=150, overlap=10))
    assert [c.headings for c in chunks] == [("Limits",), ("Limits",)]
    assert chunks[0].text.startswith("Limits\n\nIntro words.")
    assert chunks[1].text == "Plans\n\nFree 60.\n\nHeaders\n\nRateLimit-Limit."
    documents = chunks_to_documents(chunks)
    assert documents[0].title == "Limits"


def test_pdf_chunks_record_their_pages(pdf_writer: ModuleType) -> None:
    make_pdf = pdf_writer
    pages = [[f"Page one line {n}." for n in range(6)], ["Page two."], ["Page three."]]
    doc = load_bytes(make_pdf.pdf_bytes(pages, "Guide"), "guide.pdf")
    chunks = chunk_document(doc, ChunkingConfig(size=60, overlap=0))
    assert chunks[0].headings == ("page 1",)
    assert chunks[0].metadata["pages"] == (1, 1)
    assert chunks[-1].metadata["pages"] == (2, 3)
    assert "Page two." in chunks[-1].text


def test_raw_latex_chunks_by_sections() -> None:
    text = (
        "\\section{Queues}\nFIFO order.\n\\subsection{Retries}\nBackoff.\n\\section{Limits}\nTen."
    )
    chunks = chunk_text(text, "a.tex", kind="tex", config=ChunkingConfig(size=30, overlap=0))
    assert [c.headings for c in chunks] == [
        ("Queues",),
        ("Queues", "Retries"),
        ("Limits",),
    ]


# --- JSON ----------------------------------------------------------------------------------
def test_json_splits_on_members_and_nested_members() -> None:
    value = {
        "title": "Reference",
        "webhooks": {
            "max_endpoints": {"value": 20, "description": "Endpoints per workspace." * 3},
            "max_retries": {"value": 8, "description": "Retries over 24 hours." * 3},
        },
        "api_keys": {"scopes": ["runs:read", "runs:write"]},
    }
    text = json.dumps(value, indent=2)
    chunks = chunk_text(text, "ref.json", kind="json", config=ChunkingConfig(size=160, overlap=0))
    trails = [c.headings for c in chunks]
    assert ("webhooks", "max_endpoints") in trails
    assert ("webhooks", "max_retries") in trails
    retries = next(c for c in chunks if c.headings == ("webhooks", "max_retries"))
    assert '"max_retries"' in retries.text
    assert "max_retries" in retries.symbols
    assert any("api_keys" in c.symbols for c in chunks)


def test_json_arrays_split_by_element_and_strings_do_not_confuse_it() -> None:
    items = [{"id": n, "text": "a, b } ] { [ \\" + '" quoted'} for n in range(4)]
    text = json.dumps(items)
    chunks = chunk_text(text, "a.json", kind="json", config=ChunkingConfig(size=60, overlap=0))
    assert [c.headings for c in chunks] == [("[0]",), ("[1]",), ("[2]",), ("[3]",)]
    assert all('"id"' in c.text for c in chunks)


def test_invalid_json_text_falls_back_to_characters() -> None:
    config = ChunkingConfig(size=5, overlap=0)
    chunks = chunk_text('{"a": [1, 2', "a.json", kind="json", config=config)
    assert "".join(c.text for c in chunks).replace(" ", "") == '{"a":[1,2'


# --- code --------------------------------------------------------------------------------------
PYTHON = '''"""Module docstring."""

import os

LIMIT = 3


# Retries with backoff.
@decorator
def retry(times: int) -> int:
    """Retry."""
    return times * 2


class Client:
    """A client."""

    def __init__(self) -> None:
        self.x = 1

    def send(self) -> None:
        pass

    async def close(self) -> None:
        pass


async def main() -> None:
    await Client().close()
'''


def test_python_splits_on_top_level_definitions_with_symbols() -> None:
    chunks = chunk_text(PYTHON, "client.py", kind="py", config=ChunkingConfig(size=110, overlap=0))
    assert [c.symbols for c in chunks] == [
        (),
        ("retry",),
        ("Client",),  # a class too long for one chunk is split: each piece names what it
        ("send", "close"),  # defines, and keeps the class as its heading
        ("main",),
    ]
    assert [c.headings for c in chunks] == [
        (),
        ("def retry",),
        ("class Client",),
        ("class Client",),
        ("async def main",),
    ]
    assert chunks[0].text.startswith('"""Module docstring."""')
    assert chunks[1].text.startswith("# Retries with backoff.\n@decorator\ndef retry")
    assert chunks[2].text.startswith("class Client:")
    assert chunks[4].text.startswith("async def main")
    config = ChunkingConfig(size=180, overlap=0)
    packed = chunk_text(PYTHON, "client.py", kind="py", config=config)
    assert [c.symbols for c in packed] == [("retry",), ("Client", "send", "close"), ("main",)]


def test_small_definitions_pack_together_with_all_their_symbols() -> None:
    (chunk,) = chunk_text("def a():\n    pass\n\n\ndef b():\n    pass\n", "m.py")
    assert chunk.symbols == ()  # a .py path, but kind "text": no code strategy
    (chunk,) = chunk_text("def a():\n    pass\n\n\ndef b():\n    pass\n", "m.py", kind="py")
    assert chunk.symbols == ("a", "b")


def test_python_with_a_syntax_error_uses_the_pattern() -> None:
    text = "def ok():\n    pass\n\ndef broken(:\n    pass\n"
    chunks = chunk_text(text, "m.py", kind="python", config=ChunkingConfig(size=25, overlap=0))
    assert [c.symbols for c in chunks] == [("ok",), ("broken",)]


def test_other_languages_split_on_column_zero_definitions() -> None:
    text = (
        "import x from 'x';\n\n"
        "// Sends a request.\n"
        "export async function send(url) {\n  return fetch(url);\n}\n\n"
        "export class Client {\n  constructor() {}\n}\n\n"
        "const helper = () => 1;\n"
    )
    chunks = chunk_text(text, "c.js", kind="js", config=ChunkingConfig(size=60, overlap=0))
    symbols = [c.symbols for c in chunks]
    assert ("send",) in symbols
    assert ("Client",) in symbols
    assert ("helper",) in symbols
    send = next(c for c in chunks if c.symbols == ("send",))
    assert send.text.startswith("// Sends a request.")
    assert send.headings == ("export async function send",)
    go = "package main\n\nfunc (s *Server) Start() error {\n\treturn nil\n}\n\n"
    go += "type Server struct{}\n"
    chunks = chunk_text(go, "s.go", kind="go", config=ChunkingConfig(size=50, overlap=0))
    assert [c.symbols for c in chunks] == [(), ("Start",), ("Server",)]


# --- the character splitter ----------------------------------------------------------------
def test_fallback_prefers_paragraphs_then_lines_then_sentences() -> None:
    config = ChunkingConfig(size=40, overlap=0)
    paragraphs = "First paragraph here.\n\nSecond one is here too."
    assert [c.text for c in chunk_text(paragraphs, "p", config=config)] == [
        "First paragraph here.",
        "Second one is here too.",
    ]
    lines = "line number one is here\nline number two is here"
    assert [c.text for c in chunk_text(lines, "l", config=config)] == [
        "line number one is here",
        "line number two is here",
    ]
    sentences = "The first sentence ends. The second sentence ends."
    assert next(c.text for c in chunk_text(sentences, "s", config=config)) == (
        "The first sentence ends."
    )


def test_fallback_cuts_words_then_code_points() -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta"
    chunks = chunk_text(words, "w", config=ChunkingConfig(size=20, overlap=0))
    assert all(not c.text.startswith(" ") and c.text.split()[0] in words.split() for c in chunks)
    assert " ".join(c.text for c in chunks) == words
    solid = "x" * 50
    chunks = chunk_text(solid, "s", config=ChunkingConfig(size=20, overlap=5))
    assert [(c.start, c.end) for c in chunks] == [(0, 20), (15, 35), (30, 50)]


def test_overlap_restarts_at_a_word_start() -> None:
    text = " ".join(f"w{n:02d}" for n in range(40))
    chunks = chunk_text(text, "t", config=ChunkingConfig(size=40, overlap=12))
    for previous, chunk in itertools.pairwise(chunks):
        assert 0 < previous.end - chunk.start <= 12
        assert text[chunk.start - 1] == " "


def test_cjk_text_is_cut_by_code_points_with_exact_overlap() -> None:
    text = "路由使用方括号目录名称" * 6
    chunks = chunk_text(text, "zh", config=ChunkingConfig(size=25, overlap=5))
    assert all(len(c.text) <= 25 for c in chunks)
    assert all(a.end - b.start == 5 for a, b in itertools.pairwise(chunks))


# --- into the knowledge base -----------------------------------------------------------------
def test_chunks_index_into_a_knowledge_base_with_symbols() -> None:
    docs = EXAMPLE_DOCS
    chunks = [
        *chunk_document(load_bytes((docs / "relaybird_client.py").read_bytes(), "client.py")),
        *chunk_document(load_bytes((docs / "api" / "webhooks.md").read_bytes(), "api/webhooks.md")),
    ]
    documents = chunks_to_documents(chunks)
    first = documents[0]
    assert first.id == chunks[0].id
    assert first.metadata["version"] == chunks[0].version
    assert (first.metadata["start"], first.metadata["end"]) == (chunks[0].start, chunks[0].end)
    assert first.metadata["sha256"] == chunks[0].sha256
    settings = IndexSettings(
        field_weights={"title": 3.0, "body": 1.0, "symbols": 2.0}, scoring="bm25f"
    )
    kb = KnowledgeBase.from_documents(documents, settings)
    hits = kb.search("verify_signature", k=3)
    top = kb.get(hits[0].id)
    assert top is not None
    assert "verify_signature" in top.metadata["symbols"]
    assert hits[0].breakdown["symbols"] > 0
    retries = kb.search("webhook retries disabled endpoint", k=1)[0]
    assert retries.id.startswith("api/webhooks.md#")
    entry = kb.get(retries.id)
    assert entry is not None
    assert entry.title.startswith("Webhooks")
    assert RetrievalConfig(field_weights={"symbols": 2.0}).field_weights["symbols"] == 2.0
