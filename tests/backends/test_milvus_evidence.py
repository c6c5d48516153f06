"""Document evidence through Milvus (``retrieve_evidence_from``): the embedded path's
outcome shape, the same evidence on a corpus the candidates cover, labels enforced."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import load_by_path

import groundwire as gw
from groundwire.access.filters import admits
from groundwire.config import chunk_settings

helpers = load_by_path("backend_helpers", Path(__file__).parent / "backend_helpers.py")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not helpers.HAVE_MILVUS, reason=helpers.MILVUS_MISSING),
]
DOCS = Path(__file__).resolve().parents[2] / "examples" / "docs"
QUESTIONS = (
    "how are webhook deliveries retried?",
    "rotate an api key",
    "what is the rate limit",
    "nothing about zebras",
)


def docs_kb() -> gw.KnowledgeBase:
    loaded = gw.load_documents([str(DOCS)])
    chunks = [c for doc in loaded.documents for c in gw.chunk_document(doc, gw.ChunkingConfig())]
    # api/ is acme's, for its engineers; the rest is shared.
    policy = gw.AccessPolicy.from_mapping(
        {"rules": [{"paths": ["api/**"], "tenant": "acme", "acl": ["group:eng"]}], "default": {}}
    )
    chunks, _ = gw.label_chunks(chunks, policy)
    return gw.KnowledgeBase.from_documents(gw.chunks_to_documents(chunks), chunk_settings())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    kb = docs_kb()
    for server in helpers.lite_server(tmp_path_factory):
        yield kb, server.export(kb)


def _view(result: gw.EvidenceResult) -> tuple[Any, ...]:
    return (result.status, result.reason, result.text, result.citations, result.excerpts)


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("principal", [None, gw.Principal("acme", "ann", ["eng"])])
def test_milvus_evidence_is_the_embedded_backends(
    exported: tuple[Any, Any], question: str, principal: gw.Principal | None
) -> None:
    kb, milvus = exported
    via_milvus = gw.retrieve_evidence_from(milvus, question, principal=principal)
    via_embedded = gw.retrieve_evidence_from(gw.EmbeddedBackend(kb), question, principal=principal)
    direct = gw.retrieve_evidence(kb, question, principal=principal)
    assert type(via_milvus) is type(direct)
    assert [f.name for f in dataclasses.fields(via_milvus)] == [
        f.name for f in dataclasses.fields(direct)
    ]
    assert _view(via_milvus) == _view(via_embedded)
    assert via_milvus.status == direct.status
    # Statistics are the candidates' (not every visible chunk's), so which excerpts are
    # kept may differ at the margin (docs/MILVUS.md); readiness and reason agree here.
    assert via_milvus.reason == direct.reason
    if direct.ready:
        assert {c.id for c in via_milvus.citations} & {c.id for c in direct.citations}
    visible = {e.id for e in kb.entries if admits(gw.Filter.of(principal), e)}
    assert {c.id for c in via_milvus.citations} <= visible
    if principal is None:
        assert not any(c.id.startswith("api/") for c in via_milvus.citations)
