"""The repository corpus in a real temporary git repository: every rule, and regeneration."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from groundwire import ChunkingConfig, ConfigError, SourceError, build_corpus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    files = {
        ".gitignore": "*.log\nbuild/\nsecret-notes.md\n",
        "docs/guide.md": "# Guide\n\nInstall with pip.\n\n## Configure\n\nSet the key.\n",
        "docs/api/webhooks.md": "# Webhooks\n\nRetries happen 8 times.\n",
        "docs/diagram.png": "not really a png",
        "src/app.py": "def main():\n    return 1\n",
        "src/util.py": "class Helper:\n    pass\n",
        "debug.log": "log line\n",
        "build/out.md": "# generated\n",
        "secret-notes.md": "# tracked but ignored\n",
        "node_modules/pkg/index.js": "module.exports = 1;\n",
        ".env": "TOKEN=abc\n",
        "keys/deploy.txt": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n",
        "config/db.yaml": "url: postgres://app:hunter2@db.internal:5432/app\n",
        "config/public.yaml": "docs: https://user@docs.example.org/path\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def reasons(result: object) -> dict[str, str]:
    return {s.path: s.reason for s in result.skipped}  # type: ignore[attr-defined]


def test_only_the_allow_list_is_read(repo: Path) -> None:
    result = build_corpus(repo, ["docs/guide.md", "src/app.py"])
    assert [s.path for s in result.sources] == ["docs/guide.md", "src/app.py"]
    assert result.skipped == ()
    assert result.missing == ()
    guide = result.source("docs/guide.md")
    assert guide is not None
    raw = (repo / "docs" / "guide.md").read_bytes()
    assert guide.sha256 == hashlib.sha256(raw).hexdigest()
    assert guide.version == guide.sha256[:12]
    assert guide.text_sha256 == hashlib.sha256(raw).hexdigest()  # Markdown text is the file
    assert guide.kind == "markdown"
    assert guide.size == len(raw)
    assert [c.id for c in guide.chunks] == ["docs/guide.md#0"]
    assert guide.chunks[0].version == guide.version
    assert result.chunks == (*guide.chunks, *result.sources[1].chunks)
    assert result.sources[1].chunks[0].symbols == ("main",)


def test_folders_and_globs(repo: Path) -> None:
    by_folder = build_corpus(repo, ["docs"])
    assert [s.path for s in by_folder.sources] == ["docs/api/webhooks.md", "docs/guide.md"]
    assert reasons(by_folder) == {"docs/diagram.png": "unsupported file type '.png'"}
    by_glob = build_corpus(repo, ["docs/**/*.md", "src/*.py"])
    assert [s.path for s in by_glob.sources] == [
        "docs/api/webhooks.md",
        "docs/guide.md",
        "src/app.py",
        "src/util.py",
    ]
    top_only = build_corpus(repo, ["docs/*.md"])
    assert [s.path for s in top_only.sources] == ["docs/guide.md"]


def test_gitignore_is_respected_even_for_tracked_files(repo: Path) -> None:
    git(repo, "add", "secret-notes.md", "-f")
    git(repo, "commit", "-q", "-m", "track an ignored file")
    result = build_corpus(repo, ["debug.log", "secret-notes.md", "docs/guide.md", "**/*.md"])
    found = reasons(result)
    assert found["debug.log"].startswith("ignored by git (.gitignore:1: *.log)")
    assert found["secret-notes.md"].startswith("ignored by git (.gitignore:3: secret-notes.md)")
    assert "build/out.md" not in {s.path for s in result.sources}
    assert [s.path for s in result.sources] == ["docs/api/webhooks.md", "docs/guide.md"]


def test_a_negated_rule_does_not_ignore(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.md\n!docs/guide.md\n")
    result = build_corpus(repo, ["docs"])
    assert [s.path for s in result.sources] == ["docs/guide.md"]
    assert "ignored by git" in reasons(result)["docs/api/webhooks.md"]


def test_without_git_nothing_is_included(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = repo.parent / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(SourceError, match=r"git is not available.*nothing was included"):
        build_corpus(repo, ["docs/guide.md"])


def test_outside_a_work_tree_the_build_fails_closed(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.md").write_text("# A")
    with pytest.raises(SourceError, match=r"git check-ignore failed.*nothing was included"):
        build_corpus(plain, ["a.md"])


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinks_are_rejected(repo: Path) -> None:
    outside = repo.parent / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# outside the repo")
    (repo / "docs" / "link.md").symlink_to(outside / "secret.md")
    (repo / "linked").symlink_to(outside, target_is_directory=True)
    result = build_corpus(repo, ["docs/link.md", "linked/secret.md", "linked", "docs"])
    found = reasons(result)
    assert found["docs/link.md"] == "symlink (not followed)"
    assert found["linked/secret.md"] == "symlink in the path (not followed)"
    assert found["linked"] == "symlink (not followed)"
    assert all("outside" not in c.text for c in result.chunks)


def test_path_traversal_is_rejected(repo: Path) -> None:
    (repo.parent / "outside.md").write_text("# outside")
    inside = repo / "docs" / "guide.md"
    result = build_corpus(
        repo,
        ["../outside.md", "docs/../../outside.md", str(repo.parent / "outside.md"), str(inside)],
    )
    found = reasons(result)
    assert "path traversal" in found["../outside.md"]
    assert "path traversal" in found["docs/../../outside.md"]
    assert "outside the corpus root" in found[str(repo.parent / "outside.md")]
    assert [s.path for s in result.sources] == ["docs/guide.md"]


def test_dependency_vcs_and_hidden_paths_are_excluded(repo: Path) -> None:
    walked = build_corpus(repo, ["."])
    paths = {s.path for s in walked.sources}
    assert not any(p.startswith(("node_modules/", "build/", ".git/")) for p in paths)
    assert ".env" not in paths
    explicit = build_corpus(repo, ["node_modules/pkg/index.js", ".env", "node_modules", ".git"])
    found = reasons(explicit)
    assert found["node_modules/pkg/index.js"] == "in 'node_modules', a dependency/VCS/build folder"
    assert found[".env"] == "hidden file"
    assert found["node_modules"] == "in 'node_modules', a dependency/VCS/build folder"
    assert found[".git"] == "in '.git', a dependency/VCS/build folder"
    assert explicit.sources == ()


def test_private_keys_and_credential_urls_are_rejected(repo: Path) -> None:
    result = build_corpus(repo, ["keys/deploy.txt", "config/db.yaml", "config/public.yaml"])
    found = reasons(result)
    assert found["keys/deploy.txt"].startswith("contains a private key marker (line 1)")
    assert found["config/db.yaml"].startswith("contains a URL with a password (line 1")
    assert "hunter2" not in found["config/db.yaml"]
    assert [s.path for s in result.sources] == ["config/public.yaml"]


def test_non_regular_files_are_rejected(repo: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs named pipes")
    os.mkfifo(repo / "docs" / "pipe.md")
    result = build_corpus(repo, ["docs/pipe.md", "docs"])
    assert reasons(result)["docs/pipe.md"] == "not a regular file (a FIFO)"


def test_byte_and_file_bounds(repo: Path) -> None:
    (repo / "docs" / "big.md").write_text("# Big\n\n" + "word " * 400)
    result = build_corpus(repo, ["docs/big.md", "docs/guide.md"], max_file_bytes=1_000)
    assert "over the 1,000-byte limit" in reasons(result)["docs/big.md"]
    assert [s.path for s in result.sources] == ["docs/guide.md"]
    with pytest.raises(SourceError, match="max_total_bytes=60"):
        build_corpus(repo, ["docs/guide.md", "src/app.py"], max_total_bytes=60)
    with pytest.raises(SourceError, match="selects 2 files, over max_files=1"):
        build_corpus(repo, ["src"], max_files=1)
    with pytest.raises(ConfigError, match="max_file_bytes=0"):
        build_corpus(repo, ["src"], max_file_bytes=0)


def test_missing_entries_are_reported(repo: Path) -> None:
    result = build_corpus(repo, ["docs/guide.md", "docs/gone.md", "nothing/**/*.rst"])
    assert result.missing == ("docs/gone.md", "nothing/**/*.rst")
    assert [s.path for s in result.sources] == ["docs/guide.md"]
    with pytest.raises(SourceError, match="allow-list is empty"):
        build_corpus(repo, [])


def test_regeneration_reuses_replaces_and_removes(repo: Path) -> None:
    include = ["docs/guide.md", "docs/api/webhooks.md", "src/app.py", "src/util.py"]
    first = build_corpus(repo, include)
    assert first.added == tuple(sorted(include))
    (repo / "docs" / "guide.md").write_text("# Guide\n\nInstall with uv now.\n")
    (repo / "src" / "util.py").unlink()
    second = build_corpus(repo, [*include, "src/new.py"], previous=first)
    (repo / "src" / "new.py").write_text("def new():\n    pass\n")
    third = build_corpus(repo, [*include, "src/new.py"], previous=second)

    assert second.reused == ("docs/api/webhooks.md", "src/app.py")
    for path in second.reused:
        old, new = first.source(path), second.source(path)
        assert old is not None
        assert new is old
        assert new.chunks is old.chunks
    assert second.changed == ("docs/guide.md",)
    guide = second.source("docs/guide.md")
    assert guide is not None
    assert "uv" in guide.chunks[0].text
    assert guide.version != first.source("docs/guide.md").version  # type: ignore[union-attr]
    assert second.removed == ("src/util.py",)
    assert second.source("src/util.py") is None
    assert not any(c.source_id == "src/util.py" for c in second.chunks)
    assert second.missing == ("src/util.py", "src/new.py")
    assert third.added == ("src/new.py",)
    assert third.missing == ("src/util.py",)
    assert len(third.reused) == 3


def test_a_new_chunking_config_rechunks_everything(repo: Path) -> None:
    first = build_corpus(repo, ["docs"])
    again = build_corpus(repo, ["docs"], previous=first, config=ChunkingConfig(size=20, overlap=0))
    assert again.reused == ()
    assert again.changed == ("docs/api/webhooks.md", "docs/guide.md")
    assert all(len(c.text) <= 20 for c in again.chunks)
