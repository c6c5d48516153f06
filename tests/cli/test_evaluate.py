"""``eval``."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import (
    HANDBOOK,
    one_error_line,
    run,
    run_json,
)

# -- eval -----------------------------------------------------------------------------------
EVAL_KEYS = {
    "ndcg@10",
    "recall@100",
    "mrr@10",
    "map@100",
    "queries",
    "documents",
    "index_seconds",
    "queries_per_second",
}
EVAL_ROWS = ("nDCG@10", "recall@100", "MRR@10", "MAP@100", "queries", "documents")
RATIO_KEYS = {"ndcg@10", "recall@100", "mrr@10", "map@100", "queries_per_second"}


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.fixture
def tiny_beir(tmp_path: Path) -> str:
    """Six documents, three judged queries: two found at rank 1, one never found."""
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "solar", "title": "Solar panels", "text": "Photovoltaic cells on roofs."},
        {"_id": "wind", "title": "Wind turbines", "text": "Blades spin a generator."},
        {"_id": "hydro", "title": "Hydroelectric dams", "text": "Water drives turbines."},
        {"_id": "coal", "title": "Coal plants", "text": "Burning coal boils water."},
        {"_id": "tide", "title": "Tidal energy", "text": "The moon moves the sea."},
        {"_id": "geo", "title": "Geothermal heat", "text": "Heat from deep rock."},
    ]
    queries = [
        {"_id": "q1", "text": "photovoltaic roofs"},
        {"_id": "q2", "text": "geothermal rock"},
        {"_id": "q3", "text": "nuclear fission"},
        {"_id": "q4", "text": "unjudged"},
    ]
    (root / "corpus.jsonl").write_text(_jsonl(corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text(_jsonl(queries), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tsolar\t1\nq2\tgeo\t2\nq3\tcoal\t1\n", encoding="utf-8"
    )
    return str(root)


def test_eval_json_has_exactly_the_report_keys(tiny_beir: str) -> None:
    data = run_json("eval", tiny_beir)
    assert set(data) == EVAL_KEYS
    # q1 and q2 find their one relevant document first; q3 matches nothing (scores 0).
    # Every metric: (1 + 1 + 0) / 3. q4 has no judgment and is not run.
    for name in ("ndcg@10", "recall@100", "mrr@10", "map@100"):
        assert data[name] == pytest.approx(2 / 3, abs=1e-6)
    assert data["queries"] == 3
    assert data["documents"] == 6
    assert data["index_seconds"] >= 0
    assert data["queries_per_second"] > 0


def test_eval_json_on_the_handbook_finds_its_eval_folder() -> None:
    data = run_json("eval", HANDBOOK)
    assert set(data) == EVAL_KEYS
    assert data["queries"] == 40
    assert data["documents"] == 80
    assert data["recall@100"] == 1.0
    assert 0.8 < data["ndcg@10"] <= 1.0


def test_eval_readable_table(tiny_beir: str) -> None:
    result = run("eval", tiny_beir)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "tiny (BEIR dataset; judgments:" in out
    for label in EVAL_ROWS:
        assert re.search(rf"{re.escape(label)}\s+\S", out), label
    assert re.search(r"nDCG@10\s+0\.6667", out)
    assert re.search(r"documents\s+6", out)
    assert "bm25s" not in out
    assert result.stderr == ""  # no progress bar without a terminal


def test_eval_explicit_queries_and_qrels(tiny_beir: str, tmp_path: Path) -> None:
    qrels = tmp_path / "only-q1.tsv"
    qrels.write_text("q1\tsolar\t1\n", encoding="utf-8")
    data = run_json("eval", tiny_beir, "--qrels", str(qrels))
    assert data["queries"] == 1
    assert data["ndcg@10"] == 1.0
    queries = tmp_path / "q.jsonl"
    queries.write_text(_jsonl([{"_id": "q1", "text": "wind turbines"}]), encoding="utf-8")
    data = run_json("eval", tiny_beir, "--qrels", str(qrels), "--queries", str(queries))
    assert data["ndcg@10"] == 0.0


def test_eval_compare_json_shape(tiny_beir: str) -> None:
    pytest.importorskip("bm25s", reason="bm25s is in the 'bench' extra")
    data = run_json("eval", tiny_beir, "--compare")
    assert set(data) == {"groundwire", "bm25s", "ratios"}
    assert set(data["groundwire"]) == EVAL_KEYS
    assert set(data["bm25s"]) == EVAL_KEYS
    assert set(data["ratios"]) == RATIO_KEYS
    assert data["bm25s"]["queries"] == 3
    assert data["bm25s"]["documents"] == 6
    assert data["bm25s"]["ndcg@10"] == pytest.approx(2 / 3, abs=1e-6)
    assert data["ratios"]["ndcg@10"] == pytest.approx(1.0)
    ours, theirs = data["groundwire"], data["bm25s"]
    assert data["ratios"]["queries_per_second"] == pytest.approx(
        ours["queries_per_second"] / theirs["queries_per_second"], rel=1e-3
    )


def test_eval_compare_readable_shows_both_systems_and_ratios() -> None:
    pytest.importorskip("bm25s", reason="bm25s is in the 'bench' extra")
    result = run("eval", HANDBOOK, "--compare")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"groundwire\s+bm25s\s+groundwire / bm25s", out)
    assert re.search(r"nDCG@10\s+0\.\d{4}\s+0\.\d{4}\s+\d\.\d{3}x", out)
    assert re.search(r"queries/second\s+[\d,]+\s+[\d,]+\s+\d+\.\d{3}x", out)
    # bm25s indexes only the active entries (the ones groundwire can return).
    assert re.search(r"documents\s+80\s+72\s*$", out, flags=re.MULTILINE)


def test_eval_compare_gives_bm25s_groundwires_stop_words(
    tiny_beir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bm25s = pytest.importorskip("bm25s", reason="bm25s is in the 'bench' extra")
    from groundwire.config import document_settings
    from groundwire.text.stopwords import resolve_stopwords

    seen: dict[str, Any] = {}
    original = bm25s.tokenization.Tokenizer

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(bm25s.tokenization, "Tokenizer", spy)
    run_json("eval", tiny_beir, "--compare")
    analyzer = document_settings().analyzer
    assert set(seen["stopwords"]) == resolve_stopwords(analyzer.stopwords, analyzer.language)
    assert seen["stemmer"].stemWord("running") == "run"


def test_eval_compare_without_bm25s_names_the_extra(
    tiny_beir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "bm25s", None)  # makes `import bm25s` fail
    result = run("eval", tiny_beir, "--compare", "--json")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "groundwire eval --compare needs the 'bm25s' package" in line
    assert "pip install 'groundwire[bench]'" in line
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("no-qrels", "no qrels found"),
        ("bad-qrels", "qrels/test.tsv:3: score 'high' is not a number"),
        ("bad-corpus", "corpus.jsonl:2: invalid JSON"),
        ("no-match", "no query with a relevant judgment"),
    ],
)
def test_eval_data_errors_are_one_line_exit_1(tiny_beir: str, change: str, message: str) -> None:
    root = Path(tiny_beir)
    if change == "no-qrels":
        shutil.rmtree(root / "qrels")
    elif change == "bad-qrels":
        (root / "qrels" / "test.tsv").write_text(
            "query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\tb\thigh\n"
        )
    elif change == "bad-corpus":
        (root / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{oops\n')
    else:
        (root / "qrels" / "test.tsv").write_text("zz\tsolar\t1\n")
    result = run("eval", tiny_beir, "--json")
    assert result.exit_code == 1
    assert message in one_error_line(result)
    assert result.stdout == ""


def test_eval_unknown_split_lists_the_splits(tiny_beir: str) -> None:
    result = run("eval", tiny_beir, "--split", "dev")
    assert result.exit_code == 1
    assert "no qrels/dev.tsv; this dataset has splits test" in one_error_line(result)


def test_eval_missing_explicit_file(tiny_beir: str, tmp_path: Path) -> None:
    result = run("eval", tiny_beir, "--queries", str(tmp_path / "none.jsonl"))
    assert result.exit_code == 1
    assert "none.jsonl: no such file; check the --queries path" in one_error_line(result)


def test_eval_of_an_invalid_kb_names_the_first_error(broken_kb: str) -> None:
    eval_dir = Path(broken_kb).parent / "broken-eval"
    eval_dir.mkdir()
    (eval_dir / "queries.jsonl").write_text(_jsonl([{"_id": "q", "text": "one"}]))
    (eval_dir / "qrels.tsv").write_text("q\ta.one\t1\n")
    result = run("eval", broken_kb)
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "integrations-missing" in line
    assert "groundwire validate" in line
    assert result.stdout == ""


def test_eval_help_names_the_measures() -> None:
    text = " ".join(run("eval", "--help").stdout.replace("│", " ").split())
    for part in ("nDCG@10", "recall@100", "MRR@10", "MAP@100", "--compare", "bm25s", "--split"):
        assert part in text
    assert "pip install 'groundwire[bench]'" in text
