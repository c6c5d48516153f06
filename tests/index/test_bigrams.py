"""The derived ``bigrams`` field: adjacent term pairs of title, summary and body.

Scores are checked against an independent BM25F / per-field BM25 written here with
plain loops over the analyzer's terms.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from groundwire import AnalyzerConfig, Document, IndexSettings, KnowledgeBase
from groundwire.config import DEFAULT_FIELD_WEIGHTS, document_settings
from groundwire.text import Analyzer

ROTATE = {
    "id": "security.rotate",
    "title": "Rotate keys",
    "summary": "Grace period applies.",
    "body": "Revoke old secrets. Cat of the hat.",
    "domain": "security",
    "integrations": [],
    "aliases": ["key rollover"],
    "keywords": ["secret rotation"],
}
OTHER = {
    "id": "billing.refunds",
    "title": "Refunds",
    "summary": "Money back within five days.",
    "domain": "billing",
    "integrations": [],
}


def _kb(weight: float) -> KnowledgeBase:
    settings = IndexSettings(field_weights={**DEFAULT_FIELD_WEIGHTS, "bigrams": weight})
    return KnowledgeBase.from_sources(
        [{"id": "kb", "version": "1", "entries": [ROTATE, OTHER]}], settings
    )


def _bigram_share(kb: KnowledgeBase, query: str) -> float:
    return kb.explain(query, "security.rotate", exact_boost=0, alias_boost=0).breakdown["bigrams"]


# -- which pairs are indexed ---------------------------------------------------------------
@pytest.mark.parametrize(
    "query",
    [
        "rotate keys",  # title
        "grace period",  # summary
        "revoke old",  # body
        "old secrets",  # body
        "cat hat",  # body: pairs are of adjacent *terms*, stop words already dropped
    ],
)
def test_pairs_of_title_summary_and_body_match(query: str) -> None:
    assert _bigram_share(_kb(0.5), query) > 0


@pytest.mark.parametrize(
    "query",
    [
        "key rollover",  # an alias: aliases are not a pair source
        "secret rotation",  # a keyword: keywords are not a pair source
        "keys grace",  # title end + summary start: pairs never cross fields
        "keys rotate",  # order matters
        "rotate period",  # not adjacent
    ],
)
def test_other_pairs_do_not_match(query: str) -> None:
    kb = _kb(0.5)
    assert _bigram_share(kb, query) == 0
    # The single terms still match where they occur.
    hit = kb.explain(query, "security.rotate", exact_boost=0, alias_boost=0)
    assert hit.score > 0


def test_query_terms_gain_their_indexed_adjacent_pairs() -> None:
    kb = _kb(0.5)
    lexical = kb.lexical
    vocab = lexical.vocabulary
    single = [vocab["rotat"], vocab["key"]]
    pair_ids = lexical.query_ids(["rotat", "key"])[2:]
    assert lexical.query_ids(["rotat", "key"])[:2] == single
    assert len(pair_ids) == 1
    assert pair_ids[0] >= len(vocab)  # the pair field's own id
    assert lexical.query_ids(["key", "rotat"]) == single[::-1]  # order matters: no such pair
    assert lexical.query_ids(["rotat"]) == [vocab["rotat"]]
    assert lexical.query_ids([]) == []
    # An unknown term between two known ones breaks the pair instead of being skipped.
    assert lexical.query_ids(["rotat", "zzzunknown", "key"]) == single
    # Segments never pair across their boundary.
    assert kb.query_ids([["rotat"], ["key"]]) == single


def test_breakdown_has_a_bigrams_key_when_configured() -> None:
    hits = _kb(0.5).search("rotate keys", k=1, exact_boost=0)
    assert set(hits[0].breakdown) == {
        *("title", "aliases", "keywords", "summary", "body", "bigrams", "exact", "alias"),
    }
    assert hits[0].breakdown["bigrams"] > 0
    assert sum(hits[0].breakdown.values()) == pytest.approx(hits[0].score)


def test_weight_zero_means_no_field() -> None:
    off = _kb(0.0)
    assert "bigrams" not in off.lexical.fields
    vocab = off.lexical.vocabulary
    assert off.lexical.query_ids(["rotat", "key"]) == [vocab["rotat"], vocab["key"]]
    assert off.lexical.pair_keys.shape[0] == 0
    hit = off.search("rotate keys", k=1)[0]
    assert "bigrams" not in hit.breakdown
    # Identical to never naming the field.
    never = KnowledgeBase.from_sources(
        [{"id": "kb", "version": "1", "entries": [ROTATE, OTHER]}], IndexSettings()
    )
    for query in ("rotate keys", "old secrets money", "grace period five days"):
        assert [(h.id, h.score) for h in off.search(query)] == [
            (h.id, h.score) for h in never.search(query)
        ]


def test_pairs_raise_the_document_with_the_phrase() -> None:
    docs = [
        Document("a", "", "panel solar efficiency"),  # the words, not the phrase
        Document("b", "", "solar panel efficiency"),  # the phrase
    ]
    without = KnowledgeBase.from_documents(
        docs, IndexSettings({"title": 3.0, "body": 1.0}, scoring="bm25f")
    )
    with_pairs = KnowledgeBase.from_documents(docs)
    assert without.search("solar panel")[0].score == without.search("solar panel")[1].score
    assert [hit.id for hit in with_pairs.search("solar panel")] == ["b", "a"]


# -- scores against an independent reference ------------------------------------------------
CORPUS = [
    Document("d1", "Solar panel efficiency", "Solar panel efficiency depends on panel heat."),
    Document("d2", "Panel discussion", "A panel of experts discussed solar policy and efficiency."),
    Document("d3", "Wind power", ""),  # title only, one pair
    Document("d4", "", "Solar solar solar panel."),
    Document("d5", "Efficiency", "Panel efficiency of solar cells; solar panel arrays."),
    Document("d6", "Geothermal", "Heat pumps."),
    Document("d7", "Solar", ""),  # one term: no pair at all
]
QUERIES = [
    "solar panel efficiency",
    "panel solar",
    "efficiency of solar panels",
    "wind power",
    "solar solar",
    "heat pumps geothermal",
]


def _pairs(terms: list[str]) -> list[str]:
    return [f"{terms[i]} {terms[i + 1]}" for i in range(len(terms) - 1)]


def _fields(analyzer: Analyzer, doc: Document) -> dict[str, Counter[str]]:
    title, body = analyzer.tokens(doc.title), analyzer.tokens(doc.text)
    return {
        "title": Counter(title),
        "body": Counter(body),
        "bigrams": Counter(_pairs(title) + _pairs(body)),
    }


def _reference(settings: IndexSettings, query: str) -> dict[str, float]:
    """Every document's score for ``query``, straight from the BM25 / BM25F formulas."""
    analyzer = Analyzer(settings.analyzer)
    weights = settings.field_weights
    k1, b = settings.k1, settings.b
    fields = {doc.id: _fields(analyzer, doc) for doc in CORPUS}
    n = len(CORPUS)
    lengths = {f: {d: sum(c[f].values()) for d, c in fields.items()} for f in weights}
    present = {f: [length for length in lengths[f].values() if length > 0] for f in weights}
    avgdl = {f: sum(present[f]) / len(present[f]) for f in weights}
    terms = analyzer.tokens(query)
    scores = dict.fromkeys(fields, 0.0)
    for term in [*terms, *_pairs(terms)]:  # a repeated term counts each time
        for doc, counts in fields.items():
            norm = {f: 1 - b + b * lengths[f][doc] / avgdl[f] for f in weights}
            if settings.scoring == "bm25f":
                df = sum(1 for c in fields.values() if any(c[f][term] for f in weights))
                pseudo = sum(weights[f] * counts[f][term] / norm[f] for f in weights)
                if pseudo > 0:
                    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                    scores[doc] += idf * pseudo * (k1 + 1) / (pseudo + k1)
            else:
                for f in weights:
                    tf = counts[f][term]
                    if tf:
                        n_f = len(present[f])
                        df = sum(1 for c in fields.values() if c[f][term])
                        idf = math.log(1 + (n_f - df + 0.5) / (df + 0.5))
                        scores[doc] += weights[f] * idf * tf * (k1 + 1) / (tf + k1 * norm[f])
    return scores


