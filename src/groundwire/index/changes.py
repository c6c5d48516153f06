"""What changed between a snapshot of documents and the documents now: the corpus manifest.

A snapshot of chunked documents records, with every chunk, the source it came from and
that source's version (12 hex digits of its content SHA-256). :func:`document_changes`
compares that record with freshly loaded documents: unchanged sources are not chunked
again, changed and new ones are chunked, and the chunks of changed or vanished sources
that no longer exist are deleted. ``KnowledgeBase.update`` then applies the result, so a
sync or ``groundwire ingest --update`` costs the changed files, not a rebuild.

The chunking options are part of the record (the ``ingest`` section of the snapshot):
chunks cut with other options would not line up, so an update with different options is
refused and a rebuild is needed.

So is the access policy that labeled the chunks (its
:meth:`~groundwire.AccessPolicy.fingerprint`; None: no policy). New and changed chunks
are labeled by the policy given, exactly as a full ingest labels them. With another
policy than the recorded one, every chunk is relabeled: unchanged chunks whose labels
differ are upserted with the new labels, and sources the new policy no longer matches
are deleted, so the result equals a rebuild with that policy. A labeled snapshot updated
without a policy is refused: dropping every label would share each chunk with every
tenant, which only an explicit rebuild may do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from groundwire.access.labels import ACL_KEY, TENANT_KEY, Labels, read_labels
from groundwire.config import ChunkingConfig
from groundwire.errors import KnowledgeIndexError, SourceError
from groundwire.index.parts import SnapshotSection
from groundwire.ingest.chunking import chunk_document, chunks_to_documents
from groundwire.ingest.policy import AccessPolicy, label_chunks
from groundwire.model import Document, KnowledgeEntry, LoadedDocument, SkippedSource

__all__ = ["INGEST_SECTION", "DocumentChanges", "chunking_section", "document_changes"]

#: The meta-only section recording how a snapshot's documents were chunked.
INGEST_SECTION = "ingest"


@dataclass(frozen=True, slots=True)
class DocumentChanges:
    """Chunks to upsert and chunk ids to delete, and which sources were what.

    ``relabeled`` names the unchanged sources whose chunks got new labels (another access
    policy); ``skipped`` holds the files left out, and why (a source the policy does not
    match loses its chunks).
    """

    upserts: tuple[Document | KnowledgeEntry, ...]
    deletes: tuple[str, ...]
    added: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]
    removed: tuple[str, ...]
    skipped: tuple[SkippedSource, ...]
    relabeled: tuple[str, ...] = ()


_ACCESS = "access"  # the ingest section's key for the labeling policy's fingerprint
_UNLABELED = (
    "the snapshot's chunks were labeled by an access policy, and no policy was given: "
    "updating without one would share new chunks with every tenant; pass the policy "
    "(--access FILE), or rebuild without --update to drop the labels"
)


def chunking_section(config: ChunkingConfig, access: AccessPolicy | None = None) -> SnapshotSection:
    """The ``ingest`` section recording ``config`` and the ``access`` policy (no arrays)."""
    meta = {"chunk_size": config.size, "chunk_overlap": config.overlap}
    fingerprint = None if access is None else access.fingerprint()
    return SnapshotSection(
        INGEST_SECTION, {**meta, "max_chunks": config.max_chunks, _ACCESS: fingerprint}
    )


def _checked_policy(
    recorded: SnapshotSection | None, config: ChunkingConfig, access: AccessPolicy | None
) -> bool:
    """Refuse an update the record does not allow; whether every chunk is relabeled."""
    wanted = dict(chunking_section(config, access).meta)
    found = {} if recorded is None else dict(recorded.meta)
    options = {k: v for k, v in wanted.items() if k != _ACCESS}
    if recorded is None or {k: v for k, v in found.items() if k != _ACCESS} != options:
        shown = "none" if recorded is None else {k: v for k, v in found.items() if k != _ACCESS}
        raise KnowledgeIndexError(
            f"the snapshot was chunked with options {shown}, not {options}; "
            "rebuild it (without --update) or pass the same chunking options"
        )
    labeled_by = found.get(_ACCESS)
    if labeled_by is not None and access is None:
        raise KnowledgeIndexError(_UNLABELED)
    return bool(labeled_by != wanted[_ACCESS])


def _refusal(policy: AccessPolicy) -> str:
    return (
        f"no rule of the access policy {policy.origin} matches this path, and it has no "
        "default; its chunks are deleted; add a rule or a default to index it"
    )


def _relabeled(entry: KnowledgeEntry, labels: Labels) -> KnowledgeEntry | None:
    """``entry`` with ``labels`` (as ingest stores them), or None when it has them already."""
    if read_labels(entry.metadata) == labels:
        return None
    metadata = {k: v for k, v in entry.metadata.items() if k not in (TENANT_KEY, ACL_KEY)}
    return replace(entry, metadata={**metadata, **labels.as_metadata()})


def document_changes(
    entries: Iterable[KnowledgeEntry],
    recorded: SnapshotSection | None,
    documents: Sequence[LoadedDocument],
    config: ChunkingConfig,
    access: AccessPolicy | None = None,
) -> DocumentChanges:
    """The update that brings a snapshot's chunks (``entries``) to ``documents``, labeled
    by ``access`` (see the module docstring).

    ``recorded`` is the snapshot's ``ingest`` section; without it, or with other chunking
    options, or without a policy for a labeled snapshot, raises KnowledgeIndexError
    (rebuild instead). A document that fails to chunk, or that the policy does not
    match, is skipped with the reason and its old chunks are deleted, as a rebuild would
    leave it out (a file that fails to load or a page that fails to fetch is absent from
    ``documents``, so its chunks are deleted too).
    """
    relabel = _checked_policy(recorded, config, access)
    versions: dict[str, str] = {}
    chunks_of: dict[str, list[KnowledgeEntry]] = {}
    labeled = False
    for entry in entries:
        source = entry.metadata.get("source_id")
        if not isinstance(source, str):
            raise KnowledgeIndexError(
                f"entry {entry.id!r} records no source: this is not a snapshot of ingested "
                "documents; rebuild it"
            )
        versions[source] = entry.version
        chunks_of.setdefault(source, []).append(entry)
        labeled = labeled or TENANT_KEY in entry.metadata or ACL_KEY in entry.metadata
    if labeled and access is None:
        raise KnowledgeIndexError(_UNLABELED)
    upserts: list[Document | KnowledgeEntry] = []
    deletes: list[str] = []
    added: list[str] = []
    changed: list[str] = []
    unchanged: list[str] = []
    relabeled: list[str] = []
    skipped: list[SkippedSource] = []
    seen: set[str] = set()

    def drop(source: str) -> None:
        deletes.extend(sorted(e.id for e in chunks_of.get(source, ())))

    for document in documents:
        source = document.source_id
        seen.add(source)
        if versions.get(source) == document.version:
            if relabel and access is not None:
                labels = access.labels_for(source)
                if labels is None:
                    skipped.append(SkippedSource(document.path, _refusal(access)))
                    drop(source)
                    continue
                moved = [m for e in chunks_of[source] if (m := _relabeled(e, labels))]
                if moved:
                    relabeled.append(source)
                    upserts.extend(moved)
            unchanged.append(source)
            continue
        try:
            chunks = list(chunk_document(document, config))
        except SourceError as exc:  # as a rebuild leaves it out (and as a failed load)
            skipped.append(SkippedSource(document.path, f"{exc}; its chunks are deleted"))
            drop(source)
            continue
        if access is not None:
            chunks, refused = label_chunks(chunks, access)
            if refused:
                skipped.append(SkippedSource(document.path, _refusal(access)))
                drop(source)
                continue
        (changed if source in versions else added).append(source)
        fresh = chunks_to_documents(chunks)
        upserts.extend(fresh)
        kept = {d.id for d in fresh}
        deletes.extend(sorted(e.id for e in chunks_of.get(source, ()) if e.id not in kept))
    removed = sorted(set(versions) - seen)
    for source in removed:
        drop(source)
    return DocumentChanges(
        tuple(upserts),
        tuple(deletes),
        tuple(added),
        tuple(changed),
        tuple(unchanged),
        tuple(removed),
        tuple(skipped),
        tuple(relabeled),
    )
