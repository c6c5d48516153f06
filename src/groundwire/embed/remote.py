"""An OpenAI-compatible embeddings client: OpenAI, Azure-style gateways, Ollama, vLLM, TEI,
LM Studio — anything that serves ``POST {base_url}/embeddings``.

Requests carry ``{"model", "input": [texts], "encoding_format": "float"}`` (plus
``"dimensions"`` when set) in batches of ``batch_size``; answers are
``{"data": [{"index", "embedding"}, ...]}``, put back in input order and normalized.
Empty texts are not sent (their vector is zero). Sending text to a server needs
``allow_remote=True`` (consent), checked when the embedder is made.

Failures: rate limits (429), timeouts (408), conflicts (409) and server errors (5xx),
and transport errors (refused, reset, timed out) are retried with exponential backoff and
jitter (seed 003's defaults: 5 retries starting at 2 s, doubling, capped at 60 s); a
``Retry-After`` (or ``retry-after-ms``) header sets the wait when it is longer. Other
statuses (400, 401, 403, 404, 422) fail at once. Every failure is an
:class:`~groundwire.EmbeddingError` naming the server, the model, the status and what the
server said, with the fix.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np

from groundwire.config import (
    DEFAULT_EMBED_ATTEMPTS,
    DEFAULT_EMBED_RETRY_INITIAL_S,
    DEFAULT_EMBED_RETRY_JITTER_S,
    DEFAULT_EMBED_RETRY_MAX_S,
    DEFAULT_EMBED_TIMEOUT_S,
    DEFAULT_REMOTE_BATCH,
    RetryPolicy,
)
from groundwire.embed.base import (
    EmbedderLocation,
    Matrix,
    check_texts,
    checked_matrix,
    first_row,
    require_consent,
)
from groundwire.errors import ConfigError, EmbeddingError

__all__ = ["EMBEDDING_RETRY", "OpenAIEmbedder"]

#: Seed 003's embedding retry handler: 5 retries from 2 s, doubling, with jitter.
EMBEDDING_RETRY = RetryPolicy(
    attempts=DEFAULT_EMBED_ATTEMPTS,
    initial_s=DEFAULT_EMBED_RETRY_INITIAL_S,
    max_s=DEFAULT_EMBED_RETRY_MAX_S,
    jitter=DEFAULT_EMBED_RETRY_JITTER_S,
)
_RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})
_HINTS = {
    400: "check the model name and that the texts are within the model's input limit",
    401: "check the API key (api_key=, or OPENAI_API_KEY)",
    403: "the key may not use this model; check its permissions",
    404: "check base_url (it should end in /v1 for most servers) and the model name",
    422: "the server rejected the request; check the model name and dimensions",
}


class _AttemptError(Exception):
    """One failed attempt: the message, whether to retry, the status and the server's wait."""

    def __init__(self, message: str, retryable: bool, status: int | None, wait: float | None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.wait = wait


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds a server asked to wait (``retry-after-ms``, ``Retry-After`` seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))[:300]
    if isinstance(error, str):
        return error[:300]
    return str(body)[:300]


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible server (see the module docstring).

    ``model``: the server's model name. ``base_url``: e.g. ``https://api.openai.com/v1``
    or ``http://localhost:11434/v1`` (Ollama). ``api_key``: sent as a bearer token
    (default: ``OPENAI_API_KEY`` when set). ``dimensions``: asked of the server when
    given (text-embedding-3 models shorten vectors), else learned from its first answer.
    ``allow_remote=True`` is required: documents and queries are sent to the server.
    ``retry``: attempts and backoff (``sleep`` replaceable in tests). ``transport``: an
    httpx transport (tests, proxies).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        allow_remote: bool = False,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = DEFAULT_REMOTE_BATCH,
        timeout_s: float = DEFAULT_EMBED_TIMEOUT_S,
        retry: RetryPolicy = EMBEDDING_RETRY,
        query_prefix: str = "",
        document_prefix: str = "",
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"model={model!r} is invalid: expected the server's model name")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"base_url={base_url!r} is invalid: expected an http(s) URL such as "
                "'https://api.openai.com/v1'"
            )
        require_consent(model, base_url, allow_remote)
        for name, value in (("batch_size", batch_size), ("dimensions", dimensions)):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise ConfigError(f"{name}={value!r} is invalid: expected an integer >= 1")
        if not isinstance(timeout_s, int | float) or not 0 < timeout_s < math.inf:
            raise ConfigError(f"timeout_s={timeout_s!r} is invalid: expected seconds > 0")
        if not isinstance(retry, RetryPolicy):
            raise ConfigError(f"retry={retry!r} is invalid: expected a RetryPolicy")
        self._model = model
        self._url = base_url.rstrip("/") + "/embeddings"
        self._requested = dimensions
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._retry = retry
        self._query_prefix = query_prefix
        self._document_prefix = document_prefix
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        sent = {"content-type": "application/json", **(headers or {})}
        if key:
            sent["authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            headers=sent, timeout=httpx.Timeout(timeout_s), transport=transport
        )

    @property
    def model_id(self) -> str:
        """``openai-compatible:<model>@<host>[/<dimensions>]`` plus prefixes when set."""
        host = httpx.URL(self._url).host
        model_id = f"openai-compatible:{self._model}@{host}"
        if self._requested is not None:
            model_id += f"/{self._requested}"
        if self._query_prefix or self._document_prefix:
            model_id += f"|q={self._query_prefix}|d={self._document_prefix}"
        return model_id

    @property
    def location(self) -> EmbedderLocation:
        """Always ``"remote"``."""
        return "remote"

    @property
    def dimensions(self) -> int:
        """Vector length: as configured, else learned from the server (one request)."""
        if self._dimensions is None:
            self._dimensions = int(self._request(["dimensions"]).shape[1])
        return self._dimensions

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Vectors of documents, ``batch_size`` texts per request, in input order."""
        checked = [self._document_prefix + text for text in check_texts(texts)]
        return self._embed(checked)

    def embed_query(self, text: str) -> Matrix:
        """The vector of one query."""
        return first_row(self._embed([self._query_prefix + check_texts([text])[0]]))

    def _embed(self, texts: list[str]) -> Matrix:
        sent = [n for n, text in enumerate(texts) if text.strip()]
        if not sent:
            return np.zeros((len(texts), self.dimensions), dtype=np.float32)
        parts = [
            self._request([texts[n] for n in sent[start : start + self._batch_size]])
            for start in range(0, len(sent), self._batch_size)
        ]
        values = np.concatenate(parts, axis=0)
        out = np.zeros((len(texts), values.shape[1]), dtype=np.float32)
        out[sent] = values
        return out

    def _request(self, inputs: list[str]) -> Matrix:
        """One batch, retried as the policy says; raises EmbeddingError when it gives up."""
        body: dict[str, Any] = {"model": self._model, "input": inputs, "encoding_format": "float"}
        if self._requested is not None:
            body["dimensions"] = self._requested
        policy = self._retry
        sleep = policy.sleep or time.sleep
        failure: _AttemptError | None = None
        for attempt in range(1, policy.attempts + 1):
            try:
                return self._attempt(body, len(inputs))
            except _AttemptError as exc:
                failure = exc
                if not exc.retryable or attempt == policy.attempts:
                    break
                backoff = min(policy.max_s, policy.initial_s * 2 ** (attempt - 1))
                wait = max(backoff, min(exc.wait, policy.max_s) if exc.wait is not None else 0)
                sleep(wait + random.uniform(0, policy.jitter))
        assert failure is not None
        tried = f" after {policy.attempts} attempts" if failure.retryable else ""
        raise EmbeddingError(
            f"embeddings server {self._url} (model {self._model!r}) failed{tried}: {failure}",
            status=failure.status,
        )

    def _attempt(self, body: dict[str, Any], count: int) -> Matrix:
        try:
            response = self._client.post(self._url, json=body)
        except httpx.TimeoutException as exc:
            raise _AttemptError(f"timed out ({type(exc).__name__})", True, None, None) from exc
        except httpx.TransportError as exc:
            raise _AttemptError(
                f"cannot reach the server ({type(exc).__name__}: {exc}); check that it is "
                "running and that base_url is right",
                True,
                None,
                None,
            ) from exc
        status = response.status_code
        if status != 200:
            hint = _HINTS.get(status, "the server is failing; try again later")
            raise _AttemptError(
                f"HTTP {status}: {_server_message(response)}; {hint}",
                status in _RETRYABLE,
                status,
                _retry_after(response.headers),
            )
        try:
            data = response.json()["data"]
            rows = sorted(data, key=lambda item: int(item["index"]))
            indexes = [int(item["index"]) for item in rows]
            vectors = [item["embedding"] for item in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise _AttemptError(
                "the answer is not an embeddings list ({'data': [{'index', 'embedding'}]}); "
                "check that base_url points at an OpenAI-compatible /embeddings API",
                False,
                status,
                None,
            ) from exc
        if indexes != list(range(count)):
            raise _AttemptError(
                f"asked for {count} embedding(s), the server returned indexes {indexes[:10]}",
                False,
                status,
                None,
            )
        dims = self._dimensions or (len(vectors[0]) if vectors else 0)
        try:
            matrix = checked_matrix(vectors, count, dims, self._model)
        except EmbeddingError as exc:
            raise _AttemptError(str(exc), False, status, None) from exc
        self._dimensions = dims
        return matrix

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self._model!r}, base_url={self._url[: -len('/embeddings')]!r})"
