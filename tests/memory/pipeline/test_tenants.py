"""A pipeline job acts for its own tenant and agent: it shows the model nothing of another
scope and writes nothing into one, even when the texts and the session ids are the same."""

from __future__ import annotations

import json
from typing import Any

from memory_helpers import ACME, GLOBEX, OTHER_AGENT

from groundwire import CallableProvider, MemoryAttribute, MemoryScope, MemoryStore

FOREIGN = "Alice works at Acme as a data engineer, says Zorblat."
OWN = "Alice works at Acme as an analyst."
TURNS = [("user", "Alice works at Acme as a data engineer now."), ("assistant", "Noted.")]
FACT = {
    "content": "Alice works at Acme as a data engineer.",
    "entities": [{"name": "Alice", "type": "person"}],
    "attributes": [
        {"entity": "Alice", "aspect": "employer", "value": "Acme", "claim_key": "current"}
    ],
}
CURRENT = MemoryAttribute("Alice", "employer", "Acme", claim_key="current")


def _model(prompts: list[tuple[str, str]]) -> Any:
    def answer(request: Any) -> str:
        kind = request.metadata["groundwire"].removeprefix("memory-")
        prompts.append((kind, "\n".join(m.content for m in request.messages)))
        if kind == "extract":
            return json.dumps({"facts": [FACT]})
        if kind == "decision":
            decision = {"fact": 1, "operation": "update", "target": "M1", "reason": "newer"}
            return json.dumps({"decisions": [decision]})
        if kind == "contradiction":
            return '{"contradicts": false, "confidence": 0.9}'
        if kind == "prospective_index":
            return "Where does Alice work?"
        return '{"score": 0.5}'

    return answer


def _state(store: MemoryStore, scope: MemoryScope) -> dict[str, Any]:
    """Everything of one scope that the pipeline could write."""
    key = (scope.tenant, scope.agent)
    with store._read() as conn:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(sql, key).fetchall()]

        return {
            "memories": rows(
                "SELECT id, content, deleted FROM memories WHERE tenant = ? AND agent = ?"
                " ORDER BY id"
            ),
            "aspects": rows(
                "SELECT e.name, a.name, a.weight, a.updated_at FROM aspects a"
                " JOIN entities e ON e.id = a.entity_id WHERE e.tenant = ? AND e.agent = ?"
                " ORDER BY a.id"
            ),
            "attributes": rows(
                "SELECT ea.id, ea.status FROM entity_attributes ea JOIN entities e"
                " ON e.id = ea.entity_id WHERE e.tenant = ? AND e.agent = ? ORDER BY ea.id"
            ),
            "sessions": rows(
                "SELECT id, feedback_at FROM sessions WHERE tenant = ? AND agent = ? ORDER BY id"
            ),
            "session_memories": rows(
                "SELECT session_id, memory_id, relevance_score FROM session_memories"
                " WHERE tenant = ? AND agent = ? ORDER BY memory_id"
            ),
            "scores": rows("SELECT * FROM session_scores WHERE tenant = ? AND agent = ?"),
            "hints": rows(
                "SELECT h.hint FROM memory_hints h JOIN memories m ON m.id = h.memory_id"
                " WHERE m.tenant = ? AND m.agent = ?"
            ),
            "counters": rows("SELECT * FROM pipeline_counters WHERE tenant = ? AND agent = ?"),
            "calls": rows("SELECT COUNT(*) FROM model_calls WHERE tenant = ? AND agent = ?"),
            "proposals": rows(
                "SELECT COUNT(*) FROM memory_proposals WHERE tenant = ? AND agent = ?"
            ),
            "audit": rows("SELECT COUNT(*) FROM memory_audit WHERE tenant = ? AND agent = ?"),
        }


def test_jobs_never_cross_tenants_or_agents(store: MemoryStore, make_pipeline: Any) -> None:
    foreign = {s: store.remember(s, FOREIGN, attributes=[CURRENT]) for s in (GLOBEX, OTHER_AGENT)}
    for scope in foreign:  # the same session id, recalled in the other scopes too
        assert store.recall(scope, "alice works acme", session_id="s1").memories
    own = store.remember(ACME, OWN, attributes=[CURRENT])
    before = {scope: _state(store, scope) for scope in foreign}

    prompts: list[tuple[str, str]] = []
    pipeline = make_pipeline(
        store, CallableProvider(_model(prompts)), update_policy="apply", hints=True
    )
    pipeline.remember_turns(ACME, TURNS, session_id="s1")
    assert store.recall(ACME, "where does alice work", session_id="s1").memories
    pipeline.end_session(ACME, "s1")
    outcomes = pipeline.run_pending()
    assert {o.kind for o in outcomes} == {
        "extract", "prospective_index", "session_feedback", "continuity_score"}  # fmt: skip
    assert all(o.state == "done" for o in outcomes), [o.error for o in outcomes]

    kinds = {kind for kind, _ in prompts}
    assert {"extract", "decision", "continuity_score"} <= kinds
    assert all("Zorblat" not in text for _, text in prompts)  # never shown another scope's
    [decision] = [text for kind, text in prompts if kind == "decision"]
    assert OWN in decision
    assert store.get(ACME, own.id) is None  # the update replaced ACME's own memory...
    for scope, memory in foreign.items():  # ...and nothing of the other scopes
        assert store.get(scope, memory.id) is not None
        assert _state(store, scope) == before[scope]
    mine = _state(store, ACME)
    assert mine["scores"]
    assert mine["audit"] == [(1,)]
    assert mine["hints"]
    assert mine["sessions"][0][1] is not None  # ACME's s1 got its feedback

    # The other tenant's session end touches only its own aspects and session.
    pipeline.end_session(GLOBEX, "s1")
    assert all(o.state == "done" for o in pipeline.run_pending())
    assert _state(store, ACME) == mine
    assert _state(store, OTHER_AGENT) == before[OTHER_AGENT]
    globex = _state(store, GLOBEX)
    assert globex["aspects"][0][2] > before[GLOBEX]["aspects"][0][2]
    assert globex["scores"]
    assert globex["sessions"][0][1] is not None
