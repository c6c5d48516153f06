"""Evaluation data: BEIR folders and knowledge bases with queries and qrels.

BEIR layout: ``corpus.jsonl`` or ``corpus.jsonl.gz`` (``_id``, ``title``, ``text``),
``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id``,
``corpus-id``, ``score``; a header line is optional, TREC's four columns
``qid iteration docid grade`` are accepted too). A knowledge base (a folder with
``source.yaml``, or a ``.json``/``.yaml`` source file) is evaluated with a
``queries.jsonl`` and a ``qrels.tsv`` found beside its entries, in a sibling
``<name>-eval`` folder, or given explicitly.

Only queries with at least one relevant judgment (grade > 0) are kept: a query
nothing is relevant to cannot be scored (trec_eval skips it too).
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from groundwire.errors import SourceError
from groundwire.ingest import load_sources
from groundwire.ingest.loaders import open_regular
from groundwire.ingest.parsing import parse_json
from groundwire.ingest.sources import SOURCE_MANIFEST
from groundwire.model import Document, KnowledgeSource

__all__ = ["EvalDataset", "load_dataset", "read_corpus", "read_qrels", "read_queries"]

#: First-column names that mark a qrels header line.
_QRELS_HEADERS = frozenset({"query-id", "query_id", "qid", "query"})
_KB_SUFFIXES = frozenset({".json", ".yaml", ".yml"})


@dataclass(frozen=True, slots=True)
class EvalDataset:
    """Documents (BEIR) or knowledge sources (a knowledge base), with the judged queries.

    ``queries`` maps query id to text; ``qrels`` maps query id to ``{doc id: grade}``.
    Exactly one of ``documents`` and ``sources`` is non-empty.
    """

    name: str
    documents: tuple[Document, ...]
    sources: tuple[KnowledgeSource, ...]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    queries_path: Path | None = None
    qrels_path: Path | None = None

    @property
    def kind(self) -> str:
        """``"beir"`` for a document corpus, ``"kb"`` for a knowledge base."""
        return "kb" if self.sources else "beir"

    @property
    def size(self) -> int:
        """Number of documents (or authored entries) evaluated against."""
        return len(self.documents) or sum(len(s.entries) for s in self.sources)


def _open(path: Path) -> IO[str]:
    """A dataset file as text: a regular file only (a FIFO is refused, never waited on)."""
    handle, _ = open_regular(path)
    if path.suffix == ".gz":
        return gzip.open(handle, "rt", encoding="utf-8")
    return io.TextIOWrapper(handle, encoding="utf-8")


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """Non-blank lines of a (possibly gzipped) JSON Lines file, as (line number, object)."""
    number = 0
    try:
        with _open(path) as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                record = parse_json(
                    line.rstrip("\r\n"),
                    str(path),
                    line_offset=number - 1,
                    fix="write one JSON object per line",
                )
                if not isinstance(record, dict):
                    raise SourceError(f"{path}:{number}: expected a JSON object per line")
                yield number, record
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"{path}:{number + 1}: not valid UTF-8 (byte {exc.start}); save it as UTF-8"
        ) from exc
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise SourceError(f"{path}: not a complete gzip file ({exc}); download it again") from exc
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _field(path: Path, number: int, record: dict[str, object], name: str) -> str:
    value = record.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise SourceError(f"{path}:{number}: '{name}' must be a string, got {got}")
    return value


def read_corpus(path: Path) -> tuple[Document, ...]:
    """Read a BEIR corpus file (``.jsonl`` or ``.jsonl.gz``); ``title`` is optional."""
    documents = []
    seen: set[str] = set()
    for number, record in _jsonl(path):
        doc_id = _field(path, number, record, "_id")
        if doc_id in seen:
            raise SourceError(f"{path}:{number}: duplicate document id {doc_id!r}")
        seen.add(doc_id)
        title = record.get("title")
        title = title if isinstance(title, str) else "" if title is None else str(title)
        documents.append(Document(doc_id, title, _field(path, number, record, "text")))
    if not documents:
        raise SourceError(f"{path}: the corpus holds no documents")
    return tuple(documents)


def read_queries(path: Path) -> dict[str, str]:
    """Read ``queries.jsonl`` into ``{query id: text}``."""
    return {
        _field(path, number, record, "_id"): _field(path, number, record, "text")
        for number, record in _jsonl(path)
    }


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read a qrels file into ``{query id: {doc id: grade}}``.

    Lines are ``query-id  corpus-id  score`` (tab or space separated) or TREC's
    ``qid iteration docid grade``; an optional header comes first. Grades are integers
    (``2.0`` is read as 2); a repeated pair keeps its last grade.
    """
    qrels: dict[str, dict[str, int]] = {}
    try:
        with _open(path) as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not valid UTF-8 (byte {exc.start}); save it as UTF-8") from exc
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    first = True
    for number, line in enumerate(lines, 1):
        parts = line.split("\t") if "\t" in line else line.split()
        parts = [part.strip() for part in parts]
        if not any(parts):
            continue
        if first and parts[0].lower() in _QRELS_HEADERS:
            first = False
            continue
        first = False
        if len(parts) == 4:  # TREC layout: qid iteration docid grade
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3 or not parts[0] or not parts[1]:
            raise SourceError(
                f"{path}:{number}: expected 'query-id<TAB>corpus-id<TAB>score' "
                f"(or TREC's 'qid 0 docid grade'), got {line.strip()!r}"
            )
        try:
            score = float(parts[2])
        except ValueError as exc:
            raise SourceError(
                f"{path}:{number}: score {parts[2]!r} is not a number; grades are integers "
                "such as 0, 1, 2"
            ) from exc
        if not score.is_integer():
            raise SourceError(
                f"{path}:{number}: score {parts[2]!r} is not a whole number; grades are "
                "integers such as 0, 1, 2"
            )
        qrels.setdefault(parts[0], {})[parts[1]] = int(score)
    return qrels


