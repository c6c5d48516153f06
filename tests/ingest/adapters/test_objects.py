"""Object storage: a local folder, and S3 on moto's standalone server (127.0.0.1)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from groundwire import KnowledgeBase
from synctools import search_ids, syncer, write_config

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def test_folder_additions_edits_deletions_and_skips(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "onboarding.md").write_text(
        "# Onboarding\n\nNew hires get a laptop on day one.\n"
    )
    (docs / "faq.txt").write_text("Parking is free after 6 pm.\n")
    (docs / ".secret.txt").write_text("hidden\n")
    (docs / "key.txt").write_text(
        "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n"
    )
    config = write_config(
        tmp_path, [{"id": "docs", "type": "folder", "path": "docs", "tenant": "acme"}]
    )
    with syncer(config) as sync:
        first = sync.run_once().sources[0]
        assert sorted(first.new) == ["docs/faq.txt", "docs/guides/onboarding.md"]
        assert [s.path for s in first.skipped] == ["key.txt"]
        assert "private key" in first.skipped[0].reason
        assert search_ids(tmp_path / "kb", "laptop day one") == ["docs/guides/onboarding.md"]

        (docs / "faq.txt").write_text("Parking is free after 7 pm.\n")
        os.utime(docs / "faq.txt", ns=(1, 2_000_000_000_000_000_000))
        (docs / "guides" / "onboarding.md").unlink()
        second = sync.run_once().sources[0]
        assert second.changed == ["docs/faq.txt"]
        assert second.removed == ["docs/guides/onboarding.md"]
        assert not search_ids(tmp_path / "kb", "laptop day one")
        kb = KnowledgeBase.load(tmp_path / "kb")
        assert "7 pm" in kb.get(kb.search("parking", k=1)[0].id).body  # type: ignore[union-attr]

        third = sync.run_once()
        assert third.published is None  # nothing changed: the snapshot is not rewritten
        assert third.sources[0].unchanged == 1
        assert [s.path for s in third.sources[0].skipped] == ["key.txt"]  # said again each run
        assert not any(
            b"PRIVATE KEY" in sync.custody.store.get(n) or b""
            for n in sync.custody.store.names("objects/")
        )


@pytest.mark.integration
def test_s3_listing_deltas_deletions_and_quarantine(tmp_path: Path, moto_s3: Any) -> None:
    bucket = moto_s3.bucket()
    s3 = moto_s3.client()
    s3.put_object(
        Bucket=bucket, Key="handbook/leave.md", Body=b"# Leave\n\nAnnual leave is 25 days.\n"
    )
    s3.put_object(Bucket=bucket, Key="handbook/remote.txt", Body=b"Remote work needs a VPN.\n")
    s3.put_object(Bucket=bucket, Key="handbook/scan.pdf", Body=PNG)  # lies about its type
    s3.put_object(Bucket=bucket, Key="other/ignored.txt", Body=b"outside the prefix\n")
    config = write_config(
        tmp_path,
        [
            {
                "id": "bucket",
                "type": "s3",
                "bucket": bucket,
                "prefix": "handbook/",
                "endpoint_url": moto_s3.endpoint,
                "region": "us-east-1",
                "tenant": "acme",
                "acl": ["group:hr"],
            }
        ],
        batch_size=1,
    )
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with syncer(config) as sync:
        first = sync.run_once().sources[0]
        assert first.error is None, first.error
        assert sorted(first.new) == ["bucket/handbook/leave.md", "bucket/handbook/remote.txt"]
        assert first.quarantined == 1
        assert "quarantined: media-type-mismatch" in first.skipped[0].reason
        assert first.batches == 3  # one object per page
        quarantined = sync.custody.quarantined()
        assert quarantined[0]["key"] == "handbook/scan.pdf"

        s3.put_object(
            Bucket=bucket, Key="handbook/leave.md", Body=b"# Leave\n\nAnnual leave is 27 days.\n"
        )
        s3.delete_object(Bucket=bucket, Key="handbook/remote.txt")
        s3.put_object(Bucket=bucket, Key="handbook/new.txt", Body=b"Lunch is served at noon.\n")
        second = sync.run_once().sources[0]
        assert second.changed == ["bucket/handbook/leave.md"]
        assert second.removed == ["bucket/handbook/remote.txt"]
        assert second.new == ["bucket/handbook/new.txt"]
        assert second.unchanged == 0
        assert second.quarantined == 1
        assert search_ids(tmp_path / "kb", "annual leave days") == ["bucket/handbook/leave.md"]
        assert not search_ids(tmp_path / "kb", "VPN remote")


@pytest.mark.integration
def test_originals_can_live_in_an_s3_custody_store(tmp_path: Path, moto_s3: Any) -> None:
    bucket = moto_s3.bucket()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("Same bytes.\n")
    (tmp_path / "docs" / "b.txt").write_text("Same bytes.\n")
    config = write_config(
        tmp_path,
        [{"id": "docs", "type": "folder", "path": "docs"}],
        originals={
            "type": "s3",
            "bucket": bucket,
            "prefix": "custody",
            "endpoint_url": moto_s3.endpoint,
            "region": "us-east-1",
        },
    )
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with syncer(config) as sync:
        report = sync.run_once().sources[0]
        assert report.originals_stored == 1
        assert report.provenance_added == 2
    keys = sorted(o["Key"] for o in moto_s3.client().list_objects_v2(Bucket=bucket)["Contents"])
    assert sum(1 for key in keys if key.startswith("custody/objects/")) == 1
    assert sum(1 for key in keys if key.startswith("custody/provenance/")) == 2
    body = moto_s3.client().get_object(
        Bucket=bucket, Key=next(k for k in keys if "/objects/" in k)
    )["Body"]
    assert io.BytesIO(body.read()).read() == b"Same bytes.\n"
