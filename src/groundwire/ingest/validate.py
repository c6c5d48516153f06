"""Normalize authored knowledge sources into entries and report every problem.

An entry's access labels, ``tenant`` and ``acl`` (see :mod:`groundwire.access.labels`),
are stored in its ``metadata``, where every store reads them.

Errors block a snapshot; warnings do not. Each issue carries a stable code:

errors:   source-id-missing, source-invalid, entry-invalid, entry-id-missing,
          entry-id-duplicate, title-missing, summary-missing, domain-missing,
          integrations-missing, integrations-invalid, kind-unsupported,
          status-unsupported, field-invalid, field-too-long, field-control-chars,
          too-many-entries, tenant-invalid, acl-invalid
warnings: source-version-missing, field-unknown, alias-empty, alias-duplicate,
          related-missing, related-self, parent-missing, parent-self, tenant-mixed
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from groundwire.access.labels import ACL_KEY, TENANT_KEY, Labels, parse_acl, parse_tenant
from groundwire.config import MAX_ENTRIES, MAX_FIELD_CHARS, MAX_NESTING_DEPTH
from groundwire.errors import SourceError
from groundwire.ingest.parsing import check_nesting
from groundwire.model import (
    ENTRY_KINDS,
    ENTRY_STATUSES,
    KnowledgeEntry,
    KnowledgeSource,
    Severity,
    ValidationIssue,
    issues_have_errors,
)
from groundwire.text import Analyzer

__all__ = [
    "ValidationReport",
    "coerce_source",
    "combine_digests",
    "content_hash",
    "content_record",
    "entry_digest",
    "normalize_and_validate",
    "stable_metadata",
]

#: Keys an authored entry may carry (file front matter, JSON/YAML, dicts).
ENTRY_KEYS = (
    "id",
    "title",
    "summary",
    "body",
    "domain",
    "integrations",
    "aliases",
    "keywords",
    "related",
    "parent",
    "kind",
    "status",
    "metadata",
    "tenant",
    "acl",
)
_LIST_FIELDS = ("aliases", "keywords", "related")
_INTERNAL_KEYS = frozenset({"version", "source_id"})


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """Normalized entries (sorted by id) and every issue found, in source order."""

    entries: tuple[KnowledgeEntry, ...]
    issues: tuple[ValidationIssue, ...]

    @property
    def ok(self) -> bool:
        """True when no issue is an error."""
        return not issues_have_errors(self.issues)

    @property
    def errors(self) -> tuple[ValidationIssue, ...]:
        """The blocking issues."""
        return tuple(i for i in self.issues if i.severity == "error")

    @property
    def warnings(self) -> tuple[ValidationIssue, ...]:
        """The non-blocking issues."""
        return tuple(i for i in self.issues if i.severity == "warning")


# Characters a one-line field may not hold: C0/C1 controls (tab, line breaks, escape...),
# Unicode line/paragraph separators, and bidirectional controls that reorder how text shows.
_UNSAFE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def unsafe_character(text: str) -> str | None:
    """The first character a one-line field may not hold, described, or None."""
    match = _UNSAFE.search(text)
    if match is None:
        return None
    char = match.group()
    name = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab"}.get(char)
    return f"{name or 'the control character'} U+{ord(char):04X} at character {match.start() + 1}"


def _text(value: Any) -> str | None:
    """A scalar as text (YAML turns 2026-01-01 into a date and 1.0 into a float)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | dt.date):
        return str(value)
    return None


def coerce_source(value: KnowledgeSource | Mapping[str, Any]) -> KnowledgeSource:
    """Turn a mapping ``{"id", "version", "entries"}`` into a KnowledgeSource (unchecked)."""
    if isinstance(value, KnowledgeSource):
        return value
    if not isinstance(value, Mapping):
        return KnowledgeSource(id="", version="", entries=(), origin=f"<{type(value).__name__}>")
    entries = value.get("entries", ())
    return KnowledgeSource(
        id=_text(value.get("id")) or "",
        version=_text(value.get("version")) or "",
        entries=tuple(entries) if isinstance(entries, list | tuple) else entries,
        origin=value.get("origin") if isinstance(value.get("origin"), str) else None,
    )


