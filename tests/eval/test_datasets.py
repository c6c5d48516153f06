"""Evaluation data: BEIR folders (plain and gzipped), qrels layouts, knowledge bases, errors."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from groundwire import Document, SourceError
from groundwire.eval import load_dataset
from groundwire.eval.datasets import read_qrels

ROOT = Path(__file__).resolve().parents[2]
HANDBOOK = ROOT / "examples" / "handbook"

CORPUS = [
    {"_id": "d1", "title": "Solar power", "text": "Panels turn sunlight into power."},
    {"_id": "d2", "title": "", "text": "Wind turbines spin."},
    {"_id": 3, "title": None, "text": "Numeric ids are read as strings."},
]
QUERIES = [
    {"_id": "q1", "text": "solar panels"},
    {"_id": "q2", "text": "wind"},
    {"_id": "q3", "text": "not judged at all"},
    {"_id": "q4", "text": "only non-relevant judgments"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\nq2\td2\t1\nq4\td1\t0\nq9\td1\t1\n"


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def write_beir(
    root: Path, *, gz: bool = False, qrels: str = QRELS, split: str = "test", corpus: str = ""
) -> Path:
    """A small BEIR folder: corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv."""
    (root / "qrels").mkdir(parents=True)
    text = corpus or _jsonl(CORPUS)
    if gz:
        with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        (root / "corpus.jsonl").write_text(text, encoding="utf-8")
    (root / "queries.jsonl").write_text(_jsonl(QUERIES), encoding="utf-8")
    (root / "qrels" / f"{split}.tsv").write_text(qrels, encoding="utf-8")
    return root


# -- BEIR ------------------------------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_beir_folder_is_read_plain_or_gzipped(tmp_path: Path, gz: bool) -> None:
    data = load_dataset(write_beir(tmp_path / "tiny", gz=gz))
    assert data.name == "tiny"
    assert data.kind == "beir"
    assert data.sources == ()
    assert data.documents == (
        Document("d1", "Solar power", "Panels turn sunlight into power."),
        Document("d2", "", "Wind turbines spin."),
        Document("3", "", "Numeric ids are read as strings."),
    )
    assert data.size == 3
    assert data.qrels_path == tmp_path / "tiny" / "qrels" / "test.tsv"
    assert data.queries_path == tmp_path / "tiny" / "queries.jsonl"


def test_only_queries_with_a_relevant_judgment_are_kept(tmp_path: Path) -> None:
    data = load_dataset(write_beir(tmp_path / "tiny"))
    # q3 has no judgment, q4 only grade 0, q9 is judged but has no query text.
    assert data.queries == {"q1": "solar panels", "q2": "wind"}
    assert data.qrels == {"q1": {"d1": 2, "d2": 0}, "q2": {"d2": 1}}


def test_split_picks_the_qrels_file(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "tiny", split="dev", qrels="q2\td2\t1\n")
    assert load_dataset(root, split="dev").qrels == {"q2": {"d2": 1}}
    with pytest.raises(SourceError, match=r"no qrels/test\.tsv; this dataset has splits dev"):
        load_dataset(root)


def test_explicit_queries_and_qrels_override(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "tiny")
    queries = tmp_path / "mine.jsonl"
    queries.write_text(_jsonl([{"_id": "x", "text": "turbines"}]), encoding="utf-8")
    qrels = tmp_path / "mine.tsv"
    qrels.write_text("x\td2\t1\n", encoding="utf-8")
    data = load_dataset(root, queries=queries, qrels=qrels)
    assert data.queries == {"x": "turbines"}
    assert data.qrels == {"x": {"d2": 1}}


# -- qrels layouts ---------------------------------------------------------------------------
def test_qrels_with_and_without_header_and_spaces(tmp_path: Path) -> None:
    path = tmp_path / "qrels.tsv"
    for text in (
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t2\n",
        "\nq1\td1\t1\n\nq1 d2 2.0\n",  # no header, blank lines, space separated, 2.0
    ):
        path.write_text(text, encoding="utf-8")
        assert read_qrels(path) == {"q1": {"d1": 1, "d2": 2}}


def test_trec_four_column_qrels(tmp_path: Path) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text("101 0 doc-a 1\n101 0 doc-b 0\n102\tQ0\tdoc-c\t2\n", encoding="utf-8")
    assert read_qrels(path) == {"101": {"doc-a": 1, "doc-b": 0}, "102": {"doc-c": 2}}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("q1\td1\t1\nq2\td2\n", 2, "expected 'query-id<TAB>corpus-id<TAB>score'"),
        ("q1\td1\t1\nq1\td2\tyes\n", 2, "score 'yes' is not a number"),
        ("q1\td1\t0.5\n", 1, "score '0.5' is not a whole number"),
        ("header\tcorpus\tscore\n", 1, "score 'score' is not a number"),
        ("q1\td1\t1\tx\ty\n", 1, "expected"),
    ],
)
def test_malformed_qrels_line_names_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError) as caught:
        read_qrels(path)
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert message in str(caught.value)


# -- malformed corpus and queries ------------------------------------------------------------
@pytest.mark.parametrize(
    ("corpus", "line", "message"),
    [
        ('{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', 2, "invalid JSON"),
        ('{"_id": "a", "text": "x"}\n\n["not", "an", "object"]\n', 3, "expected a JSON object"),
        ('{"_id": "a"}\n', 1, "'text' must be a string, got missing"),
        ('{"_id": ["a"], "text": "x"}\n', 1, "'_id' must be a string, got a list"),
        ('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', 2, "duplicate document id"),
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_malformed_corpus_line_names_file_and_line(
    tmp_path: Path, corpus: str, line: int, message: str, gz: bool
) -> None:
    root = write_beir(tmp_path / "bad", corpus=corpus, gz=gz)
    name = "corpus.jsonl.gz" if gz else "corpus.jsonl"
    with pytest.raises(SourceError) as caught:
        load_dataset(root)
    assert str(caught.value).startswith(f"{root / name}:{line}: ")
    assert message in str(caught.value)


def test_malformed_queries_line_names_file_and_line(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "bad")
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n{"_id": "q2"}\n')
    with pytest.raises(SourceError, match=r"queries\.jsonl:2: 'text' must be a string"):
        load_dataset(root)


def test_a_truncated_gzip_corpus_is_a_clear_error(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "bad", gz=True)
    packed = (root / "corpus.jsonl.gz").read_bytes()
    (root / "corpus.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(SourceError, match="not a complete gzip file"):
        load_dataset(root)


def test_an_empty_corpus_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="holds no documents"):
        load_dataset(write_beir(tmp_path / "empty", corpus="\n"))


# -- missing files ---------------------------------------------------------------------------
def test_missing_dataset_folder(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file or folder"):
        load_dataset(tmp_path / "nope")


def test_folder_that_is_neither_beir_nor_a_knowledge_base(tmp_path: Path) -> None:
    (tmp_path / "random").mkdir()
    with pytest.raises(SourceError, match=r"neither a BEIR dataset .* nor a knowledge base"):
        load_dataset(tmp_path / "random")


def test_missing_queries_and_qrels(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "tiny")
    (root / "queries.jsonl").unlink()
    with pytest.raises(SourceError, match=r"no queries\.jsonl in .*; pass --queries FILE"):
        load_dataset(root)
    root = write_beir(tmp_path / "tiny2")
    shutil.rmtree(root / "qrels")
    with pytest.raises(SourceError, match=r"no qrels found .*; pass --qrels FILE"):
        load_dataset(root)


def test_missing_explicit_files_name_the_option(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "tiny")
    with pytest.raises(SourceError, match=r"nope\.jsonl: no such file; check the --queries path"):
        load_dataset(root, queries=tmp_path / "nope.jsonl")
    with pytest.raises(SourceError, match=r"nope\.tsv: no such file; check the --qrels path"):
        load_dataset(root, qrels=tmp_path / "nope.tsv")


def test_no_judged_query_in_common_is_an_error(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "tiny", qrels="zz\td1\t1\n")
    with pytest.raises(SourceError, match="no query with a relevant judgment"):
        load_dataset(root)


# -- knowledge bases -------------------------------------------------------------------------
def test_knowledge_base_finds_its_sibling_eval_folder() -> None:
    data = load_dataset(HANDBOOK)
    assert data.kind == "kb"
    assert data.documents == ()
    assert data.name == "handbook"
    assert data.size == 80
    assert data.queries_path == HANDBOOK.parent / "handbook-eval" / "queries.jsonl"
    assert data.qrels_path == HANDBOOK.parent / "handbook-eval" / "qrels.tsv"
    assert len(data.queries) == 40
    assert data.qrels["q1"] == {"security.api-key-rotation": 2, "security.api-keys": 1}


def _small_kb(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "source.yaml").write_text('id: t\nversion: "1"\n', encoding="utf-8")
    (root / "a.md").write_text(
        "---\nid: a.one\ntitle: Solar\nsummary: Sun.\ndomain: a\nintegrations: []\n---\nBody\n",
        encoding="utf-8",
    )
    return root


def test_knowledge_base_with_queries_and_qrels_inside(tmp_path: Path) -> None:
    root = _small_kb(tmp_path / "kb")
    (root / "queries.jsonl").write_text(_jsonl([{"_id": "q", "text": "solar"}]))
    (root / "qrels.tsv").write_text("q\ta.one\t1\n")
    data = load_dataset(root)
    assert data.kind == "kb"
    assert data.qrels == {"q": {"a.one": 1}}


def test_knowledge_base_source_file_uses_its_stem_eval_folder(tmp_path: Path) -> None:
    source = {
        "id": "t",
        "version": "1",
        "entries": [
            {"id": "a.one", "title": "Solar", "summary": "Sun.", "domain": "a", "integrations": []}
        ],
    }
    (tmp_path / "kb.json").write_text(json.dumps(source), encoding="utf-8")
    (tmp_path / "kb-eval").mkdir()
    (tmp_path / "kb-eval" / "queries.jsonl").write_text(_jsonl([{"_id": "q", "text": "sun"}]))
    (tmp_path / "kb-eval" / "qrels.tsv").write_text("q\ta.one\t1\n")
    data = load_dataset(tmp_path / "kb.json")
    assert data.name == "kb"
    assert data.kind == "kb"
    assert data.size == 1


def test_knowledge_base_without_qrels_says_where_it_looked(tmp_path: Path) -> None:
    root = _small_kb(tmp_path / "kb")
    (root / "queries.jsonl").write_text(_jsonl([{"_id": "q", "text": "solar"}]))
    with pytest.raises(SourceError) as caught:
        load_dataset(root)
    message = str(caught.value)
    assert "no qrels found" in message
    assert str(tmp_path / "kb-eval") in message
    assert "--qrels FILE" in message


def test_a_broken_entry_is_reported_before_missing_queries(tmp_path: Path) -> None:
    root = _small_kb(tmp_path / "kb")
    (root / "broken.md").write_text("---\nid: x.y\ntitle: [unclosed\n---\nbody\n")
    with pytest.raises(SourceError, match=r"broken\.md.*invalid YAML"):
        load_dataset(root)
