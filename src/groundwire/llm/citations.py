"""Check the citations of a generated answer against the evidence that was offered.

Three syntaxes are recognized, one reference per pair of brackets:

- ``[evidence:ID]`` — an evidence excerpt (its ``id``, a chunk id such as
  ``docs/guide.md#3``);
- ``[KB:ID@VERSION]`` — a knowledge entry or document chunk at one version, as
  :attr:`groundwire.Citation.tag` writes it (``[KB:security.api-keys@2026-11-15]``);
- ``[MEM:ID]`` — an agent memory recalled into the turn's memory block
  (:attr:`groundwire.Memory.tag`), checked against the ``memories`` argument.

Model output is untrusted input: the scan is linear in the text whatever it holds, and
reads at most :data:`~groundwire.config.MAX_CITATION_TEXT_CHARS` characters (a longer
answer is reported ``truncated`` and never ``ok``).

The prefixes are matched case-insensitively and spaces just inside the brackets are
ignored; an id may itself hold balanced brackets (``pages/[slug].md#0``). A ``[KB:...]``
without ``@VERSION`` is reported as malformed rather than skipped.

A citation is valid when its id (and, for ``[KB:...]``, its version) is among those
offered, and — when a ``resolver`` is given (an
:class:`~groundwire.EvidenceResolver` of the evidence ledger) — when its evidence is
current, of the principal's tenant and untampered: citations to withdrawn, superseded,
deleted, foreign-tenant or tampered evidence get that problem and a ``detail``. For
an :class:`~groundwire.Excerpt` every chunk merged into it counts, at the excerpt's
version. Validity means the id was offered — **not** that the cited text
supports the sentence around it: this checks ids, not truth.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from groundwire.config import MAX_CITATION_TEXT_CHARS
from groundwire.ground.evidence import EvidenceResult
from groundwire.memory import Memory, MemoryBlock, MemoryContext, RecalledMemory
from groundwire.model import Chunk, Citation, Excerpt, KnowledgeBlock, KnowledgeEntry

__all__ = [
    "CitationCheck",
    "CitationReport",
    "CitationResolver",
    "EvidenceLike",
    "offered_citations",
    "validate_citations",
]

CitationKind = Literal["evidence", "kb", "memory"]
CitationProblem = Literal[
    "unknown-id",
    "wrong-version",
    "malformed",
    # from a resolver (groundwire.ingest.custody.resolve.RESOLUTION_PROBLEMS):
    "foreign-tenant",
    "withdrawn",
    "superseded",
    "deleted",
    "tampered",
    "unknown-evidence",
]


class CitationResolver(Protocol):
    """Judges the evidence behind a citation that was offered (the evidence ledger's
    :class:`~groundwire.EvidenceResolver`): ``(problem, detail)``, or None when sound."""

    def check_citation(self, citation: Citation, offered: object = None) -> tuple[str, str] | None:
        """Why ``citation`` (offered as ``offered``) must be rejected, or None."""
        ...


#: What :func:`validate_citations` accepts as the evidence that was offered.
EvidenceLike = (
    EvidenceResult | KnowledgeBlock | Iterable[Excerpt | Citation | Chunk | KnowledgeEntry]
)
#: What :func:`validate_citations` accepts as the memories that were offered.
MemoriesLike = MemoryContext | MemoryBlock | Iterable[Memory | RecalledMemory | str]

# One reference: "[", optional blanks, a prefix and ":", then a body running to the first
# "]" outside a bracket pair (ids may hold balanced, unnested pairs such as
# "pages/[slug].md"), never across a line break. Every quantifier is possessive and the
# alternatives start with different characters, so nothing is ever retried: a match
# attempt reads each character once and the whole scan is linear in the text, whatever
# the model wrote. The body is split into id (and @version) in Python.
_CITATION = re.compile(
    r"\[[ \t]*+(?P<prefix>(?i:evidence|MEM|KB)):(?P<body>(?:[^\[\]\n]++|\[[^\[\]\n]*+\])++)\]"
)


@dataclass(frozen=True, slots=True)
class CitationCheck:
    """One citation found in the text, and whether it refers to offered evidence.

    ``tag`` is the citation exactly as written; ``start``/``end`` its position in the
    text. ``version`` is None for ``[evidence:ID]``. ``problem`` is None when valid,
    else ``unknown-id``, ``wrong-version`` (the id was offered at another version) or
    ``malformed`` (``[KB:...]`` without ``@VERSION``).
    """

    kind: CitationKind
    id: str
    version: str | None
    tag: str
    start: int
    end: int
    problem: CitationProblem | None = None
    detail: str | None = None

    @property
    def valid(self) -> bool:
        """Whether the cited id (and version) was offered."""
        return self.problem is None


@dataclass(frozen=True, slots=True)
class CitationReport:
    """Every citation of an answer, checked against the offered evidence.

    ``citations`` are in text order. ``ok`` is the verdict a grounded answer needs:
    at least one citation, none invalid, and the whole text checked. ``truncated`` is
    True when the text was longer than
    :data:`~groundwire.config.MAX_CITATION_TEXT_CHARS` and only its start was read
    (such an answer is never ``ok``).
    """

    citations: tuple[CitationCheck, ...]
    offered: tuple[Citation, ...]
    offered_memories: tuple[str, ...] = ()
    truncated: bool = False

    @property
    def valid(self) -> tuple[CitationCheck, ...]:
        """Citations whose id (and version) was offered, in text order."""
        return tuple(c for c in self.citations if c.problem is None)

    @property
    def invalid(self) -> tuple[CitationCheck, ...]:
        """Citations of ids or versions not offered, or malformed, in text order."""
        return tuple(c for c in self.citations if c.problem is not None)

    @property
    def cited(self) -> bool:
        """Whether the text cites anything at all (valid or not)."""
        return bool(self.citations)

    @property
    def ok(self) -> bool:
        """At least one citation, every citation valid, and no unchecked text."""
        return self.cited and not self.invalid and not self.truncated

    @property
    def cited_ids(self) -> tuple[str, ...]:
        """Distinct ids of the valid citations, in first-appearance order."""
        return tuple(dict.fromkeys(c.id for c in self.valid))

    @property
    def invalid_tags(self) -> tuple[str, ...]:
        """Distinct invalid citations as written, in first-appearance order."""
        return tuple(dict.fromkeys(c.tag for c in self.invalid))


def _offered_records(evidence: EvidenceLike) -> dict[tuple[str, str], object]:
    """Each ``(id, version)`` ``evidence`` offers → the record that offered it, in order."""
    items: Iterable[object]
    if isinstance(evidence, EvidenceResult):
        items = evidence.excerpts
    elif isinstance(evidence, KnowledgeBlock):
        items = evidence.citations
    elif isinstance(evidence, str | bytes):
        raise TypeError("evidence must be an EvidenceResult, a KnowledgeBlock or a list")
    else:
        items = evidence
    found: dict[tuple[str, str], object] = {}
    for item in items:
        if isinstance(item, Excerpt):
            for chunk_id in (item.id, *item.chunk_ids):
                found.setdefault((chunk_id, item.version), item)
        elif isinstance(item, Citation | Chunk | KnowledgeEntry):
            found.setdefault((item.id, item.version), item)
        else:
            raise TypeError(
                f"evidence items must be Excerpt, Citation, Chunk or KnowledgeEntry records, "
                f"got {type(item).__name__}"
            )
    return found


def offered_citations(evidence: EvidenceLike) -> tuple[Citation, ...]:
    """The ``(id, version)`` pairs ``evidence`` offers, deduplicated, in order.

    An excerpt offers its best chunk and every chunk merged into it, at its version.
    """
    return tuple(Citation(cited_id, version) for cited_id, version in _offered_records(evidence))


def offered_memory_ids(memories: MemoriesLike | None) -> tuple[str, ...]:
    """The memory ids a turn's memory block offered, deduplicated, in order."""
    if memories is None:
        return ()
    if isinstance(memories, MemoryContext | MemoryBlock):
        return memories.memory_ids
    if isinstance(memories, str | bytes):
        raise TypeError("memories must be a MemoryContext, a MemoryBlock or a list")
    out: dict[str, None] = {}
    for item in memories:
        if isinstance(item, RecalledMemory | Memory):
            out[item.id] = None
        elif isinstance(item, str):
            out[item] = None
        else:
            raise TypeError(
                f"memories items must be Memory, RecalledMemory or ids, got {type(item).__name__}"
            )
    return tuple(out)