def content_record(entry: KnowledgeEntry) -> bytes:
    """One entry's normalized content as canonical JSON: every field and the metadata."""
    record = {
        "id": entry.id,
        "title": entry.title,
        "summary": entry.summary,
        "body": entry.body,
        "domain": entry.domain,
        "integrations": entry.integrations,
        "aliases": entry.aliases,
        "keywords": entry.keywords,
        "related": entry.related,
        "parent": entry.parent,
        "kind": entry.kind,
        "status": entry.status,
        "version": entry.version,
        "source_id": entry.source_id,
        "metadata": stable_metadata(entry.metadata),
    }
    return json.dumps(record, ensure_ascii=False, sort_keys=True, default=repr).encode()


def stable_metadata(metadata: Mapping[str, Any]) -> Any:
    """Metadata as :func:`content_record` hashes it (see ``_stable``)."""
    return _stable(dict(metadata))


def entry_digest(entry: KnowledgeEntry) -> bytes:
    """SHA-256 (32 bytes) of one entry's :func:`content_record`."""
    return hashlib.sha256(content_record(entry)).digest()


def combine_digests(digests: Iterable[bytes]) -> str:
    """The content hash of entries given their :func:`entry_digest` values in id order."""
    digest = hashlib.sha256()
    for item in digests:
        digest.update(item)
    return digest.hexdigest()


def content_hash(entries: Iterable[KnowledgeEntry]) -> str:
    """Deterministic SHA-256 of normalized entry content (order-independent).

    The hash of every entry's :func:`entry_digest` in id order, so a snapshot that stores
    the per-entry digests recomputes it after an incremental update without re-reading
    unchanged entries.
    """
    return combine_digests(entry_digest(e) for e in sorted(entries, key=lambda e: e.id))


def _stable(value: Any) -> Any:
    """Metadata as json.dumps can hash it deterministically.

    JSON values pass unchanged (so hashes of such metadata never change); mappings
    with keys other than strings become sorted ``[key, value]`` pairs and sets become
    sorted lists, since neither sorts nor prints in a stable order by itself.
    """
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {key: _stable(item) for key, item in value.items()}
        pairs = [[_stable(key), _stable(item)] for key, item in value.items()]
        return {"~pairs": sorted(pairs, key=_sort_key)}
    if isinstance(value, list | tuple):
        return [_stable(item) for item in value]
    if isinstance(value, set | frozenset):
        return {"~set": sorted((_stable(item) for item in value), key=_sort_key)}
    return value


def _sort_key(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)


class _Collector:
    """Accumulates issues with the current source/entry/origin filled in."""

    def __init__(self) -> None:
        self.issues: list[ValidationIssue] = []
        self.source_id: str | None = None
        self.entry_id: str | None = None
        self.origin: str | None = None

    def add(self, severity: Severity, code: str, message: str, field: str | None = None) -> None:
        self.issues.append(
            ValidationIssue(
                severity, code, message, self.source_id, self.entry_id, field, self.origin
            )
        )

    def error(self, code: str, message: str, field: str | None = None) -> None:
        self.add("error", code, message, field)

    def warning(self, code: str, message: str, field: str | None = None) -> None:
        self.add("warning", code, message, field)


def _as_mapping(entry: KnowledgeEntry | Mapping[str, Any]) -> Mapping[str, Any] | None:
    if isinstance(entry, KnowledgeEntry):
        return {
            f.name: getattr(entry, f.name) for f in fields(entry) if f.name not in _INTERNAL_KEYS
        }
    return entry if isinstance(entry, Mapping) else None


def _string_list(value: Any) -> list[str] | None:
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return [item.strip() for item in value]
    return None


def _source_version(source: KnowledgeSource, col: _Collector) -> str:
    version = _text(source.version) if source.version is not None else None
    if version:
        return version
    digest = hashlib.sha256(
        json.dumps([repr(_stable(e)) for e in source.entries], ensure_ascii=False).encode()
    ).hexdigest()[:12]
    col.warning(
        "source-version-missing",
        f"the source has no version, so citations use its content hash {digest!r}; "
        "set 'version' (in source.yaml or the source object) to a release or date",
        "version",
    )
    return digest


