"""BM25 scores against an independent, plain-Python reference of the documented formulas.

The reference below is written from the module docstring of ``groundwire.index.lexical``
with dicts and loops only (no numpy, no groundwire math):

``fields``  Σ_f w_f · idf_f(t) · tf·(k1+1) / (tf + k1·(1−b+b·dl/avgdl_f)),
            idf_f = ln(1 + (N_f − df_f + ½)/(df_f + ½)), N_f = documents whose field f is
            non-empty, avgdl_f = mean length of f over those documents.
``bm25f``   tf̃ = Σ_f w_f·tf_f / (1−b+b·dl_f/avgdl_f);  idf(t)·tf̃·(k1+1)/(tf̃+k1), idf over
            all N documents with df = documents containing t in any (weighted) field.

Every query term counts once per occurrence.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

import groundwire.index.lexical as lexical_module
from groundwire import IndexSettings
from groundwire.errors import KnowledgeIndexError
from groundwire.index.lexical import LexicalIndex
from groundwire.index.lexical_builder import LexicalIndexBuilder

TOLERANCE = 1e-9

Doc = list[list[str]]  # one list of terms per field


# -- reference ----------------------------------------------------------------------------------


@dataclass
class Reference:
    """A straightforward BM25 / BM25F over lists of terms."""

    docs: list[Doc]
    weights: list[float]
    k1: float
    b: float
    scoring: str

    def __post_init__(self) -> None:
        n_fields = len(self.weights)
        self.tf: list[list[dict[str, int]]] = []
        self.dl: list[list[int]] = []
        for doc in self.docs:
            self.tf.append([dict(Counter(doc[f])) for f in range(n_fields)])
            self.dl.append([len(doc[f]) for f in range(n_fields)])
        self.n = len(self.docs)
        self.field_docs: list[int] = []
        self.avgdl: list[float] = []
        for f in range(n_fields):
            non_empty = [self.dl[d][f] for d in range(self.n) if self.dl[d][f] > 0]
            self.field_docs.append(len(non_empty))
            self.avgdl.append(sum(non_empty) / len(non_empty) if non_empty else 1.0)
        # document frequencies: per field, and over any field with a positive weight
        self.df_field: list[dict[str, int]] = [{} for _ in range(n_fields)]
        self.df_any: dict[str, int] = {}
        for d in range(self.n):
            seen: set[str] = set()
            for f in range(n_fields):
                for term in self.tf[d][f]:
                    self.df_field[f][term] = self.df_field[f].get(term, 0) + 1
                    if self.weights[f] > 0:
                        seen.add(term)
            for term in seen:
                self.df_any[term] = self.df_any.get(term, 0) + 1

    def _norm(self, d: int, f: int) -> float:
        return 1.0 - self.b + self.b * self.dl[d][f] / self.avgdl[f]

    def field_df(self, term: str, f: int) -> int:
        return self.df_field[f].get(term, 0)

    def any_df(self, term: str) -> int:
        return self.df_any.get(term, 0)

    def term_parts(self, term: str, d: int) -> list[float]:
        """Per-field contributions of one occurrence of ``term`` to document ``d``."""
        n_fields = len(self.weights)
        parts = [0.0] * n_fields
        if self.scoring == "fields":
            for f in range(n_fields):
                tf = self.tf[d][f].get(term, 0)
                if tf == 0:
                    continue
                df = self.field_df(term, f)
                idf = math.log(1.0 + (self.field_docs[f] - df + 0.5) / (df + 0.5))
                saturation = tf * (self.k1 + 1) / (tf + self.k1 * self._norm(d, f))
                parts[f] = self.weights[f] * idf * saturation
            return parts
        pseudo_parts = [0.0] * n_fields
        for f in range(n_fields):
            tf = self.tf[d][f].get(term, 0)
            if tf > 0:
                pseudo_parts[f] = self.weights[f] * tf / self._norm(d, f)
        pseudo = sum(pseudo_parts)
        if pseudo == 0.0:
            return parts
        df = self.any_df(term)
        idf = math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))
        total = idf * pseudo * (self.k1 + 1) / (pseudo + self.k1)
        return [total * p / pseudo for p in pseudo_parts]

    def score(self, query: list[str], d: int) -> float:
        total = 0.0
        for term in query:
            total += sum(self.term_parts(term, d))
        return total

    def explain(self, query: list[str], d: int) -> list[float]:
        out = [0.0] * len(self.weights)
        for term in query:
            for f, part in enumerate(self.term_parts(term, d)):
                out[f] += part
        return out

    def all_scores(self, query: list[str]) -> list[float]:
        return [self.score(query, d) for d in range(self.n)]


# -- random corpora -----------------------------------------------------------------------------

COMMON = [f"w{i}" for i in range(24)]
RARE = [f"r{i}" for i in range(160)]
UNKNOWN = ["zz-unknown", "never-indexed"]


@dataclass
class Corpus:
    docs: list[Doc]
    fields: tuple[str, ...]
    weights: list[float]
    duplicates: list[list[int]]  # groups of identical documents


def make_corpus(seed: int, n_docs: int = 300) -> Corpus:
    rng = random.Random(seed)
    n_fields = rng.randint(2, 5)
    fields = tuple(f"f{i}" for i in range(n_fields))
    weights = [round(rng.uniform(0.1, 5.0), 3) for _ in range(n_fields)]
    zipf = [1.0 / (rank + 1) for rank in range(len(COMMON))]
    docs: list[Doc] = []
    for _ in range(n_docs):
        doc: Doc = []
        for _f in range(n_fields):
            if rng.random() < 0.25:
                doc.append([])  # empty fields change N_f and avgdl_f
                continue
            length = rng.randint(1, 14)
            doc.append(rng.choices(COMMON, weights=zipf, k=length))
        if rng.random() < 0.5:
            f = rng.randrange(n_fields)
            doc[f] = doc[f] + rng.sample(RARE, rng.randint(1, 3))
        docs.append(doc)
    # identical documents at scattered positions make exact ties
    duplicates: list[list[int]] = []
    for _ in range(6):
        source = rng.randrange(n_docs)
        copies = rng.sample([i for i in range(n_docs) if i != source], 2)
        for c in copies:
            docs[c] = [list(terms) for terms in docs[source]]
        duplicates.append(sorted([source, *copies]))
    return Corpus(docs, fields, weights, duplicates)


def build(corpus: Corpus, k1: float, b: float, scoring: str) -> LexicalIndex:
    builder = LexicalIndexBuilder(corpus.fields)
    for doc in corpus.docs:
        builder.add(doc)
    settings = IndexSettings(
        field_weights=dict(zip(corpus.fields, corpus.weights, strict=True)),
        k1=k1,
        b=b,
        scoring=scoring,
    )
    return builder.build(settings)


def make_queries(corpus: Corpus, seed: int) -> list[list[str]]:
    rng = random.Random(seed + 1000)
    present = sorted({t for doc in corpus.docs for field in doc for t in field})
    queries: list[list[str]] = []
    for _ in range(25):
        n = rng.randint(1, 6)
        query = rng.choices(present, k=n)
        if rng.random() < 0.4:
            query.append(rng.choice(query))  # a repeated term counts twice
        if rng.random() < 0.3:
            query.insert(rng.randrange(len(query) + 1), rng.choice(UNKNOWN))
        queries.append(query)
    queries.append([UNKNOWN[0]])  # matches nothing
    queries.append(list(UNKNOWN))
    queries.append([])
    queries.append(["w0", "w0", "w0"])
    # the terms of one duplicated document: several exact ties at the top
    group = corpus.duplicates[0]
    queries.append([t for field in corpus.docs[group[0]] for t in field][:5])
    return queries


SEEDS = [11, 23, 37]
PARAMS = [(1.2, 0.75), (1.5, 0.0), (2.0, 1.0), (0.5, 0.3), (0.0, 0.75)]
MODES = ["fields", "bm25f"]


@pytest.fixture(scope="module", params=SEEDS, ids=lambda s: f"seed{s}")
def corpus(request: pytest.FixtureRequest) -> Corpus:
    return make_corpus(request.param)


def dense_scores(index: LexicalIndex, query: list[str]) -> list[float]:
    scores = index.score(query)
    return [scores.score_of(d) for d in range(index.doc_count)]


def expected_top(scores: list[float], k: int, mask: list[bool] | None = None) -> list[int]:
    docs = [d for d, s in enumerate(scores) if s > 0 and (mask is None or mask[d])]
    return sorted(docs, key=lambda d: (-scores[d], d))[:k]


# -- scores -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scoring", MODES)
@pytest.mark.parametrize(("k1", "b"), PARAMS, ids=lambda v: str(v))
def test_scores_equal_reference(corpus: Corpus, scoring: str, k1: float, b: float) -> None:
    index = build(corpus, k1, b, scoring)
    reference = Reference(corpus.docs, corpus.weights, k1, b, scoring)
    assert index.doc_count == len(corpus.docs)
    for query in make_queries(corpus, SEEDS[0]):
        expected = reference.all_scores(query)
        scores = index.score(query)
        for d, want in enumerate(expected):
            got = scores.score_of(d)
            assert abs(got - want) <= TOLERANCE, (query, d, got, want)
        docs, values = scores.matched()
        assert docs.tolist() == [d for d, s in enumerate(expected) if s > 0]
        for d, value in zip(docs.tolist(), values.tolist(), strict=True):
            assert abs(value - expected[d]) <= TOLERANCE


@pytest.mark.parametrize("scoring", MODES)
@pytest.mark.parametrize(("k1", "b"), PARAMS[:3], ids=lambda v: str(v))
def test_top_k_ordering(corpus: Corpus, scoring: str, k1: float, b: float) -> None:
    index = build(corpus, k1, b, scoring)
    reference = Reference(corpus.docs, corpus.weights, k1, b, scoring)
    n = index.doc_count
    for query in make_queries(corpus, SEEDS[1]):
        own = dense_scores(index, query)
        want = reference.all_scores(query)
        for k in (1, 3, 10, n, n + 7):
            docs, values = index.score(query).top(k)
            got = docs.tolist()
            # exact semantics on the index's own scores: score desc, doc asc on ties
            assert got == expected_top(own, k), (query, k)
            assert values.tolist() == [own[d] for d in got]
            # and against the reference: the chosen docs are a true top k
            if got:
                floor = min(want[d] for d in got)
                assert all(want[d] <= floor + TOLERANCE for d in range(n) if d not in got)
                for d in got:
                    assert abs(own[d] - want[d]) <= TOLERANCE


def test_identical_documents_tie_and_break_on_doc_number(corpus: Corpus) -> None:
    for scoring in MODES:
        index = build(corpus, 1.2, 0.75, scoring)
        for group in corpus.duplicates:
            query = [t for field in corpus.docs[group[0]] for t in field]
            if not query:
                continue
            scores = dense_scores(index, query)
            assert len({scores[d] for d in group}) == 1  # bit-identical
            top = index.score(query).top(index.doc_count)[0].tolist()
            positions = [top.index(d) for d in group]
            assert positions == sorted(positions)  # ascending doc number among ties
            assert positions == list(range(positions[0], positions[0] + len(group)))


def test_tie_at_the_kth_place_keeps_the_lowest_doc_numbers() -> None:
    builder = LexicalIndexBuilder(("title", "body"))
    docs = [
        [["beta"], ["noise", "words", "here"]],
        [["alpha"], ["alpha", "x"]],  # doc 1: tied
        [["alpha", "alpha"], ["alpha"]],  # doc 2: best
        [["alpha"], ["alpha", "x"]],  # doc 3: tied
        [["gamma"], []],
        [["alpha"], ["alpha", "x"]],  # doc 5: tied
    ]
    for doc in docs:
        builder.add(doc)
    for scoring in MODES:
        index = builder.build(
            IndexSettings(field_weights={"title": 2.0, "body": 1.0}, scoring=scoring)
        )
        # single-term queries take the sparse path, repeated terms the dense path
        for query in (["alpha"], ["alpha", "alpha"]):
            scores = index.score(query)
            assert scores.top(1)[0].tolist() == [2]
            assert scores.top(2)[0].tolist() == [2, 1]
            assert scores.top(3)[0].tolist() == [2, 1, 3]
            assert scores.top(10)[0].tolist() == [2, 1, 3, 5]
            mask = np.array([True, False, True, True, True, True])
            assert scores.top(2, mask)[0].tolist() == [2, 3]
            assert scores.top(0)[0].tolist() == []


def test_repeated_query_terms_count_per_occurrence(corpus: Corpus) -> None:
    index = build(corpus, 1.2, 0.75, "fields")
    once = dense_scores(index, ["w1"])
    thrice = dense_scores(index, ["w1", "w1", "w1"])
    for a, b in zip(once, thrice, strict=True):
        assert abs(3 * a - b) <= TOLERANCE


def test_query_matching_nothing(corpus: Corpus) -> None:
    index = build(corpus, 1.2, 0.75, "fields")
    for query in ([], ["zz-unknown"], ["zz-unknown", "never-indexed", "zz-unknown"]):
        scores = index.score(query)
        docs, values = scores.matched()
        assert docs.tolist() == []
        assert values.tolist() == []
        assert scores.top(5)[0].tolist() == []
        assert scores.score_of(0) == 0.0


def test_unknown_terms_do_not_change_scores(corpus: Corpus) -> None:
    index = build(corpus, 1.2, 0.75, "bm25f")
    assert dense_scores(index, ["w2", "zz-unknown", "w3"]) == dense_scores(index, ["w2", "w3"])


def test_term_ids_count_known_terms(corpus: Corpus) -> None:
    index = build(corpus, 1.2, 0.75, "fields")
    ids = index.term_ids(["w0", "zz-unknown", "w0", "w1"])
    assert sorted(ids.values()) == [1, 2]
    assert ids[index.vocabulary["w0"]] == 2


# -- explain ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scoring", "k1", "b"),
    [
        ("fields", 1.2, 0.75),
        ("fields", 2.0, 1.0),
        ("fields", 1.5, 0.0),
        ("bm25f", 1.2, 0.75),
        ("bm25f", 1.5, 0.0),
        ("bm25f", 2.0, 1.0),
    ],
)
def test_explain_sums_to_score_and_matches_reference(
    corpus: Corpus, scoring: str, k1: float, b: float
) -> None:
    index = build(corpus, k1, b, scoring)
    reference = Reference(corpus.docs, corpus.weights, k1, b, scoring)
    for query in make_queries(corpus, SEEDS[2])[:12]:
        scores = index.score(query)
        matched = scores.matched()[0].tolist()
        for d in [*matched[:25], 0, index.doc_count - 1]:
            explained = index.explain(query, d)
            assert list(explained) == list(corpus.fields)
            assert abs(sum(explained.values()) - scores.score_of(d)) <= TOLERANCE, (query, d)
            want = reference.explain(query, d)
            for name, part in zip(corpus.fields, want, strict=True):
                assert abs(explained[name] - part) <= TOLERANCE, (query, d, name)


@pytest.mark.parametrize("scoring", ["fields", ("bm25f")])
def test_explain_with_b1_and_an_empty_field_minimal(scoring: str) -> None:
    builder = LexicalIndexBuilder(("title", "body"))
    builder.add([["alpha"], []])  # empty body: norm = 1 - b + b*0/avgdl = 0 at b=1
    builder.add([["beta"], ["alpha", "gamma"]])
    index = builder.build(
        IndexSettings(field_weights={"title": 2.0, "body": 1.0}, b=1.0, scoring=scoring)
    )
    explained = index.explain(["alpha"], 0)
    assert not any(math.isnan(v) for v in explained.values()), explained
    assert abs(sum(explained.values()) - index.score(["alpha"]).score_of(0)) <= TOLERANCE


@pytest.mark.parametrize(
    "scoring",
    [
        "fields",
        pytest.param(
            "bm25f",
        ),
    ],
)
def test_explain_with_a_zero_weight_field(scoring: str) -> None:
    builder = LexicalIndexBuilder(("title", "body"))
    builder.add([["alpha"], ["beta"]])
    builder.add([["gamma"], ["alpha"]])
    index = builder.build(IndexSettings(field_weights={"title": 1.0, "body": 0.0}, scoring=scoring))
    scores = index.score(["beta"])
    assert scores.matched()[0].tolist() == []  # weight 0: the body does not score
    explained = index.explain(["beta"], 0)
    assert explained == {"title": 0.0, "body": 0.0}


def test_zero_weight_fields_match_reference() -> None:
    corpus = make_corpus(5, n_docs=120)
    corpus.weights[0] = 0.0
    for scoring in MODES:
        index = build(corpus, 1.2, 0.75, scoring)
        reference = Reference(corpus.docs, corpus.weights, 1.2, 0.75, scoring)
        for query in make_queries(corpus, 5)[:10]:
            for d, want in enumerate(reference.all_scores(query)):
                assert abs(index.score(query).score_of(d) - want) <= TOLERANCE


def test_explain_of_unmatched_document_is_zero(corpus: Corpus) -> None:
    for scoring in MODES:
        index = build(corpus, 1.2, 0.75, scoring)
        assert set(index.explain(["zz-unknown"], 3).values()) == {0.0}


# -- masks --------------------------------------------------------------------------------------


def test_masks_restrict_top_and_matched(corpus: Corpus) -> None:
    rng = random.Random(99)
    index = build(corpus, 1.2, 0.75, "fields")
    n = index.doc_count
    for query in make_queries(corpus, 99)[:15]:
        mask_list = [rng.random() < 0.5 for _ in range(n)]
        mask = np.array(mask_list)
        scores = index.score(query)
        own = dense_scores(index, query)
        docs, values = scores.matched(mask)
        assert docs.tolist() == [d for d in range(n) if own[d] > 0 and mask_list[d]]
        assert values.tolist() == [own[d] for d in docs.tolist()]
        for k in (1, 5, n):
            top_docs, top_values = scores.top(k, mask)
            assert top_docs.tolist() == expected_top(own, k, mask_list)
            assert top_values.tolist() == [own[d] for d in top_docs.tolist()]
            assert all(mask_list[d] for d in top_docs.tolist())
        nothing = np.zeros(n, dtype=bool)
        assert scores.top(5, nothing)[0].tolist() == []
        assert scores.matched(nothing)[0].tolist() == []


# -- sparse accumulation ------------------------------------------------------------------------


def rare_queries(corpus: Corpus) -> list[list[str]]:
    """Multi-term queries over rare terms, several from the same document (overlap)."""
    queries = []
    for doc in corpus.docs:
        rare = [t for field in doc for t in field if t.startswith("r")]
        if len(rare) >= 2:
            queries.append([*rare, rare[0]])
        if len(queries) == 12:
            break
    queries.append(["r1", "r2", "zz-unknown", "r3"])
    queries.append(["r5", "r5"])
    return queries


@pytest.mark.parametrize("scoring", MODES)
def test_sparse_path_equals_dense_path(
    corpus: Corpus, scoring: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = build(corpus, 1.2, 0.75, scoring)
    n = index.doc_count
    rng = random.Random(3)
    queries = rare_queries(corpus)
    masks = [np.array([rng.random() < 0.6 for _ in range(n)]) for _ in queries]

    def snapshot(expect_dense: bool) -> list[tuple[object, ...]]:
        out = []
        for query, mask in zip(queries, masks, strict=True):
            scores = index.score(query)
            assert (scores.dense is not None) is expect_dense
            out.append(
                (
                    [scores.score_of(d) for d in range(n)],
                    scores.matched()[0].tolist(),
                    scores.matched()[1].tolist(),
                    scores.matched(mask)[0].tolist(),
                    [scores.top(k)[0].tolist() for k in (1, 2, 5, n)],
                    [scores.top(k, mask)[0].tolist() for k in (1, 2, 5, n)],
                    scores.top(n)[1].tolist(),
                )
            )
        return out

    dense = snapshot(expect_dense=True)
    monkeypatch.setattr(lexical_module, "_DENSE_DOCS", 0)
    sparse = snapshot(expect_dense=False)
    reference = Reference(corpus.docs, corpus.weights, 1.2, 0.75, scoring)
    for query, got, want in zip(queries, sparse, dense, strict=True):
        # the two paths add the same numbers in a different order: equal up to rounding
        assert got[0] == pytest.approx(want[0], rel=1e-12, abs=0.0)
        assert got[2] == pytest.approx(want[2], rel=1e-12, abs=0.0)
        assert got[6] == pytest.approx(want[6], rel=1e-12, abs=0.0)
        # which documents matched, and their order, are identical
        assert (got[1], got[3], got[4], got[5]) == (want[1], want[3], want[4], want[5])
        for value, expected in zip(got[0], reference.all_scores(query), strict=True):
            assert abs(value - expected) <= TOLERANCE


# -- builder ------------------------------------------------------------------------------------


def test_builder_rejects_bad_fields_and_documents() -> None:
    with pytest.raises(KnowledgeIndexError):
        LexicalIndexBuilder(())
    with pytest.raises(KnowledgeIndexError):
        LexicalIndexBuilder(("a", "a"))
    builder = LexicalIndexBuilder(("a", "b"))
    with pytest.raises(KnowledgeIndexError, match="expected terms for 2 fields"):
        builder.add([["x"]])
    assert builder.add([["x"], []]) == 0
    assert builder.add([[], ["y"]]) == 1


def test_empty_index_scores_nothing() -> None:
    index = LexicalIndexBuilder(("a",)).build(IndexSettings(field_weights={"a": 1.0}))
    assert index.doc_count == 0
    scores = index.score(["x"])
    assert scores.matched()[0].tolist() == []
    assert scores.top(3)[0].tolist() == []
