"""The seam every framework adapter is written against: who asks, what comes back, who answers.

- :class:`Access` — who a search runs for and what it may see (principal, authorizer, host
  predicate, integration scope, blocked domains). groundwire applies it *before ranking*;
  the adapters only carry it, from their constructor or from one call.
- :class:`Passage` / :class:`Passages` — one cited result and one search's results, in the
  shape every adapter turns into its framework's documents or nodes
  (:meth:`Passage.metadata` gives the same keys in all of them).
- :class:`Searcher` — ``search(query, access, limit)`` and its async twin. The embedded index
  implements it twice (:class:`~groundwire.integrations.EntrySearcher` for knowledge entries,
  :class:`~groundwire.integrations.EvidenceSearcher` for document chunks); a scale-out
  backend (Milvus) implements it too, or is accepted by the retrieval those two call, and
  the adapters do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Protocol, runtime_checkable

from groundwire import ChannelScore, Citation, ConfigError, KnowledgeEntry, Principal, Scope
from groundwire.access.authorize import check_callback

__all__ = ["ACCESS_FIELDS", "Access", "Passage", "Passages", "Searcher"]

#: A host authorizer: ``authorize(principal, item) -> bool``; only ``True`` allows.
Authorize = Callable[[Principal, Any], bool]


def _principal(value: object) -> Principal | None:
    """``value`` if it is a verified :class:`~groundwire.Principal` (or None), else refused."""
    if value is None or isinstance(value, Principal):
        return value
    raise ConfigError(
        f"principal={value!r} is invalid: expected a groundwire Principal(tenant, subject, "
        "groups) built from your authenticated session (groundwire never infers one), or "
        "None for an anonymous request; keep your own user object in authorize's closure"
    )


def _scope(value: object) -> Scope | None:
    if value is None or isinstance(value, Scope):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(
            f"scope={value!r} is invalid: expected a groundwire.Scope or a list of integration "
            'names, e.g. ["slack"]'
        )
    return Scope(tuple(value))


def _domains(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence | frozenset | set):
        raise ConfigError(f"blocked_domains={value!r} is invalid: expected a list of strings")
    items = sorted(value) if isinstance(value, frozenset | set) else list(value)
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"blocked_domains={value!r} is invalid: expected a list of strings")
    return tuple(items)


@dataclass(frozen=True, slots=True)
class Access:
    """Who a search runs for and what it may see; groundwire applies it before ranking.

    ``principal`` is the request's verified :class:`~groundwire.Principal` (groundwire never
    infers one from the query, ids or metadata; None: anonymous). Its tenant and ACL
    labels apply exactly as in a grounding turn: records of another tenant or outside its
    ACL never take a slot, and an anonymous search sees only unlabeled records.
    ``authorize(principal, item)`` narrows that further (it is asked only about items the
    labels admit, and needs a principal): a :class:`~groundwire.KnowledgeEntry` for
    entries, an :class:`~groundwire.EvidenceSource` (once per source) for document chunks.
    Only ``True`` allows; ``False``, any other value and an exception deny (fail closed,
    as every groundwire callback: :mod:`groundwire.access.authorize`). The next three
    apply to entries only (a document searcher refuses them rather than ignore them):
    ``allow(entry) -> bool`` is a host predicate, ``scope`` the integrations enabled for the
    request (a :class:`~groundwire.Scope` or a list of names; ``None``: only entries that
    apply everywhere, as in a grounding turn), ``blocked_domains`` domains never returned.
    """

    principal: Principal | None = None
    authorize: Authorize | None = None
    allow: Callable[[KnowledgeEntry], bool] | None = None
    scope: Scope | None = None
    blocked_domains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "principal", _principal(self.principal))
        check_callback(self.authorize, "authorize")
        check_callback(self.allow, "allow")
        object.__setattr__(self, "scope", _scope(self.scope))
        object.__setattr__(self, "blocked_domains", _domains(self.blocked_domains))

    def updated(self, changes: Access | Mapping[str, Any] | None) -> Access:
        """This access with ``changes`` applied: a whole :class:`Access` replaces it; a
        mapping replaces the fields it names, ``None`` included (``{"principal": None}``
        is an anonymous request, never this access's principal).

        Raises :class:`ConfigError` for a key that is not a field, naming the valid ones.
        """
        if changes is None:
            return self
        if isinstance(changes, Access):
            return changes
        if not isinstance(changes, Mapping):
            raise ConfigError(
                f"access changes must be a groundwire Access or a mapping of its fields "
                f"{list(ACCESS_FIELDS)}, got {type(changes).__name__}"
            )
        unknown = sorted(str(key) for key in changes if key not in ACCESS_FIELDS)
        if unknown:
            raise ConfigError(
                f"unknown access field(s) {unknown}; the fields are {list(ACCESS_FIELDS)}"
            )
        if not changes:
            return self
        return replace(self, **{str(key): value for key, value in changes.items()})


#: The fields of :class:`Access`, as a per-call mapping may name them.
ACCESS_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Access))


@dataclass(frozen=True, slots=True)
class Passage:
    """One cited result, as every adapter hands it to its framework.

    ``text`` is what a model should read; ``citation`` cites it (``[KB:<id>@<version>]``).
    ``score`` is groundwire's final score (None for an entry added by relationship
    expansion, ``expanded``). ``breakdown`` explains a lexical score per field and boost
    (empty when it would not explain the score exactly); ``channels`` explains a fused one
    per channel. ``coverage`` is the share of the query's information the relevance gate
    measured (entries). ``source`` is the knowledge source or document the passage comes
    from, ``version`` its cited version, ``span`` its code-point range in the source text
    (document excerpts). ``details`` holds what only one kind has (entries: ``domain``,
    ``integrations``, ``entry_kind``; excerpts: ``path``, ``headings``, ``chunk_ids``,
    ``sha256``, ``cut``).
    """

    id: str
    text: str
    score: float | None
    citation: Citation
    title: str
    source: str
    version: str
    kind: Literal["entry", "excerpt"]
    span: tuple[int, int] | None = None
    breakdown: Mapping[str, float] = field(default_factory=dict)
    channels: Mapping[str, ChannelScore] = field(default_factory=dict)
    coverage: float | None = None
    expanded: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    def metadata(self, confidence: str | None = None) -> dict[str, Any]:
        """JSON-ready metadata, with the same keys in every framework; ``confidence`` is
        the search's (entries), copied onto each passage."""
        return {
            "id": self.id,
            "citation": self.citation.tag,
            "score": self.score,
            "breakdown": dict(self.breakdown),
            "channels": {
                name: {
                    "rank": part.rank,
                    "score": part.score,
                    "normalized": part.normalized,
                    "contribution": part.contribution,
                }
                for name, part in self.channels.items()
            },
            "source": self.source,
            "version": self.version,
            "span": None if self.span is None else list(self.span),
            "title": self.title,
            "kind": self.kind,
            "coverage": self.coverage,
            "expanded": self.expanded,
            "confidence": confidence,
            **{key: list(v) if isinstance(v, tuple) else v for key, v in self.details.items()},
        }


