"""Search backends: the contract (``protocol``), the embedded snapshot, Milvus.

``groundwire.backends.milvus`` needs the ``[milvus]`` extra and is imported on demand.
"""

from groundwire.backends.embedded import EmbeddedBackend
from groundwire.backends.hybrid import hybrid_search
from groundwire.backends.protocol import BackendHit, BackendStats, SearchBackend, sort_hits

__all__ = [
    "BackendHit",
    "BackendStats",
    "EmbeddedBackend",
    "SearchBackend",
    "hybrid_search",
    "sort_hits",
]
