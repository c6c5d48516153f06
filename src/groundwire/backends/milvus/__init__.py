"""The Milvus search backend (extra ``[milvus]``): export, sync and search (docs/MILVUS.md)."""

from groundwire.backends.milvus.backend import MilvusBackend
from groundwire.backends.milvus.schema import compile_filter
from groundwire.backends.milvus.sync import (
    MilvusSyncReport,
    delete_entries,
    entries_rows,
    sync_milvus,
    upsert_entries,
)

__all__ = [
    "MilvusBackend",
    "MilvusSyncReport",
    "compile_filter",
    "delete_entries",
    "entries_rows",
    "sync_milvus",
    "upsert_entries",
]
