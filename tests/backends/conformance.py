"""The shared conformance suite of search backends (groundwire.backends.SearchBackend).

A backend's test module subclasses :class:`BackendConformance` and provides the
``make_backend`` fixture: ``make_backend(kb, vectors) -> SearchBackend`` (class-scoped,
so each corpus is loaded once). Scores are checked against an independent reference
written here (per-field BM25 from analyzed terms, cosine by brute force, ``admits`` for
eligibility), never against the backend itself.

Known, explained deviations are class attributes, and the tests that concern them assert
the deviation explicitly (the backend matches the reference *with* the deviation and does
not match it without), so a deviation that disappears or changes fails too:

* ``POOLS_EMPTY_FIELDS`` — a field's N and avgdl count records where it is empty, avgdl
  floored at 1 (Milvus: a BM25 function sees every row); the embedded index counts only
  records holding the field.
* ``SCORING`` — the lexical scoring a backend applies to a ``bm25f`` snapshot: ``bm25f``
  (the snapshot's own) or ``fields`` (per-field sum with the same weights).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import groundwire as gw
from groundwire.access.filters import admits
from groundwire.backends import SearchBackend
from groundwire.errors import QueryError
from groundwire.retrieve.gate import measure_noise
from groundwire.text import Analyzer

WORDS = [
    "rotate",
    "keys",
    "token",
    "webhook",
    "invoice",
    "export",
    "sync",
    "retry",
    "alert",
    "audit",
    "payroll",
    "deploy",
    "cluster",
    "ticket",
    "refund",
]
TENANTS = ("acme", "beta")
LABELS = ("group:eng", "group:hr", "user:alice", "user:bob")
QUERIES = (
    "rotate keys",
    "webhook retry alert",
    "invoice refund export export",
    "payroll audit ticket deploy cluster sync",
    "token",
    "keys rotate keys",
)
MakeBackend = Callable[[gw.KnowledgeBase, "gw.VectorIndex | None"], SearchBackend]


def _entry(rng: random.Random, n: int, *, full: bool) -> dict[str, Any]:
    def words(k: int) -> str:
        return " ".join(rng.choices(WORDS, k=k))

    entry: dict[str, Any] = {
        "id": f"e{n:03d}.{rng.choice(WORDS)}",
        "title": words(rng.randint(1, 4)),
        "summary": words(rng.randint(3, 8)),
        "body": words(rng.randint(5, 30)),
        "domain": rng.choice(("ops", "ops", "billing", "Security")),
        "integrations": rng.choice(([], [], ["slack"], ["Jira", "slack"])),
        "aliases": [words(2)] if full or rng.random() < 0.3 else [],
        "keywords": [rng.choice(WORDS)] if full or rng.random() < 0.3 else [],
        "status": "deprecated" if rng.random() < 0.1 else "active",
    }
    tenant = rng.choice((None, None, *TENANTS))
    if tenant:
        entry["tenant"] = tenant
    if rng.random() < 0.4:
        entry["acl"] = rng.sample(LABELS, rng.randint(1, 2))
    return entry


def corpus(seed: int, count: int, *, full: bool) -> gw.KnowledgeBase:
    """Labeled entries; ``full``: every lexical field non-empty."""
    rng = random.Random(seed)
    entries = [_entry(rng, n, full=full) for n in range(count)]
    # Twins: same text, different ids (ties break on id); a malformed label.
    twin = dict(entries[0], id="zz.twin")
    twin.pop("tenant", None)
    twin.pop("acl", None)
    entries.append(twin)
    entries.append(dict(twin, id="aa.twin"))
    return gw.KnowledgeBase.from_sources([{"id": "kb", "version": "v1", "entries": entries}])


def with_malformed(kb: gw.KnowledgeBase) -> gw.KnowledgeBase:
    """``kb`` plus one entry whose labels do not parse (visible to nobody)."""
    bad = gw.KnowledgeEntry(
        "bad.labels",
        "rotate keys",
        "rotate keys",
        "ops",
        (),
        body="rotate keys",
        aliases=("rotate keys",),
        keywords=("keys",),
        metadata={"tenant": "has space", "acl": ["group:eng"]},
    )
    return gw.KnowledgeBase([*kb.entries, bad], kb.settings)


# -- the reference -----------------------------------------------------------------------------
FIELDS = ("title", "aliases", "keywords", "summary", "body")


def field_terms(kb: gw.KnowledgeBase, entry: gw.KnowledgeEntry) -> dict[str, list[str]]:
    analyzer = Analyzer(kb.settings.analyzer)
    text = {
        "title": entry.title,
        "aliases": "\n".join(entry.aliases),
        "keywords": "\n".join(entry.keywords),
        "summary": entry.summary,
        "body": entry.body,
    }
    terms = {name: analyzer.tokens(value) for name, value in text.items()}
    terms["bigrams"] = [
        f"{a} {b}"
        for name in ("title", "summary", "body")
        for a, b in zip(terms[name], terms[name][1:], strict=False)
    ]
    return terms


def reference_lexical(
    kb: gw.KnowledgeBase, query: str, *, pooled: bool
) -> dict[str, dict[str, float]]:
    """Per-field BM25 ("fields" scoring, Lucene idf, (k1 + 1) numerator) of every entry.

    ``pooled``: N and avgdl of a field count every entry, also those where it is empty,
    and avgdl is at least 1 (what Milvus 2.5 does).
    """
    settings = kb.settings
    k1, b = float(settings.k1), float(settings.b)
    analyzer = Analyzer(settings.analyzer)
    q_terms = analyzer.tokens(query)
    q = {"bigrams": Counter(f"{a} {c}" for a, c in itertools.pairwise(q_terms))}
    docs = {e.id: field_terms(kb, e) for e in kb.entries}
    out: dict[str, dict[str, float]] = {e.id: {} for e in kb.entries}
    for name, weight in settings.field_weights.items():
        if weight <= 0:
            continue
        counts = q.get(name, Counter(q_terms))
        holders = [d for d in docs.values() if pooled or d[name]]
        n = len(holders)
        avgdl = sum(len(d[name]) for d in holders) / n if n else 0.0
        if pooled:  # Milvus floors a field's mean length at one token (measured, 2.5.1)
            avgdl = max(avgdl, 1.0)
        for term, times in counts.items():
            df = sum(1 for d in holders if term in d[name])
            if not df:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for entry_id, d in docs.items():
                tf = d[name].count(term)
                if tf:
                    norm = 1 - b + b * len(d[name]) / avgdl
                    part = weight * times * idf * tf * (k1 + 1) / (tf + k1 * norm)
                    out[entry_id][name] = out[entry_id].get(name, 0.0) + part
    return out


def reference_top(
    kb: gw.KnowledgeBase, query: str, flt: gw.Filter, k: int, *, pooled: bool
) -> list[tuple[str, float]]:
    scores = reference_lexical(kb, query, pooled=pooled)
    eligible = {e.id for e in kb.entries if admits(flt, e)}
    totals = [(i, sum(parts.values())) for i, parts in scores.items() if parts and i in eligible]
    return sorted(totals, key=lambda item: (-item[1], item[0]))[:k]


def assert_same_ranking(
    got: Sequence[tuple[str, float]], want: Sequence[tuple[str, float]], rel: float = 1e-5
) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert a == pytest.approx(b, rel=rel, abs=1e-6)


def ranked(hits: Sequence[gw.BackendHit] | Any) -> list[tuple[str, float]]:
    return [(hit.id, hit.score) for hit in hits]


def filters() -> st.SearchStrategy[gw.Filter]:
    principals = st.one_of(
        st.none(),
        st.builds(
            gw.Principal,
            st.sampled_from(TENANTS),
            st.sampled_from(("alice", "bob", "carol")),
            st.lists(st.sampled_from(("eng", "hr", "ops")), max_size=2, unique=True),
        ),
    )
    scopes = st.one_of(st.none(), st.builds(gw.Scope, st.sampled_from(((), ("slack",), ("jira",)))))
    blocked = st.sampled_from(((), ("billing",), ("security", "ops")))
    return st.builds(gw.Filter.of, principals, scopes, blocked)


def hashed_vectors(kb: gw.KnowledgeBase) -> gw.VectorIndex:
    return gw.VectorIndex.build(kb, gw.HashingEmbedder(32))


#: Bounded and derandomized (each Milvus example is a few round trips). The same base
#: method runs in every backend's subclass by design, hence differing_executors.
PROPERTY = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


class BackendConformance:
    """Inherit and provide ``make_backend``; set the deviation attributes your backend has."""

    POOLS_EMPTY_FIELDS: ClassVar[bool] = False
    SCORING: ClassVar[str] = "bm25f"

    # -- corpora (one backend each, per class) ------------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def full_kb(cls) -> gw.KnowledgeBase:
        return with_malformed(corpus(7, 60, full=True))

    @pytest.fixture(scope="class")
    @classmethod
    def sparse_kb(cls) -> gw.KnowledgeBase:
        return corpus(11, 60, full=False)

    @pytest.fixture(scope="class")
    @classmethod
    def full(cls, make_backend: MakeBackend, full_kb: gw.KnowledgeBase) -> SearchBackend:
        return make_backend(full_kb, hashed_vectors(full_kb))

    @pytest.fixture(scope="class")
    @classmethod
    def sparse(cls, make_backend: MakeBackend, sparse_kb: gw.KnowledgeBase) -> SearchBackend:
        return make_backend(sparse_kb, None)

    @pytest.fixture(scope="class")
    @classmethod
    def docs_kb(cls) -> gw.KnowledgeBase:
        rng = random.Random(3)
        docs = [
            gw.Document(
                f"d{n:02d}", " ".join(rng.choices(WORDS, k=3)), " ".join(rng.choices(WORDS, k=40))
            )
            for n in range(40)
        ]
        return gw.KnowledgeBase.from_documents(docs)

    @pytest.fixture(scope="class")
    @classmethod
    def documents(cls, make_backend: MakeBackend, docs_kb: gw.KnowledgeBase) -> SearchBackend:
        return make_backend(docs_kb, None)

    # -- lexical --------------------------------------------------------------------------
    @pytest.mark.parametrize("query", QUERIES)
    def test_lexical_equals_the_reference(
        self, full: SearchBackend, full_kb: gw.KnowledgeBase, query: str
    ) -> None:
        flt = gw.Filter.of(gw.Principal("acme", "alice", ["eng"]))
        want = reference_top(full_kb, query, flt, 10, pooled=False)
        assert want, "the fixture must match something"
        assert_same_ranking(ranked(full.lexical(query, flt, 10)), want)

    def test_explanations_sum_to_the_score(self, full: SearchBackend) -> None:
        for hit in full.lexical("rotate keys webhook", gw.Filter(), 10):
            assert sum(hit.explanation.values()) == pytest.approx(hit.score, rel=1e-6)
            assert set(hit.explanation) <= set(FIELDS)

    def test_ties_break_on_id(self, full: SearchBackend, full_kb: gw.KnowledgeBase) -> None:
        twin = full_kb.get("aa.twin")
        assert twin is not None
        hits = full.lexical(twin.title, gw.Filter(), 200)
        ids = [hit.id for hit in hits]
        assert ids.index("aa.twin") + 1 == ids.index("zz.twin")
        assert [(-h.score, h.id) for h in hits] == sorted((-h.score, h.id) for h in hits)

    def test_sparse_fields_statistics_deviation(
        self, sparse: SearchBackend, sparse_kb: gw.KnowledgeBase
    ) -> None:
        """Explicit: which statistics a field with empty values gets (see module)."""
        flt = gw.Filter.of(gw.Principal("beta", "bob", ["hr"]))
        query = "rotate keys payroll"
        got = ranked(sparse.lexical(query, flt, 10))
        mine = reference_top(sparse_kb, query, flt, 10, pooled=self.POOLS_EMPTY_FIELDS)
        other = reference_top(sparse_kb, query, flt, 10, pooled=not self.POOLS_EMPTY_FIELDS)
        assert_same_ranking(got, mine)
        assert [s for _, s in got] != pytest.approx([s for _, s in other], rel=1e-3)
        overlap = len({i for i, _ in got} & {i for i, _ in other})
        assert overlap >= 7, "the deviation moves scores, not which entries are found"

    def test_bm25f_snapshot_scoring(
        self, documents: SearchBackend, docs_kb: gw.KnowledgeBase
    ) -> None:
        """Explicit: a bm25f snapshot is scored as ``SCORING`` says."""
        assert docs_kb.settings.scoring == "bm25f"
        query = "rotate keys token export"
        got = ranked(documents.lexical(query, gw.Filter(), 10))
        ids, scores = docs_kb.search_ids(query, 10)
        embedded = list(zip(ids, scores, strict=True))
        fields_sum = reference_top(docs_kb, query, gw.Filter(), 10, pooled=self.POOLS_EMPTY_FIELDS)
        if self.SCORING == "bm25f":
            assert_same_ranking(got, embedded)
        else:
            assert documents.stats().scoring == "fields"
            assert_same_ranking(got, fields_sum)
            assert [s for _, s in got] != pytest.approx([s for _, s in embedded], rel=1e-3)

    @PROPERTY
    @given(flt=filters(), query=st.sampled_from(QUERIES))
    def test_filter_applies_before_top_k(
        self, full: SearchBackend, full_kb: gw.KnowledgeBase, flt: gw.Filter, query: str
    ) -> None:
        hits = full.lexical(query, flt, 8)
        entries = {e.id: e for e in full_kb.entries}
        assert all(admits(flt, entries[hit.id]) for hit in hits)
        assert_same_ranking(ranked(hits), reference_top(full_kb, query, flt, 8, pooled=False))

    # -- what the relevance gate reads ----------------------------------------------------
    @PROPERTY
    @given(flt=filters())
    def test_term_counts_equal_the_reference(
        self, full: SearchBackend, full_kb: gw.KnowledgeBase, flt: gw.Filter
    ) -> None:
        analyzer = Analyzer(full_kb.settings.analyzer)
        terms = [*dict.fromkeys(analyzer.tokens(" ".join(WORDS))), "zzzunknown"]
        admitted = [e for e in full_kb.entries if admits(flt, e)]
        held = [{t for ts in field_terms(full_kb, e).values() for t in ts} for e in admitted]
        want = [sum(term in h for h in held) for term in terms]
        assert full.term_counts(terms, flt) == (len(admitted), want)
        assert full.term_counts([], flt) == (len(admitted), [])

    @pytest.mark.parametrize("quantile", [0.0, 0.5, 0.9, 1.0])
    def test_noise_level_is_the_snapshots(
        self, full: SearchBackend, full_kb: gw.KnowledgeBase, quantile: float
    ) -> None:
        assert full.noise_level(quantile) == measure_noise(full_kb, quantile)

    def test_malformed_labels_are_visible_to_nobody(self, full: SearchBackend) -> None:
        for principal in (None, gw.Principal("acme", "alice", ["eng"])):
            hits = full.lexical("rotate keys", gw.Filter.of(principal), 200)
            assert "bad.labels" not in {hit.id for hit in hits}

    def test_where_constraints(self, full: SearchBackend) -> None:
        # Every entry's metadata lacks "locale": a where constraint admits none.
        assert full.lexical("rotate keys", gw.Filter.of(where={"locale": "en"}), 10) == []

    def test_queries_without_terms_and_bad_k(self, full: SearchBackend) -> None:
        assert full.lexical("the of and", gw.Filter(), 5) == []
        assert full.lexical("zzzunknownword", gw.Filter(), 5) == []
        with pytest.raises(QueryError):
            full.lexical("rotate", gw.Filter(), 0)

    # -- phrase ---------------------------------------------------------------------------
    def test_phrase_channel(self, full: SearchBackend, full_kb: gw.KnowledgeBase) -> None:
        target = next(
            e
            for e in full_kb.entries
            if e.aliases
            and "tenant" not in e.metadata
            and "acl" not in e.metadata
            and e.status == "active"
        )
        hits = full.phrase(f"how do I {target.aliases[0]} today", gw.Filter())
        analyzer = Analyzer(full_kb.settings.analyzer)
        key = analyzer.phrase(target.aliases[0])
        expected = {
            e.id
            for e in full_kb.entries
            if admits(gw.Filter(), e) and key in {analyzer.phrase(a) for a in e.aliases}
        }
        assert expected <= {hit.id for hit in hits}
        found = {hit.id: hit for hit in hits}
        assert found[target.id].explanation.get("alias") == gw.config.DEFAULT_ALIAS_BOOST
        exact = full.phrase(f"see {target.id}", gw.Filter())
        assert target.id in {hit.id for hit in exact}
        assert all(admits(gw.Filter(), full_kb.get(hit.id)) for hit in exact)  # type: ignore[arg-type]

    # -- dense ----------------------------------------------------------------------------
    @PROPERTY
    @given(flt=filters(), query=st.sampled_from(QUERIES))
    def test_dense_equals_brute_force(
        self, full: SearchBackend, full_kb: gw.KnowledgeBase, flt: gw.Filter, query: str
    ) -> None:
        vector = gw.HashingEmbedder(32).embed_query(query)
        matrix = hashed_vectors(full_kb).matrix()
        want = sorted(
            (
                (e.id, float(matrix[n] @ vector))
                for n, e in enumerate(full_kb.entries)
                if admits(flt, e)
            ),
            key=lambda item: (-item[1], item[0]),
        )
        got = ranked(full.dense(vector, flt, 7))
        assert len(got) == min(7, len(want))
        assert_same_up_to_ties(got, want)

    def test_dense_rejects_bad_vectors(self, full: SearchBackend) -> None:
        with pytest.raises(QueryError):
            full.dense(np.zeros(5, dtype=np.float32), gw.Filter(), 3)
        with pytest.raises(QueryError):
            full.dense(np.full(32, np.nan, dtype=np.float32), gw.Filter(), 3)

    # -- records --------------------------------------------------------------------------
    def test_fetch_keeps_order_and_drops_unknown(
        self, full: SearchBackend, full_kb: gw.KnowledgeBase
    ) -> None:
        ids = [full_kb.entries[5].id, "nope", full_kb.entries[1].id]
        got = full.fetch(ids)
        assert [e.id for e in got] == [ids[0], ids[2]]
        assert got[0] == full_kb.entries[5]

    def test_stats(self, full: SearchBackend, full_kb: gw.KnowledgeBase) -> None:
        stats = full.stats()
        assert stats.count == len(full_kb)
        assert dict(stats.field_weights) == {
            f: w for f, w in full_kb.settings.field_weights.items() if w > 0
        }
        assert stats.dimensions == 32
        assert stats.k1 == full_kb.settings.k1


def assert_same_up_to_ties(
    got: Sequence[tuple[str, float]], want: Sequence[tuple[str, float]], tol: float = 1e-5
) -> None:
    """Same scores position by position; an id may differ from the reference only where
    the reference holds another score within ``tol`` (float32 near-ties of another
    summation order). ``want`` may be longer than ``got`` (ties across the cut)."""
    assert len(got) <= len(want)
    for n, (entry_id, score) in enumerate(got):
        assert score == pytest.approx(want[n][1], rel=tol, abs=tol)
        level = {i for i, s in want if abs(s - want[n][1]) <= tol * max(1.0, abs(s))}
        assert entry_id in level, (n, entry_id, want[n])
    assert len({i for i, _ in got}) == len(got)


class HybridConformance:
    """Fused channels through a backend equal the embedded pipeline's ``search_channels``."""

    @pytest.mark.parametrize("fusion", ["weighted", "rrf"])
    @pytest.mark.parametrize("query", QUERIES[:4])
    def test_hybrid_equals_search_channels(
        self, full: SearchBackend, full_kb: gw.KnowledgeBase, fusion: str, query: str
    ) -> None:
        from groundwire.backends import EmbeddedBackend, hybrid_search

        flt = gw.Filter.of(gw.Principal("acme", "alice", ["eng"]), gw.Scope(("slack",)))
        settings = gw.HybridSettings(mode="hybrid", fusion=fusion, channel_depth=20)  # type: ignore[arg-type]
        vectors = hashed_vectors(full_kb)
        vector = gw.HashingEmbedder(32).embed_query(query)
        want, _ = gw.search_channels(
            full_kb,
            query,
            10,
            settings,
            vectors=vectors,
            query_vector=vector,
            mask=EmbeddedBackend(full_kb).mask(flt),
        )
        got = hybrid_search(full, query, vector, flt, 10, settings)
        assert_same_up_to_ties(
            [(h.id, h.score) for h in got],
            [(full_kb.entries[h.doc].id, h.score) for h in want],
            tol=1e-4,
        )
