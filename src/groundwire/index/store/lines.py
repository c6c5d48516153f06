"""Entries' snapshot lines and content digests, encoded in bulk.

A save writes every entry twice over in JSON: its line in ``entries.jsonl``
(``codecs.encode_entry``) and the SHA-256 of its canonical content record
(``ingest.validate.entry_digest``), from which the source manifest hash is made. One
``json`` call per entry and record costs ~20 µs (building the record dict, the
encoder's setup, the metadata walk): at a million entries that was 43 of a full
save's 46 s. Here each string field is escaped once, column by column, by the same C
function the ``json`` encoder calls for strings, and both texts are formatted from the
escaped columns: the same bytes, a few µs per entry.

The fast path takes what validated entries hold (strings, tuples of strings, a parent
that is a string or None); metadata that is not empty is encoded per entry by the
reference code's own helpers. Anything else (a field of another type, a lone
surrogate, metadata nested too deep) sends the whole batch to the reference functions,
which give the same bytes or raise their own errors. ``tests/index/test_entry_lines.py``
checks the bytes against them on generated entries.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, pairwise, repeat
from json.encoder import encode_basestring
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.config import MAX_SNAPSHOT_JSON_DEPTH
from groundwire.index.store.codecs import _encode_value, check_json_depth, encode_entry
from groundwire.ingest.validate import entry_digest, stable_metadata
from groundwire.model import KnowledgeEntry

__all__ = ["encoded_entries", "encoded_lines", "entry_digests"]

#: Entries encoded per batch: bounds the escaped columns held at once (~4 MiB of text).
_BATCH = 8192
_ESCAPE: Callable[[str], str] = encode_basestring  # json's C escaper (ensure_ascii=False)
_STRINGS = ("id", "title", "summary", "domain", "body", "kind", "status", "version")
_LISTS = ("integrations", "aliases", "keywords", "related")
_COLUMNS = attrgetter(*_STRINGS, *_LISTS, "parent", "source_id", "metadata")
_MAPPINGS = (dict, MappingProxyType)
_NEWLINE = 10
Column = str | list[str]  # one value for the whole batch, or one per row
# Column numbers in _COLUMNS order, by field name.
_AT = {name: at for at, name in enumerate((*_STRINGS, *_LISTS, "parent", "source_id", "metadata"))}
# encode_entry's record: compact, fields in this order (see codecs.encode_entry).
_LINE_ORDER = (*_STRINGS, *_LISTS, "parent", "source_id", "metadata")
# content_record's: json.dumps' separators (", " and ": "), keys sorted.
_CONTENT_ORDER = tuple(sorted(_LINE_ORDER))
_LINE_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_CONTENT_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=repr).encode


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic collector paused: a batch makes ~20 acyclic objects per entry, and each
    collection would walk every live entry of a large knowledge base."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _UnusualError(Exception):
    """A batch the fast path does not take: the reference functions encode it."""


def _list(values: Any, separator: str) -> str:
    if type(values) is not tuple and type(values) is not list:
        raise _UnusualError
    return "[" + separator.join(map(_ESCAPE, values)) + "]" if values else "[]"


def _lists(values: Sequence[Any]) -> tuple[Column, Column]:
    """One list field's compact and spaced JSON."""
    if not any(values):  # the common case: every one empty
        if not set(map(type, values)) <= {tuple, list}:
            raise _UnusualError
        return "[]", "[]"
    return [_list(v, ",") for v in values], [_list(v, ", ") for v in values]


def _metadata(metadata: Any, lines: bool, content: bool) -> tuple[str, str]:
    """Non-empty metadata as encode_entry and content_record write it (their helpers)."""
    line = _LINE_JSON(_encode_value(dict(metadata), "metadata")) if lines else ""
    if lines:  # the line nests one level more; the reader bounds it (encode_entry checks)
        check_json_depth(line.encode("utf-8"), MAX_SNAPSHOT_JSON_DEPTH - 1, "")
    return line, _CONTENT_JSON(stable_metadata(metadata)) if content else ""


def _template(order: Sequence[str], comma: str, colon: str) -> tuple[list[str], list[int]]:
    """A record's constant pieces (one before each field, one after the last, which ends
    the record with a newline) and the column of each field."""
    pieces = [("{" if at == 0 else comma) + f'"{name}"{colon}' for at, name in enumerate(order)]
    return [*pieces, "}\n"], [_AT[name] for name in order]


_LINE = _template(_LINE_ORDER, ",", ":")
_CONTENT = _template(_CONTENT_ORDER, ", ", ": ")


def _column(values: list[str]) -> Column:
    """``values``, or their one value when every row has it (folded into the pieces)."""
    first = values[0]
    return first if values.count(first) == len(values) else values


