"""Authorization on Milvus: the randomized scenarios of tests/access/test_leaks.py, exported
to Milvus Lite, searched through every channel of the backend, reveal nothing.

All scenarios' entries (tenants, groups, users, labeled entries with random statuses,
domains, scopes and links) share one collection. For each scenario's principal (or none)
and its queries, made of what it may not see, every output of the lexical, phrase and
dense channels and of ``fetch(ids, filter)`` is serialized and searched for the ids and
markers of the scenario's entries it may not see; every returned id must be admitted by
the filter over the whole collection; and the hits must be exactly the embedded
backend's (same filter, global statistics).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import load_by_path

import groundwire as gw
from groundwire.access.filters import admits

conformance = load_by_path("backend_conformance", Path(__file__).parent / "conformance.py")
helpers = load_by_path("backend_helpers", Path(__file__).parent / "backend_helpers.py")
leaks = load_by_path("leak_scenarios", Path(__file__).parents[1] / "access" / "test_leaks.py")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not helpers.HAVE_MILVUS, reason=helpers.MILVUS_MISSING),
]
#: A fifth of the access suite's scenarios (GROUNDWIRE_LEAK_SEEDS scales it too).
SEEDS = range(0, int(os.environ.get("GROUNDWIRE_LEAK_SEEDS", "200")), 5)
EMBEDDER = gw.HashingEmbedder(32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Any]]:
    """Every scenario's entries in one knowledge base (ids are unique per seed), exported
    once: each principal then faces every other scenario's entries too."""
    entries = [entry for seed in SEEDS for entry in leaks.scenario(seed).entries]
    kb = gw.KnowledgeBase.from_sources([{"id": "kb", "version": "v1", "entries": entries}])
    vectors = gw.VectorIndex.build(kb, EMBEDDER)
    for server in helpers.lite_server(tmp_path_factory):
        yield kb, server.export(kb, vectors), gw.EmbeddedBackend(kb, vectors)


def _hits_json(hits: list[gw.BackendHit]) -> list[Any]:
    return [[hit.id, hit.score, dict(hit.explanation)] for hit in hits]


@pytest.mark.parametrize("seed", SEEDS)
def test_milvus_reveals_nothing(exported: tuple[Any, Any, Any], seed: int) -> None:
    kb, backend, reference = exported
    s = leaks.scenario(seed)
    flt = gw.Filter.of(s.principal, s.scope, s.blocked)
    visible = {e.id for e in kb.entries if admits(flt, e)}
    for query in s.queries:
        vector = EMBEDDER.embed_query(query)
        lexical = backend.lexical(query, flt, 20)
        phrase = backend.phrase(query, flt)
        dense = backend.dense(vector, flt, 20)
        ids = [hit.id for hit in (*lexical, *phrase, *dense)]
        assert set(ids) <= visible, f"seed {seed}: {sorted(set(ids) - visible)} not visible"
        fetched = backend.fetch(ids, flt)
        assert fetched == reference.fetch(ids, flt)
        text = json.dumps(
            [_hits_json(lexical), _hits_json(phrase), _hits_json(dense)]
            + [leaks._entry_json(e) for e in fetched],
            default=str,
        )
        leaks.assert_no_leak(s, leaks._scrub_query(text, query), visible, "milvus")
        same = conformance.assert_same_up_to_ties
        same(_ranked(lexical), _ranked(reference.lexical(query, flt, 40)))
        assert [h.id for h in phrase] == [h.id for h in reference.phrase(query, flt)]
        same(_ranked(dense), _ranked(reference.dense(vector, flt, 40)))


def _ranked(hits: list[gw.BackendHit]) -> list[tuple[str, float]]:
    return [(hit.id, hit.score) for hit in hits]
