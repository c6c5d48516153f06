"""Connecting to Milvus (pymilvus ``MilvusClient``), and the collections groundwire keeps.

A knowledge base is one collection, ``NAME``, plus a one-row companion ``NAME__meta``
that records what the collection mirrors (settings, vector model, the snapshot digest).
Milvus Lite 2.5 implements no collection properties, hence the companion.
pymilvus's exceptions are converted to :class:`~groundwire.errors.BackendError` here.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from groundwire.config import MILVUS_CONSISTENCY, MILVUS_MAX_VARCHAR, MILVUS_TIMEOUT_S
from groundwire.errors import BackendError, MissingExtraError

__all__ = ["META_SUFFIX", "MilvusConnection", "connect", "milvus_errors"]

META_SUFFIX = "__meta"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
T = TypeVar("T")


class _EmptyResultNoise(logging.Filter):
    """Drops pymilvus's error log of the empty-result decoding failure handled below."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        # The failure surfaces as a BackendError when it is not this one; its log line
        # ("Failed to query collection") would be noise either way.
        return _EMPTY_RESULT not in message and "Failed to query collection" not in message


_EMPTY_RESULT = "Unsupported data type: 0"


def _pymilvus() -> Any:
    try:
        with warnings.catch_warnings():  # milvus-lite 2.5 imports pkg_resources
            warnings.simplefilter("ignore", UserWarning)
            import pymilvus
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise MissingExtraError("pymilvus", "milvus", "The Milvus backend") from exc
    for name in ("pymilvus.decorators", "pymilvus.milvus_client.milvus_client"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _EmptyResultNoise) for f in log.filters):
            log.addFilter(_EmptyResultNoise())
    return pymilvus


@contextmanager
def milvus_errors(what: str, collection: str) -> Iterator[None]:
    """Turn pymilvus/gRPC failures of ``what`` into a BackendError naming the collection."""
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in {"pymilvus", "grpc", "milvus_lite"}:
            raise
        message = getattr(exc, "message", None) or str(exc)
        raise BackendError(
            f"Milvus {what} on collection {collection!r} failed: {str(message)[:300]}"
        ) from exc


class MilvusConnection:
    """One ``MilvusClient`` plus the names of a knowledge base's two collections."""

    def __init__(self, client: Any, collection: str, uri: str) -> None:
        self.client = client
        self.collection = collection
        self.meta = collection + META_SUFFIX
        self.uri = uri

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` with the timeout, errors converted."""
        with milvus_errors(what, self.collection):
            return fn(*args, timeout=MILVUS_TIMEOUT_S, **kwargs)

    def query(self, **kwargs: Any) -> list[dict[str, Any]]:
        """``client.query(collection, **kwargs)`` as a list of rows.

        pymilvus 2.5 fails to decode an *empty* result of a collection with ARRAY fields
        from Milvus Lite ("Unsupported data type: 0"); that exact failure means no rows.
        """
        try:
            rows = self.client.query(self.collection, timeout=MILVUS_TIMEOUT_S, **kwargs)
        except Exception as exc:
            if _EMPTY_RESULT in str(getattr(exc, "message", exc)):
                return []
            with milvus_errors("query", self.collection):
                raise
        return [dict(row) for row in rows]

    def exists(self) -> bool:
        """Whether the collection (and its companion) exist."""
        has = self.call("has_collection", self.client.has_collection, self.collection)
        meta = self.call("has_collection", self.client.has_collection, self.meta)
        return bool(has and meta)

    def read_meta(self) -> dict[str, Any] | None:
        """What the companion records, or None when there is no collection yet."""
        if not self.exists():
            return None
        rows = self.call("get", self.client.get, self.meta, ids=["meta"], output_fields=["value"])
        if not rows:
            return None
        value: dict[str, Any] = json.loads(rows[0]["value"])
        return value

    def write_meta(self, value: dict[str, Any]) -> None:
        """Record ``value`` in the companion (created on first use)."""
        pymilvus = _pymilvus()
        client = self.client
        if not self.call("has_collection", client.has_collection, self.meta):
            schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", pymilvus.DataType.VARCHAR, is_primary=True, max_length=64)
            schema.add_field("value", pymilvus.DataType.VARCHAR, max_length=MILVUS_MAX_VARCHAR)
            schema.add_field("pad", pymilvus.DataType.FLOAT_VECTOR, dim=2)  # one is required
            index = client.prepare_index_params()
            index.add_index("pad", index_type="FLAT", metric_type="L2")
            self.call(
                "create_collection",
                client.create_collection,
                self.meta,
                schema=schema,
                index_params=index,
                consistency_level=MILVUS_CONSISTENCY,
            )
        encoded = json.dumps(value, sort_keys=True)
        if len(encoded.encode()) > MILVUS_MAX_VARCHAR:
            raise BackendError(f"the record of collection {self.collection!r} is too large")
        self.call(
            "upsert",
            client.upsert,
            self.meta,
            [{"id": "meta", "value": encoded, "pad": [0.0, 0.0]}],
        )

    def drop(self) -> None:
        """Drop the collection and its companion (nothing when absent)."""
        for name in (self.collection, self.meta):
            if self.call("has_collection", self.client.has_collection, name):
                self.call("drop_collection", self.client.drop_collection, name)
            # pymilvus 2.5 keeps a dropped collection's schema cached for inserts: a
            # collection re-created under the name would be written with the old fields.
            handler = getattr(self.client, "_get_connection", lambda: None)()
            cache = getattr(handler, "schema_cache", None)
            if isinstance(cache, dict):
                cache.pop(name, None)

    def close(self) -> None:
        """Close the client (a Milvus Lite file's server process stops with its last client)."""
        with milvus_errors("close", self.collection):
            self.client.close()


def connect(
    uri: str,
    collection: str,
    *,
    token: str = "",
    db_name: str = "",
    client_options: Mapping[str, Any] | None = None,
) -> MilvusConnection:
    """A connection to ``uri``: a Milvus Lite file (``./kb.db``) or a server
    (``http://host:19530``, ``https://...`` for TLS); ``token`` is ``user:password`` or an
    API key; ``client_options`` go to ``MilvusClient`` (TLS files: ``server_pem_path``,
    ``ca_pem_path``, ``client_pem_path``, ``client_key_path``, ``server_name``)."""
    if not isinstance(collection, str) or not _NAME.match(collection):
        raise BackendError(
            f"collection name {collection!r} is invalid: use letters, digits and underscores, "
            "starting with a letter or underscore"
        )
    pymilvus = _pymilvus()
    kwargs: dict[str, Any] = {"uri": uri}
    if token:
        kwargs["token"] = token
    if db_name:
        kwargs["db_name"] = db_name
    kwargs.update(client_options or {})
    try:
        with warnings.catch_warnings():  # a Milvus Lite URI imports milvus_lite here
            warnings.simplefilter("ignore", UserWarning)
            client = pymilvus.MilvusClient(**kwargs)
    except Exception as exc:
        raise BackendError(
            f"cannot connect to Milvus at {uri!r}: {str(exc)[:300]}; check the URI (a .db file "
            "path for Milvus Lite, http(s)://host:19530 for a server) and the token"
        ) from exc
    return MilvusConnection(client, collection, uri)
