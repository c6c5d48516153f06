"""docs/INTEGRATIONS.md: every framework example runs as written and prints what it says.

Each ``<!-- example: NAME -->`` block is executed from the repository root (where its
``examples/...`` paths resolve), in this process, with its output captured.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "INTEGRATIONS.md"
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- example: (\w+) -->\n```python\n(.*?)\n```", re.S)
EXAMPLES = dict(BLOCK.findall(DOC.read_text(encoding="utf-8")))

#: Lines each example must print (in order), and text it must never print.
EXPECTED = {
    "langchain": (
        [
            "[KB:security.api-key-rotation@2026-11-15] 266.86",
            "['api.rate-limits', 'api.error-codes', 'troubleshooting.webhook-401']",
            "[KB:security.api-key-rotation@2026-11-15]",
        ],
        [],
    ),
    "llamaindex": (
        [
            "[KB:api/webhooks.md#1@",
            "['config-reference.json', 'index.md', 'operations-guide.pdf', 'relaybird_client.py']",
            "['Webhook deliveries are retried with exponential backoff for three days.']",
            "[]",
        ],
        ["The office closes"],
    ),
    "haystack": (
        [
            "[KB:security.api-key-rotation@2026-11-15] 266.9",
            "high [KB:security.api-key-rotation@2026-11-15]",
            "low-relevance",
        ],
        [],
    ),
}


def test_every_framework_has_one_example() -> None:
    assert set(EXAMPLES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_example_runs_and_prints_what_the_doc_says(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    exec(compile(EXAMPLES[name], f"docs/INTEGRATIONS.md:{name}", "exec"), {"__name__": name})
    out = capsys.readouterr().out
    wanted, never = EXPECTED[name]
    at = 0
    for text in wanted:
        found = out.find(text, at)
        assert found >= 0, f"{name}: {text!r} not printed (in order); printed:\n{out}"
        at = found + len(text)
    for text in never:
        assert text not in out


def test_the_readme_lists_the_adapters() -> None:
    readme = README.read_text(encoding="utf-8")
    section = readme.split("## Framework adapters", 1)[1].split("\n## ", 1)[0]
    assert "docs/INTEGRATIONS.md" in section
    for extra in ("[langchain]", "[llamaindex]", "[haystack]"):
        assert extra in section
