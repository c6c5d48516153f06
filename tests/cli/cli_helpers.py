"""Helpers shared by the CLI tests (loaded by tests/conftest.py as ``cli_helpers``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.main import get_command
from typer.testing import CliRunner

from groundwire.cli import app

ROOT = Path(__file__).resolve().parents[2]
HANDBOOK = str(ROOT / "examples" / "handbook")
DOCS = ROOT / "docs" / "CLI.md"
ROTATION = "security.api-key-rotation"
ROTATION_TAG = "[KB:security.api-key-rotation@2026-11-15]"
SLACK_ONLY = "troubleshooting.slack-bot-not-posting"  # integrations: [slack]
SLACK_QUERY = "slack bot not posting"

GROUND_KEYS = {"block", "metadata", "candidates"}
BLOCK_KEYS = {"kind", "trusted", "content", "citations", "metadata"}
METADATA_KEYS = {
    "selected_ids",
    "expanded_ids",
    "candidate_count",
    "context_tokens",
    "truncated",
    "duration_ms",
    "confidence",
    "failure_reason",
    "truncated_query",
    "out_of_scope_count",
    "out_of_scope_integrations",
    "named_integrations",
    "authorization_errors",
    "channels",
}
STATUS_KEYS = {"enabled", "ready", "entry_count", "last_error", "validation_issues"}
ISSUE_KEYS = {"severity", "code", "message", "source_id", "entry_id", "field", "origin"}
BREAKDOWN_KEYS = {"title", "aliases", "keywords", "summary", "body", "exact", "alias"}
COMMANDS = sorted(get_command(app).commands)  # type: ignore[attr-defined]
#: Commands that take a knowledge base (``memory`` takes a store: tests/cli/test_memory_cli.py;
#: ``sync`` a CONFIG; ``keygen`` makes an API key: tests/server/test_cli.py).
KB_COMMANDS = [name for name in COMMANDS if name not in ("memory", "sync", "keygen")]

runner = CliRunner()


def run(*args: str) -> Any:
    """Invoke the CLI in-process; never a traceback, never an escaped exception."""
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def run_json(*args: str, code: int = 0) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def one_error_line(result: Any) -> str:
    """The single ``error:`` line a failing command writes to stderr."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def write_kb(root: Path, entries: dict[str, str], manifest: str = 'id: t\nversion: "1"\n') -> str:
    """A Markdown knowledge base folder: source.yaml plus one file per entry."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "source.yaml").write_text(manifest, encoding="utf-8")
    for name, text in entries.items():
        (root / name).write_text(text, encoding="utf-8")
    return str(root)


def entry(entry_id: str, extra: str = "", body: str = "Body text.") -> str:
    return (
        f"---\nid: {entry_id}\ntitle: {entry_id} title\nsummary: Summary of {entry_id}.\n"
        f"domain: {entry_id.split('.')[0]}\n{extra}---\n{body}\n"
    )
