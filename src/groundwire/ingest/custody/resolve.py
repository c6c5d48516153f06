"""Resolve a citation to its evidence, or reject it with the reason.

A citation names a chunk (``<document id>#<n>``) at a version. :class:`EvidenceResolver`
finds that evidence in the ledger and rejects the citation when the evidence is:

- ``foreign-tenant``: labelled with another tenant than the principal's (checked first,
  so nothing else about another tenant's evidence is revealed);
- ``withdrawn``: the document was withdrawn (legal hold, takedown);
- ``superseded``: a newer version of the document is current;
- ``deleted``: the document is gone from its source;
- ``tampered``: the cited text does not match the fingerprint recorded for it, the
  recorded text no longer hashes to its fingerprint, or an original in custody was
  altered;
- ``unknown-evidence``: the ledger holds no such document at that version.

A resolved citation carries its originals (SHA-256, media type, size) and the fragment
locator (number, start, end). :meth:`EvidenceResolver.check_citation` is the hook
:func:`groundwire.llm.citations.validate_citations` calls (``resolver=``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from groundwire.ingest.custody.ledger import EvidenceLedger, EvidenceRecord
from groundwire.ingest.custody.originals import Custody
from groundwire.model import Chunk, Citation, Excerpt, KnowledgeEntry

__all__ = ["RESOLUTION_PROBLEMS", "EvidenceResolver", "Resolution", "ResolutionProblem"]

ResolutionProblem = Literal[
    "foreign-tenant", "withdrawn", "superseded", "deleted", "tampered", "unknown-evidence"
]
#: Every reason a citation's evidence can be rejected, in the order they are checked.
RESOLUTION_PROBLEMS: Final[tuple[str, ...]] = get_args(ResolutionProblem)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Resolution:
    """A citation resolved to its evidence, or the reason it is rejected."""

    citation: Citation
    problem: ResolutionProblem | None
    detail: str = ""
    document_id: str = ""
    evidence_id: int | None = None
    originals: tuple[tuple[str, str, int], ...] = ()
    locator: tuple[int, int, int] | None = None  # fragment number, start, end

    @property
    def ok(self) -> bool:
        """Whether the citation resolves to current, untampered evidence of this tenant."""
        return self.problem is None


def split_chunk_id(chunk_id: str) -> tuple[str, int | None]:
    """``doc#3`` → ``("doc", 3)``; an id without a chunk number → ``(id, None)``."""
    document, sep, number = chunk_id.rpartition("#")
    if sep and number.isdigit():
        return document, int(number)
    return chunk_id, None


class EvidenceResolver:
    """Resolves citations for one principal's tenant (None: the anonymous view)."""

    def __init__(
        self, ledger: EvidenceLedger, *, tenant: str | None, custody: Custody | None = None
    ) -> None:
        self.ledger = ledger
        self.tenant = tenant
        self.custody = custody

    def resolve(self, citation: Citation, offered: object = None) -> Resolution:
        """Resolve ``citation``; ``offered`` (the Excerpt, Chunk or entry shown to the model)
        is checked against the recorded fingerprints too."""
        document_id, number = split_chunk_id(citation.id)

        def reject(problem: ResolutionProblem, detail: str) -> Resolution:
            return Resolution(citation, problem, detail, document_id)

        records = self.ledger.evidence(document_id, citation.version)
        if not records:
            if self.ledger.withdrawal(document_id) is not None:
                everything = self.ledger.evidence(document_id)
                if everything and self._foreign(everything[0]):
                    return reject("foreign-tenant", "the evidence belongs to another tenant")
                return reject("withdrawn", f"{document_id} was withdrawn")
            known = sorted({r.version for r in self.ledger.evidence(document_id)})
            if known and not self._foreign(self.ledger.evidence(document_id)[0]):
                return reject(
                    "unknown-evidence",
                    f"{document_id} has no version {citation.version} (known: {', '.join(known)})",
                )
            return reject("unknown-evidence", f"no evidence for {citation.id}@{citation.version}")
        record = next((r for r in records if r.state == "current"), records[0])
        if self._foreign(record):
            return reject("foreign-tenant", "the evidence belongs to another tenant")
        if record.state == "withdrawn":
            return reject("withdrawn", f"{document_id} was withdrawn: {record.note or 'no reason'}")
        if record.state == "superseded":
            latest = self.ledger.evidence(document_id)
            current = next((r.version for r in latest if r.state == "current"), None)
            newer = f"; version {current} is current" if current else ""
            return reject("superseded", f"{document_id}@{citation.version} was superseded{newer}")
        if record.state == "deleted":
            return reject("deleted", f"{document_id} was deleted from its source: {record.note}")
        locator = None
        if number is not None:
            fragment = self.ledger.fragment(record.id, number)
            if fragment is None:
                return reject("unknown-evidence", f"{document_id} has no fragment {number}")
            if fragment.text is None or _sha256(fragment.text) != fragment.sha256:
                return reject("tampered", f"fragment {number} no longer matches its fingerprint")
            problem = self._offered(offered, fragment.sha256, record)
            if problem is not None:
                return reject("tampered", problem)
            locator = (fragment.number, fragment.start, fragment.end)
        if record.text is None or _sha256(record.text) != record.text_sha256:
            return reject("tampered", "the recorded text no longer matches its fingerprint")
        if self.custody is not None:
            for digest, _, _ in record.originals:
                problem = self.custody.verify(digest)
                if problem is not None:
                    return reject("tampered", problem)
        return Resolution(citation, None, "", document_id, record.id, record.originals, locator)

    def _foreign(self, record: EvidenceRecord) -> bool:
        return record.labels.tenant is not None and record.labels.tenant != self.tenant

    def _offered(self, offered: object, fingerprint: str, record: EvidenceRecord) -> str | None:
        """Why the offered evidence differs from what was recorded, or None."""
        if isinstance(offered, Chunk):
            if offered.sha256 != fingerprint or _sha256(offered.text) != fingerprint:
                return f"the offered chunk {offered.id} differs from the recorded fragment"
        elif isinstance(offered, KnowledgeEntry):
            recorded: Any = offered.metadata.get("sha256")
            if recorded != fingerprint or _sha256(offered.body) != fingerprint:
                return f"the offered entry {offered.id} differs from the recorded fragment"
        elif isinstance(offered, Excerpt):
            text = record.text
            if (
                _sha256(offered.text) != offered.sha256
                or text is None
                or text[offered.start : offered.end] != offered.text
            ):
                return f"the offered excerpt {offered.id} differs from the recorded text"
        return None

    def check_citation(self, citation: Citation, offered: object = None) -> tuple[str, str] | None:
        """``(problem, detail)`` when the citation is rejected, else None (the
        :func:`~groundwire.llm.citations.validate_citations` resolver hook)."""
        resolution = self.resolve(citation, offered)
        return None if resolution.problem is None else (resolution.problem, resolution.detail)
