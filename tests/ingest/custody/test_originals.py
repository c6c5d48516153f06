"""Custody: declared size and digest verified, insert-only storage, provenance, quarantine."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from groundwire import CustodyError
from groundwire.ingest.custody import Custody, FolderStore, Provenance
from groundwire.ingest.custody.media import media_mismatch

PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
ZIP = b"PK\x03\x04" + b"\x00" * 40
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 40


def _custody(tmp_path: Path) -> Custody:
    return Custody(FolderStore(tmp_path / "originals"))


def _from(account: str, key: str = "k") -> Provenance:
    return Provenance("src", account, key)


def test_declared_size_and_digests_are_verified(tmp_path: Path) -> None:
    custody = _custody(tmp_path)
    data = b"quarterly numbers\n"
    wrong_size = custody.admit(data, provenance=_from("a"), name="q.txt", size=len(data) + 1)
    assert not wrong_size.accepted
    assert wrong_size.reason == "size-mismatch"
    assert f"{len(data) + 1:,} bytes" in wrong_size.detail
    wrong_sha = custody.admit(
        data, provenance=_from("a"), name="q.txt", sha256=hashlib.sha256(b"x").hexdigest()
    )
    assert not wrong_sha.accepted
    assert wrong_sha.reason == "digest-mismatch"
    wrong_md5 = custody.admit(data, provenance=_from("a"), name="q.txt", md5="0" * 32)
    assert wrong_md5.reason == "digest-mismatch"
    assert FolderStore(tmp_path / "originals").names("objects/") == []  # nothing stored
    good = custody.admit(
        data,
        provenance=_from("a"),
        name="q.txt",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        md5=hashlib.md5(data).hexdigest(),
    )
    assert good.accepted
    assert good.stored
    assert custody.read(good.sha256) == data


def test_same_bytes_from_another_account_append_provenance(tmp_path: Path) -> None:
    custody = _custody(tmp_path)
    first = custody.admit(PDF, provenance=_from("alice@acme"), media_type="application/pdf")
    again = custody.admit(PDF, provenance=_from("alice@acme"), media_type="application/pdf")
    other = custody.admit(PDF, provenance=_from("bob@acme"), media_type="application/pdf")
    assert (first.stored, first.provenance_added) == (True, True)
    assert (again.stored, again.provenance_added) == (False, False)  # a replay adds nothing
    assert (other.stored, other.provenance_added) == (False, True)
    assert len(custody.store.names("objects/")) == 1
    assert [r["account"] for r in custody.provenance(first.sha256)] == ["alice@acme", "bob@acme"]


@pytest.mark.parametrize(
    ("declared", "data", "found"),
    [
        ("application/pdf", PNG, "PNG"),
        ("image/png", PDF, "PDF"),
        ("text/plain", ELF, "EXE"),
        ("application/pdf", b"plain words", "no matching signature"),
        ("text/csv", ZIP, "ZIP"),
    ],
)
def test_media_types_that_do_not_match_the_bytes_are_quarantined(
    tmp_path: Path, declared: str, data: bytes, found: str
) -> None:
    custody = _custody(tmp_path)
    admission = custody.admit(data, provenance=_from("a", "file.bin"), media_type=declared)
    assert not admission.accepted
    assert admission.quarantined
    assert found in admission.detail
    assert declared in admission.detail
    assert custody.store.names("objects/") == []
    [record] = custody.quarantined()
    assert record["sha256"] == admission.sha256
    assert record["key"] == "file.bin"


def test_matching_and_unjudged_types_are_admitted(tmp_path: Path) -> None:
    assert media_mismatch("application/pdf", PDF) is None
    assert (
        media_mismatch(
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document", ZIP
        )
        is None
    )
    assert media_mismatch("text/markdown", b"# hi") is None
    assert media_mismatch("application/octet-stream", ELF) is None
    assert media_mismatch("application/x-unknown-thing", PNG) is None
    custody = _custody(tmp_path)
    assert custody.admit(PNG, provenance=_from("a"), name="logo.png").accepted  # type from the name


def test_the_store_is_insert_only_and_reads_are_verified(tmp_path: Path) -> None:
    custody = _custody(tmp_path)
    admission = custody.admit(b"original text\n", provenance=_from("a"), name="a.txt")
    path = tmp_path / "originals" / "objects" / admission.sha256[:2] / admission.sha256
    assert not custody.store.put(
        f"objects/{admission.sha256[:2]}/{admission.sha256}", b"other bytes"
    )
    assert path.read_bytes() == b"original text\n"
    os.chmod(path, 0o644)
    path.write_bytes(b"tampered text\n")
    assert custody.verify(admission.sha256) is not None
    with pytest.raises(CustodyError, match="altered"):
        custody.read(admission.sha256)
    with pytest.raises(CustodyError, match="not in custody"):
        custody.read("0" * 64)