def _required_text(raw: Mapping[str, Any], name: str, code: str, col: _Collector) -> str:
    value = _text(raw.get(name))
    if not value:
        col.error(code, f"'{name}' is missing or empty; add a non-empty '{name}' string", name)
        return ""
    return value


def _labels(raw: Mapping[str, Any], metadata: Mapping[str, Any], col: _Collector) -> Labels:
    """The entry's ``tenant`` and ``acl`` labels; syntax errors name the field.

    Authored at the top level of the entry; a record built in Python (a
    ``KnowledgeEntry``) carries them in ``metadata``, where they are checked the same way.
    """
    values: dict[str, Any] = {}
    for key in (TENANT_KEY, ACL_KEY):
        top, inner = raw.get(key), metadata.get(key)
        if top is not None and inner is not None and top != inner:
            col.error(
                "field-invalid",
                f"'{key}' is set both at the top level and in 'metadata', differently; "
                f"keep only the top-level '{key}'",
                key,
            )
        values[key] = top if top is not None else inner
    tenant: str | None = None
    acl: tuple[str, ...] = ()
    try:
        tenant = parse_tenant(values[TENANT_KEY])
    except ValueError as exc:
        col.error("tenant-invalid", str(exc), TENANT_KEY)
    try:
        acl = parse_acl(values[ACL_KEY])
    except ValueError as exc:
        col.error("acl-invalid", str(exc), ACL_KEY)
    return Labels(tenant, acl)


def _entry(
    raw: Mapping[str, Any], source_id: str, version: str, col: _Collector
) -> KnowledgeEntry | None:
    for key in raw:
        if key not in ENTRY_KEYS:
            close = difflib.get_close_matches(str(key), ENTRY_KEYS, n=1)
            hint = (
                f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(ENTRY_KEYS)}"
            )
            note = " (entry versions come from the source)" if key == "version" else ""
            col.warning("field-unknown", f"unknown key '{key}' is ignored{note}; {hint}", str(key))
    errors_before = sum(1 for i in col.issues if i.severity == "error")
    title = _required_text(raw, "title", "title-missing", col)
    summary = _required_text(raw, "summary", "summary-missing", col)
    domain = _required_text(raw, "domain", "domain-missing", col)
    integrations: list[str] = []
    if "integrations" not in raw or raw["integrations"] is None:
        col.error(
            "integrations-missing",
            "'integrations' is required: use [] for an entry that applies everywhere, "
            "or list the integrations it applies to",
            "integrations",
        )
    else:
        parsed = _string_list(raw["integrations"])
        if parsed is None or any(not item for item in parsed):
            col.error(
                "integrations-invalid",
                f"'integrations' must be a list of non-empty strings, got "
                f"{raw['integrations']!r}; write e.g. [slack, github] or []",
                "integrations",
            )
        else:
            integrations = parsed
    body = raw.get("body", "")
    if body is None:
        body = ""
    if not isinstance(body, str):
        col.error("field-invalid", f"'body' must be text, got {type(body).__name__}", "body")
        body = ""
    lists: dict[str, list[str]] = {}
    for name in _LIST_FIELDS:
        value = raw.get(name)
        parsed = [] if value is None else _string_list(value)
        if parsed is None:
            col.error(
                "field-invalid",
                f"'{name}' must be a list of strings, got {value!r}; write e.g. [a, b]",
                name,
            )
            parsed = []
        lists[name] = [item for item in parsed if item or name == "aliases"]
    parent = raw.get("parent")
    if parent is not None and not (isinstance(parent, str) and parent.strip()):
        col.error("field-invalid", f"'parent' must be an entry id string, got {parent!r}", "parent")
        parent = None
    kind = _text(raw.get("kind")) or "text"
    if kind not in ENTRY_KINDS:
        col.error(
            "kind-unsupported",
            f"kind {kind!r} is not supported; use one of: {', '.join(sorted(ENTRY_KINDS))}",
            "kind",
        )
    status = _text(raw.get("status")) or "active"
    if status not in ENTRY_STATUSES:
        col.error(
            "status-unsupported",
            f"status {status!r} is not supported; use one of: {', '.join(sorted(ENTRY_STATUSES))}",
            "status",
        )
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        col.error("field-invalid", f"'metadata' must be a mapping, got {metadata!r}", "metadata")
        metadata = {}
    labels = _labels(raw, metadata, col)
    metadata = {k: v for k, v in metadata.items() if k not in (TENANT_KEY, ACL_KEY)}
    metadata.update(labels.as_metadata())
    for name, text in (("title", title), ("summary", summary), ("body", body)):
        if len(text) > MAX_FIELD_CHARS:
            col.error(
                "field-too-long",
                f"'{name}' has {len(text):,} characters, over the limit of "
                f"{MAX_FIELD_CHARS:,}; split the entry or move the text into documents",
                name,
            )
    single_line: list[tuple[str, str | None]] = [
        ("title", title),
        ("summary", summary),
        ("domain", domain),
        ("parent", parent if isinstance(parent, str) else None),
    ]
    single_line += [("integrations", item) for item in integrations]
    single_line += [(name, item) for name in _LIST_FIELDS for item in lists[name]]
    for name, line in single_line:
        problem = unsafe_character(line or "")
        if problem is not None:
            col.error(
                "field-control-chars",
                f"'{name}' contains {problem}; it must be one line of text without "
                "control characters (put longer text in 'body')",
                name,
            )
            break
    if sum(1 for i in col.issues if i.severity == "error") > errors_before:
        return None
    return KnowledgeEntry(
        id=col.entry_id or "",
        title=title,
        summary=summary,
        domain=domain,
        integrations=tuple(integrations),
        body=body.strip(),
        aliases=tuple(lists["aliases"]),
        keywords=tuple(lists["keywords"]),
        related=tuple(lists["related"]),
        parent=parent.strip() if isinstance(parent, str) else None,
        kind=kind,
        status=status,
        version=version,
        source_id=source_id,
        metadata=dict(metadata),
    )


