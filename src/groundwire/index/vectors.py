"""Dense vectors of a knowledge base's entries or chunks, and exact search over them.

A :class:`VectorIndex` holds one unit-length vector per entry, in the knowledge base's
position order (entry id, code point), with the model id and dimensions that made them.
It is built from a :class:`~groundwire.index.knowledge_base.KnowledgeBase` by
:meth:`VectorIndex.build` and attached to retrieval by passing it along with the
knowledge base (it checks that both hold the same ids in the same order).

**What is embedded** (:func:`embedding_text`): a document or chunk embeds its title
(document title and heading trail) and its text, on two lines; a curated entry its
title, summary and body. Aliases and keywords are left to the lexical and phrase
channels: they are lookup phrases, not prose.

**Storage**: ``float32`` (exact), ``float16`` (half the memory) or ``int8`` (a quarter;
each row scaled by its largest magnitude / 127). Scores are always computed in float32;
the quality of each type against float32 is measured in docs/HYBRID.md.

**Search** (:meth:`VectorIndex.search`): cosine similarity (the dot product of unit
vectors) over the positions a mask allows, applied *before* top-k, so an ineligible
entry never takes a slot; entries whose text embedded to the zero vector (no text) are
never returned. Ties break on position (entry id). float32 and int8 rows are scanned
by the C dense kernel (:mod:`groundwire.index._dense`) in place, in one pass, masks
applied during the scan; without it (or for float16) numpy scores them. Above a size
threshold an attached ANN index answers instead (:mod:`groundwire.index.ann`).

**Scan** (:attr:`VectorIndex.scan`, float32 rows): ``"rescored"`` (the default) scans int8
codes of the rows (made on first search, a quarter of the bytes) and rescores the best
``2k + 64`` in float32; a certificate (the pool's worst code score plus a bound on the
quantization and rounding error is below the k-th exact score) proves no row left out
could enter the top k, else the full scan answers. Hits and scores are those of
``"full"`` (every float32 row read, the reference exact mode) bit for bit.

**Where they are kept**: in the snapshot, as its ``vectors`` section (:meth:`section`,
:meth:`from_section`; covered by the manifest and checksums like every other array,
memory-mapped on load). :meth:`updated` brings vectors to an updated knowledge base,
embedding only entries whose text changed. :meth:`save`/:meth:`load` read and write the
legacy side file ``<snapshot>.vectors`` (:mod:`groundwire.index.vector_files`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import numpy.typing as npt

from groundwire.config import (
    DEFAULT_ANN_THRESHOLD,
    DEFAULT_DENSE_SCAN,
    DENSE_RESCORE_EXTRA,
    DENSE_RESCORE_FACTOR,
    DENSE_SCANS,
    VECTOR_DTYPES,
)
from groundwire.embed.base import Embedder, Matrix, check_embedder, first_row, normalize_rows
from groundwire.errors import ConfigError, IndexFormatError, KnowledgeIndexError, QueryError
from groundwire.index import _dense
from groundwire.index.parts import SnapshotSection
from groundwire.model import KnowledgeEntry

if TYPE_CHECKING:
    from groundwire.index.knowledge_base import KnowledgeBase

__all__ = [
    "SECTION",
    "AnnSearcher",
    "VectorDtype",
    "VectorIndex",
    "embedding_text",
]

#: The snapshot section that holds a knowledge base's vectors (docs/INDEX.md, "Sections").
SECTION = "vectors"


def _ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\x00".join(ids).encode("utf-8")).hexdigest()


VectorDtype = Literal["float32", "float16", "int8"]
DenseScan = Literal["rescored", "full"]
MaskArray = npt.NDArray[np.bool_]
#: Rows scored per block when the stored type must be widened to float32 first.
_BLOCK = 16_384


def _check_scan(scan: object) -> DenseScan:
    if scan not in DENSE_SCANS:
        raise ConfigError(f"scan={scan!r} is invalid: expected one of {DENSE_SCANS}")
    return scan  # type: ignore[return-value]


def embedding_text(entry: KnowledgeEntry) -> str:
    """The text embedded for an entry (see the module docstring)."""
    parts = (entry.title, entry.summary, entry.body) if entry.summary else (entry.title, entry.body)
    return "\n".join(part for part in parts if part)


class AnnSearcher(Protocol):
    """An approximate nearest-neighbour index over a :class:`VectorIndex`'s rows."""

    def search(
        self, query: Matrix, k: int, allowed: MaskArray | None
    ) -> tuple[list[int], list[float]]:
        """Up to ``k`` (position, cosine) pairs among ``allowed`` positions, best first."""
        ...


