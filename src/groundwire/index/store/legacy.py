"""Format version 1, read only: its files, its checks, and its assembly into Parts.

Version 1 (groundwire 0.1) stored per-field postings (``postings.<f>.{indptr,docs,tf}``)
beside the score rows, pair keys instead of pair tables, resolved relations, and a
content hash streamed over the entries. Loading converts the postings into the
frequency bytes of a :class:`~groundwire.index.lexical.LexicalIndex` (arrays in memory,
not mapped); saving a loaded version-1 snapshot writes version 2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from groundwire.index.lexical import FieldStats, LexicalIndex
from groundwire.index.lexical_builder import frequencies_of, pair_tables
from groundwire.index.store.layout import (
    COMMON_FILES,
    F8,
    I4,
    I8,
    FileSpec,
    check_ascending_rows,
    check_pointers,
    check_scores,
    check_values,
    counts_of,
    fail,
)
from groundwire.ingest.validate import content_record
from groundwire.model import KnowledgeEntry

__all__ = ["COUNTS", "check_arrays", "expected_files", "legacy_content_hash", "lexical_of"]

COUNTS = (
    "entries",
    "terms",
    "pairs",
    "postings",
    "fields",
    "exact_phrases",
    "alias_phrases",
    "relations",
    "domains",
    "integrations",
    "issues",
)


def expected_files(fields: int) -> dict[str, FileSpec]:
    """Logical name → (extension, dtype) of every file of format version 1."""
    files: dict[str, FileSpec] = {
        "lexical.field_doc_count": ("npy", I8),
        "lexical.field_avg_length": ("npy", F8),
        "lexical.pair_keys": ("npy", I8),
    }
    for f in range(fields):
        for name, dtype in (("indptr", I8), ("docs", I4), ("tf", I4)):
            files[f"postings.{f}.{name}"] = ("npy", dtype)
    files.update(COMMON_FILES)
    files.update(
        {
            "relations.indptr": ("npy", I8),
            "relations.targets": ("npy", I4),
            "labels": ("json", None),
            "issues": ("json", None),
        }
    )
    return files


def check_arrays(manifest: dict[str, Any], arrays: dict[str, Any], full: bool, where: str) -> None:
    """Shapes and bounds across files (constant-time ones always, the rest when full)."""
    counts = counts_of(manifest["counts"], COUNTS, where)
    if counts["fields"] != len(manifest["fields"]):
        raise fail(where, "the field count differs from the field list")
    n, terms, fields = counts["entries"], counts["terms"], counts["fields"]
    rows = terms + counts["pairs"]  # single terms, then adjacent-term pairs
    ptr = arrays["lexical.indptr"]
    # Always checked in full: the C query kernel trusts these row bounds like slices.
    check_pointers(where, "lexical.indptr", ptr, rows, arrays["lexical.docs"].shape[0], True)
    pair_keys = arrays["lexical.pair_keys"]
    if pair_keys.shape != (counts["pairs"],):
        raise fail(where, "lexical.pair_keys does not have one key per pair")
    if (
        full
        and pair_keys.size
        and (
            bool((pair_keys[1:] <= pair_keys[:-1]).any())
            or int(pair_keys[0]) < 0
            or int(pair_keys[-1]) >= terms * terms
        )
    ):
        raise fail(where, "lexical.pair_keys is not ascending within 0..terms²")
    if arrays["lexical.scores"].shape != arrays["lexical.docs"].shape:
        raise fail(where, "lexical.scores and lexical.docs differ in length")
    check_ascending_rows(where, "lexical.docs", ptr, arrays["lexical.docs"], n, full)
    check_scores(where, "lexical.scores", arrays["lexical.scores"], full)
    if arrays["lexical.lengths"].shape != (fields, n):
        raise fail(where, "lexical.lengths does not have one row per field")
    for name in ("lexical.field_doc_count", "lexical.field_avg_length"):
        if arrays[name].shape != (fields,):
            raise fail(where, f"{name} does not have one value per field")
    if full and fields:
        # The statistics follow from the lengths exactly as the builder computes them.
        lengths = arrays["lexical.lengths"]
        doc_count = (lengths > 0).sum(axis=1).astype(np.int64)
        totals = lengths.sum(axis=1, dtype=np.int64)
        average = np.divide(
            totals, doc_count, out=np.ones(fields, dtype=np.float64), where=doc_count > 0
        )
        if (
            int(lengths.min(initial=0)) < 0
            or not np.array_equal(arrays["lexical.field_doc_count"], doc_count)
            or not np.array_equal(arrays["lexical.field_avg_length"], average)
        ):
            raise fail(where, "field lengths and field statistics disagree")
    for f in range(fields):
        p_ptr, p_docs, p_tf = (arrays[f"postings.{f}.{x}"] for x in ("indptr", "docs", "tf"))
        check_pointers(where, f"postings.{f}.indptr", p_ptr, rows, p_docs.shape[0], full)
        if p_tf.shape != p_docs.shape:
            raise fail(where, f"postings.{f}.tf and docs differ in length")
        check_ascending_rows(where, f"postings.{f}.docs", p_ptr, p_docs, n, full)
        if full and p_tf.size and int(p_tf.min()) < 1:
            raise fail(where, f"postings.{f}.tf holds a frequency below 1")
    # Arrays sized by entries, terms or phrases are checked in every mode: each is a
    # fraction of the postings, and their values index other arrays (an unchecked one
    # would fail later as an IndexError deep in a query).
    cheap = True
    blob_end = arrays["terms.bytes"].shape[0]
    check_pointers(where, "terms.offsets", arrays["terms.offsets"], terms, blob_end, cheap)
    for name in ("terms.keys", "terms.order"):
        if arrays[name].shape != (terms,):
            raise fail(where, f"{name} does not have one value per term")
    check_values(where, "terms.order", arrays["terms.order"], max(terms, 1), cheap)
    keys = arrays["terms.keys"]
    if full and terms > 1 and bool((keys[1:] < keys[:-1]).any()):
        raise fail(where, "terms.keys is not sorted")
    check_pointers(
        where, "ids.offsets", arrays["ids.offsets"], n, arrays["ids.bytes"].shape[0], cheap
    )
    check_pointers(
        where, "entries.offsets", arrays["entries.offsets"], n, arrays["entries"].shape[0], cheap
    )
    for kind in ("exact", "alias"):
        phrases = counts[f"{kind}_phrases"]
        check_pointers(
            where,
            f"{kind}.keys.offsets",
            arrays[f"{kind}.keys.offsets"],
            phrases,
            arrays[f"{kind}.keys.bytes"].shape[0],
            cheap,
        )
        docs = arrays[f"{kind}.docs"]
        check_pointers(
            where, f"{kind}.indptr", arrays[f"{kind}.indptr"], phrases, docs.shape[0], cheap
        )
        check_values(where, f"{kind}.docs", docs, n, cheap)
    targets = arrays["relations.targets"]
    check_pointers(
        where, "relations.indptr", arrays["relations.indptr"], n, targets.shape[0], cheap
    )
    check_values(where, "relations.targets", targets, n, cheap)
    labels = arrays["labels"]
    if (
        not isinstance(labels, dict)
        or not all(
            isinstance(labels.get(k), list) and all(isinstance(v, str) for v in labels[k])
            for k in ("domains", "integrations")
        )
        or len(labels["domains"]) != counts["domains"]
        or len(labels["integrations"]) != counts["integrations"]
    ):
        raise fail(where, "labels.json does not list the domains and integrations")
    for name in ("active", "universal", "domain_codes"):
        if arrays[name].shape != (n,):
            raise fail(where, f"{name} does not have one value per entry")
    if arrays["integration_masks"].shape != (counts["integrations"], n):
        raise fail(where, "integration_masks does not have one row per integration")
    check_values(where, "domain_codes", arrays["domain_codes"], max(counts["domains"], 1), cheap)
    for name in ("active", "universal", "integration_masks"):
        if arrays[name].size and int(arrays[name].view(np.uint8).max()) > 1:
            raise fail(where, f"{name} holds a value other than 0 and 1")


def lexical_of(
    fields: list[str], weights: Any, settings: Any, vocabulary: Any, arrays: dict[str, Any]
) -> LexicalIndex:
    """The LexicalIndex of version-1 arrays: per-field postings become frequency bytes."""
    indptr, docs = arrays["lexical.indptr"], arrays["lexical.docs"]
    lengths = arrays["lexical.lengths"]
    n_docs, n_single = lengths.shape[1], len(vocabulary)
    scale = max(n_docs, 1)
    rows = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    keys = rows * scale + docs
    single_end = int(indptr[n_single])
    frequencies = []
    for f, name in enumerate(fields):
        p_ptr, p_docs, p_tf = (arrays[f"postings.{f}.{x}"] for x in ("indptr", "docs", "tf"))
        p_rows = np.repeat(np.arange(p_ptr.shape[0] - 1, dtype=np.int64), np.diff(p_ptr))
        at = np.searchsorted(keys, p_rows * scale + p_docs)
        at = np.minimum(at, max(keys.shape[0] - 1, 0))
        if at.shape[0] and not np.array_equal(keys[at], p_rows * scale + p_docs):
            raise fail("", f"postings.{f} holds a posting missing from the score rows")
        pair = name == "bigrams"
        start, stop = (single_end, docs.shape[0]) if pair else (0, single_end)
        frequencies.append(frequencies_of(p_tf.astype(np.int64), at.astype(np.int64), start, stop))
    starts, seconds = pair_tables(arrays["lexical.pair_keys"], n_single)
    return LexicalIndex(
        fields=tuple(fields),
        weights=weights,
        k1=float(settings.k1),
        b=float(settings.b),
        scoring=settings.scoring,
        vocabulary=vocabulary,
        indptr=indptr,
        docs=docs,
        scores=arrays["lexical.scores"],
        frequencies=tuple(frequencies),
        lengths=lengths,
        stats=FieldStats(
            arrays["lexical.field_doc_count"], arrays["lexical.field_avg_length"], n_docs
        ),
        pair_starts=starts,
        pair_seconds=seconds,
    )


def legacy_content_hash(entries: Iterable[KnowledgeEntry]) -> str:
    """The content hash version 1 recorded: SHA-256 streamed over each entry's record."""
    digest = hashlib.sha256()
    for entry in sorted(entries, key=lambda e: e.id):
        digest.update(content_record(entry))
        digest.update(b"\n")
    return digest.hexdigest()
