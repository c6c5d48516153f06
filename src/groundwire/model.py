"""Records shared by every layer: entries, sources, hits, selections, context, outcomes.

All records are frozen dataclasses with slots; change them with ``dataclasses.replace``.
This module imports nothing else from groundwire.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, get_args

__all__ = [
    "ACL_PREFIXES",
    "ENTRY_KINDS",
    "ENTRY_STATUSES",
    "FAILURE_REASONS",
    "LABEL_ID",
    "ChannelScore",
    "Chunk",
    "Citation",
    "Confidence",
    "ContextResult",
    "Document",
    "EvidenceSource",
    "Excerpt",
    "FailureReason",
    "Filter",
    "GroundingMetadata",
    "GroundingOutcome",
    "GroundingStatus",
    "Hit",
    "KnowledgeBlock",
    "KnowledgeEntry",
    "KnowledgeSource",
    "LoadedDocument",
    "Principal",
    "RetrievalResult",
    "Scope",
    "ScoredEntry",
    "Section",
    "Severity",
    "SkippedSource",
    "Turn",
    "ValidationIssue",
]

#: The kinds an entry may declare. ``text`` is the default.
ENTRY_KINDS: Final[frozenset[str]] = frozenset(
    {"text", "setting", "faq", "procedure", "policy", "troubleshooting", "reference", "concept"}
)
#: Lifecycle statuses. Only ``active`` entries are ever retrieved.
ENTRY_STATUSES: Final[frozenset[str]] = frozenset({"active", "draft", "deprecated", "archived"})

Severity = Literal["error", "warning"]
Confidence = Literal["none", "low", "medium", "high"]
FailureReason = Literal[
    "disabled",
    "empty-query",
    "index-not-ready",
    "no-match",
    "low-relevance",
    "budget-exhausted",
    "timeout",
    "error",
    "backend-unavailable",
]
#: Every reason a grounding turn can come back without a knowledge block.
FAILURE_REASONS: Final[tuple[str, ...]] = get_args(FailureReason)


def _tuple(value: Any) -> Any:
    """Freeze lists into tuples; leave anything else for validation to judge."""
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier message of the conversation (``role`` is ``user`` or ``assistant``)."""

    role: str
    text: str


@dataclass(frozen=True, slots=True)
class Scope:
    """Who and where a turn runs: the integrations enabled for this request.

    Entries that apply everywhere (``integrations == ()``) are always in scope;
    integration-specific entries need at least one of theirs enabled (case-insensitive).
    """

    enabled_integrations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        value = _tuple(self.enabled_integrations)
        if not isinstance(value, tuple) or not all(isinstance(i, str) for i in value):
            raise TypeError(
                f"enabled_integrations must be a list of strings, got {value!r}; "
                'write Scope(["slack"]) rather than Scope("slack")'
            )
        object.__setattr__(self, "enabled_integrations", value)


#: The kinds of ACL label: ``user:<subject>`` and ``group:<group>``.
ACL_PREFIXES: Final[tuple[str, ...]] = ("user", "group")
#: A tenant, subject or group id: 1-256 characters, none of them whitespace, a control or
#: format character, a quote, a backslash, a comma or ``*`` (kept for future wildcards), so
#: an id can be embedded in a filter expression without escaping. Compared exactly (no case
#: folding: ``Alice`` and ``alice`` are different subjects).
LABEL_ID: Final = re.compile(
    r"[^\s\x00-\x1f\x7f-\x9f\"'\\,*\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]{1,256}"
)


def is_label_id(value: object) -> bool:
    """Whether ``value`` is a valid tenant, subject or group id (see :data:`LABEL_ID`)."""
    return isinstance(value, str) and LABEL_ID.fullmatch(value) is not None


