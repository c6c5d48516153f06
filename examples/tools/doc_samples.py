"""Regenerate, or check, the command output samples in docs/CLI.md and README.md.

A sample is a fenced block right after a line ``<!-- sample -->``: its first line is
``$ groundwire ARGS`` and the rest is what that command prints on stdout when piped (the
command runs in-process from the repository root). Durations differ run to run, so
:func:`normalize` masks them before samples are compared. ``tests/test_docs.py`` checks
every sample; after a change to the output, rewrite them:

    .venv/bin/python examples/tools/doc_samples.py          # rewrite the samples
    .venv/bin/python examples/tools/doc_samples.py --check  # exit 1 when one is stale
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = (ROOT / "docs" / "CLI.md", ROOT / "README.md")
MARKER = "<!-- sample -->"
_SAMPLE = re.compile(
    r"^<!-- sample -->\n```[a-z]*\n(\$ groundwire [^\n]*)\n(.*?)^```$", re.M | re.S
)
_DURATION = re.compile(r"(duration_ms\": |duration +)[0-9.]+")


def normalize(text: str) -> str:
    """``text`` with every duration replaced by ``…`` (they differ run to run)."""
    return _DURATION.sub(r"\g<1>…", text)


def run(command: str) -> str:
    """What ``$ groundwire ARGS`` prints on stdout, run in-process from the repository root."""
    from typer.testing import CliRunner

    from groundwire.cli import app

    args = shlex.split(command)[2:]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = CliRunner().invoke(app, args, terminal_width=80)
    finally:
        os.chdir(cwd)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise RuntimeError(f"{command} raised {result.exception!r}")
    return result.stdout


def samples(text: str) -> Iterator[tuple[re.Match[str], str, str]]:
    """Each sample of a document: its match, command line and documented output."""
    for match in _SAMPLE.finditer(text):
        yield match, match.group(1), match.group(2)


def update(path: Path) -> int:
    """Rewrite the samples of ``path`` with fresh output; returns how many changed."""
    text = path.read_text(encoding="utf-8")
    changed = 0
    out, last = [], 0
    for match, command, documented in samples(text):
        fresh = run(command)
        if normalize(fresh) != normalize(documented):
            changed += 1
        out.append(text[last : match.start(2)] + fresh)
        last = match.end(2)
    out.append(text[last:])
    path.write_text("".join(out), encoding="utf-8")
    return changed


def stale(path: Path) -> list[str]:
    """The commands of ``path`` whose documented output differs from what they print."""
    text = path.read_text(encoding="utf-8")
    return [
        command
        for _, command, documented in samples(text)
        if normalize(run(command)) != normalize(documented)
    ]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        found = [f"{path.name}: {command}" for path in FILES for command in stale(path)]
        print("\n".join(found) or "every sample is current")
        return 1 if found else 0
    for path in FILES:
        print(f"{path.relative_to(ROOT)}: {update(path)} sample(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
