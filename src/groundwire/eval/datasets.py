"""Evaluation data: BEIR folders and knowledge base folders with queries and qrels.

BEIR layout: ``corpus.jsonl`` or ``corpus.jsonl.gz`` (``_id``, ``title``, ``text``),
``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id``,
``corpus-id``, ``score``; a header line is optional). A knowledge base folder is
evaluated with a ``queries.jsonl`` and a qrels TSV found in the folder, in a sibling
``<folder>-eval`` folder, or given explicitly.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from groundwire.errors import SourceError
from groundwire.ingest import load_sources
from groundwire.ingest.sources import SOURCE_MANIFEST
from groundwire.model import Document, KnowledgeSource

__all__ = ["EvalDataset", "load_dataset"]


@dataclass(frozen=True, slots=True)
class EvalDataset:
    """Documents (BEIR) or knowledge sources (KB), with the judged queries."""

    name: str
    documents: tuple[Document, ...]
    sources: tuple[KnowledgeSource, ...]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def size(self) -> int:
        """Number of documents (or entries) evaluated against."""
        return len(self.documents) or sum(len(s.entries) for s in self.sources)


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    try:
        with _open(path) as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SourceError(f"{path}:{number}: invalid JSON ({exc.msg})") from exc
                if not isinstance(record, dict):
                    raise SourceError(f"{path}:{number}: expected a JSON object per line")
                yield number, record
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _field(path: Path, number: int, record: dict[str, object], name: str) -> str:
    value = record.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise SourceError(f"{path}:{number}: '{name}' must be a string")
    return value


def read_corpus(path: Path) -> tuple[Document, ...]:
    """Read a BEIR corpus file (``.jsonl`` or ``.jsonl.gz``)."""
    documents = []
    seen: set[str] = set()
    for number, record in _jsonl(path):
        doc_id = _field(path, number, record, "_id")
        if doc_id in seen:
            raise SourceError(f"{path}:{number}: duplicate document id {doc_id!r}")
        seen.add(doc_id)
        title = record.get("title") or ""
        documents.append(Document(doc_id, str(title), _field(path, number, record, "text")))
    return tuple(documents)


def read_queries(path: Path) -> dict[str, str]:
    """Read ``queries.jsonl`` into ``{query id: text}``."""
    return {
        _field(path, number, record, "_id"): _field(path, number, record, "text")
        for number, record in _jsonl(path)
    }


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read a qrels TSV (``query-id  corpus-id  score``; header optional)."""
    qrels: dict[str, dict[str, int]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        if number == 1 and parts[0] in ("query-id", "query_id", "qid"):
            continue
        if len(parts) == 4:  # TREC layout: qid iteration docid grade
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3:
            raise SourceError(f"{path}:{number}: expected 'query-id<TAB>corpus-id<TAB>score'")
        try:
            grade = int(float(parts[2]))
        except ValueError as exc:
            raise SourceError(f"{path}:{number}: score {parts[2]!r} is not a number") from exc
        qrels.setdefault(parts[0], {})[parts[1]] = grade
    return qrels


def _first(*candidates: Path) -> Path | None:
    return next((path for path in candidates if path.is_file()), None)


def load_dataset(
    path: str | Path,
    *,
    split: str = "test",
    queries: str | Path | None = None,
    qrels: str | Path | None = None,
) -> EvalDataset:
    """Load a BEIR folder or a knowledge base folder with its queries and qrels.

    Only queries that have judgments are kept (and only judged queries that exist).
    """
    root = Path(path)
    if not root.is_dir():
        raise SourceError(f"{root}: not a folder; pass a BEIR dataset or knowledge base folder")
    sibling = root.parent / f"{root.name}-eval"
    corpus = _first(root / "corpus.jsonl", root / "corpus.jsonl.gz")
    queries_path = (
        Path(queries) if queries else _first(root / "queries.jsonl", sibling / "queries.jsonl")
    )
    qrels_path = (
        Path(qrels)
        if qrels
        else _first(root / "qrels" / f"{split}.tsv", root / "qrels.tsv", sibling / "qrels.tsv")
    )
    if queries_path is None or not queries_path.is_file():
        raise SourceError(f"{root}: no queries.jsonl found; pass --queries FILE")
    if qrels_path is None or not qrels_path.is_file():
        raise SourceError(
            f"{root}: no qrels found (qrels/{split}.tsv or qrels.tsv); pass --qrels FILE"
        )
    judged = read_qrels(qrels_path)
    texts = read_queries(queries_path)
    kept = {qid: texts[qid] for qid in judged if qid in texts}
    if not kept:
        raise SourceError(f"{qrels_path}: no judged query appears in {queries_path}")
    if corpus is not None:
        documents = read_corpus(corpus)
        return EvalDataset(root.name, documents, (), kept, {q: judged[q] for q in kept})
    if (root / SOURCE_MANIFEST).is_file():
        sources = tuple(load_sources(root))
        return EvalDataset(root.name, (), sources, kept, {q: judged[q] for q in kept})
    raise SourceError(
        f"{root}: neither a BEIR dataset (corpus.jsonl[.gz]) nor a knowledge "
        f"base folder ({SOURCE_MANIFEST})"
    )
