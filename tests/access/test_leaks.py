"""Nothing the principal may not see ever shows: randomized scenarios, library and CLI.

Each seed builds a scenario: tenants, groups, users; entries with random tenant and ACL
labels, statuses, domains, related/parent links pointing anywhere (other tenants
included); document chunks labeled by an access policy. Every entry and document holds a
unique marker word. A random principal (sometimes anonymous) then asks queries built to
tempt a leak: the markers, ids, titles and aliases of what it may not see, mixed with
common words. Every output — knowledge block, citations, metadata, the retrieval with its
entries and breakdowns, expansion, evidence text, excerpts, tool results, error messages,
authorization reports — is serialized and searched for the ids and markers of everything
the principal may not see. Scores are checked against an isolated reference: the tenant's
own pool for turns, the visible entries alone for readers and evidence.

To add a store (memories, the server), give it a ``check_*`` function fed the same
scenario and call it from ``test_library_paths_reveal_nothing``.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import groundwire as gw
from groundwire.access.filters import admits, admits_labels
from groundwire.access.labels import Labels, read_labels
from groundwire.cli import app

#: Scenarios per run; GROUNDWIRE_LEAK_SEEDS=5000 runs a longer probe outside CI.
SCENARIOS = int(os.environ.get("GROUNDWIRE_LEAK_SEEDS", "200"))
LIBRARY_SEEDS = range(SCENARIOS)
CLI_SEEDS = range(0, SCENARIOS, 5)  # a fifth of them through the command line too
WORDS = (
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
)
TENANTS = ("acme", "beta", "gamma")
GROUPS = ("eng", "hr", "ops")
USERS = ("alice", "bob", "carol")


@dataclass
class Scenario:
    seed: int
    entries: list[dict[str, Any]]
    docs: dict[str, tuple[str, Labels]]  # path -> (text, labels)
    principal: gw.Principal | None
    scope: gw.Scope
    blocked: tuple[str, ...]
    queries: list[str]
    markers: dict[str, str] = field(default_factory=dict)  # id -> marker

    @property
    def source(self) -> dict[str, Any]:
        return {"id": "kb", "version": "v1", "entries": self.entries}

    def policy(self) -> dict[str, Any]:
        rules = []
        for path, (_, labels) in sorted(self.docs.items()):
            rule: dict[str, Any] = {"paths": [path]}
            if labels.tenant:
                rule["tenant"] = labels.tenant
            if labels.acl:
                rule["acl"] = list(labels.acl)
            rules.append(rule)
        return {"rules": rules}


def _marker(rng: random.Random) -> str:
    return f"mk{rng.getrandbits(48):012x}"


def _labels(rng: random.Random) -> tuple[str | None, list[str]]:
    tenant = rng.choice((None, *TENANTS, *TENANTS))
    acl: list[str] = []
    if rng.random() < 0.5:
        pool = [f"group:{g}" for g in GROUPS] + [f"user:{u}" for u in USERS]
        acl = rng.sample(pool, rng.randint(1, 2))
    return tenant, acl


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    count = rng.randint(6, 16)
    ids = [f"s{seed}n{n}.{_marker(rng)[:6]}" for n in range(count)]
    entries, markers = [], {}
    for entry_id in ids:
        marker = _marker(rng)
        markers[entry_id] = marker
        tenant, acl = _labels(rng)
        words = " ".join(rng.choices(WORDS, k=6))
        others = [i for i in ids if i != entry_id]
        entry: dict[str, Any] = {
            "id": entry_id,
            "title": f"{rng.choice(WORDS)} {marker} guide",
            "summary": f"{words} {marker}",
            "body": f"{' '.join(rng.choices(WORDS, k=12))} {marker}",
            "domain": rng.choice(("ops", "ops", "billing")),
            "integrations": rng.choice(([], [], ["slack"])),
            "aliases": [f"{rng.choice(WORDS)} {marker}"],
            "related": rng.sample(others, rng.randint(0, 3)),
            "status": "draft" if rng.random() < 0.1 else "active",
        }
        if rng.random() < 0.4:
            entry["parent"] = rng.choice(others)
        if tenant:
            entry["tenant"] = tenant
        if acl:
            entry["acl"] = acl
        entries.append(entry)
    docs = {}
    for n in range(rng.randint(3, 7)):
        marker = _marker(rng)
        path = f"d{n}/{marker}.md"
        markers[path] = marker
        tenant, acl = _labels(rng)
        text = f"# {rng.choice(WORDS)} {marker}\n\n{' '.join(rng.choices(WORDS, k=30))} {marker}."
        docs[path] = (text, Labels(tenant, tuple(sorted(acl))))
    principal = None
    if rng.random() < 0.85:
        principal = gw.Principal(
            rng.choice(TENANTS), rng.choice(USERS), rng.sample(GROUPS, rng.randint(0, 2))
        )
    queries = []
    for _ in range(3):
        target = rng.choice(entries)
        parts = [
            *rng.sample(WORDS, 2),
            markers[target["id"]],
            target["id"],
            target["aliases"][0],
            target["title"],
            markers[rng.choice(sorted(docs))],
        ]
        rng.shuffle(parts)
        queries.append(" ".join(parts[: rng.randint(2, len(parts))]))
    return Scenario(
        seed=seed,
        entries=entries,
        docs=docs,
        principal=principal,
        scope=gw.Scope(rng.choice(((), ("slack",)))),
        blocked=rng.choice(((), ("billing",))),
        queries=queries,
        markers=markers,
    )


# -- what may be seen ---------------------------------------------------------------------------
def _record(entry: dict[str, Any]) -> gw.KnowledgeEntry:
    labels = {
        k: (tuple(entry[k]) if k == "acl" else entry[k]) for k in ("tenant", "acl") if k in entry
    }
    return gw.KnowledgeEntry(
        entry["id"],
        entry["title"],
        entry["summary"],
        entry["domain"],
        tuple(entry["integrations"]),
        status=entry["status"],
        metadata=labels,
    )


def label_visible(s: Scenario) -> set[str]:
    """Entries and documents whose tenant and ACL labels admit the principal."""
    flt = gw.Filter.of(s.principal)
    seen = {e["id"] for e in s.entries if admits_labels(flt, read_labels(_record(e).metadata))}
    seen |= {path for path, (_, labels) in s.docs.items() if admits_labels(flt, labels)}
    return seen


def turn_visible(s: Scenario) -> set[str]:
    """Entries a turn of this request may show (labels, status, domain, scope)."""
    flt = gw.Filter.of(s.principal, s.scope, s.blocked)
    return {e["id"] for e in s.entries if admits(flt, _record(e))}


_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> str:
    """``text`` as a run of casefolded words between spaces."""
    return " " + " ".join(_WORD.findall(text.casefold())) + " "


def named_visible(s: Scenario, query: str) -> set[str]:
    """:func:`turn_visible` for one query. Integrations are relevance scope, not
    authorization: those the query names — by name, or by an alias of an entry the request
    may otherwise see (labels, status, domain) — join its scope. A superset of what a turn
    widens to (the host predicate is not consulted, the gate's state is not read)."""
    words = _words(query)
    unscoped = gw.Filter.of(s.principal, None, s.blocked)
    named: set[str] = set()
    for e in s.entries:
        if not e["integrations"] or not admits(unscoped, _record(e)):
            continue
        if any(_words(name) in words for name in e["integrations"]) or any(
            _words(alias) in words for alias in e["aliases"]
        ):
            named.update(e["integrations"])
    scope = gw.Scope(tuple(sorted({*s.scope.enabled_integrations, *named})))
    flt = gw.Filter.of(s.principal, scope, s.blocked)
    return {e["id"] for e in s.entries if admits(flt, _record(e))}


def forbidden_strings(s: Scenario, visible: set[str]) -> dict[str, str]:
    """Every id, path and marker the principal may not see, mapped to what it belongs to."""
    out: dict[str, str] = {}
    for name, marker in s.markers.items():
        if name not in visible:
            out[marker] = name
            out[name] = name
    return out


def assert_no_leak(s: Scenario, text: str, visible: set[str], what: str) -> None:
    for needle, owner in forbidden_strings(s, visible).items():
        assert needle not in text, (
            f"seed {s.seed}: {what} reveals {owner!r} ({needle!r}) to {s.principal}"
        )


def _scrub_query(text: str, query: str) -> str:
    """Outputs may echo the query itself (the evidence block's question line); drop it."""
    return text.replace(json.dumps(query, ensure_ascii=False), "").replace(query, "")


# -- serialization of every output --------------------------------------------------------------
def _entry_json(entry: gw.KnowledgeEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "title": entry.title,
        "summary": entry.summary,
        "body": entry.body,
        "aliases": entry.aliases,
        "keywords": entry.keywords,
        "related": entry.related,
        "parent": entry.parent,
        "metadata": {k: str(v) for k, v in entry.metadata.items()},
    }


def outcome_text(outcome: gw.GroundingOutcome) -> str:
    block = outcome.block
    retrieval = outcome.retrieval
    data: dict[str, Any] = {
        "block": None if block is None else [block.content, [c.tag for c in block.citations]],
        "metadata": repr(outcome.metadata),
    }
    if retrieval is not None:
        data["primary"] = [
            [_entry_json(i.entry), i.score, dict(i.breakdown), repr(dict(i.channels))]
            for i in retrieval.primary
        ]
        data["expanded"] = [_entry_json(e) for e in retrieval.expanded]
        data["context"] = repr(retrieval.context)
        data["errors"] = retrieval.authorization_errors
    return json.dumps(data, ensure_ascii=False, default=str)


def evidence_text(result: gw.EvidenceResult) -> str:
    lines = [line for line in result.text.splitlines() if not line.startswith("question: ")]
    data = {
        "text": lines,
        "excerpts": [repr(e) for e in result.excerpts],
        "citations": [c.tag for c in result.citations],
        "counts": [result.candidate_count, result.authorized_sources, result.denied_sources],
        "errors": result.authorization_errors,
        "reason": result.reason,
    }
    return json.dumps(data, ensure_ascii=False)


# -- the library paths --------------------------------------------------------------------------
def host_authorizer(seed: int) -> Any:
    """A host check that fails in every way on some entries, naming them in its errors."""
    rng = random.Random(seed * 7919)
    mode = rng.choice(("none", "raise", "string", "deny"))
    if mode == "none":
        return None

    def authorize(principal: gw.Principal | None, entry: gw.KnowledgeEntry) -> Any:
        if hash(entry.id) % 4:
            return True
        if mode == "raise":
            raise LookupError(f"no policy for {entry.id} ({entry.title})")
        return "no" if mode == "string" else False

    return authorize


EMBEDDER = gw.HashingEmbedder(64)


def hybrid_settings(seed: int) -> gw.HybridSettings:
    """Per seed: lexical, hybrid (fused), dense alone, or hybrid with a reranker."""
    mode = seed % 4
    if mode == 0:
        return gw.HybridSettings()
    if mode == 3:
        return gw.HybridSettings(mode="hybrid", reranker=gw.EmbeddingReranker(EMBEDDER))
    return gw.HybridSettings(mode="hybrid" if mode == 1 else "dense")


def check_turns(s: Scenario, kb: gw.KnowledgeBase) -> None:
    authorize = host_authorizer(s.seed)
    settings = hybrid_settings(s.seed)  # lexical, fused, dense alone or reranked channels
    hybrid = settings.mode != "lexical"
    config = gw.RetrievalConfig(
        candidate_limit=12, result_limit=5, relation_limit=6, hybrid=settings
    )
    pool = [e for e in s.entries if e.get("tenant") in (None, s.principal and s.principal.tenant)]
    reference = gw.KnowledgeBase.from_sources([{**s.source, "entries": pool}])
    vectors = {"kb": None, "reference": None}
    if hybrid:
        vectors = {
            "kb": gw.VectorIndex.build(kb, EMBEDDER),
            "reference": gw.VectorIndex.build(reference, EMBEDDER),
        }
    for query in s.queries:
        visible = named_visible(s, query)
        request = gw.RetrievalRequest(query, scope=s.scope, principal=s.principal)
        allow = None if authorize is None else (lambda e, a=authorize: a(s.principal, e))
        selection = gw.retrieve(
            kb, request, config, s.blocked, allow, vectors=vectors["kb"], embedder=EMBEDDER
        )
        shown = [i.entry for i in selection.primary] + list(selection.expanded)
        assert {e.id for e in shown} <= visible, f"seed {s.seed}"
        result = gw.RetrievalResult(query, selection.primary, selection.expanded, 0, "none",
                                    gw.assemble_context([i.entry for i in selection.primary],
                                                        selection.expanded, gw.ContextConfig()),
                                    0.0, selection.authorization_errors)  # fmt: skip
        text = outcome_text(gw.GroundingOutcome(None, gw.GroundingMetadata(), result))
        assert_no_leak(s, _scrub_query(text, query), visible, f"turn {query!r}")
        if authorize is None:  # scores equal the tenant's pool indexed alone
            alone = gw.retrieve(
                reference, request, config, s.blocked, vectors=vectors["reference"],
                embedder=EMBEDDER,
            )  # fmt: skip
            assert [(i.entry.id, i.score, dict(i.breakdown)) for i in selection.primary] == [
                (i.entry.id, i.score, dict(i.breakdown)) for i in alone.primary
            ], f"seed {s.seed}: scores depend on another tenant"


def check_engine(s: Scenario) -> None:
    settings = hybrid_settings(s.seed // 3)  # the engine's seeds are multiples of 3
    config = gw.GroundingConfig(
        sources=[s.source],
        blocked_domains=s.blocked,
        authorize=host_authorizer(s.seed),
        retrieval=gw.RetrievalConfig(hybrid=settings),
        embedder=None if settings.mode == "lexical" else EMBEDDER,
        timeout_ms=60_000,  # not under test for time: a turn past 800 ms fails open, no channels
    )
    with gw.GroundingEngine(config) as engine:
        assert engine.ready(30)
        for query in s.queries:
            visible = named_visible(s, query)
            outcome = engine.ground(query, scope=s.scope, principal=s.principal)
            assert outcome.metadata.failure_reason != "error", f"seed {s.seed}"
            assert set(outcome.metadata.selected_ids) <= visible
            assert set(outcome.metadata.expanded_ids) <= visible
            channels = outcome.metadata.channels
            if settings.mode != "lexical":
                assert channels is not None, f"seed {s.seed}"
                assert channels["used"] == settings.mode
                assert set(channels["hits"]) == set(outcome.metadata.selected_ids)
            text = _scrub_query(outcome_text(outcome), query)
            assert_no_leak(s, text, visible, f"ground {query!r}")


def check_reader(s: Scenario, kb: gw.KnowledgeBase) -> None:
    visible = label_visible(s)
    with kb.reader(s.principal) as reader:
        assert {e.id for e in reader} == {e["id"] for e in s.entries} & visible
        for entry in reader:
            assert set(entry.related) <= visible
            assert entry.parent is None or entry.parent in visible
        own = [
            {**e, "related": [r for r in e["related"] if r in visible],
             "parent": e.get("parent") if e.get("parent") in visible else None}
            for e in s.entries
            if e["id"] in visible
        ]  # fmt: skip
        alone = gw.KnowledgeBase.from_sources([{**s.source, "entries": own}])
        for query in s.queries:
            hits = reader.search(query, 10)
            assert [(h.id, h.score, dict(h.breakdown)) for h in hits] == [
                (h.id, h.score, dict(h.breakdown)) for h in alone.search(query, 10)
            ], f"seed {s.seed}"
            text = json.dumps([[h.id, h.score, dict(h.breakdown)] for h in hits])
            assert_no_leak(s, text, visible, f"reader search {query!r}")
        hidden = sorted({e["id"] for e in s.entries} - visible)
        for entry_id in hidden[:3]:
            assert reader.get(entry_id) is None
            with pytest.raises(gw.KnowledgeIndexError) as error:
                reader.explain("keys", entry_id)
            assert str(error.value) == f"no entry with id {entry_id!r} in this knowledge base"
        tool = gw.search_knowledge_base_tool(kb, principal=s.principal)
        for query in s.queries:
            output = tool.run({"query": query, "k": 10})
            assert {r["id"] for r in output["results"]} <= visible
            text = json.dumps(output["results"], ensure_ascii=False)
            assert_no_leak(s, text, visible, f"search tool {query!r}")


def docs_kb(s: Scenario, only: set[str] | None = None) -> gw.KnowledgeBase:
    policy = gw.AccessPolicy.from_mapping(s.policy())
    chunks = [
        c
        for path, (text, _) in sorted(s.docs.items())
        if only is None or path in only
        for c in gw.chunk_text(text, path)
    ]
    labeled, skipped = gw.label_chunks(chunks, policy)
    assert skipped == []
    return gw.KnowledgeBase.from_documents(gw.chunks_to_documents(labeled), gw.chunk_settings())


def check_evidence(s: Scenario) -> None:
    visible = label_visible(s)
    kb = docs_kb(s)
    alone = docs_kb(s, only=visible)
    for query in s.queries:
        result = gw.retrieve_evidence(
            kb, query, principal=s.principal, limit=10, candidate_limit=50
        )
        assert {e.source_id for e in result.excerpts} <= visible
        assert_no_leak(s, evidence_text(result), visible, f"evidence {query!r}")
        reference = gw.retrieve_evidence(
            alone, query, principal=s.principal, limit=10, candidate_limit=50
        )
        # Restricted statistics are recomputed, so scores agree to rounding, not to the bit.
        assert [e.id for e in result.excerpts] == [e.id for e in reference.excerpts], s.seed
        assert [e.score for e in result.excerpts] == pytest.approx(
            [e.score for e in reference.excerpts], rel=1e-12
        ), f"seed {s.seed}: evidence scores depend on what the principal may not see"
        assert result.authorized_sources == reference.authorized_sources


@pytest.mark.parametrize("seed", LIBRARY_SEEDS)
def test_library_paths_reveal_nothing(seed: int) -> None:
    s = scenario(seed)
    kb = gw.KnowledgeBase.from_sources([s.source])
    check_turns(s, kb)
    check_reader(s, kb)
    check_evidence(s)
    if seed % 3 == 0:  # the engine runs the same pipeline; a third of the seeds go through it
        check_engine(s)


# -- the command line ---------------------------------------------------------------------------
runner = CliRunner()


def principal_flags(s: Scenario) -> list[str]:
    if s.principal is None:
        return []
    flags = ["--tenant", s.principal.tenant, "--subject", s.principal.subject]
    for group in s.principal.groups:
        flags += ["--group", group]
    return flags


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 1), result.output
    return result.output


@pytest.mark.integration
@pytest.mark.parametrize("seed", CLI_SEEDS)
def test_the_command_line_reveals_nothing(seed: int, tmp_path: Path) -> None:
    s = scenario(seed)
    source = tmp_path / "kb.json"
    source.write_text(json.dumps(s.source), encoding="utf-8")
    folder = tmp_path / "docs"
    for path, (text, _) in s.docs.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    policy = tmp_path / "access.yaml"
    policy.write_text(yaml.safe_dump(s.policy()), encoding="utf-8")
    flags = principal_flags(s)
    scope = [f for name in s.scope.enabled_integrations for f in ("--integration", name)]
    blocked = [f for name in s.blocked for f in ("--blocked-domain", name)]
    labels = label_visible(s)
    for query in s.queries[:2]:
        turn = named_visible(s, query)
        grounded = cli("ground", str(source), query, *flags, *scope, *blocked, "--json")
        assert_no_leak(s, _scrub_query(grounded, query), turn, f"cli ground {query!r}")
        meta = json.loads(grounded)["metadata"]
        assert set(meta["selected_ids"]) | set(meta["expanded_ids"]) <= turn
        found = cli("search", str(source), query, *flags, *blocked, "--json")
        assert_no_leak(s, found, labels, f"cli search {query!r}")
        evidence = cli("ground", str(folder), query, "--access", str(policy), *flags, "--json")
        data = json.loads(evidence)
        data.pop("settings")
        block = [
            line
            for line in (data.pop("block") or "").splitlines()
            if not line.startswith("question: ")
        ]
        text = json.dumps([data, block], ensure_ascii=False)
        assert_no_leak(s, text, labels, f"cli evidence {query!r}")
