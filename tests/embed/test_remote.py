"""The OpenAI-compatible embeddings client against a real loopback server."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from groundwire import ConfigError, EmbeddingError, RetryPolicy
from groundwire.embed import HashingEmbedder, OpenAIEmbedder, create_embedder

EmbeddingsServer = Any  # the fixture's server (tests/embed/conftest.py)


def _policy(delays: list[float], attempts: int = 6) -> RetryPolicy:
    return RetryPolicy(
        attempts=attempts, initial_s=2.0, max_s=60.0, jitter=0.0, sleep=delays.append
    )


def test_remote_needs_explicit_consent() -> None:
    with pytest.raises(ConfigError, match=r"allow_remote=True.*--allow-remote"):
        OpenAIEmbedder("text-embedding-3-small", base_url="https://api.openai.com/v1")
    with pytest.raises(ConfigError, match="allow_remote"):
        create_embedder("openai:text-embedding-3-small")
    with pytest.raises(ConfigError, match="allow_remote"):
        create_embedder("ollama:nomic-embed-text", allow_remote="yes")  # type: ignore[arg-type]


def test_wire_format_batching_order_and_normalization(embeddings_server: EmbeddingsServer) -> None:
    embedder = OpenAIEmbedder(
        "text-embedding-3-small",
        base_url=embeddings_server.base_url,
        allow_remote=True,
        api_key="sk-test",
        batch_size=2,
    )
    texts = ["rotate an api key", "", "webhook retries", "billing refunds", "sso login"]
    vectors = embedder.embed_documents(texts)
    assert embedder.location == "remote"
    assert vectors.dtype == np.float32
    assert vectors.shape == (5, 32)
    expected = HashingEmbedder(32).embed_documents(texts)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)  # sorted by index, normalized
    assert not vectors[1].any()  # an empty text is not sent; its vector is zero
    sent = embeddings_server.requests
    assert [body["input"] for body in sent] == [
        ["rotate an api key", "webhook retries"],
        ["billing refunds", "sso login"],
    ]
    assert all(body["encoding_format"] == "float" for body in sent)
    assert all(body["model"] == "text-embedding-3-small" for body in sent)
    assert embeddings_server.headers[0]["authorization"] == "Bearer sk-test"
    assert embedder.model_id == "openai-compatible:text-embedding-3-small@127.0.0.1"


def test_dimensions_are_requested_and_learned(embeddings_server: EmbeddingsServer) -> None:
    sized = OpenAIEmbedder(
        "m", base_url=embeddings_server.base_url, allow_remote=True, dimensions=16
    )
    assert sized.embed_query("hello").shape == (16,)
    assert embeddings_server.requests[-1]["dimensions"] == 16
    assert sized.model_id.endswith("/16")
    learned = OpenAIEmbedder("m", base_url=embeddings_server.base_url, allow_remote=True)
    assert learned.dimensions == 32


def test_rate_limits_and_server_errors_are_retried_with_backoff(
    embeddings_server: EmbeddingsServer,
) -> None:
    delays: list[float] = []
    embeddings_server.enqueue(429, {"error": {"message": "slow down"}}, {"retry-after": "7"})
    embeddings_server.enqueue(503, {"error": {"message": "overloaded"}})
    embeddings_server.enqueue_disconnect()
    embedder = OpenAIEmbedder(
        "m", base_url=embeddings_server.base_url, allow_remote=True, retry=_policy(delays)
    )
    vectors = embedder.embed_documents(["a query about keys"])
    assert vectors.shape == (1, 32)
    # 2 s, doubled each retry; Retry-After (7 s) wins where it is longer.
    assert delays == [7.0, 4.0, 8.0]
    assert len(embeddings_server.requests) == 4


def test_giving_up_names_server_model_and_last_failure(embeddings_server: EmbeddingsServer) -> None:
    delays: list[float] = []
    for _ in range(6):
        embeddings_server.enqueue(500, {"error": {"message": "boom"}})
    embedder = OpenAIEmbedder(
        "m", base_url=embeddings_server.base_url, allow_remote=True, retry=_policy(delays)
    )
    with pytest.raises(EmbeddingError, match=r"failed after 6 attempts: HTTP 500: boom") as info:
        embedder.embed_documents(["x y"])
    assert info.value.status == 500
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0]  # seed 003: 5 retries from 2 s


def test_client_errors_fail_at_once_with_a_hint(embeddings_server: EmbeddingsServer) -> None:
    delays: list[float] = []
    embeddings_server.enqueue(401, {"error": {"message": "bad key"}})
    embedder = OpenAIEmbedder(
        "m", base_url=embeddings_server.base_url, allow_remote=True, retry=_policy(delays)
    )
    with pytest.raises(EmbeddingError, match=r"HTTP 401: bad key; check the API key"):
        embedder.embed_documents(["x y"])
    assert delays == []


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"nothing": []}, "not an embeddings list"),
        (
            {"data": [{"index": 0, "embedding": [0.1, 0.2]}, {"index": 5, "embedding": [1, 2]}]},
            "returned indexes",
        ),
        ({"data": [{"index": 0, "embedding": [float("nan")] * 32}]}, "NaN"),
        (b"<html>gateway</html>", "not an embeddings list"),
    ],
)
def test_malformed_answers_are_clear_errors(
    embeddings_server: EmbeddingsServer, body: object, match: str
) -> None:
    embeddings_server.enqueue(200, body)
    embedder = OpenAIEmbedder(
        "m", base_url=embeddings_server.base_url, allow_remote=True, dimensions=32
    )
    with pytest.raises(EmbeddingError, match=match):
        embedder.embed_documents(["only one text"])


def test_unreachable_server_fails_after_retries() -> None:
    delays: list[float] = []
    embedder = OpenAIEmbedder(
        "m", base_url="http://127.0.0.1:9/v1", allow_remote=True, retry=_policy(delays, 3)
    )
    with pytest.raises(EmbeddingError, match=r"after 3 attempts: cannot reach the server"):
        embedder.embed_documents(["hello there"])
    assert delays == [2.0, 4.0]


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIEmbedder("m", base_url="localhost:1234", allow_remote=True)
    with pytest.raises(ConfigError, match="batch_size"):
        OpenAIEmbedder("m", base_url="http://127.0.0.1:1/v1", allow_remote=True, batch_size=0)
