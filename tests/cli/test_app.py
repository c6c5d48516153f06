"""The command group: errors common to every command, usage errors, version, help, the
console script, and the documentation of every command."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import (
    COMMANDS,
    DOCS,
    HANDBOOK,
    KB_COMMANDS,
    ROTATION,
    ROTATION_TAG,
    one_error_line,
    run,
    runner,
    write_kb,
)
from typer.main import get_command

import groundwire
from groundwire.cli import app


# -- errors common to every command ----------------------------------------------------------
def _args(command: str, kb: str) -> list[str]:
    if command in ("index", "ingest"):
        return [command, kb, "--out", kb + "-snapshot"]
    if command == "export":
        return [command, kb, "--milvus", kb + ".db"]
    return [command, kb, "api key"] if command in ("ground", "search", "ask") else [command, kb]


@pytest.mark.parametrize("command", KB_COMMANDS)
def test_missing_kb_is_one_clean_error_line(command: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-kb")
    result = run(*_args(command, missing))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert missing in line
    assert "no such file or folder" in line
    assert result.stdout == ""


# ingest reads documents, not entries: a bad front matter skips that file with its reason
# (test_ingest_summary_lists_skipped_files_with_reasons).
@pytest.mark.parametrize("command", [name for name in KB_COMMANDS if name != "ingest"])
def test_malformed_front_matter_names_the_file(command: str, tmp_path: Path) -> None:
    kb = write_kb(tmp_path / "kb", {"broken.md": "---\nid: x.y\ntitle: [unclosed\n---\nbody\n"})
    result = run(*_args(command, kb))
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "broken.md" in line
    assert "invalid YAML" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ground", HANDBOOK, "q", "--bogus"], "No such option: --bogus"),
        (["ground", HANDBOOK], "Missing argument 'QUERY'"),
        (["search", HANDBOOK, "q", "--limit", "0"], "--limit"),
        (["nosuch"], "No such command 'nosuch'"),
        (["ground", HANDBOOK, "q", "--blocked-domain", ""], "blocked_domains"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert message in one_error_line(result)
    assert result.stdout == ""


def test_version_and_help() -> None:
    version = run("--version")
    assert version.exit_code == 0
    assert version.stdout.strip() == f"groundwire {groundwire.__version__}"
    listing = run("--help")
    assert listing.exit_code == 0
    for command in COMMANDS:
        assert command in listing.stdout
    bare = run()
    assert bare.exit_code == 0
    assert "Usage" in bare.stdout


def test_ground_help_explains_the_integration_rule() -> None:
    result = run("ground", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "only included when you pass --integration NAME" in text
    search_help = " ".join(run("search", "--help").stdout.replace("│", " ").split())
    assert "does not filter by integration" in search_help


# -- the installed console script -------------------------------------------------------------
def _script() -> str:
    bindir = Path(sys.executable).parent
    found = shutil.which("groundwire", path=str(bindir))
    if found is None:
        pytest.skip(f"the groundwire console script is not installed in {bindir}")
    return found


def _script_run(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [_script(), *args], capture_output=True, text=True, encoding="utf-8", timeout=120
    )
    assert "Traceback" not in result.stdout + result.stderr
    return result


@pytest.mark.integration
def test_script_grounds_the_handbook() -> None:
    result = _script_run("ground", HANDBOOK, "how do I rotate an API key", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["metadata"]["selected_ids"][0] == ROTATION
    assert ROTATION_TAG in data["block"]["citations"]
    assert result.stderr == ""


@pytest.mark.integration
def test_script_validate_and_usage_errors(broken_kb: str) -> None:
    invalid = _script_run("validate", broken_kb)
    assert invalid.returncode == 1
    assert "failed: 0 valid entries, 2 errors, 0 warnings" in invalid.stdout
    bad_flag = _script_run("search", HANDBOOK, "q", "--zzz")
    assert bad_flag.returncode == 2
    assert bad_flag.stderr.splitlines() == ["error: No such option: --zzz"]
    assert _script_run("--version").stdout.strip() == f"groundwire {groundwire.__version__}"


# -- documentation (every command documented, every --help works) ------------------------------
def test_every_command_is_documented_with_its_options() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    sections = re.split(r"^## ", docs, flags=re.MULTILINE)
    for name in COMMANDS:
        matching = [s for s in sections if s.startswith(f"`groundwire {name}")]
        assert matching, f"docs/CLI.md has no '## `groundwire {name}`' section"
        command = get_command(app).commands[name]  # type: ignore[attr-defined]
        for param in command.params:
            for option in param.opts:
                if option.startswith("--") and option != "--help":
                    assert option in matching[0], f"{option} of {name} is not documented"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0
    assert f"groundwire {command}" in result.stdout


def _help(command: str) -> str:
    """A command's help as a wide terminal shows it, whitespace runs folded."""
    result = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def _documented_defaults(command: str) -> dict[str, str]:
    """``--option`` → the default docs/CLI.md gives it (``default 5``, ``default `test```)."""
    section = re.split(r"^## ", DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    text = next(s for s in section if s.startswith(f"`groundwire {command}`"))
    found = {}
    for row in re.findall(r"^\| `(--[a-z-]+)[^|]*\|(.*)\|\s*$", text, flags=re.MULTILINE):
        option, description = row
        match = re.search(r"\(default:? `?([\w$.-]+)`?", description)
        if match:
            found[option] = match.group(1)
    return found


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_reads_cleanly_with_its_options_and_defaults(command: str) -> None:
    text = _help(command)
    assert "<bool>" not in text
    assert "<list[" not in text
    assert "{" not in text.split(" Options: ")[0].split(" Arguments: ")[0]  # usage line
    cli = get_command(app).commands[command]  # type: ignore[attr-defined]
    for param in cli.params:
        for option in param.opts:
            if option.startswith("-"):
                assert option in text, f"{command} --help lacks {option}"
        shown = param.param_type_name == "option" and param.show_default and not param.is_flag
        if shown and param.default is not None:
            default = getattr(param.default, "value", param.default)
            assert f"[default: {default}" in text, f"{command} {param.opts[0]}: no default"
    for option, default in _documented_defaults(command).items():
        assert option in text, f"docs/CLI.md documents {option} for {command}; --help lacks it"
        around = text[text.index(option) :][:400]
        assert f"default: {default}" in around, f"{command} {option}: docs say {default}"


def test_bracketed_text_in_help_survives() -> None:
    assert "[default: 5]" in _help("ground")  # written into the help of --limit
    assert "[KB:id@version]" in _help("ask")
    assert "[evidence:ID]" in _help("ask")
    assert "pip install 'groundwire[bench]'" in _help("eval")


@pytest.mark.parametrize(
    "args",
    [
        ["ground", HANDBOOK, "how do I rotate an API key"],
        ["ground", HANDBOOK, "what is the capital of France"],
        ["search", HANDBOOK, "webhook deliveries failing with 401"],
        ["status", HANDBOOK],
        ["eval", HANDBOOK],
    ],
)
def test_piped_output_is_neither_padded_nor_wrapped(args: list[str]) -> None:
    result = run(*args)  # CliRunner's stdout is not a terminal, as a pipe or a file
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(line == line.rstrip() for line in lines)
    assert "─" * 81 not in result.stdout  # no rule drawn across a fixed width
    if args[0] == "ground" and "rotate" in args[2]:
        long = [line for line in lines if len(line) > 200]
        assert any(line.startswith("The entries below are reference data") for line in long)