SETTINGS: dict[str, IndexSettings] = {
    "document defaults (bm25f)": document_settings(),
    "per-field sum": IndexSettings(
        {"title": 3.0, "body": 1.0, "bigrams": 0.25},
        scoring="fields",
        analyzer=AnalyzerConfig(stopwords="extended"),
    ),
    "bm25f, k1 1.2, b 0.5": IndexSettings(
        {"title": 2.0, "body": 1.0, "bigrams": 0.4}, k1=1.2, b=0.5, scoring="bm25f"
    ),
}


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("query", QUERIES)
def test_scores_equal_the_reference(name: str, query: str) -> None:
    settings = SETTINGS[name]
    kb = KnowledgeBase.from_documents(CORPUS, settings)
    expected = _reference(settings, query)
    for doc in CORPUS:
        assert kb.explain(query, doc.id).score == pytest.approx(expected[doc.id], rel=1e-12)
    ranked = sorted((d for d, s in expected.items() if s > 0), key=lambda d: (-expected[d], d))
    hits = kb.search(query, k=len(CORPUS))
    assert [hit.id for hit in hits] == ranked
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.id], rel=1e-12)


def test_reference_covers_the_pair_field() -> None:
    # Guard: the reference corpus really exercises pairs (some scores change with them).
    settings = document_settings()
    no_pairs = IndexSettings({"title": 3.0, "body": 1.0}, scoring="bm25f")
    with_pairs = _reference(settings, "solar panel efficiency")
    kb = KnowledgeBase.from_documents(CORPUS, no_pairs)
    assert kb.explain("solar panel efficiency", "d1").score < with_pairs["d1"]