def _quantize(matrix: Matrix, dtype: VectorDtype) -> tuple[np.ndarray, Matrix | None]:
    if dtype == "float32":
        return np.ascontiguousarray(matrix, dtype=np.float32), None
    if dtype == "float16":
        return np.ascontiguousarray(matrix, dtype=np.float16), None
    peak = np.abs(matrix).max(axis=1).astype(np.float32)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    quantized = np.clip(np.rint(matrix / scale[:, None]), -127, 127).astype(np.int8)
    return quantized, scale


def _top(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The ``k`` best (position, score) pairs: score descending, then position."""
    if docs.shape[0] > k:
        cut = np.argpartition(-scores, k - 1)[:k]
        threshold = scores[cut].min()
        # Keep every tie of the k-th score, so the position tie-break is exact.
        keep = np.flatnonzero(scores >= threshold)
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))[:k]
    return docs[order].tolist(), scores[order].astype(np.float64).tolist()


class VectorIndex:
    """Unit-length vectors of a knowledge base's entries, searchable exactly (see module)."""

    __slots__ = (
        "_ann",
        "_codes",
        "_matrix",
        "_nonzero",
        "_scale",
        "_view",
        "dimensions",
        "dtype",
        "ids",
        "model_id",
        "scan",
    )

    def __init__(
        self,
        ids: Sequence[str],
        vectors: Matrix,
        model_id: str,
        *,
        dtype: VectorDtype = "float32",
        scan: DenseScan = DEFAULT_DENSE_SCAN,
    ) -> None:
        """Vectors (one row per id, in the knowledge base's position order); ``scan`` says
        how exact search reads float32 rows (see the module docstring)."""
        if dtype not in VECTOR_DTYPES:
            raise ConfigError(f"dtype={dtype!r} is invalid: expected one of {VECTOR_DTYPES}")
        matrix = np.asarray(vectors)
        if matrix.ndim != 2 or matrix.shape[0] != len(ids):
            raise ConfigError(f"vectors of shape {tuple(matrix.shape)} do not match {len(ids)} ids")
        if not isinstance(model_id, str) or not model_id:
            raise ConfigError("model_id must be a non-empty string (the embedder's model_id)")
        self.ids = tuple(ids)
        self.model_id = model_id
        self.dimensions = int(matrix.shape[1])
        self.dtype: VectorDtype = dtype
        if matrix.dtype in (np.int8, np.float16) and matrix.dtype.name == dtype:
            raise ConfigError("pass float32 vectors; the index quantizes them itself")
        unit = normalize_rows(matrix.astype(np.float32, copy=False))
        self._matrix, self._scale = _quantize(unit, dtype)
        self._nonzero: MaskArray = np.abs(unit).sum(axis=1) > 0
        self._ann: AnnSearcher | None = None
        self._view: _dense.Matrix | bool | None = False  # the kernel's view, made on first use
        self._codes: _dense.Codes | None = None  # int8 codes of float32 rows, on first use
        self.scan: DenseScan = _check_scan(scan)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        kb: KnowledgeBase,
        embedder: Embedder,
        *,
        dtype: VectorDtype = "float32",
        text: Callable[[KnowledgeEntry], str] = embedding_text,
    ) -> VectorIndex:
        """Embed every entry of ``kb`` (``text(entry)``, default :func:`embedding_text`).

        Wrap ``embedder`` in a :class:`~groundwire.embed.cache.CachedEmbedder` so a
        rebuild embeds only entries whose text changed.
        """
        check_embedder(embedder)
        entries = list(kb)
        matrix = embedder.embed_documents([text(entry) for entry in entries])
        if len(entries) == 0:
            matrix = np.zeros((0, embedder.dimensions), dtype=np.float32)
        return cls([entry.id for entry in entries], matrix, embedder.model_id, dtype=dtype)

    def with_scan(self, scan: DenseScan) -> VectorIndex:
        """A copy of this index (sharing its arrays) whose exact search scans as ``scan``
        says: ``"full"`` (every float32 row, the reference) or ``"rescored"``."""
        copy = self.with_ann(self._ann)
        copy.scan = _check_scan(scan)
        return copy

    def with_ann(self, ann: AnnSearcher | None) -> VectorIndex:
        """A copy of this index (sharing its arrays) that ``ann`` answers large searches for."""
        copy = VectorIndex.__new__(VectorIndex)
        for name in VectorIndex.__slots__:
            setattr(copy, name, getattr(self, name))
        copy._ann = ann
        return copy

    def subset(self, positions: Sequence[int] | np.ndarray) -> VectorIndex:
        """The rows at ``positions`` (ascending) as an index of their own, stored values
        unchanged (no re-quantization) and searched exactly: the vectors of a scoped view
        (a tenant's pool, a reader) built from those entries of the knowledge base."""
        rows = np.asarray(positions, dtype=np.int64)
        part = VectorIndex.__new__(VectorIndex)
        part.ids = tuple(self.ids[n] for n in rows.tolist())
        part.model_id, part.dimensions, part.dtype = self.model_id, self.dimensions, self.dtype
        part._matrix = self._matrix[rows]
        part._scale = None if self._scale is None else self._scale[rows]
        part._nonzero = self._nonzero[rows]
        part._ann = None
        part._view = False
        part._codes = None
        part.scan = self.scan
        return part

    @property
    def ann(self) -> AnnSearcher | None:
        """The attached ANN index, if any."""
        return self._ann

    # -- inspection -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored matrix (and int8 scales)."""
        return int(self._matrix.nbytes + (0 if self._scale is None else self._scale.nbytes))

    def stored_arrays(self) -> tuple[np.ndarray, Matrix | None]:
        """The rows as stored (float32, float16 or int8) and the int8 row scales (or None)."""
        return self._matrix, self._scale

    def matrix(self) -> Matrix:
        """Every vector as float32 ``[n, dimensions]`` (widened from the stored type)."""
        return self._rows(np.arange(len(self.ids)))

    def vector(self, doc: int) -> Matrix:
        """The float32 vector at position ``doc``."""
        return first_row(self._rows(np.array([doc])))

    def _rows(self, docs: np.ndarray) -> Matrix:
        rows = np.asarray(self._matrix[docs], dtype=np.float32)
        if self._scale is not None:
            rows = rows * self._scale[docs][:, None]
        return rows

    def matches(self, kb: KnowledgeBase) -> bool:
        """Whether ``kb`` holds exactly this index's ids, in the same order."""
        return len(kb) == len(self.ids) and all(
            kb.entry(n).id == entry_id for n, entry_id in enumerate(self.ids)
        )

    def check_query(self, vector: object, model_id: str | None = None) -> Matrix:
        """A query vector as float32 ``[dimensions]``; errors name the mismatch and fix."""
        if model_id is not None and model_id != self.model_id:
            raise QueryError(
                f"the query was embedded with {model_id!r} but the vectors with "
                f"{self.model_id!r}; use the same model for both"
            )
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != self.dimensions:
            raise QueryError(
                f"the query vector has {query.shape[0]} dimensions, the index "
                f"{self.dimensions}; embed the query with the index's model ({self.model_id})"
            )
        if not np.isfinite(query).all():
            raise QueryError("the query vector holds NaN or infinite values")
        return query

    # -- search -----------------------------------------------------------------------------
    def _kernel(self) -> _dense.Matrix | None:
        """The dense kernel's view of the stored matrix (None: numpy scores instead)."""
        view = self._view
        if view is False:
            view = _dense.Matrix.of(self._matrix, self._scale, self._nonzero)
            self._view = view
        return view if isinstance(view, _dense.Matrix) else None

    def scores(self, query: Matrix, docs: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Cosine of ``query`` with the rows ``docs`` (all rows when None), float32."""
        rows = np.arange(len(self.ids)) if docs is None else np.asarray(docs, dtype=np.int64)
        view = self._kernel()
        if view is not None and rows.shape[0]:  # the kernel's scores, as search ranks by
            if int(rows.min()) < 0 or int(rows.max()) >= len(self.ids):
                raise QueryError(f"positions must lie within the {len(self.ids)} vectors")
            return _dense.rows(view, np.ascontiguousarray(query, dtype=np.float32), rows)
        if self.dtype == "float32":
            matrix = self._matrix if docs is None else self._matrix[rows]
            return np.asarray(matrix @ query, dtype=np.float32)
        out = np.empty(rows.shape[0], dtype=np.float32)
        for start in range(0, rows.shape[0], _BLOCK):
            part = rows[start : start + _BLOCK]
            out[start : start + part.shape[0]] = self._rows(part) @ query
        return out

    def search(
        self, query: Matrix, k: int, mask: MaskArray | None = None, *, exact: bool = False
    ) -> tuple[list[int], list[float]]:
        """Up to ``k`` (positions, cosines) allowed by ``mask``, best first, ties by position.

        ``mask`` (from ``KnowledgeBase.eligibility``) is applied before top-k. With an ANN
        index attached and more than the ANN threshold of vectors, the ANN index answers
        unless ``exact``. Exact search returns the same hits and scores whatever
        :attr:`scan` is (``"rescored"`` only reads fewer bytes).
        """
        n = len(self.ids)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise QueryError(f"k={k!r} is invalid: expected an integer >= 1")
        if mask is not None and (mask.dtype != np.bool_ or mask.shape != (n,)):
            raise QueryError(f"mask must be a boolean array of {n} values (one per entry)")
        if self._ann is not None and not exact and n > DEFAULT_ANN_THRESHOLD:
            allowed = self._nonzero if mask is None else mask & self._nonzero
            return self._ann.search(query, k, None if mask is None else allowed)
        view = self._kernel()
        pool = k * DENSE_RESCORE_FACTOR + DENSE_RESCORE_EXTRA
        if view is not None and self._rescored(pool):
            rows, values, _ = _dense.topk_rescored(
                view,
                self._code_view(),
                np.ascontiguousarray(query, dtype=np.float32),
                k,
                pool,
                None if mask is None else np.ascontiguousarray(mask),
            )
            return rows.tolist(), values.astype(np.float64).tolist()
        if view is not None:  # one pass over the stored rows, the masks applied in place
            rows, values = _dense.topk(
                view,
                np.ascontiguousarray(query, dtype=np.float32),
                k,
                None if mask is None else np.ascontiguousarray(mask),
            )
            return rows.tolist(), values.astype(np.float64).tolist()
        allowed = self._nonzero if mask is None else mask & self._nonzero
        if mask is None and bool(allowed.all()):
            docs = np.arange(n)
            return _top(docs, self.scores(query), k)
        docs = np.flatnonzero(allowed)
        if docs.shape[0] == 0:
            return [], []
        if docs.shape[0] * 2 < n:  # few allowed: score only those rows
            return _top(docs, self.scores(query, docs), k)
        scores = self.scores(query)
        return _top(docs, scores[docs], k)

    def _rescored(self, pool: int) -> bool:
        """Whether search goes through int8 codes: float32 rows, scan "rescored", and
        enough rows that a pool is a small part of them."""
        return self.scan == "rescored" and self.dtype == "float32" and len(self.ids) > 2 * pool

    def _code_view(self) -> _dense.Codes:
        codes = self._codes
        if codes is None:
            codes = _dense.Codes(np.asarray(self._matrix, dtype=np.float32))
            self._codes = codes
        return codes

    # -- files ------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to one file, atomically (a failed write keeps the old file).

        The snapshot's ``vectors`` section is where writers keep vectors
        (:func:`~groundwire.index.vector_files.with_vectors`); this file is the legacy
        side file, still read, and a way to move vectors on their own."""
        from groundwire.index.vector_files import write_vector_file

        write_vector_file(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, verify: bool = True) -> VectorIndex:
        """Open a file written by :meth:`save`, the matrix memory-mapped.

        ``verify`` checks the matrix's SHA-256. Raises :class:`IndexFormatError` for a
        missing, truncated, tampered or foreign file.
        """
        from groundwire.index.vector_files import read_vector_file

        return read_vector_file(path, verify=verify)

    @classmethod
    def stored(
        cls,
        ids: Sequence[str],
        model_id: str,
        matrix: np.ndarray,
        scale: Matrix | None,
    ) -> VectorIndex:
        """An index over already stored rows (``matrix`` of type float32, float16 or int8,
        ``scale`` the int8 row scales), kept as they are: no copy, no re-quantization."""
        index = cls.__new__(cls)
        index.ids, index.model_id = tuple(ids), model_id
        index.dimensions, index.dtype = int(matrix.shape[1]), matrix.dtype.name  # type: ignore[assignment]
        index._matrix, index._scale, index._ann, index._view = matrix, scale, None, False
        index._codes, index.scan = None, DEFAULT_DENSE_SCAN
        index._nonzero = (
            np.abs(index._rows(np.arange(len(index.ids)))).sum(axis=1) > 0
            if index.ids
            else np.zeros(0, dtype=bool)
        )
        return index

    def updated(
        self,
        previous: KnowledgeBase,
        kb: KnowledgeBase,
        embedder: Embedder | None,
        *,
        text: Callable[[KnowledgeEntry], str] = embedding_text,
    ) -> VectorIndex:
        """These vectors (of ``previous``) brought to ``kb``: every entry whose id and
        embedded text (``text(entry)``) are unchanged keeps its stored row as it is; only
        the others are embedded, with ``embedder`` (same type). With another model than
        these vectors', every entry is embedded. Raises :class:`KnowledgeIndexError` when
        entries need embedding and ``embedder`` is None."""
        self.check_for(previous)
        if embedder is not None and check_embedder(embedder).model_id != self.model_id:
            return VectorIndex.build(kb, embedder, dtype=self.dtype, text=text)
        entries = list(kb)
        kept = np.full(len(entries), -1, dtype=np.int64)
        for n, entry in enumerate(entries):
            old = previous.position(entry.id)
            if old is not None and text(previous.entry(old)) == text(entry):
                kept[n] = old
        fresh = np.flatnonzero(kept < 0)
        if fresh.shape[0] and embedder is None:
            raise KnowledgeIndexError(
                f"{fresh.shape[0]} entries are new or changed since these vectors "
                f"({self.model_id}) were made; pass the embedder that made them to embed "
                "those (the CLI's --embed MODEL), or drop the vectors"
            )
        matrix = np.empty((len(entries), self.dimensions), dtype=self._matrix.dtype)
        scale = None if self._scale is None else np.empty(len(entries), dtype=np.float32)
        reused = np.flatnonzero(kept >= 0)
        matrix[reused] = self._matrix[kept[reused]]
        if scale is not None and self._scale is not None:
            scale[reused] = self._scale[kept[reused]]
        if fresh.shape[0] and embedder is not None:
            vectors = embedder.embed_documents([text(entries[n]) for n in fresh.tolist()])
            rows, row_scale = _quantize(normalize_rows(np.asarray(vectors)), self.dtype)
            matrix[fresh] = rows
            if scale is not None and row_scale is not None:
                scale[fresh] = row_scale
        return VectorIndex.stored([entry.id for entry in entries], self.model_id, matrix, scale)

    # -- the snapshot section -----------------------------------------------------------------
    def section(self) -> SnapshotSection:
        """These vectors as the snapshot's ``vectors`` section: ``kb.with_section(...)``
        then ``save`` stores them checksummed inside the snapshot, memory-mapped on load."""
        arrays = {"matrix": np.asarray(self._matrix)}
        if self._scale is not None:
            arrays["scale"] = np.asarray(self._scale, dtype=np.float32)
        meta = {
            "model_id": self.model_id,
            "dimensions": self.dimensions,
            "dtype": self.dtype,
            "ids_sha256": _ids_digest(self.ids),
        }
        return SnapshotSection(SECTION, meta, arrays)

    @classmethod
    def from_section(cls, kb: KnowledgeBase) -> VectorIndex | None:
        """The vectors ``kb``'s snapshot holds in its ``vectors`` section (None without one).

        Raises :class:`IndexFormatError` when the section does not fit ``kb`` (other ids,
        shapes or types): rebuild the vectors.
        """
        section = kb.sections.get(SECTION)
        if section is None:
            return None
        ids = tuple(entry.id for entry in kb)
        meta, arrays = section.meta, section.arrays
        matrix, scale = arrays.get("matrix"), arrays.get("scale")
        dtype, dims = meta.get("dtype"), meta.get("dimensions")
        fits = (
            matrix is not None
            and isinstance(meta.get("model_id"), str)
            and dtype in VECTOR_DTYPES
            and matrix.dtype.name == dtype
            and matrix.shape == (len(ids), dims)
            and (scale is None) == (dtype != "int8")
            and (scale is None or scale.shape == (len(ids),))
            and meta.get("ids_sha256") == _ids_digest(ids)
        )
        if not fits or matrix is None:
            raise IndexFormatError(
                "the snapshot's vectors section does not fit its entries; rebuild the "
                "vectors (VectorIndex.build, or index/ingest --embed)"
            )
        return cls.stored(ids, str(meta["model_id"]), matrix, scale)

    def check_for(self, kb: KnowledgeBase) -> VectorIndex:
        """This index if it matches ``kb``, else a :class:`KnowledgeIndexError` with the fix."""
        if not self.matches(kb):
            raise KnowledgeIndexError(
                f"these vectors ({len(self.ids)} ids, {self.model_id}) were built for another "
                f"knowledge base than this one ({len(kb)} entries); rebuild them with "
                "VectorIndex.build(kb, embedder)"
            )
        return self
