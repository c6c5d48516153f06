"""How a knowledge base maps onto one Milvus collection, and a Filter onto an expression.

**Lexical fields.** Each field with a positive weight (title, aliases, keywords, summary,
body, symbols, and the term-pair field ``bigrams``) is a VARCHAR holding the field's
*groundwire-analyzed* terms joined by spaces, read by Milvus's ``whitespace`` tokenizer
into a BM25 function and a sparse inverted index of its own. Both backends therefore
index exactly the same terms (stemming, stop words, CJK bigrams, possessives), and the
per-field statistics (N, avgdl, df) Milvus keeps are the ones the embedded "fields"
scoring uses; the backend sums ``weight x field score`` client-side. A term pair is one
token ``a|b`` (a term never contains ``|`` or whitespace).

**Scalars.** ``status``; ``domain`` case-folded; ``integrations`` (ARRAY, case-folded);
``tenant`` ("" when shared, ``*`` when the labels are malformed: ``*`` is never a tenant
id, so such a record matches no filter); ``acl`` (ARRAY); ``exact``/``alias`` phrase keys
(ARRAY) for the phrase channel; ``source`` and ``digest`` for incremental sync; the whole
entry as JSON (``record``), whose ``metadata`` the ``where`` constraints read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

from groundwire.access.labels import read_labels
from groundwire.config import (
    MILVUS_MAX_ARRAY,
    MILVUS_MAX_PHRASE_BYTES,
    MILVUS_MAX_VARCHAR,
    AnalyzerConfig,
    IndexSettings,
)
from groundwire.errors import BackendError, QueryError
from groundwire.index.builder import FIELD_TEXT
from groundwire.model import Filter, KnowledgeEntry
from groundwire.text import Analyzer

__all__ = [
    "MALFORMED_TENANT",
    "SCHEMA_VERSION",
    "compile_filter",
    "entry_from_record",
    "entry_row",
    "lexical_fields",
    "pair_tokens",
    "quote",
    "row_digest",
    "settings_from_json",
    "settings_to_json",
]

#: Version of the row layout below; a collection of another version is refused.
SCHEMA_VERSION = 1
#: The tenant stored for a record whose labels do not parse: never a principal's tenant.
MALFORMED_TENANT = "*"
BIGRAMS = "bigrams"
PAIR_SOURCES = ("title", "summary", "body")


def lexical_fields(settings: IndexSettings) -> list[str]:
    """The lexical fields a collection holds: those of positive weight, in settings order."""
    return [name for name, weight in settings.field_weights.items() if weight > 0]


def pair_tokens(terms: Sequence[str]) -> list[str]:
    """Adjacent term pairs as single tokens (``a|b``), in order."""
    return [f"{a}|{b}" for a, b in pairwise(terms)]


def quote(value: str) -> str:
    """``value`` as a Milvus string literal; control characters are refused."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise QueryError(
            f"{value[:40]!r} holds a control character, which a Milvus filter cannot carry; "
            "remove it from the filter value"
        )
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(quote(v) for v in sorted(values)) + "]"


def compile_filter(flt: Filter) -> str:
    """The Milvus boolean expression with the meaning of ``flt`` (see ``access.filters``)."""
    parts = ['status == "active"']
    if flt.blocked_domains:
        parts.append(f"domain not in {_list(flt.blocked_domains)}")
    if flt.integrations is not None:
        scoped = "array_length(integrations) == 0"
        if flt.integrations:
            scoped = f"({scoped} or array_contains_any(integrations, {_list(flt.integrations)}))"
        parts.append(scoped)
    if flt.tenant is None:
        parts.append('tenant == ""')
    else:
        parts.append(f'(tenant == "" or tenant == {quote(flt.tenant)})')
    if flt.labels:
        parts.append(f"(array_length(acl) == 0 or array_contains_any(acl, {_list(flt.labels)}))")
    else:
        parts.append("array_length(acl) == 0")
    for key, values in flt.where:
        path = f"record[{quote('metadata')}][{quote(key)}]"
        parts.append(f"({path} in {_list(values)} or json_contains_any({path}, {_list(values)}))")
    return " and ".join(parts)


def _json_safe(value: Any) -> Any:
    """Metadata as JSON keeps: mappings, lists, strings, numbers, booleans; else its str."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _record(entry: KnowledgeEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "title": entry.title,
        "summary": entry.summary,
        "domain": entry.domain,
        "integrations": list(entry.integrations),
        "body": entry.body,
        "aliases": list(entry.aliases),
        "keywords": list(entry.keywords),
        "related": list(entry.related),
        "parent": entry.parent,
        "kind": entry.kind,
        "status": entry.status,
        "version": entry.version,
        "source_id": entry.source_id,
        "metadata": _json_safe(entry.metadata),
        # JSON has no tuple: top-level metadata tuples (labels) come back as tuples.
        "tuples": sorted(k for k, v in entry.metadata.items() if isinstance(v, tuple)),
    }


def entry_from_record(record: Mapping[str, Any]) -> KnowledgeEntry:
    """The entry a row's ``record`` JSON holds."""
    tuples = set(record.get("tuples", ()))
    return KnowledgeEntry(
        id=record["id"],
        title=record["title"],
        summary=record["summary"],
        domain=record["domain"],
        integrations=tuple(record["integrations"]),
        body=record["body"],
        aliases=tuple(record["aliases"]),
        keywords=tuple(record["keywords"]),
        related=tuple(record["related"]),
        parent=record["parent"],
        kind=record["kind"],
        status=record["status"],
        version=record["version"],
        source_id=record["source_id"],
        metadata={
            key: tuple(value) if key in tuples and isinstance(value, list) else value
            for key, value in record["metadata"].items()
        },
    )