def normalize_and_validate(
    sources: Sequence[KnowledgeSource | Mapping[str, Any]],
    analyzer: Analyzer | None = None,
) -> ValidationReport:
    """Normalize every entry of ``sources`` and report every issue (see module docstring).

    ``analyzer`` decides how aliases normalize (default: the default analyzer).
    Returns the entries that normalized cleanly; check ``report.ok`` before indexing.
    """
    analyzer = analyzer if analyzer is not None else Analyzer()
    col = _Collector()
    entries: list[KnowledgeEntry] = []
    seen: dict[str, str | None] = {}
    total = 0
    for position, item in enumerate(sources):
        source = coerce_source(item)
        col.source_id, col.entry_id, col.origin = source.id or None, None, source.origin
        if not isinstance(item, KnowledgeSource | Mapping):
            col.error(
                "source-invalid",
                f"source #{position + 1} is a {type(item).__name__}; expected a mapping "
                "with id, version and entries, or a KnowledgeSource",
            )
            continue
        for name, value in (("id", source.id), ("version", source.version)):
            problem = unsafe_character(value) if isinstance(value, str) else None
            if problem is not None:
                col.error(
                    "field-control-chars",
                    f"the source {name} contains {problem}; it appears in every citation, "
                    "so it must be one line of text without control characters",
                    name,
                )
        if not source.id:
            col.error(
                "source-id-missing",
                f"source #{position + 1} has no id; add a non-empty 'id' "
                "(in source.yaml or the source object)",
                "id",
            )
        raw_entries = source.entries
        if not isinstance(raw_entries, tuple):
            shown = "empty (null)" if raw_entries is None else f"a {type(raw_entries).__name__}"
            col.error(
                "source-invalid",
                f"'entries' is {shown}; it must be a list of entries (write 'entries: []' "
                "for a source without entries)",
                "entries",
            )
            continue
        try:
            check_nesting(list(raw_entries), "entries")
        except SourceError:
            col.error(
                "source-invalid",
                f"'entries' nest lists or mappings more than {MAX_NESTING_DEPTH} levels deep "
                "(or a value contains itself); flatten the metadata",
                "entries",
            )
            continue
        version = _source_version(source, col)
        total += len(raw_entries)
        if total > MAX_ENTRIES:
            col.error(
                "too-many-entries",
                f"more than {MAX_ENTRIES:,} entries in one source set; split the "
                "knowledge base or index the text as documents",
            )
            break
        for n, raw_entry in enumerate(raw_entries):
            origins = source.entry_origins
            col.origin = origins[n] if n < len(origins) and origins[n] else source.origin
            col.entry_id = None
            raw = _as_mapping(raw_entry)
            if raw is None:
                col.error(
                    "entry-invalid",
                    f"entry #{n + 1} is a {type(raw_entry).__name__}; "
                    "expected a mapping of entry fields",
                )
                continue
            entry_id = _text(raw.get("id"))
            if not entry_id:
                col.error(
                    "entry-id-missing",
                    f"entry #{n + 1} has no id; add a unique, stable 'id' such as "
                    "'billing.refunds'",
                    "id",
                )
                continue
            col.entry_id = entry_id
            problem = unsafe_character(entry_id)
            if problem is not None:
                col.error(
                    "field-control-chars",
                    f"id {entry_id!r} contains {problem}; an id is one line of text "
                    "without control characters",
                    "id",
                )
                continue
            if entry_id in seen:
                where = f" (first defined in {seen[entry_id]})" if seen[entry_id] else ""
                col.error(
                    "entry-id-duplicate",
                    f"id {entry_id!r} is used twice{where}; ids must be unique across all sources",
                    "id",
                )
                continue
            seen[entry_id] = col.origin
            entry = _entry(raw, source.id, version, col)
            if entry is not None:
                entries.append(entry)
    _check_links(entries, seen, analyzer, col)
    _check_tenants(entries, col)
    entries.sort(key=lambda e: e.id)
    return ValidationReport(tuple(entries), tuple(col.issues))


