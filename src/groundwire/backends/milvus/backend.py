"""The Milvus search backend: one collection per knowledge base (see ``schema.py``).

Lexical: one BM25 search per field (Milvus's sparse inverted index, its own per-field
statistics over the whole collection), summed client-side with the snapshot's weights.
The top k of a sum is made exact with the threshold algorithm (Fagin): every candidate
gets every field's score (a second search restricted to ``id in [...]``), and the lists
deepen until the k-th sum beats the best sum an unseen entry could reach.
Dense: one search of the ``dense`` field (inner product of unit vectors = cosine).
Ties break on id client-side, over a margin of extra hits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.backends.milvus.client import MilvusConnection, connect
from groundwire.backends.milvus.schema import (
    BIGRAMS,
    SCHEMA_VERSION,
    compile_filter,
    entry_from_record,
    pair_tokens,
    quote,
    settings_from_json,
)
from groundwire.backends.protocol import BackendHit, BackendStats, cut_links, links, sort_hits
from groundwire.config import (
    DEFAULT_ALIAS_BOOST,
    DEFAULT_EXACT_BOOST,
    DEFAULT_MAX_QUERY_CHARS,
    MAX_PHRASE_TOKENS,
    MILVUS_CONSISTENCY,
    MILVUS_LEXICAL_DEPTH,
    MILVUS_MAX_LIMIT,
    MILVUS_TERM_DEPTH,
    MILVUS_TIE_MARGIN,
    IndexSettings,
)
from groundwire.errors import BackendError, QueryError
from groundwire.index.knowledge_base import check_k, check_query
from groundwire.model import Filter, KnowledgeEntry
from groundwire.text import Analyzer

__all__ = ["MilvusBackend"]

Scores = dict[str, float]


class MilvusBackend:
    """Search a knowledge base exported to Milvus (``groundwire export --milvus``).

    ``MilvusBackend(uri, collection)`` opens an existing collection; the settings it was
    built with (fields, weights, analyzer, vector model) are read from it. ``close()``
    (or ``with``) releases the client.
    """

    def __init__(
        self,
        uri: str,
        collection: str = "groundwire",
        *,
        token: str = "",
        db_name: str = "",
        client_options: Mapping[str, Any] | None = None,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        connection: MilvusConnection | None = None,
    ) -> None:
        self._conn = connection or connect(
            uri, collection, token=token, db_name=db_name, client_options=client_options
        )
        meta = self._conn.read_meta()
        if meta is None:
            self._conn.close()
            raise BackendError(
                f"Milvus at {uri!r} has no groundwire collection {collection!r}; create it "
                f"with: groundwire export SNAPSHOT --milvus {uri} --collection {collection}"
            )
        if meta.get("schema") != SCHEMA_VERSION:
            self._conn.close()
            raise BackendError(
                f"collection {collection!r} has row layout {meta.get('schema')!r}; this "
                f"groundwire reads layout {SCHEMA_VERSION}; re-export it with --recreate"
            )
        self._meta = meta
        self._settings = settings_from_json(meta["settings"])
        self._analyzer = Analyzer(self._settings.analyzer)
        self._weights = {f: float(w) for f, w in self._settings.field_weights.items() if w > 0}
        self._exact_boost = float(exact_boost)
        self._alias_boost = float(alias_boost)

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def connection(self) -> MilvusConnection:
        """The client and collection names (for sync and tests)."""
        return self._conn

    @property
    def settings(self) -> IndexSettings:
        """The index settings the collection was exported with."""
        return self._settings

    @property
    def meta(self) -> dict[str, Any]:
        """What the collection records: settings, vector model, the snapshot it mirrors."""
        return dict(self._meta)

    def close(self) -> None:
        """Release the client."""
        self._conn.close()

    def __enter__(self) -> MilvusBackend:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- Milvus calls ---------------------------------------------------------------------
    def _search(
        self, field: str, data: Any, expr: str, limit: int, metric: str
    ) -> list[tuple[str, float]]:
        conn = self._conn
        found = conn.call(
            "search",
            conn.client.search,
            conn.collection,
            data=[data],
            anns_field=field,
            filter=expr,
            limit=limit,
            output_fields=["id"],
            search_params={"metric_type": metric},
            consistency_level=MILVUS_CONSISTENCY,
        )
        return [(str(hit["id"]), float(hit["distance"])) for hit in found[0]]

    def _query(self, expr: str, fields: list[str], limit: int) -> list[dict[str, Any]]:
        return self._conn.query(
            filter=expr, output_fields=fields, limit=limit, consistency_level=MILVUS_CONSISTENCY
        )

    # -- lexical --------------------------------------------------------------------------
    def _texts(self, query: str) -> dict[str, str]:
        terms = self._analyzer.tokens(check_query(query, DEFAULT_MAX_QUERY_CHARS))
        texts = {f: " ".join(pair_tokens(terms) if f == BIGRAMS else terms) for f in self._weights}
        return {f: text for f, text in texts.items() if text}

    def _field_scores(self, field: str, text: str, expr: str, ids: Sequence[str]) -> Scores:
        """Raw BM25 of field ``field`` for exactly these ids (absent: no match, 0)."""
        out: Scores = {}
        for start in range(0, len(ids), MILVUS_MAX_LIMIT):
            part = ids[start : start + MILVUS_MAX_LIMIT]
            scoped = f"({expr}) and id in [{', '.join(quote(i) for i in part)}]"
            out.update(self._search(f"s_{field}", text, scoped, len(part), "BM25"))
        return out

    def lexical(self, query: str, flt: Filter, k: int) -> list[BackendHit]:
        """The exact BM25 top ``k`` of the eligible entries (per-field sum; see module)."""
        check_k("k", k)
        texts = self._texts(query)
        if not texts:
            return []
        expr = compile_filter(flt)
        depth = min(max(k * MILVUS_LEXICAL_DEPTH, 32), MILVUS_MAX_LIMIT)
        scores: dict[str, Scores] = {f: {} for f in texts}
        while True:
            lists = {
                f: self._search(f"s_{f}", text, expr, depth, "BM25") for f, text in texts.items()
            }
            for f, hits in lists.items():
                scores[f].update(hits)
            union = sorted({i for field_scores in scores.values() for i in field_scores})
            for f, text in texts.items():
                missing = [i for i in union if i not in scores[f]]
                if missing:
                    found = self._field_scores(f, text, expr, missing)
                    scores[f].update({i: found.get(i, 0.0) for i in missing})
            totals = {i: sum(self._weights[f] * scores[f][i] for f in texts) for i in union}
            ranked = sorted(totals, key=lambda i: (-totals[i], i))
            bound = sum(
                self._weights[f] * hits[-1][1]
                for f, hits in lists.items()
                if len(hits) == depth and hits
            )
            done = bound == 0.0 or (len(ranked) >= k and totals[ranked[k - 1]] > bound)
            if done or depth >= MILVUS_MAX_LIMIT:
                break
            depth = min(depth * 4, MILVUS_MAX_LIMIT)
        return [
            BackendHit(
                i,
                totals[i],
                {f: self._weights[f] * scores[f][i] for f in texts if scores[f][i]},
            )
            for i in ranked[:k]
            if totals[i] > 0
        ]

    def lexical_scores(self, query: str, flt: Filter, ids: Sequence[str]) -> Scores:
        """BM25 of eligible ``ids`` (0 for those that do not match; ineligible left out)."""
        texts = self._texts(query)
        expr = compile_filter(flt)
        eligible = self._eligible(expr, ids)
        totals = dict.fromkeys(eligible, 0.0)
        for f, text in texts.items():
            for i, score in self._field_scores(f, text, expr, eligible).items():
                totals[i] += self._weights[f] * score
        return totals

    def _eligible(self, expr: str, ids: Sequence[str]) -> list[str]:
        out: list[str] = []
        unique = sorted(set(ids))
        for start in range(0, len(unique), MILVUS_MAX_LIMIT):
            part = unique[start : start + MILVUS_MAX_LIMIT]
            scoped = f"({expr}) and id in [{', '.join(quote(i) for i in part)}]"
            out.extend(str(row["id"]) for row in self._query(scoped, ["id"], len(part)))
        return sorted(out)

    # -- phrase ---------------------------------------------------------------------------
    def phrase(self, query: str, flt: Filter) -> list[BackendHit]:
        """Eligible entries whose exact (id/title) or alias phrase occurs in ``query``."""
        terms = self._analyzer.tokens(check_query(query, DEFAULT_MAX_QUERY_CHARS))
        longest = min(int(self._meta.get("max_phrase_terms", MAX_PHRASE_TOKENS)), MAX_PHRASE_TOKENS)
        keys = sorted(
            {
                " ".join(terms[i : i + n])
                for i in range(len(terms))
                for n in range(1, longest + 1)
                if i + n <= len(terms)
            }
        )
        if not keys or (self._exact_boost <= 0 and self._alias_boost <= 0):
            return []
        listed = "[" + ", ".join(quote(key) for key in keys) + "]"
        expr = compile_filter(flt)
        # Two queries of ids: pymilvus 2.5 cannot read ARRAY fields back from Milvus Lite.
        found: dict[str, dict[str, float]] = {}
        for name, boost in (("exact", self._exact_boost), ("alias", self._alias_boost)):
            if boost <= 0:
                continue
            scoped = f"array_contains_any({name}, {listed}) and {expr}"
            for row in self._query(scoped, ["id"], MILVUS_MAX_LIMIT):
                found.setdefault(str(row["id"]), {})[name] = boost
        hits = [BackendHit(i, sum(parts.values()), parts) for i, parts in found.items()]
        return sort_hits(hits)

    # -- dense ----------------------------------------------------------------------------
    def _vector(self, vector: npt.NDArray[np.float32]) -> list[float]:
        dims = self._meta.get("dimensions")
        if dims is None:
            raise QueryError(
                f"collection {self._conn.collection!r} holds no vectors; export it with --vectors"
            )
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != dims:
            raise QueryError(
                f"the query vector has {query.shape[0]} dimensions, the collection {dims}; "
                f"embed the query with the collection's model ({self._meta.get('model_id')})"
            )
        if not np.isfinite(query).all():
            raise QueryError("the query vector holds NaN or infinite values")
        return [float(x) for x in query]

    def dense(self, vector: npt.NDArray[np.float32], flt: Filter, k: int) -> list[BackendHit]:
        """Cosine top ``k`` of the eligible entries."""
        check_k("k", k)
        data = self._vector(vector)
        limit = min(k + MILVUS_TIE_MARGIN, MILVUS_MAX_LIMIT)
        found = self._search("dense", data, compile_filter(flt), limit, "IP")
        hits = [BackendHit(i, score, {"dense": score}) for i, score in found]
        return sort_hits(hits, k)

    def dense_scores(
        self, vector: npt.NDArray[np.float32], flt: Filter, ids: Sequence[str]
    ) -> Scores:
        """Cosine of eligible ``ids`` with ``vector`` (ineligible ids left out)."""
        data = self._vector(vector)
        expr = compile_filter(flt)
        out: Scores = {}
        unique = sorted(set(ids))
        for start in range(0, len(unique), MILVUS_MAX_LIMIT):
            part = unique[start : start + MILVUS_MAX_LIMIT]
            scoped = f"({expr}) and id in [{', '.join(quote(i) for i in part)}]"
            out.update(self._search("dense", data, scoped, len(part), "IP"))
        return out

    # -- records --------------------------------------------------------------------------
    def fetch(self, ids: Sequence[str], flt: Filter | None = None) -> list[KnowledgeEntry]:
        """The entries with these ids, in the order given; unknown ids are left out (with
        ``flt``: only eligible ones, links cut to eligible ids)."""
        if flt is not None:
            expr = compile_filter(flt)
            shown = set(self._eligible(expr, ids))
            shown_entries = self.fetch([i for i in ids if i in shown])
            visible = set(self._eligible(expr, links(shown_entries))) | shown
            return [cut_links(entry, visible) for entry in shown_entries]
        conn = self._conn
        found: dict[str, KnowledgeEntry] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), MILVUS_MAX_LIMIT):
            part = unique[start : start + MILVUS_MAX_LIMIT]
            rows = conn.call(
                "get", conn.client.get, conn.collection, ids=part, output_fields=["record"]
            )
            for row in rows:
                entry = entry_from_record(row["record"])
                found[entry.id] = entry
        return [found[i] for i in ids if i in found]

    def _count_rows(self) -> int:
        return self._count("")

    # -- what the relevance gate reads -----------------------------------------------------
    def _count(self, expr: str) -> int:
        rows = self._conn.query(
            filter=expr, output_fields=["count(*)"], consistency_level=MILVUS_CONSISTENCY
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def term_counts(self, terms: Sequence[str], flt: Filter) -> tuple[int, list[int]]:
        """Eligible rows, and how many of them hold each analyzed term.

        A term's rows are found by one BM25 search per field (the sparse inverted index:
        every row holding the term scores above zero), ``MILVUS_TERM_DEPTH`` deep; a term
        more common than that is counted by a scan instead (:meth:`_scan_count`).
        """
        expr = compile_filter(flt)
        total = self._count(expr)
        fields = [f for f in self._weights if f != BIGRAMS]
        depth = max(1, min(total, MILVUS_TERM_DEPTH))
        counts = []
        for term in terms:
            if not term or not total:
                counts.append(0)
                continue
            found: set[str] = set()
            exact = True
            for f in fields:
                hits = self._search(f"s_{f}", term, expr, depth, "BM25")
                found.update(i for i, _ in hits)
                exact = exact and (len(hits) < depth or depth == total)
            counts.append(len(found) if exact else self._scan_count(term, expr, fields))
        return total, counts

    def _scan_count(self, term: str, expr: str, fields: Sequence[str]) -> int:
        """Eligible rows holding ``term``, by ``==``/``like`` on the space-joined terms.

        ``_``, ``%``, ``\\`` and ``"`` in a term become the single-character wildcard
        (Milvus Lite 2.5.1 fails on escapes in ``like``): the count may then include rows
        holding a look-alike term, never miss one.
        """
        token = "".join("_" if ch in '_%\\"' else ch for ch in term)
        matches = " or ".join(
            f"t_{f} == {quote(term)} or t_{f} like {quote(token + ' %')} or "
            f"t_{f} like {quote('% ' + token + ' %')} or t_{f} like {quote('% ' + token)}"
            for f in fields
        )
        return self._count(f"({expr}) and ({matches})")

    def noise_level(self, quantile: float) -> float:
        """The noise floor recorded at export (quantiles in steps of 0.01; a quantile
        between two steps reads the lower one)."""
        table = self._meta.get("noise")
        if not isinstance(table, list) or len(table) < 2:
            raise BackendError(
                f"collection {self._conn.collection!r} records no noise level (exported by an "
                "earlier groundwire); run groundwire export again to record it"
            )
        if not 0.0 <= quantile <= 1.0:
            raise QueryError(f"quantile must be within [0, 1], got {quantile!r}")
        steps = len(table) - 1
        return float(table[int(quantile * steps + 1e-9)])

    def stats(self) -> BackendStats:
        """What the collection holds. ``scoring`` is always ``fields`` (see docs/MILVUS.md)."""
        settings = self._settings
        return BackendStats(
            backend="milvus",
            count=self._count_rows(),
            field_weights=dict(self._weights),
            scoring="fields",
            k1=float(settings.k1),
            b=float(settings.b),
            dimensions=self._meta.get("dimensions"),
            model_id=self._meta.get("model_id"),
            snapshot=self._meta.get("snapshot"),
        )