@dataclass(frozen=True, slots=True)
class Passages:
    """One search's results, best first, and what groundwire decided.

    ``confidence`` is the entries' calibrated confidence (``none`` … ``high``; None for
    documents). ``reason`` says why nothing came back: ``empty-query``, ``index-not-ready``,
    ``no-match``, ``low-relevance`` and, for documents, ``below-min-score``,
    ``too-few-sources``, ``budget-exhausted``. ``denied`` counts what ``authorize`` or
    ``allow`` denied (entries, or document sources); ``authorization_errors`` counts the
    failures among them by kind. ``query`` is the query as used (``truncated_query``: cut).
    ``named_integrations``: integrations the query named that joined its scope (entries).
    """

    query: str
    passages: tuple[Passage, ...] = ()
    confidence: str | None = None
    reason: str | None = None
    candidate_count: int = 0
    denied: int = 0
    authorization_errors: tuple[str, ...] = ()
    truncated_query: bool = False
    named_integrations: tuple[str, ...] = ()

    def limited(self, limit: int | None) -> Passages:
        """At most ``limit`` passages (the first ones); None keeps all."""
        if limit is None or len(self.passages) <= limit:
            return self
        return replace(self, passages=self.passages[:limit])


@runtime_checkable
class Searcher(Protocol):
    """What an adapter calls: authorized, ranked, gated passages for one query.

    Implementations apply ``access`` before any ranking, never return an item it denies,
    return passages in a deterministic order (ties on id by code point) and return at
    most ``limit`` of them (None: their own bound). Bad arguments raise
    :class:`~groundwire.ConfigError` or :class:`~groundwire.QueryError`; finding nothing
    is :class:`Passages` with a ``reason``, not an error.
    """

    def search(self, query: str, access: Access, limit: int | None = None) -> Passages:
        """The passages for ``query`` that ``access`` may see."""
        ...

    async def asearch(self, query: str, access: Access, limit: int | None = None) -> Passages:
        """Async :meth:`search`."""
        ...


def check_searcher(searcher: object) -> Searcher:
    """``searcher`` if it is a :class:`Searcher`, else a :class:`ConfigError`."""
    if not isinstance(searcher, Searcher):
        raise ConfigError(
            f"searcher={searcher!r} is invalid: expected a groundwire Searcher "
            "(EntrySearcher, EvidenceSearcher or one with search/asearch)"
        )
    return searcher


def check_access(access: object) -> Access:
    """``access`` if it is an :class:`Access` (None: ``Access()``), else a :class:`ConfigError`."""
    if access is None:
        return Access()
    if not isinstance(access, Access):
        raise ConfigError(f"access={access!r} is invalid: expected a groundwire Access")
    return access


def check_limit(limit: object, option: str = "limit") -> int | None:
    """``limit`` if it is None or an integer >= 0, else a :class:`ConfigError`."""
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ConfigError(f"{option}={limit!r} is invalid: expected None or an integer >= 0")
    return limit
