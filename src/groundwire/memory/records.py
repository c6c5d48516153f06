"""Records of the agent memory: scopes, memories, graph inputs, recall results.

All frozen dataclasses with slots. A :class:`MemoryScope` is the verified identity a
host passes with every read and write: the tenant, the agent whose memory it is, and
the principal's subject and groups that ACL labels are matched against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from groundwire.config import MEMORY_MAX_KEY_CHARS
from groundwire.errors import QueryError

__all__ = [
    "GraphBoost",
    "Memory",
    "MemoryAttribute",
    "MemoryEntity",
    "MemoryRecall",
    "MemoryRelation",
    "MemoryScope",
    "MemoryType",
    "PrincipalLike",
    "RecalledMemory",
]

MemoryType = Literal["fact", "preference", "decision", "constraint", "event", "episode"]


class PrincipalLike(Protocol):
    """The shape of ``groundwire.Principal``: a verified tenant, subject and groups."""

    @property
    def tenant(self) -> str: ...

    @property
    def subject(self) -> str: ...

    @property
    def groups(self) -> Sequence[str]: ...


def check_key(option: str, value: object, *, allow_empty: bool = False) -> str:
    """A short identifier (tenant, agent, subject, id, session key), checked."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise QueryError(f"{option}={value!r} is invalid: expected a non-empty string")
    if len(value) > MEMORY_MAX_KEY_CHARS:
        raise QueryError(
            f"{option} has {len(value)} characters, over the limit of {MEMORY_MAX_KEY_CHARS}: "
            "use a short stable key"
        )
    if "\n" in value:
        raise QueryError(f"{option}={value!r} is invalid: it may not contain a line break")
    return value


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """Whose memory, seen by whom: every read and write of a store takes one.

    A memory belongs to one ``tenant`` and one ``agent``; nothing crosses either. Within
    them, a memory without ACL labels is visible to every principal of the tenant; one
    with labels (``"user:alice"``, ``"group:eng"``) only to a ``subject`` or one of the
    ``groups`` it names. Build one from a verified principal with :meth:`of`.
    """

    tenant: str
    agent: str
    subject: str | None = None
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_key("tenant", self.tenant)
        check_key("agent", self.agent)
        if self.subject is not None:
            check_key("subject", self.subject)
        groups = tuple(self.groups) if isinstance(self.groups, list | tuple) else self.groups
        if not isinstance(groups, tuple):
            raise QueryError(f"groups={self.groups!r} is invalid: expected a list of strings")
        for group in groups:
            check_key("groups[]", group)
        object.__setattr__(self, "groups", tuple(sorted(set(groups))))

    @classmethod
    def of(cls, principal: PrincipalLike, agent: str) -> MemoryScope:
        """The scope of a verified principal (``groundwire.Principal``) in ``agent``'s memory."""
        return cls(principal.tenant, agent, principal.subject, tuple(principal.groups))

    @property
    def labels(self) -> tuple[str, ...]:
        """The ACL labels this scope may read: ``user:<subject>`` and ``group:<g>``."""
        own = (f"user:{self.subject}",) if self.subject else ()
        return (*own, *(f"group:{group}" for group in self.groups))


@dataclass(frozen=True, slots=True)
class MemoryEntity:
    """An entity a memory mentions: ``name`` as written, an optional type and the text
    of the mention (defaults to the name), with the writer's confidence in [0, 1]."""

    name: str
    type: str = ""
    mention: str | None = None
    confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class MemoryRelation:
    """A typed link between two entities (by name), stated by a memory."""

    source: str
    type: str
    target: str
    confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class MemoryAttribute:
    """A structured claim: ``entity``'s ``aspect`` has ``value``.

    Attributes with the same entity, aspect, ``group_key`` and ``claim_key`` are one
    claim: writing a new one supersedes the older (it stays, marked superseded, pointing
    at the new one). Without a ``claim_key`` an attribute is a sibling that never
    supersedes another (several events under one aspect stay active).
    """

    entity: str
    aspect: str
    value: str
    claim_key: str | None = None
    group_key: str = ""
    confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory. ``sources`` are the ids it came from (conversation turns);
    times are Unix seconds; ``acl`` empty means the whole tenant may see it."""

    id: str
    tenant: str
    agent: str
    content: str
    type: MemoryType
    importance: float
    created_at: float
    updated_at: float
    accessed_at: float
    access_count: int
    pinned: bool
    deleted: bool
    sources: tuple[str, ...]
    metadata: Mapping[str, Any]
    acl: tuple[str, ...]
    content_hash: str

    @property
    def tag(self) -> str:
        """The citation of this memory in a model's answer: ``[MEM:<id>]``."""
        return f"[MEM:{self.id}]"


@dataclass(frozen=True, slots=True)
class RecalledMemory:
    """A memory returned by recall: its final score, rank (1-based) and why.

    ``channels`` holds each channel's normalized score (``content``, ``hint``,
    ``vector``, ``graph``); ``stages`` each shaping or dampening factor applied, in
    order. ``note`` is set when its facts were superseded and names the replacement.
    """

    memory: Memory
    score: float
    rank: int
    channels: Mapping[str, float]
    stages: Mapping[str, float]
    note: str | None = None

    @property
    def id(self) -> str:
        """The memory's id."""
        return self.memory.id

    @property
    def explain(self) -> dict[str, Any]:
        """The per-channel, per-stage breakdown as JSON-ready data."""
        return {
            "score": self.score,
            "rank": self.rank,
            "channels": dict(self.channels),
            "stages": dict(self.stages),
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class GraphBoost:
    """What the graph lookup found: entities matched, neighbours, boosted memories.

    ``timed_out`` says the deadline passed and these are the steps finished before it;
    ``error`` is set (and everything empty) when the lookup failed.
    """

    entity_ids: tuple[int, ...] = ()
    neighbour_ids: tuple[int, ...] = ()
    memory_ids: frozenset[str] = frozenset()
    timed_out: bool = False
    error: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryRecall:
    """The result of one recall: memories best first, and how the recall went.

    ``timed_out`` is the graph lookup's flag; ``freshness`` says the query asked for
    recent facts; ``tracked`` that the session record was written (False when no
    session was given or the write failed; recall itself never fails for it).
    """

    query: str
    memories: tuple[RecalledMemory, ...]
    timed_out: bool = False
    freshness: bool = False
    graph: GraphBoost = field(default_factory=GraphBoost)
    session_id: str | None = None
    tracked: bool = False
    duration_ms: float = 0.0

    @property
    def ids(self) -> tuple[str, ...]:
        """Ids of the recalled memories, best first."""
        return tuple(item.memory.id for item in self.memories)
