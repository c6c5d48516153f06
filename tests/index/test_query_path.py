"""The search hot path: query word codes (cached per knowledge base), the one-call kernel
path for searches without phrase boosts, lazy term ids for breakdowns.

Every result is checked against the general path it replaces: analyzer terms, term ids
with their pairs (``KnowledgeBase.query_ids``) and :meth:`KnowledgeBase.rank`.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

import groundwire.index.search as kb_module
from groundwire import Document, KnowledgeBase, KnowledgeEntry, Scope, load_sources
from groundwire.index import _kernel
from groundwire.index.lexical import SKIP, UNKNOWN
from groundwire.index.query import QueryIds

HANDBOOK = Path(__file__).resolve().parents[2] / "examples" / "handbook"

WORDS = [
    *("solar", "panel", "efficiency", "grid", "storage", "battery", "lithium", "cell"),
    *("voltage", "current", "inverter", "roof", "tile", "wind", "turbine", "blade", "rotor"),
    *("hydro", "dam", "river", "flow", "water", "power", "plant", "coal", "gas", "emission"),
    *("carbon", "tax", "policy", "market", "price", "demand", "supply", "peak", "load"),
]
STOP = ["the", "of", "and", "a", "to", "in"]


def corpus(seed: int = 3, n: int = 400) -> list[Document]:
    rng = random.Random(seed)
    return [
        Document(
            f"doc-{i:04d}",
            " ".join(rng.choices(WORDS, k=rng.randint(0, 4))),
            " ".join(rng.choices(WORDS + STOP, k=rng.randint(3, 40))),
        )
        for i in range(n)
    ]


def queries(seed: int = 5, n: int = 120) -> list[str]:
    rng = random.Random(seed)
    extra = ["Solar", "PANELS", "unknownword", "zzz", "grid's", "e-mail", "42", "naïve", "東京"]
    return [" ".join(rng.choices(WORDS + STOP + extra, k=rng.randint(0, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def documents() -> KnowledgeBase:
    return KnowledgeBase.from_documents(corpus())


@pytest.fixture(scope="module")
def handbook() -> KnowledgeBase:
    return KnowledgeBase.from_sources(load_sources(HANDBOOK))


def reference(
    kb: KnowledgeBase,
    query: str,
    k: int,
    mask: Any = None,
    exact_boost: float = 0.0,
    alias_boost: float = 0.0,
) -> tuple[list[str], list[float]]:
    """The general path: analyzer terms, term ids with pairs, rank()."""
    terms = kb.analyzer.tokens(query)
    if not terms:
        return [], []
    ranking = kb.rank(
        kb.query_ids([terms]),
        terms,
        lexical_k=k,
        limit=k,
        mask=kb.eligibility() if mask is None else mask,
        exact_boost=exact_boost,
        alias_boost=alias_boost,
    )
    return [kb.entry(doc).id for doc in ranking.docs], ranking.scores


def expected_codes(kb: KnowledgeBase, words: list[str]) -> list[int]:
    terms = kb.analyzer.analyze_words(words)
    vocabulary = kb.lexical.vocabulary
    return [vocabulary.get(term, UNKNOWN) if term else SKIP for term in terms]


# -- word codes ---------------------------------------------------------------------------------


def test_word_codes_are_term_ids_stop_words_and_unknown_words(documents: KnowledgeBase) -> None:
    words = documents.analyzer.words("The solar panels of zzzunknown grids")
    codes = documents._word_codes(words)
    solar, panel, grid = (documents.lexical.vocabulary[t] for t in ("solar", "panel", "grid"))
    assert codes == [SKIP, solar, panel, SKIP, UNKNOWN, grid]
    assert codes == expected_codes(documents, words)
    assert documents._word_codes(words) == codes  # now from the cache
    assert documents._word_codes([]) == []


def test_word_cache_under_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = corpus()
    plain = KnowledgeBase.from_documents(docs)
    want = [plain.search_ids(query, 10) for query in queries()]
    monkeypatch.setattr(kb_module, "WORD_CACHE_LIMIT", 4)
    tiny = KnowledgeBase.from_documents(docs)
    longest = 0
    for query, expected in zip(queries(), want, strict=True):
        words = tiny.analyzer.words(query)
        longest = max(longest, len(set(words)))
        assert tiny.search_ids(query, 10) == expected
        assert tiny._word_codes(words) == expected_codes(tiny, words)
        # Emptied when full: never more than the limit, or one query's own new words.
        assert len(tiny._word_cache) <= max(4, longest)
    assert len(plain._word_cache) > 4  # the default limit kept every word


def test_word_cache_from_many_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = corpus(seed=11)
    texts = queries(seed=13, n=200)
    want = [KnowledgeBase.from_documents(docs).search_ids(text, 10) for text in texts]
    monkeypatch.setattr(kb_module, "WORD_CACHE_LIMIT", 8)  # emptied all the time
    shared = KnowledgeBase.from_documents(docs)
    failures: list[str] = []
    start = threading.Barrier(8)

    def work(offset: int) -> None:
        start.wait()
        for rep in range(4):
            for j in range(len(texts)):
                at = (j * (offset + 1) + rep) % len(texts)
                if shared.search_ids(texts[at], 10) != want[at]:
                    failures.append(texts[at])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(shared._word_cache) <= 8 + 9  # the limit, or one query's new words


def test_restored_snapshot_has_its_own_word_cache(documents: KnowledgeBase, tmp_path: Path) -> None:
    documents.save(tmp_path / "snap")
    loaded = KnowledgeBase.load(tmp_path / "snap")
    assert loaded._word_cache == {}
    for query in queries(n=40):
        assert loaded.search_ids(query, 10) == documents.search_ids(query, 10)
        words = loaded.analyzer.words(query)
        assert loaded._word_codes(words) == expected_codes(loaded, words)


# -- the one-call path against the general one ---------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 10, 100])
def test_document_search_matches_the_general_path(documents: KnowledgeBase, k: int) -> None:
    for query in queries():
        got = documents.search_ids(query, k)
        assert got == reference(documents, query, k)  # same ids, bit-identical scores
        hits = documents.search(query, k)
        assert ([hit.id for hit in hits], [hit.score for hit in hits]) == got


def test_restricted_searches_match_the_general_path(handbook: KnowledgeBase) -> None:
    rng = random.Random(17)
    words = [word for entry in handbook for word in entry.title.split()]
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 6))) for _ in range(60)]

    def allow(entry: KnowledgeEntry) -> bool:
        return len(entry.id) % 3 != 0

    restrictions: list[dict[str, Any]] = [
        {},
        {"scope": Scope(enabled_integrations=("okta",))},
        {"blocked_domains": ["billing"]},
        {"allow": allow},
    ]
    for text in texts:
        for restriction in restrictions:
            mask = handbook.eligibility(**restriction)
            for k in (1, 5, 20):
                # No boosts: the one-call path, even though the handbook has phrase keys.
                got = handbook.search_ids(text, k, exact_boost=0, alias_boost=0, **restriction)
                assert got == reference(handbook, text, k, mask)
                # Boosts: through rank(), as before.
                boosted = handbook.search_ids(text, k, **restriction)
                assert boosted == reference(
                    handbook,
                    text,
                    k,
                    mask,
                    kb_module.DEFAULT_EXACT_BOOST,
                    kb_module.DEFAULT_ALIAS_BOOST,
                )


def test_kernel_and_numpy_agree_on_the_one_call_path(
    documents: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def allow(entry: KnowledgeEntry) -> bool:
        return not entry.id.endswith("7")

    texts = queries(seed=23)
    with_kernel = [documents.search_ids(text, 10) for text in texts]
    restricted = [documents.search_ids(text, 10, allow=allow) for text in texts]
    mask = documents.eligibility(allow=allow)
    assert restricted == [reference(documents, text, 10, mask) for text in texts]
    monkeypatch.setattr(_kernel, "available", lambda: False)
    assert [documents.search_ids(text, 10) for text in texts] == with_kernel
    assert [documents.search_ids(text, 10, allow=allow) for text in texts] == restricted


def test_queries_without_terms(documents: KnowledgeBase) -> None:
    for text in ("", "the of and", "!!! ...", "  "):
        assert documents.search(text) == []
        assert documents.search_ids(text) == ([], [])
    # Terms the index does not know: a query, but no match.
    assert documents.search("zzzunknown qqqunknown") == []
    assert documents.search_ids("zzzunknown qqqunknown") == ([], [])


# -- breakdowns -----------------------------------------------------------------------------


def test_breakdowns_resolve_the_query_ids_lazily(documents: KnowledgeBase) -> None:
    hits = documents.search("solar panel efficiency of the grid", 5)
    assert hits
    query = hits[0].breakdown._args[1]
    assert isinstance(query, QueryIds)
    assert query._ids is None  # nothing read yet
    terms = documents.analyzer.tokens("solar panel efficiency of the grid")
    for hit in hits:
        assert dict(hit.breakdown) == dict(
            documents.explain("solar panel efficiency of the grid", hit.id).breakdown
        )
        assert sum(hit.breakdown.values()) == pytest.approx(hit.score)
    assert list(query) == documents.query_ids([terms])
    assert len(query) == len(documents.query_ids([terms]))
    assert query[0] == documents.query_ids([terms])[0]
    assert query[:2] == documents.query_ids([terms])[:2]
    assert "QueryIds" in repr(query)


def test_public_breakdown_helper_still_takes_term_ids(handbook: KnowledgeBase) -> None:
    terms = handbook.analyzer.tokens("rotate api key")
    ids = handbook.query_ids([terms])
    doc = handbook.position("security.api-key-rotation")
    assert doc is not None
    breakdown = handbook.breakdown(ids, doc, 2.0, 0.0)
    hit = handbook.explain("rotate api key", "security.api-key-rotation", exact_boost=2.0)
    assert dict(breakdown) == dict(hit.breakdown)


def test_hits_are_plain_hits(documents: KnowledgeBase) -> None:
    from groundwire import Hit

    hit = documents.search("solar grid", 1)[0]
    assert type(hit) is Hit
    assert hit == Hit(hit.id, hit.score, hit.breakdown)
    assert hit._asdict()["id"] == hit.id