def _check(
    kind: CitationKind, cited_id: str, version: str | None, versions: dict[str, set[str]]
) -> CitationProblem | None:
    if cited_id not in versions:
        return "unknown-id"
    if version is not None and version not in versions[cited_id]:
        return "wrong-version"
    return None


def _parse(
    match: re.Match[str], versions: dict[str, set[str]], memories: set[str]
) -> tuple[CitationKind, str, str | None, CitationProblem | None]:
    """Kind, id, version and problem of one matched reference."""
    body = match.group("body")
    prefix = match.group("prefix").lower()
    if prefix == "evidence":
        cited_id = body.strip()
        problem = _check("evidence", cited_id, None, versions)
        if problem is not None and "@" in cited_id:  # [evidence:ID@VERSION] is read too
            base, _, at = cited_id.rpartition("@")
            if _check("evidence", base, at, versions) is None:
                return "evidence", base, at, None
        return "evidence", cited_id, None, problem
    if prefix == "mem":
        cited_id = body.strip()
        return "memory", cited_id, None, None if cited_id in memories else "unknown-id"
    head, at, tail = body.rpartition("@")
    if not at or not head or not tail or "[" in tail or "]" in tail:
        return "kb", body.strip(), None, "malformed"  # [KB:ID] without a usable @VERSION
    cited_id, version = head.strip(), tail.strip()
    return "kb", cited_id, version, _check("kb", cited_id, version, versions)


