"""A conversation end to end with a scripted model: turns → extracted memories and graph →
hints → recall (through a Client) finds them → session end updates aspect weights and
writes a continuity score; a later session's update is applied and audited."""

from __future__ import annotations

import json
from typing import Any

from memory_helpers import scripted

from groundwire import CallableProvider, Client, MemoryScope, MemoryStore

ALICE = MemoryScope("acme", "support-bot", "alice")
FIRST_TURNS = [
    ("user", "Hi, I'm Alice, a data engineer at Acme. Please always email me, never call."),
    ("assistant", "Noted, Alice: email only."),
]
EXTRACTED = {
    "facts": [
        {
            "content": "Alice works at Acme as a data engineer.",
            "entities": [{"name": "Alice", "type": "person"}, {"name": "Acme", "type": "org"}],
            "relations": [{"source": "Alice", "type": "works_at", "target": "Acme"}],
            "attributes": [{"entity": "Alice", "aspect": "employer", "value": "Acme",
                            "claim_key": "current"}],
        },
        {
            "content": "Alice wants to be contacted by email, never by phone.",
            "type": "preference",
            "entities": [{"name": "Alice"}],
            "attributes": [{"entity": "Alice", "aspect": "contact", "value": "email",
                            "claim_key": "current"}],
        },
    ]
}  # fmt: skip
MOVED = {
    "facts": [
        {
            "content": "Alice works at Globex as a data engineer.",
            "entities": [{"name": "Alice"}, {"name": "Globex", "type": "org"}],
            "relations": [{"source": "Alice", "type": "works_at", "target": "Globex"}],
            "attributes": [{"entity": "Alice", "aspect": "employer", "value": "Globex",
                            "claim_key": "current"}],
        }
    ]
}  # fmt: skip


def test_a_conversation_end_to_end(tmp_path: Any, make_pipeline: Any) -> None:
    store = MemoryStore(tmp_path / "agent.db")
    replies: dict[str, list[str]] = {
        "extract": [json.dumps(EXTRACTED), json.dumps(MOVED)],
        "prospective_index": [
            "1. Where does Alice work?\n2. Which company employs Alice?",
            "Here are some questions:\n- How should we reach Alice?\n- Can we phone Alice?",
            "- Who employs Alice now?",
        ],
        "decision": [],
        "contradiction": ['{"contradicts": false, "confidence": 0.8, "reasoning": "a job change"}'],
        "continuity_score": [],
    }
    pipeline = make_pipeline(store, CallableProvider(scripted(replies)), hints=True,
                             update_policy="apply")  # fmt: skip

    # Session 1: the turns are remembered; the worker extracts facts, graph and hints.
    episode = pipeline.remember_turns(ALICE, FIRST_TURNS, session_id="s1", acl=["user:alice"])
    outcomes = pipeline.run_pending()
    assert [(o.kind, o.state) for o in outcomes] == [
        ("extract", "done"), ("prospective_index", "done"), ("prospective_index", "done"),
    ]  # fmt: skip
    [alice] = store.entities(ALICE, name="Alice")
    assert alice["relations"] == [{"direction": "out", "type": "works_at", "entity": "Acme",
                                   "mentions": 1, "confidence": 1.0}]  # fmt: skip

    # Session 2: a client answers with recalled memories, found through a hint.
    def answer(request: Any) -> str:
        cited = [line.split('"cite": "')[1].split('"')[0] for line in request.system.splitlines()
                 if '"cite": "' in line]  # fmt: skip
        return f"I'll email you. {cited[0]}"

    client = Client(CallableProvider(answer), memory=store, memory_scope=ALICE)
    result = client.generate("how should we reach you?", session_id="s2")
    assert result.memory is not None
    contact = store.recall(ALICE, "how should we reach alice", touch=False).memories[0]
    assert contact.memory.content == "Alice wants to be contacted by email, never by phone."
    assert "hint" in contact.channels
    assert contact.memory.id in result.memory.memory_ids
    assert contact.memory.tag in result.text
    sent = {r["memory_id"]: r for r in store.session_memories(ALICE, "s2")}
    assert sent[contact.memory.id]["was_injected"] == 1

    # Session 2 ends: the contact aspect was confirmed; the session is scored.
    prefix = contact.memory.id[:8]
    replies["continuity_score"].append(json.dumps({
        "score": 0.9, "confidence": 0.8, "memories_used": 1, "novel_context_count": 0,
        "reasoning": "The email preference was used.",
        "per_memory": [{"id": prefix, "relevance": 1.0}],
    }))  # fmt: skip
    pipeline.remember_turns(ALICE, [("user", "how should we reach you?"),
                                    ("assistant", result.text)], session_id="s2")  # fmt: skip
    replies["extract"].insert(0, json.dumps({"facts": []}))
    pipeline.end_session(ALICE, "s2")
    done = {o.kind: o for o in pipeline.run_pending()}
    assert done["session_feedback"].result["aspects_updated"] >= 1
    assert done["continuity_score"].result["score"] == 0.9
    with store._read() as conn:
        weights = dict(conn.execute("SELECT name, weight FROM aspects").fetchall())
        score = conn.execute("SELECT score, memories_recalled FROM session_scores").fetchone()
    assert weights["contact"] == 1.0 + 0.1
    assert tuple(score) == (0.9, len(sent))
    relevance = {r["memory_id"]: r["relevance_score"] for r in store.session_memories(ALICE, "s2")}
    assert relevance[contact.memory.id] == 1.0

    # Session 3: Alice moved; the decision step updates the old fact (policy "apply").
    update = {"fact": 1, "operation": "update", "target": "M1", "reason": "new employer"}
    replies["decision"].append(json.dumps({"decisions": [update]}))
    pipeline.remember_turns(ALICE, [("user", "I moved to Globex last week.")], session_id="s3")
    outcomes = pipeline.run_pending()
    assert outcomes[0].result == {"facts": 1, "flagged": 0, "applied": 1, "update": 1}
    now = store.recall(ALICE, "where does alice work now").memories[0].memory
    assert now.content == "Alice works at Globex as a data engineer."
    assert all("Acme as a data" not in m.content for m in store.memories(ALICE))
    status = pipeline.status(ALICE)
    assert status["proposals"] == {"applied": 3}
    assert status["audited"] == 3
    assert status["jobs"]["extract"] == {"done": 3}
    # 3 extractions, 1 decision, 1 semantic contradiction check, 3 hints, 1 score
    assert status["model_calls"] == {"ok": 9}
    assert status["model_calls_by_kind"] == {
        "continuity_score": 1,
        "contradiction": 1,
        "decision": 1,
        "extract": 3,
        "prospective_index": 3,
    }
    first = store.recall(ALICE, "alice email phone").memories[0].memory
    assert first.sources == (episode.id,)
    store.close()
