"""Authorization on Milvus: the randomized scenarios of tests/access/test_leaks.py, exported
to Milvus Lite, searched through every channel of the backend, reveal nothing.

For each scenario (tenants, groups, users, labeled entries with random statuses, domains,
scopes and links; a random principal or none; queries made of what it may not see), every
output of the lexical, phrase and dense channels and of ``fetch`` on the returned ids is
serialized and searched for the ids and markers of entries the principal may not see. The
hits must also be exactly the embedded backend's (same filter, global statistics).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import groundwire as gw
from tests.conftest import load_by_path

helpers = load_by_path("backend_helpers", Path(__file__).parent / "backend_helpers.py")
leaks = load_by_path("leak_scenarios", Path(__file__).parents[1] / "access" / "test_leaks.py")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not helpers.HAVE_MILVUS, reason=helpers.MILVUS_MISSING),
]
#: A fifth of the access suite's scenarios (each is one Milvus collection).
SEEDS = range(0, int(os.environ.get("GROUNDWIRE_LEAK_SEEDS", "200")), 5)
EMBEDDER = gw.HashingEmbedder(32)


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from helpers.lite_server(tmp_path_factory)


def _hits_json(hits: list[gw.BackendHit]) -> list[Any]:
    return [[hit.id, hit.score, dict(hit.explanation)] for hit in hits]


@pytest.mark.parametrize("seed", SEEDS)
def test_milvus_reveals_nothing(lite: Any, seed: int) -> None:
    s = leaks.scenario(seed)
    kb = gw.KnowledgeBase.from_sources([s.source])
    vectors = gw.VectorIndex.build(kb, EMBEDDER)
    backend = lite.export(kb, vectors)
    reference = gw.EmbeddedBackend(kb, vectors)
    flt = gw.Filter.of(s.principal, s.scope, s.blocked)
    visible = leaks.turn_visible(s)
    try:
        for query in s.queries:
            vector = EMBEDDER.embed_query(query)
            lexical = backend.lexical(query, flt, 20)
            phrase = backend.phrase(query, flt)
            dense = backend.dense(vector, flt, 20)
            ids = [hit.id for hit in (*lexical, *phrase, *dense)]
            assert set(ids) <= visible, f"seed {seed}: {sorted(set(ids) - visible)} not visible"
            fetched = [leaks._entry_json(e) for e in backend.fetch(ids, flt)]
            assert backend.fetch(ids, flt) == reference.fetch(ids, flt)
            text = json.dumps(
                [_hits_json(lexical), _hits_json(phrase), _hits_json(dense), fetched],
                default=str,
            )
            leaks.assert_no_leak(s, leaks._scrub_query(text, query), visible, "milvus")
            assert [(h.id, pytest.approx(h.score, rel=1e-5)) for h in lexical] == [
                (h.id, h.score) for h in reference.lexical(query, flt, 20)
            ]
            assert [h.id for h in phrase] == [h.id for h in reference.phrase(query, flt)]
            assert [h.id for h in dense] == [h.id for h in reference.dense(vector, flt, 20)]
    finally:
        backend.close()
        lite.backends.remove(backend)
        _drop(lite.uri, backend)


def _drop(uri: str, backend: gw.MilvusBackend) -> None:
    """Each scenario's collection is dropped so the Lite file stays small."""
    from groundwire.backends.milvus.client import connect

    conn = connect(uri, backend.connection.collection)
    try:
        conn.drop()
    finally:
        conn.close()