def _bounded_text(entry_id: str, name: str, text: str) -> str:
    if len(text.encode()) > MILVUS_MAX_VARCHAR:
        raise BackendError(
            f"entry {entry_id!r}: its {name} is {len(text.encode()):,} bytes once analyzed, more "
            f"than a Milvus VARCHAR holds ({MILVUS_MAX_VARCHAR:,}); split it into smaller "
            "documents (chunk it) before exporting"
        )
    return text


def _bounded_array(entry_id: str, name: str, values: Sequence[str]) -> list[str]:
    if len(values) > MILVUS_MAX_ARRAY:
        raise BackendError(
            f"entry {entry_id!r} has {len(values)} {name}, more than the collection's "
            f"{MILVUS_MAX_ARRAY}; reduce them"
        )
    return list(values)


def entry_row(
    entry: KnowledgeEntry,
    analyzer: Analyzer,
    fields: Sequence[str],
    exact_keys: Sequence[str],
    alias_keys: Sequence[str],
    vector: Sequence[float] | None,
) -> dict[str, Any]:
    """The Milvus row of one entry (see the module docstring), with its ``digest``."""
    terms = {name: analyzer.tokens(FIELD_TEXT[name](entry)) for name in FIELD_TEXT}
    row: dict[str, Any] = {"id": entry.id}
    for name in fields:
        if name == BIGRAMS:
            pairs = [
                p for source in PAIR_SOURCES if source in fields for p in pair_tokens(terms[source])
            ]
            text = " ".join(pairs)
        else:
            text = " ".join(terms[name])
        row[f"t_{name}"] = _bounded_text(entry.id, name, text)
    labels = read_labels(entry.metadata)
    tenant = MALFORMED_TENANT if labels is None else (labels.tenant or "")
    acl = sorted(labels.acl) if labels is not None else [MALFORMED_TENANT]
    record = _record(entry)
    encoded = json.dumps(record, ensure_ascii=False, sort_keys=True)
    _bounded_text(entry.id, "record", encoded)
    row.update(
        status=entry.status,
        domain=entry.domain.casefold(),
        integrations=_bounded_array(
            entry.id, "integrations", sorted({i.casefold() for i in entry.integrations})
        ),
        tenant=tenant,
        acl=_bounded_array(entry.id, "ACL labels", acl),
        exact=_bounded_array(entry.id, "exact phrase keys", _phrases(exact_keys)),
        alias=_bounded_array(entry.id, "alias phrase keys", _phrases(alias_keys)),
        source=entry.source_id or str(entry.metadata.get("source_id", "")),
        record=record,
    )
    if vector is not None:
        row["dense"] = [float(x) for x in vector]
    row["digest"] = _digest(encoded, exact_keys, alias_keys, vector)
    return row


def row_digest(
    entry: KnowledgeEntry,
    exact_keys: Sequence[str],
    alias_keys: Sequence[str],
    vector: Sequence[float] | None,
) -> str:
    """The ``digest`` :func:`entry_row` gives this entry, without analyzing its text.

    The analyzed fields are a function of the record and the index settings, which a
    collection holds one of (a sync refuses other settings): the record, the phrase keys
    and the vector decide the row. A sync compares these digests first and analyzes only
    the entries whose digest changed.
    """
    encoded = json.dumps(_record(entry), ensure_ascii=False, sort_keys=True)
    return _digest(encoded, exact_keys, alias_keys, vector)


def _digest(
    encoded: str,
    exact_keys: Sequence[str],
    alias_keys: Sequence[str],
    vector: Sequence[float] | None,
) -> str:
    digest = hashlib.sha256(encoded.encode())
    digest.update(json.dumps([sorted(set(exact_keys)), sorted(set(alias_keys))]).encode())
    if vector is not None:
        digest.update(json.dumps([float(x) for x in vector]).encode())
    return digest.hexdigest()


def _phrases(keys: Sequence[str]) -> list[str]:
    return sorted(k for k in set(keys) if len(k.encode()) <= MILVUS_MAX_PHRASE_BYTES)


def settings_to_json(settings: IndexSettings) -> dict[str, Any]:
    """Index settings as JSON (stored with the collection, read back to analyze queries)."""
    analyzer = settings.analyzer
    stop = analyzer.stopwords
    return {
        "field_weights": dict(settings.field_weights),
        "k1": float(settings.k1),
        "b": float(settings.b),
        "scoring": settings.scoring,
        "analyzer": {
            "language": analyzer.language,
            "stem": analyzer.stem,
            "stopwords": sorted(stop) if isinstance(stop, frozenset) else stop,
            "fold_diacritics": analyzer.fold_diacritics,
            "cjk_bigrams": analyzer.cjk_bigrams,
            "strip_possessives": analyzer.strip_possessives,
            "join_hyphenated": analyzer.join_hyphenated,
            "keep_numbers": analyzer.keep_numbers,
        },
    }


def settings_from_json(data: Mapping[str, Any]) -> IndexSettings:
    """The inverse of :func:`settings_to_json`."""
    analyzer = dict(data["analyzer"])
    if isinstance(analyzer["stopwords"], list):
        analyzer["stopwords"] = frozenset(analyzer["stopwords"])
    return IndexSettings(
        field_weights=dict(data["field_weights"]),
        k1=float(data["k1"]),
        b=float(data["b"]),
        scoring=str(data["scoring"]),
        analyzer=AnalyzerConfig(**analyzer),
    )
