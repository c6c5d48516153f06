"""Fixtures of the CLI tests: small knowledge bases and a mixed documents folder."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from cli_helpers import (
    entry,
    write_kb,
)


@pytest.fixture
def broken_kb(tmp_path: Path) -> str:
    """Two entries with blocking errors (missing integrations, unsupported kind)."""
    return write_kb(
        tmp_path / "broken",
        {
            "a.md": entry("a.one"),  # no integrations → integrations-missing
            "b.md": entry("a.two", "integrations: []\nkind: weird\n"),
        },
    )


@pytest.fixture
def warning_kb(tmp_path: Path) -> str:
    """One valid entry with two warnings (unknown key, missing related id)."""
    return write_kb(
        tmp_path / "warn",
        {"a.md": entry("a.one", "integrations: []\nrelated: [a.nope]\ncolour: red\n")},
    )


# -- documents ------------------------------------------------------
MIXED_MD = """---
title: Quokka handbook
---
# Quokka handbook

Intro paragraph about the project.

## Feeding

Every quokka eats leaves twice a day; the keeper logs each quokka feeding.
"""
MIXED_HTML = """<html><head><title>Quokka habitat</title>
<script>var quokka = "script text must not be indexed";</script></head>
<body><h1>Habitat</h1><p>The quokka lives on Rottnest Island in dense scrub.</p></body></html>
"""
MIXED_PY = '''"""Tools for the quokka census."""


def count_quokka(sightings):
    """Count every quokka sighting once."""
    return len(set(sightings))
'''


@pytest.fixture
def mixed_docs(tmp_path: Path, pdf_writer: ModuleType) -> Path:
    """A folder mixing Markdown, HTML, PDF and Python, each mentioning quokkas."""
    root = tmp_path / "docs"
    (root / "web").mkdir(parents=True)
    (root / "guide.md").write_text(MIXED_MD, encoding="utf-8")
    (root / "web" / "habitat.html").write_text(MIXED_HTML, encoding="utf-8")
    (root / "census.py").write_text(MIXED_PY, encoding="utf-8")
    pdf = pdf_writer.pdf_bytes([["Quokka survey", "Each quokka was counted at dawn."]], "Survey")
    (root / "survey.pdf").write_bytes(pdf)
    return root
