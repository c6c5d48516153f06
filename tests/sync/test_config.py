"""The sync configuration file and the checkpoint store's lease."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from groundwire import ConfigError, SyncError, load_sync_config
from groundwire.ingest.adapters import CheckpointStore
from groundwire.sync.config import build_provider
from synctools import write_config


def test_a_configuration_resolves_paths_labels_and_defaults(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        [
            {
                "id": "mail",
                "type": "mbox",
                "path": "m.mbox",
                "tenant": "acme",
                "acl": ["group:b", "group:a"],
                "owner": "ops",
            }
        ],
        chunking={"size": 800, "overlap": 80},
    )
    config = load_sync_config(path)
    source = config.source("mail")
    assert source.labels.tenant == "acme"
    assert source.labels.acl == ("group:a", "group:b", "user:ops")
    assert config.state == tmp_path.resolve() / "state"
    assert config.snapshot == tmp_path.resolve() / "kb"
    assert config.chunking.size == 800
    assert build_provider(source, config).kind == "mbox"
    with pytest.raises(ConfigError, match="no source 'other'; configured: mail"):
        config.source("other")


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ([{"id": "a", "type": "ftp"}], "expected one of mbox"),
        ([{"id": "a/b", "type": "mbox", "path": "m"}], "without spaces, '/'"),
        (
            [{"id": "a", "type": "mbox", "path": "m"}, {"id": "a", "type": "mbox", "path": "n"}],
            "configured twice",
        ),
        ([{"id": "a", "type": "imap", "host": "h", "username": "u"}], "needs 'password_env'"),
        (
            [{"id": "a", "type": "mbox", "path": "m", "tenant": "two words"}],
            "not a valid tenant id",
        ),
        (
            [{"id": "a", "type": "mbox", "path": "m", "acl": ["admins"]}],
            "not user:<subject> or group:<group>",
        ),
        (
            [{"id": "a", "type": "s3", "bucket": "b", "secret_key": "x"}],
            "name it with 'secret_key_env'",
        ),
        (
            [{"id": "a", "type": "gmail", "token": "ya29", "token_env": "T"}],
            "name it with 'token_env'",
        ),
        ([{"id": "a", "type": "folder", "paht": "d"}], "did you mean 'path'"),
    ],
)
def test_mistakes_are_errors_that_say_how_to_fix_them(
    tmp_path: Path, sources: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_sync_config(write_config(tmp_path, sources))


def test_a_missing_credential_variable_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GW_NOT_SET", raising=False)
    config = load_sync_config(
        write_config(
            tmp_path,
            [
                {
                    "id": "a",
                    "type": "imap",
                    "host": "h",
                    "username": "u",
                    "password_env": "GW_NOT_SET",
                }
            ],
        )
    )
    with pytest.raises(ConfigError, match=r"'GW_NOT_SET' .* is not set"):
        build_provider(config.source("a"), config)


def test_a_lease_is_exclusive_until_released_expired_or_its_holder_dies(tmp_path: Path) -> None:
    first = CheckpointStore(tmp_path / "c.sqlite")
    second = CheckpointStore(tmp_path / "c.sqlite")
    with first.lease("src", 60.0, now=1000.0):
        with (
            pytest.raises(SyncError, match="being synced by") as caught,
            second.lease("src", 60.0, now=1010.0),
        ):
            pass
        assert caught.value.retryable
        with second.lease("src", 60.0, now=1061.0):  # expired: taken over
            pass
    with second.lease("src", 60.0, now=2000.0):
        pass
    # a lease left by a process that no longer runs on this host is taken over at once
    first._db.execute(
        "INSERT OR REPLACE INTO leases VALUES ('src', 'dead', ?, ?, ?)",
        (os.uname().nodename, 2**22 + 12345, 10**12),
    )
    with second.lease("src", 60.0):
        pass
    first.close()
    second.close()


def test_event_keys_and_channels_are_remembered(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "c.sqlite")
    assert store.claim_event("src", "message-1")
    assert not store.claim_event("src", "message-1")
    assert store.claim_event("other", "message-1")
    store.close()
