"""Milvus (Milvus Lite 2.5.1, the real C++ core) passes the backend conformance suite.

Deviations, asserted by the suite (docs/MILVUS.md):

* ``POOLS_EMPTY_FIELDS``: Milvus's BM25 function counts every row in a field's N and
  avgdl, also rows whose field is empty; groundwire counts only rows holding the field.
  Equal on corpora where every field is filled (the ``full`` corpus: same scores to 1e-5).
* ``SCORING = "fields"``: BM25F's single saturation over weighted field frequencies cannot
  be expressed with per-field BM25 functions; a bm25f snapshot is scored as the per-field
  sum with the same weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import load_by_path

conformance = load_by_path("backend_conformance", Path(__file__).parent / "conformance.py")
helpers = load_by_path("backend_helpers", Path(__file__).parent / "backend_helpers.py")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not helpers.HAVE_MILVUS, reason=helpers.MILVUS_MISSING),
]


class TestMilvusBackend(conformance.BackendConformance, conformance.HybridConformance):
    POOLS_EMPTY_FIELDS = True
    SCORING = "fields"

    @pytest.fixture(scope="class")
    @classmethod
    def lite(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
        yield from helpers.lite_server(tmp_path_factory)

    @pytest.fixture(scope="class")
    @classmethod
    def make_backend(cls, lite: object) -> conformance.MakeBackend:
        return lambda kb, vectors: lite.export(kb, vectors)  # type: ignore[attr-defined]
