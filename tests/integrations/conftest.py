"""Fixtures for the framework adapters: the handbook and the example docs, and who may see what.

Haystack sends usage telemetry unless told not to, and reads the switch when it is first
imported: it is switched off here, before any test module of this folder imports it (no
traffic leaves this machine). LangSmith tracing is switched off for the same reason.

Who asks: two verified principals of the handbook's team, :data:`STAFF` (group ``staff``)
and :data:`GUEST` (group ``guests``). The handbook and the docs carry no tenant or ACL
labels (both see every record by labels), so the hosts' authorizers decide:

- entries: a principal in group ``staff`` reads everything; anyone else nothing in the
  ``security`` domain (fixture ``entry_policy``);
- documents: ``staff`` reads every source; anyone else nothing under ``api/``
  (fixture ``source_policy``).

Tenant and ACL labels are tested on labeled knowledge in ``test_search.py``.
"""

from __future__ import annotations

import os

os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
for _name in ("LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING", "LANGSMITH_API_KEY"):
    os.environ.pop(_name, None)

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

import groundwire as gw  # noqa: E402
from groundwire.integrations import EntrySearcher, EvidenceSearcher  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "examples" / "docs"


#: A verified principal who may read everything (the authorizers below say so).
STAFF = gw.Principal("relaybird", "sam@relaybird.example", groups=["staff"])
#: A verified principal who may not read security entries or the API docs.
GUEST = gw.Principal("relaybird", "gail@relaybird.example", groups=["guests"])


def _entry_policy(principal: gw.Principal, entry: gw.KnowledgeEntry) -> bool:
    return "staff" in principal.groups or entry.domain != "security"


def _source_policy(principal: gw.Principal, source: gw.EvidenceSource) -> bool:
    return "staff" in principal.groups or not source.path.startswith("api/")


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


def _payroll(entry_id: str, **labels: Any) -> dict[str, Any]:
    return {
        "id": entry_id,
        "title": f"Payroll approval {entry_id}",
        "summary": f"How payroll runs are approved ({entry_id}).",
        "domain": "hr",
        "integrations": [],
        **labels,
    }


#: Labeled entries: one shared, two of tenant acme (one for its HR group), one of globex.
LABELED_SOURCE: dict[str, Any] = {
    "id": "payroll",
    "version": "1",
    "entries": [
        _payroll("open"),
        _payroll("acme-hr", tenant="acme", acl=["group:hr"]),
        _payroll("acme-all", tenant="acme"),
        _payroll("globex", tenant="globex"),
    ],
}
#: Who sees which of LABELED_SOURCE's entries (by labels alone).
ACME_HR = gw.Principal("acme", "bob", groups=["hr"])
ACME_EVE = gw.Principal("acme", "eve")
GLOBEX_GUS = gw.Principal("globex", "gus", groups=["hr"])
LABELED_VIEWS: dict[gw.Principal | None, set[str]] = {
    ACME_HR: {"open", "acme-hr", "acme-all"},
    ACME_EVE: {"open", "acme-all"},
    GLOBEX_GUS: {"open", "globex"},
    None: {"open"},  # anonymous: unlabeled entries only
}


@pytest.fixture(scope="session")
def labeled() -> gw.KnowledgeBase:
    """Payroll entries with tenant and ACL labels (:data:`LABELED_VIEWS` says who sees what)."""
    return gw.KnowledgeBase.from_sources([LABELED_SOURCE])
