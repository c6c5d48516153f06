"""Fixtures for the framework adapters: the handbook and the example docs, and who may see what.

Haystack sends usage telemetry unless told not to, and reads the switch when it is first
imported: it is switched off here, before any test module of this folder imports it (no
traffic leaves this machine). LangSmith tracing is switched off for the same reason.

Access policies (the hosts' authorizers of these tests):

- entries: a ``staff`` principal reads everything; anyone else nothing in the ``security``
  domain (fixture ``entry_policy``);
- documents: ``staff`` reads every source; anyone else nothing under ``api/``
  (fixture ``source_policy``).
"""

from __future__ import annotations

import os

os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
for _name in ("LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING", "LANGSMITH_API_KEY"):
    os.environ.pop(_name, None)

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import groundwire as gw  # noqa: E402
from groundwire.integrations import EntrySearcher, EvidenceSearcher  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "examples" / "docs"


def _entry_policy(principal: object, entry: gw.KnowledgeEntry) -> bool:
    return principal == "staff" or entry.domain != "security"


def _source_policy(principal: object, source: gw.EvidenceSource) -> bool:
    return principal == "staff" or not source.path.startswith("api/")


@pytest.fixture(scope="session")
def entry_policy() -> Callable[[object, gw.KnowledgeEntry], bool]:
    """Staff read every entry; anyone else no ``security`` entry."""
    return _entry_policy


@pytest.fixture(scope="session")
def source_policy() -> Callable[[object, gw.EvidenceSource], bool]:
    """Staff read every source; anyone else nothing under ``api/``."""
    return _source_policy


@pytest.fixture(scope="session")
def handbook() -> gw.KnowledgeBase:
    """The example handbook (80 entries) as a knowledge base."""
    return gw.KnowledgeBase.from_sources(gw.load_sources(ROOT / "examples" / "handbook"))


@pytest.fixture(scope="session")
def docs_kb() -> gw.KnowledgeBase:
    """The example docs folder, chunked and indexed."""
    loaded = gw.load_documents([DOCS])
    chunks = [c for doc in loaded.documents for c in gw.chunk_document(doc, gw.ChunkingConfig())]
    return gw.KnowledgeBase.from_documents(gw.chunks_to_documents(chunks), gw.chunk_settings())


@pytest.fixture(scope="session")
def entries(handbook: gw.KnowledgeBase) -> EntrySearcher:
    """Entries of the handbook, selected as a grounding turn selects them."""
    return EntrySearcher(handbook)


@pytest.fixture(scope="session")
def evidence(docs_kb: gw.KnowledgeBase) -> EvidenceSearcher:
    """Excerpts of the example docs, selected as retrieve_evidence selects them."""
    return EvidenceSearcher(docs_kb)
