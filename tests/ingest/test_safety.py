"""What is never indexed: secrets however encoded, hard links, files git ignores (issues 9, 10).

The corpus and documents share one rule set (groundwire.ingest.safety); the documents
side is tested in a real temporary git repository, as the corpus is.
"""

from __future__ import annotations

import codecs
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from groundwire import build_corpus, find_secret, load_documents

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]

# Fake secrets, split so this file itself carries no marker.
KEY = "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tR\n"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


# -- the secret scanner ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (KEY.encode("utf-16"), "private key"),  # UTF-16 with a byte-order mark
        (("&#45;" + KEY[1:]).encode(), "private key"),  # an HTML character reference
        (("&#x2D;&#x2D;" + KEY[2:]).encode(), "private key"),
        (("\\u002d" + KEY[1:]).encode(), "private key"),  # a JSON escape
        (KEY.replace("-", "\uff0d").encode(), "private key"),  # full-width hyphens
        (KEY.replace("PRIVATE", "PRI\u200bVATE").encode(), "private key"),  # zero-width
        (b"BEGIN OPENSSH " + b"PRIVATE KEY\nb3Bl\n", "private key"),  # no dashes at all
        (b"PuTTY-User-Key-File-3: ssh-ed25519\n", "private key"),
        (b"cache: redis://:s3cretpass@cache.internal:6379/0\n", "URL with a password"),
        (b"db: postgres://app:pa/ss@db.internal/app\n", "URL with a password"),
        (b"db: postgres://app:pa#ss@db.internal/app\n", "URL with a password"),
        (b'{"url": "amqp:\\/\\/guest:hunter2@mq.internal\\/"}', "URL with a password"),
        (b'{"url": "amqp:\\u002f\\u002fguest:hunter2@mq.internal"}', "URL with a password"),
        (f"aws_access_key_id = {AWS}\n".encode(), "AWS access key"),
        (f"token: {GITHUB}\n".encode(), "GitHub token"),
        (b"slack: xoxb-1234567890-abcdefghij\n", "Slack token"),
        (b"key = sk_live_" + b"4eC39HqLyjWDarjtT1zdp7dc\n", "Stripe live key"),
    ],
)
def test_secrets_are_found_however_they_are_encoded(content: bytes, kind: str) -> None:
    text = content.decode("utf-16") if content.startswith(codecs.BOM_UTF16_LE) else None
    if text is None:
        text = content.decode("utf-8")
    reason = find_secret(content, text)
    assert reason is not None
    assert kind in reason
    assert "s3cretpass" not in reason  # never repeats the secret
    assert "hunter2" not in reason


@pytest.mark.parametrize(
    "content",
    [
        b"Connect with postgres://user:password@localhost:5432/app (replace the password).",
        b"url: postgres://app:${DB_PASSWORD}@db/app",
        b"url: mysql://root:***@localhost",
        b"docs: https://user@docs.example.org/path",
        b"see http://localhost:8080/@scope/pkg and https://medium.com:443/@writer",
        b"A PEM file starts with a header line naming the key type.",
        b"scikit-learn is imported as sk-learn in these notes",
    ],
)
def test_ordinary_text_is_not_a_secret(content: bytes) -> None:
    assert find_secret(content, content.decode()) is None


def test_the_scan_is_linear_on_crafted_text() -> None:
    # Unbounded scheme and password runs made the old pattern quadratic on such text.
    crafted = "a" * 200_000 + "://" + ("x://:" * 40_000)
    assert find_secret(crafted.encode(), crafted) is None