def _first(*candidates: Path) -> Path | None:
    """The first candidate that exists and is not a folder (reading refuses a FIFO)."""
    return next((path for path in candidates if path.exists() and not path.is_dir()), None)


def _given(path: str | Path, option: str) -> Path:
    given = Path(path)
    if not given.is_file():
        raise SourceError(f"{given}: no such file; check the {option} path")
    return given


def _qrels_path(root: Path, folders: list[Path], split: str) -> Path:
    found = _first(*(folder / "qrels" / f"{split}.tsv" for folder in folders))
    found = found or _first(*(folder / "qrels.tsv" for folder in folders))
    if found is not None:
        return found
    splits = sorted(p.stem for folder in folders for p in (folder / "qrels").glob("*.tsv"))
    if splits:
        raise SourceError(
            f"{root}: no qrels/{split}.tsv; this dataset has splits {', '.join(splits)}: "
            "pass one with --split"
        )
    where = " or ".join(str(folder) for folder in folders)
    raise SourceError(
        f"{root}: no qrels found (qrels/{split}.tsv or qrels.tsv in {where}); pass --qrels FILE"
    )


def load_dataset(
    path: str | Path,
    *,
    split: str = "test",
    queries: str | Path | None = None,
    qrels: str | Path | None = None,
) -> EvalDataset:
    """Load a BEIR folder or a knowledge base with its queries and qrels.

    ``split`` picks ``qrels/<split>.tsv``; ``queries``/``qrels`` override the files
    found. The documents (or sources) are read first, so a broken corpus or entry is
    reported before a missing qrels file. Raises :class:`SourceError` naming the file
    (and line) when something is missing or malformed.
    """
    root = Path(path)
    if not root.exists():
        raise SourceError(
            f"{root}: no such file or folder; pass a BEIR dataset folder (corpus.jsonl, "
            "queries.jsonl, qrels/) or a knowledge base"
        )
    corpus = _first(root / "corpus.jsonl", root / "corpus.jsonl.gz") if root.is_dir() else None
    documents: tuple[Document, ...] = ()
    sources: tuple[KnowledgeSource, ...] = ()
    if corpus is not None:
        documents = read_corpus(corpus)
        folders = [root]
    elif (root.is_dir() and (root / SOURCE_MANIFEST).is_file()) or (
        root.is_file() and root.suffix.lower() in _KB_SUFFIXES
    ):
        sources = tuple(load_sources(root))
        stem = root.name if root.is_dir() else root.stem
        sibling = root.parent / f"{stem}-eval"
        folders = [root, sibling] if root.is_dir() else [sibling]
    else:
        raise SourceError(
            f"{root}: neither a BEIR dataset (corpus.jsonl or corpus.jsonl.gz) nor a "
            f"knowledge base (a folder with {SOURCE_MANIFEST}, or a .json/.yaml source file)"
        )
    if queries is not None:
        queries_path = _given(queries, "--queries")
    else:
        found = _first(*(folder / "queries.jsonl" for folder in folders))
        if found is None:
            where = " or ".join(str(folder) for folder in folders)
            raise SourceError(f"{root}: no queries.jsonl in {where}; pass --queries FILE")
        queries_path = found
    qrels_path = (
        _given(qrels, "--qrels") if qrels is not None else _qrels_path(root, folders, split)
    )
    judged = read_qrels(qrels_path)
    texts = read_queries(queries_path)
    kept = {
        qid: texts[qid]
        for qid, grades in judged.items()
        if qid in texts and any(grade > 0 for grade in grades.values())
    }
    if not kept:
        raise SourceError(
            f"{qrels_path}: no query with a relevant judgment (grade > 0) appears in "
            f"{queries_path}; check that both files use the same query ids"
        )
    name = root.name if root.is_dir() else root.stem
    return EvalDataset(
        name,
        documents,
        sources,
        kept,
        {qid: judged[qid] for qid in kept},
        queries_path,
        qrels_path,
    )