def _check_links(
    entries: list[KnowledgeEntry],
    origins: Mapping[str, str | None],
    analyzer: Analyzer,
    col: _Collector,
) -> None:
    """Aliases and relationships: checked once every entry is known."""
    known = {entry.id for entry in entries}
    alias_owner: dict[str, str] = {}
    for entry in entries:
        col.source_id, col.entry_id = entry.source_id or None, entry.id
        col.origin = origins.get(entry.id)
        for alias in entry.aliases:
            key = analyzer.phrase(alias)
            if not key:
                col.warning(
                    "alias-empty",
                    f"alias {alias!r} has no searchable words after normalization and "
                    "is ignored; remove it or use a more specific phrase",
                    "aliases",
                )
                continue
            owner = alias_owner.setdefault(key, entry.id)
            if owner != entry.id:
                col.warning(
                    "alias-duplicate",
                    f"alias {alias!r} also belongs to entry {owner!r}; a query using it "
                    "boosts both — keep the alias on one entry",
                    "aliases",
                )
        for related in entry.related:
            if related == entry.id:
                col.warning(
                    "related-self", "an entry cannot be related to itself; remove it", "related"
                )
            elif related not in known:
                col.warning(
                    "related-missing",
                    f"related id {related!r} does not exist (or is invalid); fix the id "
                    "or remove it",
                    "related",
                )
        if entry.parent is not None:
            if entry.parent == entry.id:
                col.warning(
                    "parent-self", "an entry cannot be its own parent; remove 'parent'", "parent"
                )
            elif entry.parent not in known:
                col.warning(
                    "parent-missing",
                    f"parent id {entry.parent!r} does not exist (or is invalid); fix the "
                    "id or remove 'parent'",
                    "parent",
                )


def _check_tenants(entries: list[KnowledgeEntry], col: _Collector) -> None:
    """A source mixing entries with and without a tenant: the latter are shared by all."""
    by_source: dict[str, list[KnowledgeEntry]] = {}
    for entry in entries:
        by_source.setdefault(entry.source_id, []).append(entry)
    for source_id, members in by_source.items():
        shared = [e.id for e in members if TENANT_KEY not in e.metadata]
        if shared and len(shared) < len(members):
            col.source_id, col.entry_id, col.origin = source_id or None, None, None
            col.warning(
                "tenant-mixed",
                f"{len(shared)} of {len(members)} entries have no 'tenant' (first: "
                f"{shared[0]!r}) and are shared with every tenant; set 'tenant' on them, or "
                "keep shared entries in a source of their own",
                TENANT_KEY,
            )