def _records(template: tuple[list[str], list[int]], columns: Sequence[Column]) -> bytes:
    """Every row's record, each ended by a newline (JSON text never holds a raw one), as
    UTF-8: the pieces and the rows' values interleaved and joined once; a value the
    whole batch shares joins the pieces around it."""
    pieces, order = template
    count = -1
    parts: list[Any] = []
    text = pieces[0]
    for piece, at in zip(pieces[1:], order, strict=True):
        column = columns[at]
        if isinstance(column, str):
            text += column + piece
            continue
        count = len(column)
        parts += (text, column)
        text = piece
    if count < 0:  # every value shared: every record is the same
        raise _UnusualError
    rows = [repeat(part, count) if isinstance(part, str) else part for part in [*parts, text]]
    return "".join(chain.from_iterable(zip(*rows, strict=True))).encode("utf-8")


def _ends(blob: bytes) -> npt.NDArray[np.int64]:
    """The offset just past each newline of ``blob``."""
    return np.flatnonzero(np.frombuffer(blob, dtype=np.uint8) == _NEWLINE) + 1


def _texts(batch: Sequence[KnowledgeEntry], lines: bool, content: bool) -> tuple[bytes, bytes]:
    """The lines and the content records (each newline-ended) of one batch, as UTF-8."""
    columns: list[Any] = list(zip(*map(_COLUMNS, batch), strict=True))
    escaped: list[Column] = []
    for at in (*range(8), 13):
        values = _column(list(columns[at]))
        escaped.append(_ESCAPE(values) if isinstance(values, str) else list(map(_ESCAPE, values)))
    compact, spaced = zip(*map(_lists, columns[8:12]), strict=True)
    parents = _column(list(columns[12]))
    if parents is None:
        parent: Column = "null"
    else:
        parent = ["null" if p is None else _ESCAPE(p) for p in columns[12]]
    line_md: Column = "{}"
    content_md: Column = "{}"
    if not all(type(m) in _MAPPINGS and not m for m in columns[14]):
        coded = [
            ("{}", "{}") if type(m) in _MAPPINGS and not m else _metadata(m, lines, content)
            for m in columns[14]
        ]
        line_md, content_md = [c[0] for c in coded], [c[1] for c in coded]
    fields = [*escaped[:8], *compact, parent, escaped[8], line_md]
    line_blob = _records(_LINE, fields) if lines else b""
    if not content:
        return line_blob, b""
    fields[8:12] = spaced
    fields[14] = content_md
    return line_blob, _records(_CONTENT, fields)


def _hashed(records: bytes, count: int) -> bytes:
    """The SHA-256 of each newline-ended record (the newline not hashed), joined."""
    ends = _ends(records)
    if ends.shape[0] != count:
        raise _UnusualError
    view, sha256 = memoryview(records), hashlib.sha256
    starts = [0, *ends[:-1].tolist()]
    return b"".join(
        sha256(view[a : b - 1]).digest() for a, b in zip(starts, ends.tolist(), strict=True)
    )


def encoded_entries(
    entries: Sequence[KnowledgeEntry], digests: bool
) -> tuple[list[bytes], npt.NDArray[np.int64], bytes]:
    """Every entry's snapshot line (``encode_entry`` and a newline) in chunks of a batch
    each, the lines' offsets (``len + 1``), and with ``digests`` every ``entry_digest``
    joined (32 bytes each, in order; else ``b""``). Raises what ``encode_entry`` raises."""
    with _gc_paused():
        return _encoded(entries, digests)


def _encoded(
    entries: Sequence[KnowledgeEntry], digests: bool
) -> tuple[list[bytes], npt.NDArray[np.int64], bytes]:
    chunks: list[bytes] = []
    ends: list[npt.NDArray[np.int64]] = [np.zeros(1, dtype=np.int64)]
    hashed: list[bytes] = []
    at = 0
    for start in range(0, len(entries), _BATCH):
        batch = entries[start : start + _BATCH]
        try:
            blob, content = _texts(batch, True, digests)
            batch_ends = _ends(blob)
            if batch_ends.shape[0] != len(batch):
                raise _UnusualError
            hashed.append(_hashed(content, len(batch)) if digests else b"")
        except Exception:  # the reference functions raise what they raise
            if digests:
                hashed.append(b"".join(map(entry_digest, batch)))
            lines = [encode_entry(entry) + b"\n" for entry in batch]
            blob = b"".join(lines)
            batch_ends = np.cumsum(np.fromiter(map(len, lines), np.int64, len(lines)))
        chunks.append(blob)
        ends.append(batch_ends + at)
        at += len(blob)
    return chunks, np.concatenate(ends), b"".join(hashed)


def entry_digests(entries: Sequence[KnowledgeEntry]) -> bytes:
    """Every entry's ``entry_digest``, joined in order (32 bytes each)."""
    out: list[bytes] = []
    with _gc_paused():
        for start in range(0, len(entries), _BATCH):
            batch = entries[start : start + _BATCH]
            try:
                out.append(_hashed(_texts(batch, False, True)[1], len(batch)))
            except Exception:  # the reference function raises what it raises
                out.append(b"".join(map(entry_digest, batch)))
    return b"".join(out)


def encoded_lines(entries: Sequence[KnowledgeEntry]) -> list[bytes]:
    """Every entry's snapshot line (``encode_entry`` and a newline)."""
    chunks, offsets, _ = encoded_entries(entries, False)
    blob = b"".join(chunks)
    bounds = offsets.tolist()
    return [blob[a:b] for a, b in pairwise(bounds)]
