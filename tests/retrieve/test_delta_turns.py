"""Turns on a knowledge base holding a delta segment (index/reading.py).

The retrieval pipeline, the relevance gate, evidence selection, hybrid channels, the
embedded backend and the engine read a delta index as it is: nothing compacts it
(``DeltaIndex.compacted`` is made to fail while turns run), and every result equals,
field by field, what a build from scratch over the same final content returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import groundwire as gw
from groundwire.index.delta import DeltaIndex
from groundwire.ingest.validate import entry_digest
from groundwire.retrieve import gate
from groundwire.retrieve.evidence import select_evidence
from groundwire.retrieve.restricted import restricted_noise, restricted_scores
from groundwire.text import Analyzer

WORDS = ["rotate", "keys", "webhook", "retry", "billing", "refund", "invoice", "login"]
WORDS += ["token", "audit", "export", "payroll", "signing", "leaked", "monthly", "sso"]
EMBEDDER = gw.HashingEmbedder(64)
ACME = gw.Principal("acme", "alice", ["eng"])
HR = gw.Principal("acme", "bob", ["hr"])
BETA = gw.Principal("beta", "carol", [])
PRINCIPALS: tuple[gw.Principal | None, ...] = (None, ACME, HR, BETA)
QUERIES = (
    "rotate signing keys",
    "webhook retry billing",
    "leaked token audit export",
    "refund invoice",
    "payroll",
    "how do I rotate keys monthly",
    "sso login token",
    "unknownword keys",
)


@contextlib.contextmanager
def no_compaction() -> Iterator[None]:
    """Fail whatever tries to compact a delta index meanwhile."""
    with mock.patch.object(
        DeltaIndex, "compacted", side_effect=AssertionError("a turn compacted the delta index")
    ):
        yield


def plain(value: Any) -> Any:
    """A result as nested builtins, timings left out (``*_ms``), floats exact."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.endswith("_ms")
        }
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


# -- entries: the retrieval pipeline -----------------------------------------------------------
def entry(n: int, words: Sequence[str], **labels: Any) -> dict[str, Any]:
    return {
        "id": f"e.{n:02d}",
        "title": " ".join(words[:2]).title(),
        "summary": " ".join(words),
        "domain": "ops" if n % 3 else "billing",
        "integrations": ["slack"] if n % 4 == 1 else [],
        "related": [f"e.{n - 1:02d}"] if n % 5 == 2 else [],
        **labels,
    }


def labels_of(n: int) -> dict[str, Any]:
    if n % 4 == 0:
        return {}
    if n % 4 == 1:
        return {"tenant": "acme"}
    if n % 4 == 2:
        return {"tenant": "acme", "acl": ["group:hr"]}
    return {"tenant": "beta"}


