"""Shared fixtures: the shipped example knowledge base and small source builders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = ROOT / "examples" / "handbook"
DATASETS = ROOT.parent / "shared" / "datasets"


@pytest.fixture
def handbook_path() -> Path:
    """The example knowledge base shipped in examples/handbook."""
    return HANDBOOK


def make_entry(entry_id: str, **fields: Any) -> dict[str, Any]:
    """A valid authored entry (as a mapping) with overridable fields."""
    entry: dict[str, Any] = {
        "id": entry_id,
        "title": fields.pop("title", entry_id.replace(".", " ").replace("-", " ").title()),
        "summary": fields.pop("summary", f"Summary of {entry_id}."),
        "domain": fields.pop("domain", entry_id.split(".")[0]),
        "integrations": fields.pop("integrations", []),
    }
    entry.update(fields)
    return entry


def make_source(
    *entries: dict[str, Any], source_id: str = "kb", version: str = "v1"
) -> dict[str, Any]:
    """A source mapping holding the given entries."""
    return {"id": source_id, "version": version, "entries": list(entries)}


@pytest.fixture
def entry_factory() -> Callable[..., dict[str, Any]]:
    """Build a valid entry mapping: ``entry_factory("billing.refunds", body=...)``."""
    return make_entry


@pytest.fixture
def source_factory() -> Callable[..., dict[str, Any]]:
    """Build a source mapping: ``source_factory(entry, ..., source_id="kb", version="v1")``."""
    return make_source