def _label_ids(name: str, value: object) -> tuple[str, ...]:
    value = _tuple(value)
    if not isinstance(value, tuple) or not all(is_label_id(item) for item in value):
        raise ValueError(
            f"{name} must be a list of ids (no whitespace, quotes, commas or '*'), got {value!r}"
        )
    return tuple(sorted(set(value)))


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request runs for, as the host's own authentication verified it.

    groundwire never derives a principal from query text, ids or model output: the host
    passes it. ``tenant`` is the organization (the isolation boundary), ``subject`` the
    user or service within it, ``groups`` the groups the host says it belongs to. Ids are
    compared exactly. The principal holds the ACL labels ``user:<subject>`` and
    ``group:<g>`` for each group (see :attr:`labels`).
    """

    tenant: str
    subject: str
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("tenant", "subject"):
            if not is_label_id(getattr(self, name)):
                raise ValueError(
                    f"Principal.{name} must be a non-empty id without whitespace, quotes, "
                    f"commas or '*', got {getattr(self, name)!r}"
                )
        object.__setattr__(self, "groups", _label_ids("Principal.groups", self.groups))

    @property
    def labels(self) -> frozenset[str]:
        """The ACL labels this principal holds: ``user:<subject>`` and ``group:<g>`` each."""
        return frozenset({f"user:{self.subject}", *(f"group:{g}" for g in self.groups)})


@dataclass(frozen=True, slots=True)
class Filter:
    """What one request may see, declaratively: one conjunction every store compiles alike.

    A record (entry, chunk, memory) is eligible when all of these hold:

    - its lifecycle ``status`` is ``active``;
    - its domain (case-insensitive) is not in ``blocked_domains``;
    - ``integrations is None``, or it applies everywhere (no integrations), or one of its
      integrations (case-insensitive) is in ``integrations``;
    - it has no tenant label (shared by every tenant), or its tenant equals ``tenant``;
    - it has no ACL labels (every principal of its tenant), or one of them is in
      ``labels``;
    - for every ``(key, values)`` of ``where``, its ``metadata[key]`` is one of
      ``values`` (a list value: any of its items).

    A record whose labels are malformed is eligible for nobody (fail closed).
    ``tenant=None`` and no ``labels`` is the anonymous view: only records without
    tenant and ACL labels. Build one with :meth:`of`; the embedded index compiles it to a
    boolean mask, other backends to their filter expression, with the same meaning.
    """

    tenant: str | None = None
    labels: frozenset[str] = frozenset()
    integrations: frozenset[str] | None = None
    blocked_domains: frozenset[str] = frozenset()
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(
        cls,
        principal: Principal | None = None,
        scope: Scope | None = None,
        blocked_domains: Iterable[str] = (),
        where: Mapping[str, str | Sequence[str]] | None = None,
    ) -> Filter:
        """The filter of a request: who (``principal``; None = anonymous), where
        (``scope``; None = any integration), excluded domains and metadata constraints."""
        if principal is not None and not isinstance(principal, Principal):
            raise TypeError(
                f"principal must be a Principal(tenant, subject, groups), got "
                f"{type(principal).__name__}"
            )
        if isinstance(blocked_domains, str):
            raise TypeError("blocked_domains must be a list of domain names, not a string")
        constraints: list[tuple[str, tuple[str, ...]]] = []
        for key, value in sorted((where or {}).items()):
            values = (value,) if isinstance(value, str) else value
            if (
                not isinstance(key, str)
                or not key
                or not isinstance(values, Sequence)
                or not all(isinstance(v, str) for v in values)
            ):
                raise TypeError(f"where[{key!r}] must map a field name to a string or strings")
            constraints.append((key, tuple(sorted(set(values)))))
        return cls(
            tenant=principal.tenant if principal is not None else None,
            labels=principal.labels if principal is not None else frozenset(),
            integrations=None
            if scope is None
            else frozenset(i.casefold() for i in scope.enabled_integrations),
            blocked_domains=frozenset(d.casefold() for d in blocked_domains),
            where=tuple(constraints),
        )


@dataclass(frozen=True, slots=True)
class KnowledgeEntry:
    """A curated piece of knowledge: a setting, FAQ, procedure, policy, ...

    ``integrations == ()`` means the entry applies everywhere. ``version`` is the
    effective version copied from the entry's source and appears in citations.
    """

    id: str
    title: str
    summary: str
    domain: str
    integrations: tuple[str, ...]
    body: str = ""
    aliases: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    related: tuple[str, ...] = ()
    parent: str | None = None
    kind: str = "text"
    status: str = "active"
    version: str = ""
    source_id: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (  # usually built from tuples (one test per field: a build makes millions)
            isinstance(self.integrations, list)
            or isinstance(self.aliases, list)
            or isinstance(self.keywords, list)
            or isinstance(self.related, list)
        ):
            for name in ("integrations", "aliases", "keywords", "related"):
                object.__setattr__(self, name, _tuple(getattr(self, name)))

    @property
    def citation(self) -> Citation:
        """The stable citation of this entry: ``[KB:<id>@<version>]``."""
        return Citation(self.id, self.version)


@dataclass(frozen=True, slots=True)
class KnowledgeSource:
    """A versioned set of entries, as authored (entries may be mappings or entries).

    ``origin`` is the file or folder the source was read from; ``entry_origins``
    (parallel to ``entries``, optional) the file of each entry, for error messages.
    """

    id: str
    version: str
    entries: tuple[KnowledgeEntry | Mapping[str, Any], ...] = ()
    origin: str | None = None
    entry_origins: tuple[str | None, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", _tuple(self.entries))
        object.__setattr__(self, "entry_origins", _tuple(self.entry_origins))


@dataclass(frozen=True, slots=True)
class Document:
    """A plain document to index: no summary, domain or integrations required."""

    id: str
    title: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Section:
    """A heading (or page) of an extracted document: where it starts and how deep it is.

    ``start`` is a code-point offset into the document's text; a smaller ``level`` is a
    higher heading (Markdown ``#`` is 1). Sections form the heading trail of chunks.
    """

    start: int
    level: int
    title: str


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """A file, upload or web page turned into text with its structure, ready to chunk.

    ``source_id`` names it in chunk ids (a path relative to the folder given, with ``/``,
    or the URL). ``sha256`` hashes the raw content, ``text_sha256`` the extracted text.
    ``sections`` are the headings the loader found, or None to let the chunker look.
    """

    source_id: str
    path: str
    kind: str
    title: str
    text: str
    sha256: str
    text_sha256: str
    sections: tuple[Section, ...] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", _tuple(self.sections))

    @property
    def version(self) -> str:
        """The source version cited with its chunks: 12 hex digits of the content SHA-256."""
        return self.sha256[:12]


@dataclass(frozen=True, slots=True)
class SkippedSource:
    """A file or path left out of an ingest, and why (the reason says how to include it)."""

    path: str
    reason: str


class _Cited:
    """Citation and heading trail of a record with ``id``, ``version`` and ``headings``."""

    __slots__ = ()
    id: str
    version: str
    headings: tuple[str, ...]

    @property
    def citation(self) -> Citation:
        """The stable citation of this record: ``[KB:<id>@<version>]``."""
        return Citation(self.id, self.version)

    @property
    def heading(self) -> str:
        """The heading trail as one line: ``Guide > Install > Linux``."""
        return " > ".join(self.headings)


@dataclass(frozen=True, slots=True)
class Chunk(_Cited):
    """One cited piece of a document: ``text == document.text[start:end]`` (code points).

    ``id`` is ``<source_id>#<number>`` with ``number`` counted from 0; ``version`` is the
    source's version (12 hex digits of its content SHA-256) and ``sha256`` hashes this
    chunk's text, so ``[KB:<id>@<version>]`` pins the exact text. ``headings`` is the
    heading trail above the chunk; ``symbols`` the code names it defines.
    """

    id: str
    source_id: str
    number: int
    text: str
    start: int
    end: int
    version: str
    sha256: str
    path: str = ""
    title: str = ""
    kind: str = ""
    headings: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "headings", _tuple(self.headings))
        object.__setattr__(self, "symbols", _tuple(self.symbols))


@dataclass(frozen=True, slots=True)
class EvidenceSource:
    """One source (file, upload, page) of indexed chunks, as a host authorizer sees it.

    ``id`` is the source id its chunk ids start with; ``version`` its cited version;
    ``chunk_count`` how many chunks of it the knowledge base holds.
    """

    id: str
    path: str
    version: str
    title: str = ""
    kind: str = ""
    chunk_count: int = 0


@dataclass(frozen=True, slots=True)
class Excerpt(_Cited):
    """A bounded, cited piece of one source: ``text == source_text[start:end]`` (code points).

    ``id`` is the best-scoring chunk's id and ``chunk_ids`` every chunk merged into the
    excerpt (in text order); ``cut`` says the text was shortened to the excerpt bound.
    ``sha256`` hashes ``text``; ``version`` is the source's (12 hex digits of its SHA-256).
    """

    id: str
    source_id: str
    path: str
    headings: tuple[str, ...]
    start: int
    end: int
    text: str
    version: str
    sha256: str
    score: float
    chunk_ids: tuple[str, ...] = ()
    cut: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "headings", _tuple(self.headings))
        object.__setattr__(self, "chunk_ids", _tuple(self.chunk_ids))


@dataclass(frozen=True, slots=True)
class ValidationIssue:
    """One problem found while validating sources; ``message`` says how to fix it."""

    severity: Severity
    code: str
    message: str
    source_id: str | None = None
    entry_id: str | None = None
    field: str | None = None
    origin: str | None = None

    def describe(self) -> str:
        """One line naming file, source, entry and field, then the message."""
        where = [
            part
            for part in (
                self.origin,
                f"source {self.source_id!r}" if self.source_id else None,
                f"entry {self.entry_id!r}" if self.entry_id else None,
                f"field {self.field!r}" if self.field else None,
            )
            if part
        ]
        location = ", ".join(where) if where else "sources"
        return f"{self.severity} [{self.code}] {location}: {self.message}"


@dataclass(frozen=True, slots=True)
class Citation:
    """A stable reference to one version of one entry or chunk."""

    id: str
    version: str

    @property
    def tag(self) -> str:
        """The citation as written in context and answers: ``[KB:<id>@<version>]``."""
        return f"[KB:{self.id}@{self.version}]"

    def __str__(self) -> str:
        return self.tag


class Hit(NamedTuple):
    """One search result: ``breakdown`` explains the score (per-field terms and boosts).

    A named tuple rather than a frozen dataclass: searches build up to k of these per
    query, and a tuple is about twice as cheap to create; it is just as immutable.
    """

    id: str
    score: float
    breakdown: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class ChannelScore:
    """Where one channel (lexical, dense, phrase) ranked a hit, and what that added.

    ``rank`` counts from 1 in that channel's own list; ``score`` is the channel's raw
    score (BM25, cosine, phrase boost), ``normalized`` its min-max normalized value in
    the list, ``contribution`` what fusion added to the hit's fused score.
    """

    rank: int
    score: float
    normalized: float
    contribution: float


@dataclass(frozen=True, slots=True)
class ScoredEntry:
    """A candidate of one turn: the entry, its final score and why.

    ``channels`` explains a fused (dense or hybrid) score per channel; it is empty for
    lexical retrieval, whose ``breakdown`` explains the BM25 score per field and boost.
    ``coverage`` is the IDF-weighted share of the query's informative terms the entry
    contains, as the relevance gate measured it (None when the gate is off).
    """

    entry: KnowledgeEntry
    score: float
    lexical_score: float
    exact: bool
    alias: bool
    breakdown: Mapping[str, float]
    channels: Mapping[str, ChannelScore] = field(default_factory=dict)
    coverage: float | None = None


@dataclass(frozen=True, slots=True)
class ContextResult:
    """The assembled, token-bounded knowledge context of one turn.

    ``included_ids`` are in rendering order; ``summary_ids`` is the subset rendered
    without body; ``dropped_ids`` did not fit at all.
    """

    text: str
    citations: tuple[Citation, ...]
    included_ids: tuple[str, ...]
    summary_ids: tuple[str, ...]
    dropped_ids: tuple[str, ...]
    tokens: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    """Everything one turn's selection produced, for diagnosis.

    ``candidates`` are the ranked candidates before the relevance gate (the first
    ``result_limit`` were eligible for the selection), ``primary`` those it kept.
    """

    query: str
    primary: tuple[ScoredEntry, ...]
    expanded: tuple[KnowledgeEntry, ...]
    candidate_count: int
    confidence: Confidence
    context: ContextResult | None
    duration_ms: float
    candidates: tuple[ScoredEntry, ...] = ()
    authorization_errors: tuple[str, ...] = ()
    #: How dense or hybrid ranking ran (mode asked and used, fusion, fallback reason,
    #: rerank), as JSON-ready values; None for lexical retrieval.
    channels: Mapping[str, Any] | None = None

    @property
    def selected_ids(self) -> tuple[str, ...]:
        """Ids of the primary selection, best first."""
        return tuple(item.entry.id for item in self.primary)

    @property
    def expanded_ids(self) -> tuple[str, ...]:
        """Ids added by relationship expansion, in expansion order."""
        return tuple(entry.id for entry in self.expanded)


@dataclass(frozen=True, slots=True)
class KnowledgeBlock:
    """The trusted knowledge block appended to the system prompt of one turn."""

    content: str
    citations: tuple[Citation, ...]
    metadata: Mapping[str, Any]
    kind: Literal["knowledge"] = "knowledge"
    trusted: bool = True


@dataclass(frozen=True, slots=True)
class GroundingMetadata:
    """What grounding did on one turn; ``failure_reason`` is set when no block came back.

    ``truncated_query``: the query was longer than ``max_query_chars`` and was cut (its
    start and end kept). ``out_of_scope_count``: integration-specific entries that
    matched the query well enough to be selected but whose integrations this request did
    not enable; ``out_of_scope_integrations`` names the integrations that would include
    them (integrations are relevance scope, not authorization: entries excluded by a
    blocked domain or a host predicate are never counted). ``named_integrations``: the
    integrations the query named that joined this turn's scope (the request did not
    enable them; see ``RetrievalConfig.named_integrations``).
    """

    selected_ids: tuple[str, ...] = ()
    expanded_ids: tuple[str, ...] = ()
    candidate_count: int = 0
    context_tokens: int = 0
    truncated: bool = False
    duration_ms: float = 0.0
    confidence: Confidence = "none"
    failure_reason: FailureReason | None = None
    truncated_query: bool = False
    out_of_scope_count: int = 0
    out_of_scope_integrations: tuple[str, ...] = ()
    named_integrations: tuple[str, ...] = ()
    #: Host authorization callbacks that failed this turn (raised, returned a non-bool, or
    #: ran past their deadline): what failed and how often, never what was denied.
    authorization_errors: tuple[str, ...] = ()
    #: How the turn ranked, JSON-ready (None for plain lexical ranking): ``mode`` asked and
    #: ``used`` (``"lexical"`` with a ``reason`` when the query could not be embedded),
    #: ``fusion``, ``query_embed_ms``, ``channel_sizes``, ``rerank`` and ``hits``: per
    #: selected id, each channel's ``rank``, ``score``, ``normalized`` and ``contribution``.
    channels: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class GroundingOutcome:
    """The result of grounding one turn: the block (or None), metadata and the retrieval."""

    block: KnowledgeBlock | None
    metadata: GroundingMetadata
    retrieval: RetrievalResult | None = None


@dataclass(frozen=True, slots=True)
class GroundingStatus:
    """The engine's state: readiness, size, last error and every validation issue."""

    enabled: bool
    ready: bool
    entry_count: int
    last_error: str | None
    validation_issues: tuple[ValidationIssue, ...]


def issues_have_errors(issues: Sequence[ValidationIssue]) -> bool:
    """True when any issue is blocking."""
    return any(issue.severity == "error" for issue in issues)