def _resolved(
    checks: list[CitationCheck],
    offered: dict[tuple[str, str], object],
    resolver: CitationResolver,
) -> list[CitationCheck]:
    """Valid citations re-judged by ``resolver`` against the evidence ledger."""
    versions: dict[str, list[str]] = {}
    for cited_id, version in offered:
        versions.setdefault(cited_id, []).append(version)
    out = []
    for check in checks:
        if check.problem is None and check.kind != "memory":
            version = check.version or (versions.get(check.id) or [""])[0]
            item = offered.get((check.id, version))
            verdict = resolver.check_citation(Citation(check.id, version), item)
            if verdict is not None:
                problem, detail = verdict
                check = replace(check, problem=problem, detail=detail)  # type: ignore[arg-type]
        out.append(check)
    return out


def validate_citations(
    text: str,
    evidence: EvidenceLike = (),
    *,
    memories: MemoriesLike | None = None,
    resolver: CitationResolver | None = None,
) -> CitationReport:
    """Find every ``[evidence:ID]`` and ``[KB:ID@VERSION]`` in ``text`` and check each.

    ``evidence`` is what was offered to the model: an
    :class:`~groundwire.EvidenceResult`, a :class:`~groundwire.KnowledgeBlock`, or a list
    of :class:`~groundwire.Excerpt`, :class:`~groundwire.Citation`,
    :class:`~groundwire.Chunk` or :class:`~groundwire.KnowledgeEntry` records;
    ``memories`` the memories offered (``GenerateResult.memory``, a
    :class:`~groundwire.MemoryBlock`, or memories or ids), which ``[MEM:ID]`` must name.
    Returns a :class:`CitationReport`; never raises for any text. Checks ids, not truth.
    Time is linear in the text, and at most ``MAX_CITATION_TEXT_CHARS`` characters are
    read. With ``resolver``, each citation that was offered is also resolved to its
    evidence (see the module docstring).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    records = _offered_records(evidence)  # read once: ``evidence`` may be an iterator
    offered = tuple(Citation(cited_id, version) for cited_id, version in records)
    memory_ids = offered_memory_ids(memories)
    known_memories = set(memory_ids)
    versions: dict[str, set[str]] = {}
    for citation in offered:
        versions.setdefault(citation.id, set()).add(citation.version)
    truncated = len(text) > MAX_CITATION_TEXT_CHARS
    checks: list[CitationCheck] = []
    for match in _CITATION.finditer(text, 0, MAX_CITATION_TEXT_CHARS):
        kind, cited_id, version, problem = _parse(match, versions, known_memories)
        checks.append(
            CitationCheck(
                kind, cited_id, version, match.group(0), match.start(), match.end(), problem
            )
        )
    if resolver is not None:
        checks = _resolved(checks, records, resolver)
    return CitationReport(tuple(checks), offered, memory_ids, truncated)