# -- the corpus --------------------------------------------------------------------------
@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text("site/\n", encoding="utf-8")
    files = {
        "docs/guide.md": "# Guide\n\nInstall with pip.\n",
        "docs/key-utf16.txt": None,
        "docs/entity.html": "<html><body><pre>&#45;" + KEY[1:] + "</pre></body></html>",
        "docs/entity.md": "# Key\n\n&#45;" + KEY[1:],
        "docs/cache.md": "# Cache\n\nredis://:s3cretpass@cache.internal:6379\n",
        "docs/slash.md": "# DB\n\npostgres://app:pa/ss@db.internal/app\n",
        "docs/json.json": '{"url": "amqp:\\/\\/guest:hunter2@mq.internal\\/"}',
        "docs/token.md": f"# CI\n\nexport GITHUB_TOKEN={GITHUB}\n",
        "site/index.html": "<html><body><h1>Built docs</h1></body></html>",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            path.write_bytes(KEY.encode("utf-16"))
        else:
            path.write_text(text, encoding="utf-8")
    return root


SECRET_FILES = {
    "docs/key-utf16.txt": "private key",
    "docs/entity.html": "private key",
    "docs/entity.md": "private key",
    "docs/cache.md": "password",
    "docs/slash.md": "password",
    "docs/json.json": "password",
    "docs/token.md": "GitHub token",
}


def test_the_corpus_skips_encoded_secrets(repo: Path) -> None:
    # Old: UTF-16, entities, an empty user, "/" in the password and JSON-escaped slashes
    # all passed the raw-byte check, and the secrets ended up in chunks.
    result = build_corpus(repo, ["docs"])
    reasons = {s.path: s.reason for s in result.skipped}
    assert [s.path for s in result.sources] == ["docs/guide.md"]
    for path, kind in SECRET_FILES.items():
        assert kind in reasons[path], reasons
    text = " ".join(chunk.text for chunk in result.chunks)
    assert "PRIVATE KEY" not in text
    assert "s3cretpass" not in text


def test_the_corpus_refuses_hard_links_unless_allowed(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-notes.md"
    outside.write_text("# Outside\n\nPrivate notes kept outside the repository.\n")
    os.link(outside, repo / "docs" / "linked.md")
    result = build_corpus(repo, ["docs/linked.md", "docs/guide.md"])
    assert [s.path for s in result.sources] == ["docs/guide.md"]
    assert "2 hard links" in {s.path: s.reason for s in result.skipped}["docs/linked.md"]
    allowed = build_corpus(repo, ["docs/linked.md"], allow_hard_links=True)
    assert [s.path for s in allowed.sources] == ["docs/linked.md"]


# -- documents: the same rules ----------------------------------------------------------
def test_documents_in_a_work_tree_follow_gitignore_and_skip_secrets(repo: Path) -> None:
    result = load_documents([repo / "docs", repo / "site"])
    reasons = {s.path: s.reason for s in result.skipped}
    assert [d.source_id for d in result.documents] == ["guide.md"]
    assert reasons["index.html"].startswith("ignored by git (.gitignore:1: site/)")
    for path, kind in SECRET_FILES.items():
        assert kind in reasons[path.removeprefix("docs/")]


def test_gitignore_can_be_turned_off_for_documents(repo: Path) -> None:
    result = load_documents(repo / "site", gitignore=False)
    assert [d.source_id for d in result.documents] == ["index.html"]


def test_a_file_given_directly_is_checked_too(repo: Path) -> None:
    result = load_documents([repo / "site" / "index.html", repo / "docs" / "cache.md"])
    assert result.documents == ()
    assert [s.reason.split(" (")[0] for s in result.skipped] == [
        "ignored by git",
        "contains a URL with a password",
    ]


def test_documents_outside_any_work_tree_are_not_filtered_by_git(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / ".gitignore").write_text("*.md\n")  # no repository: this file means nothing
    (folder / "a.md").write_text("# A\n\ntext")
    assert [d.source_id for d in load_documents(folder).documents] == ["a.md"]


def test_without_git_a_work_tree_fails_closed(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from groundwire import SourceError

    monkeypatch.setenv("PATH", str(repo / "no-such-bin"))
    with pytest.raises(SourceError, match="git is not available"):
        load_documents(repo / "docs")
    assert load_documents(repo / "docs", gitignore=False).documents
