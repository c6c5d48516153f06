"""Fuzz: the snapshot reader, as a black box through ``KnowledgeBase.load``.

Three kinds of damage to a saved snapshot: raw edits of any file (the checksums must
catch them); a *consistent* tamper — an array or entries file edited, renamed to its
new content hash, its manifest record updated and the manifest re-signed, as anyone
with write access could (only the reader's bound checks stand in the way); and edits
of manifest values, re-signed. ``load`` (``verify="full"``, and ``"manifest"`` for the
re-signed edits) must raise IndexFormatError (any KnowledgeIndexError) or return a
snapshot that then answers queries without crashing; no other exception is tolerated.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import FUZZ, SCALARS, mutated, ran
from hypothesis import given
from hypothesis import strategies as st

from groundwire import KnowledgeBase, KnowledgeIndexError, Scope, normalize_and_validate
from groundwire.index.store import digests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _entries() -> tuple[Any, ...]:
    entries = [
        {
            "id": f"kb.e{n}",
            "title": f"Entry {n} webhooks",
            "summary": f"Summary {n} retries.",
            "domain": "kb" if n % 2 else "ops",
            "integrations": [] if n % 3 else ["slack"],
            "aliases": [f"alias {n}"],
            "keywords": ["webhook", f"k{n}"],
            "related": [f"kb.e{(n + 1) % 6}"],
            "parent": "kb.e0" if n else None,
            "body": f"Body {n}: deliveries retry eight times." * 3,
        }
        for n in range(6)
    ]
    report = normalize_and_validate([{"id": "kb", "version": "1", "entries": entries}])
    assert report.ok
    return report.entries


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz-snapshot") / "snap"
    KnowledgeBase(_entries(), __import__("groundwire").IndexSettings()).save(path)
    return path


@contextlib.contextmanager
def _copy_of(base: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A scratch copy of the snapshot, and its manifest as data."""
    with tempfile.TemporaryDirectory() as folder:
        snap = Path(folder) / "snap"
        shutil.copytree(base, snap)
        yield snap, json.loads((snap / "manifest.json").read_text(encoding="utf-8"))


def _sign(manifest: dict[str, Any]) -> bytes:
    manifest.pop("manifest_sha256", None)
    canonical = json.dumps(manifest, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    manifest["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    return (json.dumps(manifest, ensure_ascii=False, indent=1) + "\n").encode()


def _use(kb: KnowledgeBase) -> None:
    """Everything a reader does with a snapshot; none of it may crash."""
    for hit in kb.search("webhook deliveries retry", k=5):
        kb.explain("webhook deliveries retry", hit.id)
    kb.search("alias 3", k=3, scope=Scope(["slack"]), blocked_domains=["ops"])
    for entry in kb:
        kb.related(entry.id)


def _check(folder: Path, verify: str) -> None:
    """Load ``folder``: a clear refusal, or a snapshot every reader call works on.

    Strict: a crash of any other kind fails, whatever the verification mode (the
    ``"manifest"`` mode skips checksums, never the bounds that keep reads in range).
    """
    try:
        kb = KnowledgeBase.load(folder, verify=verify)  # type: ignore[arg-type]
    except KnowledgeIndexError:
        return
    # Entries decode lazily: a tampered one may be reported when first read, as an
    # IndexFormatError (a clear error, not a crash).
    with contextlib.suppress(KnowledgeIndexError):
        _use(kb)


@FUZZ
@given(st.data())
def test_raw_edits_of_any_file(base: Path, data: st.DataObject) -> None:
    ran("KnowledgeBase.load: raw edits")
    with _copy_of(base) as (snap, _):
        names = sorted(p.name for p in snap.iterdir() if p.name != ".lock")
        victim = snap / data.draw(st.sampled_from(names))
        victim.write_bytes(data.draw(mutated(victim.read_bytes())))
        _check(snap, "full")


@FUZZ
@given(st.data())
def test_consistent_tampering_of_arrays_and_entries(base: Path, data: st.DataObject) -> None:
    ran("KnowledgeBase.load: re-signed file edits")
    with _copy_of(base) as (snap, manifest):
        logical = data.draw(st.sampled_from(sorted(manifest["files"])))
        record = manifest["files"][logical]
        old = snap / record["file"]
        raw = old.read_bytes()
        header = raw.index(b"\n") + 1 if record["file"].endswith(".npy") else len(raw)
        if header < len(raw) and data.draw(st.booleans()):  # keep the header: edit values
            flips = data.draw(st.lists(st.integers(header * 8, len(raw) * 8 - 1), max_size=4))
            edited = bytearray(raw)
            for bit in flips:
                edited[bit // 8] ^= 1 << (bit % 8)
            new = bytes(edited)
        else:
            new = data.draw(mutated(raw))
        algorithm, old_hex = digests.split(record["digest"])  # format 3: "<algorithm>:<hex>"
        digest, _, check = digests.of_chunks([new], algorithm)
        name = record["file"].replace(old_hex[:12], digests.split(digest)[1][:12])
        old.unlink()
        (snap / name).write_bytes(new)
        record.update({"file": name, "digest": digest, "bytes": len(new)})
        if "check" in record:  # a consistent rewrite: the check follows the bytes too
            record["check"] = check
        (snap / "manifest.json").write_bytes(_sign(manifest))
        _check(snap, data.draw(st.sampled_from(["full", "manifest"])))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            found += _paths(item, (*prefix, n))
    return found


@FUZZ
@given(st.data())
def test_re_signed_manifest_values(base: Path, data: st.DataObject) -> None:
    ran("KnowledgeBase.load: re-signed manifest values")
    with _copy_of(base) as (snap, manifest):
        for _ in range(data.draw(st.integers(1, 3))):
            where = data.draw(st.sampled_from([p for p in _paths(manifest) if p]))
            parent = manifest
            for key in where[:-1]:
                parent = parent[key]
            replacement = data.draw(
                SCALARS.filter(lambda v: not hasattr(v, "isoformat"))
                | st.integers(-(2**63), 2**63)
                | st.lists(st.integers(-5, 10**6), max_size=3)
                | st.just({})
            )
            parent[where[-1]] = replacement
        (snap / "manifest.json").write_bytes(_sign(manifest))
        _check(snap, "full")