def corpus(seed: int, n: int) -> dict[int, dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return {
        i: entry(i, list(rng.choice(WORDS, int(rng.integers(2, 9)))), **labels_of(i))
        for i in range(n)
    }


def source(entries: Mapping[int, dict[str, Any]]) -> dict[str, Any]:
    items = [dict(e) for e in entries.values()]
    present = {e["id"] for e in items}
    for e in items:  # a relation to a deleted entry would be a validation error
        e["related"] = [r for r in e["related"] if r in present]
    return {"id": "kb", "version": "1", "entries": items}


def build(entries: Mapping[int, dict[str, Any]]) -> gw.KnowledgeBase:
    return gw.KnowledgeBase.from_sources([source(entries)])


def updated(kb: gw.KnowledgeBase, final: Mapping[int, dict[str, Any]]) -> gw.KnowledgeBase:
    """``kb`` brought to ``final`` by one update kept as a delta segment."""
    report = gw.normalize_and_validate([source(final)], Analyzer(kb.settings.analyzer))
    assert report.ok, report.issues
    old = {e.id: entry_digest(e) for e in kb}
    upserts = [e for e in report.entries if old.get(e.id) != entry_digest(e)]
    deletes = sorted({e.id for e in kb} - {e.id for e in report.entries})
    new = kb.update(upserts, deletes, compact=False)
    assert isinstance(new._lexical, DeltaIndex)
    return new


def turns(kb: gw.KnowledgeBase, **kw: Any) -> list[Any]:
    config = kw.pop("config", gw.RetrievalConfig())
    out = []
    for principal in PRINCIPALS:
        for query in QUERIES:
            request = gw.RetrievalRequest(query, (), principal=principal)
            out.append(plain(gw.retrieve(kb, request, config, **kw)))
    return out


def delta_and_scratch(seed: int = 7) -> tuple[gw.KnowledgeBase, gw.KnowledgeBase]:
    content = corpus(seed, 36)
    kb = build(content)
    final = dict(content)
    for n in (3, 8, 17):
        del final[n]
    fresh = corpus(seed + 1, 44)
    changed = [1, 5, 12, 36, 37, 38, 40, 43]
    for n in changed:
        final[n] = fresh[n]
    return updated(kb, final), build(final)


def test_pipeline_turns_on_a_delta_equal_a_rebuild_and_never_compact() -> None:
    delta, scratch = delta_and_scratch()
    want = turns(scratch)
    with no_compaction():
        got = turns(delta)
        gated_off = turns(delta, config=gw.RetrievalConfig(gate="off"))
        blocked = [
            plain(
                gw.retrieve(
                    delta, gw.RetrievalRequest(q, principal=ACME), gw.RetrievalConfig(), ["billing"]
                )
            )
            for q in QUERIES
        ]
    assert got == want
    assert gated_off == turns(scratch, config=gw.RetrievalConfig(gate="off"))
    assert blocked == [
        plain(
            gw.retrieve(
                scratch, gw.RetrievalRequest(q, principal=ACME), gw.RetrievalConfig(), ["billing"]
            )
        )
        for q in QUERIES
    ]
    assert any(s["primary"] for s in got)  # the turns select something
    assert not isinstance(delta._lexical, DeltaIndex) or "compacted" not in delta._lexical._state


def test_hybrid_turns_on_a_delta_equal_a_rebuild() -> None:
    delta, scratch = delta_and_scratch(11)
    config = gw.RetrievalConfig(hybrid=gw.HybridSettings(mode="hybrid"))
    reranked = gw.RetrievalConfig(
        hybrid=gw.HybridSettings(mode="hybrid", reranker=gw.EmbeddingReranker(EMBEDDER))
    )
    kw_scratch = {"vectors": gw.VectorIndex.build(scratch, EMBEDDER), "embedder": EMBEDDER}
    want = (
        turns(scratch, config=config, **kw_scratch),
        turns(scratch, config=reranked, **kw_scratch),
    )
    vectors = gw.VectorIndex.build(delta, EMBEDDER)
    with no_compaction():
        got = (
            turns(delta, config=config, vectors=vectors, embedder=EMBEDDER),
            turns(delta, config=reranked, vectors=vectors, embedder=EMBEDDER),
        )
    assert got == want


def test_gate_statistics_on_a_delta_equal_a_rebuild_to_the_bit() -> None:
    delta, scratch = delta_and_scratch(3)
    rng = np.random.default_rng(5)
    with no_compaction():
        for quantile in (0.0, 0.5, 0.9, 1.0):
            assert gate.measure_noise(delta, quantile) == gate.measure_noise(scratch, quantile)
        assert gate.noise_table(delta) == gate.noise_table(scratch)
        best = np.sort(delta.bm25.best_term_scores())  # term ids differ, not the values
        assert np.array_equal(best, np.sort(scratch.bm25.best_term_scores()))
        for query in QUERIES:
            terms = delta.analyzer.tokens(query)
            allowed = rng.random(len(delta)) < 0.6
            for mask in (None, allowed):
                left = gate.term_rows(delta, terms, mask)
                right = gate.term_rows(scratch, terms, mask)
                assert [r.tolist() for r in left] == [r.tolist() for r in right]
            left_scores = restricted_scores(delta.bm25, terms, allowed)
            assert np.array_equal(left_scores, restricted_scores(scratch.bm25, terms, allowed))
            level = restricted_noise(delta.bm25, allowed, 0.5)
            assert level == restricted_noise(scratch.bm25, allowed, 0.5)


def test_a_lazy_noise_level_gives_the_same_verdicts_and_is_asked_only_when_needed() -> None:
    kb = build(corpus(9, 40))
    relevance = gw.RetrievalConfig().relevance
    asked = 0

    def level() -> float:
        nonlocal asked
        asked += 1
        return gate.noise_level(kb, relevance.noise_quantile)

    for query in (*QUERIES, "rotate keys webhook retry billing refund invoice token"):
        hits = kb.search(query, k=20)
        docs = [kb.position(h.id) for h in hits]
        scores = [h.score for h in hits]
        evidence = gate.query_evidence(kb, query, relevance)
        for noise in (0.0, 1e9, gate.noise_level(kb, relevance.noise_quantile)):
            before = asked
            lazy = gate.gate_candidates(evidence, docs, scores, relevance, noise=lambda n=noise: n)
            eager = gate.gate_candidates(evidence, docs, scores, relevance, noise=noise)
            assert lazy == eager, query
            assert asked == before  # the lambdas above do not count
        gate.gate_candidates(evidence, docs, scores, relevance, noise=level)
    assert 0 < asked < len(QUERIES) + 1  # asked for some turns, not for every one


def test_the_embedded_backend_on_a_delta_equals_a_rebuild() -> None:
    delta, scratch = delta_and_scratch(5)
    ids = [*[e.id for e in scratch][::2], "e.99"]

    def answers(kb: gw.KnowledgeBase) -> list[Any]:
        backend = gw.EmbeddedBackend(kb, gw.VectorIndex.build(kb, EMBEDDER))
        out: list[Any] = [backend.noise_level(0.5)]
        for principal in PRINCIPALS:
            flt = gw.Filter.of(principal)
            for query in QUERIES:
                terms = kb.analyzer.tokens(query)
                out.append(plain(backend.lexical(query, flt, 5)))
                out.append(plain(backend.phrase(query, flt)))
                out.append(backend.lexical_scores(query, flt, ids))
                out.append(backend.term_counts(terms, flt))
        return out

    want = answers(scratch)
    with no_compaction():
        assert answers(delta) == want


def test_pair_ids_of_a_delta_score_the_delta_rows() -> None:
    """A delta numbers its term pairs base-first; the compacted index numbers them in key
    order. Ids must go back to the reader that made them (before, the embedded backend's
    scores of "delta alpha" read another pair's row of the compacted index)."""
    docs = [gw.Document(f"d{i}", "alpha beta", f"gamma delta {i}") for i in range(20)]
    new = [gw.Document("z1", "delta alpha", "beta gamma"), gw.Document("z2", "alpha gamma", "x")]
    delta = gw.KnowledgeBase.from_documents(docs).update(new, compact=False)
    scratch = gw.KnowledgeBase.from_documents(docs + new)
    ids = ["z1", "z2", "d0"]
    for query in ("delta alpha", "alpha gamma", "beta gamma", "gamma delta"):
        flt = gw.Filter.of(None)
        with no_compaction():
            got = gw.EmbeddedBackend(delta).lexical_scores(query, flt, ids)
        assert got == gw.EmbeddedBackend(scratch).lexical_scores(query, flt, ids), query


# -- documents: evidence selection -------------------------------------------------------------
def documents(seed: int, n: int) -> dict[str, gw.Document]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        text = " ".join(rng.choice(WORDS, int(rng.integers(3, 12))))
        meta: dict[str, Any] = {"source_id": f"src{i % 5}", "start": 0, "end": len(text)}
        if i % 3 == 1:
            meta["tenant"] = "acme"
        if i % 6 == 1:
            meta["acl"] = ("group:hr",)
        doc_id = f"src{i % 5}/doc-{i:03d}"
        out[doc_id] = gw.Document(doc_id, " ".join(rng.choice(WORDS, 2)), text, meta)
    return out


def evidence(kb: gw.KnowledgeBase, vectors: gw.VectorIndex) -> list[Any]:
    out = []
    for mode in ("lexical", "hybrid"):
        evidence_settings = gw.EvidenceSettings(hybrid=gw.HybridSettings(mode=mode))
        for principal in PRINCIPALS:
            for query in QUERIES:
                found = select_evidence(
                    kb,
                    query,
                    evidence_settings,
                    principal=principal,
                    vectors=vectors,
                    embedder=EMBEDDER,
                )
                out.append(plain(found))
    return out


def delta_documents(
    kb: gw.KnowledgeBase, upserts: Sequence[gw.Document], deletes: Sequence[str]
) -> gw.KnowledgeBase:
    new = kb.update(upserts, deletes, compact=False)
    assert isinstance(new._lexical, DeltaIndex)
    return new


def test_evidence_on_a_delta_equals_a_rebuild_with_labels_and_hybrid() -> None:
    content = documents(1, 40)
    kb = gw.KnowledgeBase.from_documents(content.values(), gw.chunk_settings())
    fresh = documents(2, 46)
    upserts = [fresh[k] for k in list(fresh)[38:]] + [fresh[list(fresh)[4]]]
    gone = [list(content)[n] for n in (0, 9, 21)]
    delta = delta_documents(kb, upserts, gone)
    final = {k: v for k, v in content.items() if k not in gone} | {d.id: d for d in upserts}
    scratch = gw.KnowledgeBase.from_documents(final.values(), gw.chunk_settings())
    want = evidence(scratch, gw.VectorIndex.build(scratch, EMBEDDER))
    vectors = gw.VectorIndex.build(delta, EMBEDDER)
    with no_compaction():
        assert evidence(delta, vectors) == want


# -- the engine on a reloaded delta snapshot ---------------------------------------------------
def test_engine_turns_on_a_reloaded_delta_snapshot_equal_a_rebuild(tmp_path: Path) -> None:
    content = corpus(21, 60)
    build(content).save(tmp_path / "kb")
    final = dict(content)
    del final[4]
    final[2] = corpus(22, 60)[2]
    final[70] = entry(70, ["rotate", "keys", "payroll"], tenant="acme")
    updated(gw.KnowledgeBase.load(tmp_path / "kb"), final).save(tmp_path / "kb")
    assert gw.KnowledgeBase.describe_snapshot(tmp_path / "kb")["segments"] == 2  # a delta
    build(final).save(tmp_path / "scratch")
    config = gw.GroundingConfig(timeout_ms=60_000)

    def outcomes(path: Path) -> list[Any]:
        with gw.GroundingEngine.from_snapshot(path, config) as engine:
            if path.name == "kb":
                assert isinstance(engine.knowledge_base._lexical, DeltaIndex)  # type: ignore[union-attr]
            out = []
            for principal in PRINCIPALS:
                for query in QUERIES:
                    outcome = engine.ground(query, principal=principal)
                    assert outcome.metadata.failure_reason in (None, "no-match", "low-relevance")
                    out.append(plain(outcome))
            engine.reload()  # the server's reload path: load, install, warm
            out.append(plain(engine.ground(QUERIES[0], principal=ACME)))
            return out

    want = outcomes(tmp_path / "scratch")
    with no_compaction():
        assert outcomes(tmp_path / "kb") == want


# -- random update sequences -------------------------------------------------------------------
entry_words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6)
entry_ids = st.integers(0, 23)
step = st.tuples(
    st.lists(st.tuples(entry_ids, entry_words), max_size=4),  # upserts
    st.lists(entry_ids, max_size=3),  # deletes
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    start=st.dictionaries(entry_ids, entry_words, min_size=1, max_size=16),
    steps=st.lists(step, min_size=1, max_size=3),
)
def test_random_updates_turns_equal_a_rebuild(
    start: dict[int, list[str]], steps: list[tuple[list[tuple[int, list[str]]], list[int]]]
) -> None:
    content = {n: entry(n, words, **labels_of(n)) for n, words in start.items()}
    kb = build(content)
    for upserts, deletes in steps:
        fresh = {n: entry(n, words, **labels_of(n)) for n, words in upserts}
        final = {n: e for n, e in content.items() if n not in deletes or n in fresh} | fresh
        if not final:
            continue
        kb = updated(kb, final)
        content = final
        scratch = build(content)
        with no_compaction():
            got = [
                plain(gw.retrieve(kb, gw.RetrievalRequest(q, principal=p), gw.RetrievalConfig()))
                for p in (None, ACME, HR)
                for q in QUERIES[:5]
            ]
            noise = gate.measure_noise(kb, 0.5)
        assert got == [
            plain(gw.retrieve(scratch, gw.RetrievalRequest(q, principal=p), gw.RetrievalConfig()))
            for p in (None, ACME, HR)
            for q in QUERIES[:5]
        ]
        assert noise == gate.measure_noise(scratch, 0.5)
