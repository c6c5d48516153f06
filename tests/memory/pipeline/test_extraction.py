"""The extract job: turns → validated facts with their graph, decisions, the update policy,
contradiction flags, review, the audit trail; bad answers rejected whole and recorded."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from memory_helpers import ACME, Clock, scripted

from groundwire import CallableProvider, MemoryAttribute, MemoryScope, MemoryStore, QueryError

TURNS = [
    ("user", "Hi, I'm Alice. I just started at Acme as a data engineer."),
    ("assistant", "Congratulations, Alice! How can I help?"),
]
FACT = {
    "content": "Alice works at Acme as a data engineer.",
    "type": "fact",
    "importance": 0.7,
    "entities": [{"name": "Alice", "type": "person"}, {"name": "Acme", "type": "company"}],
    "relations": [{"source": "Alice", "type": "works_at", "target": "Acme", "confidence": 0.9}],
    "attributes": [
        {"entity": "Alice", "aspect": "employer", "value": "Acme", "claim_key": "current"}
    ],
}
PREFERENCE = {"content": "Alice prefers email over phone calls.", "type": "preference"}


def facts(*items: dict[str, Any]) -> str:
    return json.dumps({"facts": list(items)})


def rows(store: MemoryStore, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with store._read() as conn:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_turns_become_memories_with_their_graph(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any, kind: str
) -> None:
    endpoint = getattr(fake, kind)
    endpoint.enqueue_text(
        "<think>Two durable facts here.</think>\n```json\n" + facts(FACT, PREFERENCE) + "\n```"
    )
    pipeline = make_pipeline(store, provider_for(kind))
    alice = MemoryScope("acme", "support-bot", "alice")
    episode = pipeline.remember_turns(
        alice, TURNS, session_id="chat-1", acl=["user:alice"], sources=["chat-1:1"]
    )
    assert episode.type == "episode"
    assert episode.content.startswith("user: Hi, I'm Alice.")
    [outcome] = pipeline.run_pending()
    assert (outcome.kind, outcome.state) == ("extract", "done")
    assert outcome.result == {"facts": 2, "flagged": 0, "applied": 2, "add": 2}
    # The facts are memories of their own, private like the turns, citing them.
    found = store.recall(alice, "where does alice work")
    fact = found.memories[0].memory
    assert fact.content == FACT["content"]
    assert (fact.type, fact.importance, fact.acl) == ("fact", 0.7, ("user:alice",))
    assert fact.sources == (episode.id, "chat-1:1")
    assert fact.metadata == {"extracted_from": episode.id}
    assert store.recall(ACME, "where does alice work").memories == ()  # not the tenant's
    graph = store.entities(alice, name="Alice")[0]
    assert graph["relations"] == [
        {"direction": "out", "type": "works_at", "entity": "Acme", "mentions": 1, "confidence": 0.9}
    ]
    details = store.details(alice, fact.id)
    assert details is not None
    assert [(a["aspect"], a["value"], a["status"]) for a in details["attributes"]] == [
        ("employer", "Acme", "active")
    ]
    # No similar memory existed: one model call, no decision call.
    assert endpoint.request_count == 1
    sent = json.dumps(endpoint.requests[0].json)
    assert "I just started at Acme" in sent
    assert "additionalProperties" in sent
    audit = rows(store, "SELECT operation, memory_id, actor, inputs FROM memory_audit ORDER BY id")
    assert [(a[0], a[2]) for a in audit] == [("add", "pipeline"), ("add", "pipeline")]
    assert json.loads(audit[0][3])["fact"] == FACT
    assert json.loads(audit[0][3])["source_memory_id"] == episode.id


BAD_ANSWERS = [
    ("not json", "the answer holds no JSON object"),
    ('{"facts": [', "the answer is not valid JSON"),
    ('["a list"]', "the answer holds no JSON object"),
    ('{"memories": []}', "'facts' is a required property"),
    # one valid fact and one with an unknown field: nothing of it is applied
    (facts(FACT, {"content": "Bob likes tea.", "mood": "happy"}), "Additional properties"),
    (facts(FACT, {"content": "Bob likes tea.", "importance": 2}), "is greater than the maximum"),
    (facts({"content": "Bob likes tea.", "type": "episode"}), "is not one of"),
    # passes the schema, fails the store's own rules (a blank entity name)
    (
        facts(FACT, {"content": "Bob likes tea.", "entities": [{"name": "   "}]}),
        "$.facts[1]: entities[0].name",
    ),
]


@pytest.mark.parametrize(("answer", "reason"), BAD_ANSWERS)
def test_a_bad_answer_is_rejected_whole_and_recorded(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any, answer: str, reason: str
) -> None:
    fake.openai.enqueue_text(answer)
    fake.openai.enqueue_text(facts(FACT))
    pipeline = make_pipeline(store, provider_for("openai"))
    pipeline.remember_turns(ACME, TURNS)
    first = pipeline.run_once()
    assert first is not None
    assert first.state == "failed"
    assert first.error is not None
    assert reason in first.error
    assert store.stats(ACME)["memories"] == 1  # the turns only: nothing half applied
    assert rows(store, "SELECT COUNT(*) FROM memory_proposals") == [(0,)]
    [(outcome, error, output)] = rows(store, "SELECT outcome, error, output FROM model_calls")
    assert (outcome, output) == ("rejected", answer)
    assert reason in error
    retried = pipeline.run_once()  # the next attempt gets a good answer
    assert retried is not None
    assert (retried.state, retried.result) == (
        "done",
        {"facts": 1, "flagged": 0, "applied": 1, "add": 1},
    )
    assert store.stats(ACME)["memories"] == 2


def test_provider_failures_fail_the_attempt(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    fake.anthropic.enqueue_error(529, "overloaded", times=2)
    fake.anthropic.enqueue_empty()
    fake.anthropic.enqueue_text(facts())
    pipeline = make_pipeline(store, provider_for("anthropic"))
    pipeline.remember_turns(ACME, TURNS)
    outcomes = pipeline.run_pending()
    assert [o.state for o in outcomes] == ["failed", "failed", "done"]
    assert "HTTP 529" in (outcomes[0].error or "")
    assert "no text" in (outcomes[1].error or "")
    assert outcomes[2].result == {"facts": 0, "flagged": 0}
    assert fake.anthropic.request_count == 4  # the provider retried the 529 once itself


def test_an_extraction_timeout_fails_the_attempt(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    gate = threading.Event()
    fake.openai.enqueue_text(facts(FACT), wait=gate)
    pipeline = make_pipeline(store, provider_for("openai"), extraction_timeout_s=5.0)
    pipeline.remember_turns(ACME, TURNS)
    outcome = pipeline.run_once()
    gate.set()
    assert outcome is not None
    assert (outcome.state, outcome.error) == (
        "failed",
        "CallTimeoutError: the model call took longer than 5 s",
    )
    assert store.stats(ACME)["memories"] == 1


def test_the_same_turns_are_extracted_once(store: MemoryStore, make_pipeline: Any) -> None:
    model = CallableProvider(scripted({"extract": [facts(FACT)]}))
    pipeline = make_pipeline(store, model)
    first = pipeline.remember_turns(ACME, TURNS)
    assert pipeline.run_pending()[0].state == "done"
    again = pipeline.remember_turns(ACME, TURNS)  # the same memory, the same job
    assert again.id == first.id
    assert pipeline.run_pending() == []
    assert store.stats(ACME)["memories"] == 2


def test_turns_are_checked(store: MemoryStore, make_pipeline: Any) -> None:
    pipeline = make_pipeline(store)
    with pytest.raises(QueryError, match="turns is empty"):
        pipeline.remember_turns(ACME, [])
    with pytest.raises(QueryError, match=r"turns\[1\] is invalid"):
        pipeline.remember_turns(ACME, [("user", "hi"), ("user",)])
    with pytest.raises(QueryError, match="content has"):
        pipeline.remember_turns(ACME, [("user", "x" * 20_000)])
    assert store.stats(ACME)["memories"] == 0


# -- decisions, the policy and review ------------------------------------------------------------
OLD = "Alice works at Acme as a data engineer."
NEW = {
    "content": "Alice works at Globex as a data engineer.",
    "attributes": [
        {"entity": "Alice", "aspect": "employer", "value": "Globex", "claim_key": "current"}
    ],
}


def _decide(operation: str, target: str = "M1") -> str:
    return json.dumps(
        {
            "decisions": [
                {
                    "fact": 1,
                    "operation": operation,
                    "target": target,
                    "reason": "Alice changed jobs",
                }
            ]
        }
    )


def _with_old(store: MemoryStore) -> str:
    old = store.remember(
        ACME, OLD, attributes=[MemoryAttribute("Alice", "employer", "Acme", claim_key="current")]
    )
    return old.id


def _run(
    store: MemoryStore, make_pipeline: Any, replies: dict[str, list[str]], **config: Any
) -> Any:
    pipeline = make_pipeline(store, CallableProvider(scripted(replies)), **config)
    pipeline.remember_turns(ACME, [("user", "I moved from Acme to Globex.")])
    [outcome] = pipeline.run_pending()
    assert outcome.state == "done", outcome.error
    return pipeline, outcome


def test_updates_are_blocked_by_default(store: MemoryStore, make_pipeline: Any) -> None:
    old = _with_old(store)
    replies = {"extract": [facts(NEW)], "decision": [_decide("update")]}
    pipeline, outcome = _run(store, make_pipeline, replies)
    assert outcome.result == {"facts": 1, "flagged": 0, "blocked": 1}
    assert store.get(ACME, old) is not None
    assert [m.content for m in store.memories(ACME) if m.type != "episode"] == [OLD]
    [proposal] = pipeline.proposals(ACME)
    assert (proposal["operation"], proposal["status"], proposal["target_memory_id"]) == (
        "update",
        "blocked",
        old,
    )
    assert rows(store, "SELECT COUNT(*) FROM memory_audit") == [(0,)]
    with pytest.raises(QueryError, match="only shadow or review"):
        pipeline.review(ACME, proposal["id"], approve=True, actor="alice")


def test_shadow_mode_stages_updates_for_review(store: MemoryStore, make_pipeline: Any) -> None:
    old = _with_old(store)
    replies = {"extract": [facts(NEW)], "decision": [_decide("update")]}
    pipeline, outcome = _run(store, make_pipeline, replies, update_policy="shadow")
    assert outcome.result == {"facts": 1, "flagged": 0, "shadow": 1}
    [proposal] = pipeline.proposals(ACME, status="shadow")
    assert store.get(ACME, old) is not None  # only recorded so far
    decided = pipeline.review(ACME, proposal["id"], approve=True, actor="alice")
    assert decided["status"] == "approved"
    assert store.get(ACME, old) is None
    current = store.get(ACME, decided["memory_id"])
    assert current is not None
    assert current.content == NEW["content"]
    [(operation, actor, target)] = rows(
        store, "SELECT operation, actor, target_memory_id FROM memory_audit"
    )
    assert (operation, actor, target) == ("update", "review:alice", old)
    with pytest.raises(QueryError, match="is 'approved'"):
        pipeline.review(ACME, proposal["id"], approve=False, actor="alice")


def test_a_rejected_proposal_changes_nothing(store: MemoryStore, make_pipeline: Any) -> None:
    old = _with_old(store)
    replies = {"extract": [facts(NEW)], "decision": [_decide("delete")]}
    pipeline, _ = _run(store, make_pipeline, replies, update_policy="shadow")
    [proposal] = pipeline.proposals(ACME)
    assert pipeline.review(ACME, proposal["id"], approve=False, actor="bob")["status"] == "rejected"
    assert store.get(ACME, old) is not None
    assert rows(store, "SELECT COUNT(*) FROM memory_audit") == [(0,)]
    other = MemoryScope("globex", "support-bot")
    with pytest.raises(QueryError, match="no proposal"):
        pipeline.review(other, proposal["id"], approve=True, actor="bob")


@pytest.mark.parametrize(
    ("operation", "left"),
    [("update", [NEW["content"]]), ("delete", []), ("none", [OLD]), ("add", [NEW["content"], OLD])],
)
def test_applied_operations(
    store: MemoryStore, make_pipeline: Any, operation: str, left: list[str]
) -> None:
    _with_old(store)
    replies = {"extract": [facts(NEW)], "decision": [_decide(operation)]}
    _, outcome = _run(store, make_pipeline, replies, update_policy="apply")
    kept = sorted(m.content for m in store.memories(ACME) if m.type != "episode")
    assert kept == sorted(left)
    audited = rows(store, "SELECT operation FROM memory_audit")
    assert audited == ([] if operation == "none" else [(operation,)])
    assert outcome.result["facts"] == 1


def test_a_contradiction_sends_an_applied_update_to_review(
    store: MemoryStore, make_pipeline: Any
) -> None:
    old = store.remember(ACME, "The deploy pipeline is enabled for the mobile team.")
    new = {"content": "The deploy pipeline is disabled for the mobile team."}
    replies = {"extract": [facts(new)], "decision": [_decide("update")]}
    pipeline, outcome = _run(store, make_pipeline, replies, update_policy="apply")
    assert outcome.result == {"facts": 1, "flagged": 1, "review": 1}
    [proposal] = pipeline.proposals(ACME, status="review")
    assert proposal["flagged"] is True
    assert proposal["contradiction"]["method"] == "syntactic"
    assert proposal["contradiction"]["reasoning"] == "antonym pair enabled/disabled"
    assert store.get(ACME, old.id) is not None


def test_the_semantic_check_flags_and_a_low_confidence_does_not(
    store: MemoryStore, make_pipeline: Any
) -> None:
    store.remember(ACME, "The team keeps the billing database on PostgreSQL.")
    new = {"content": "The team moved the billing database to MongoDB."}
    sure = '{"contradicts": true, "confidence": 0.9, "reasoning": "different engines"}'
    unsure = '{"contradicts": true, "confidence": 0.2, "reasoning": "maybe"}'
    replies = {"extract": [facts(new)], "decision": [_decide("update")], "contradiction": [sure]}
    pipeline, outcome = _run(store, make_pipeline, replies, update_policy="apply")
    assert outcome.result == {"facts": 1, "flagged": 1, "review": 1}
    [flagged] = pipeline.proposals(ACME)
    assert flagged["contradiction"]["method"] == "semantic"
    assert flagged["contradiction"]["confidence"] == 0.9
    store.remember(ACME, "The team keeps the payroll database on PostgreSQL.")
    new2 = {"content": "The team moved the payroll database to MongoDB."}
    replies = {"extract": [facts(new2)], "decision": [_decide("update")], "contradiction": [unsure]}
    pipeline = make_pipeline(store, CallableProvider(scripted(replies)), update_policy="apply")
    pipeline.remember_turns(ACME, [("user", "payroll moved to MongoDB")])
    [outcome] = pipeline.run_pending()
    assert outcome.result == {"facts": 1, "flagged": 0, "applied": 1, "update": 1}


def test_no_semantic_call_when_updates_are_blocked_or_the_check_is_off(
    store: MemoryStore, make_pipeline: Any
) -> None:
    store.remember(ACME, "The team keeps the billing database on PostgreSQL.")
    new = {"content": "The team moved the billing database to MongoDB."}
    for n, config in enumerate(({}, {"update_policy": "apply", "semantic_contradiction": False})):
        replies = {"extract": [facts(new)], "decision": [_decide("update")]}  # no verdict reply
        pipeline = make_pipeline(store, CallableProvider(scripted(replies)), **config)
        pipeline.remember_turns(ACME, [("user", f"billing moved, take {n}")])
        [outcome] = pipeline.run_pending()
        assert outcome.state == "done", outcome.error
        assert outcome.result["flagged"] == 0


@pytest.mark.parametrize(
    ("decision", "reason"),
    [
        ('{"decisions": []}', "no decision for fact(s) [1]"),
        (_decide("update", "M9"), "needs a target among its similar memories"),
        (_decide("delete", ""), "should be non-empty"),
        ('{"decisions": [{"fact": 1, "operation": "merge"}]}', "is not one of"),
        (
            '{"decisions": [{"fact": 1, "operation": "none"}, {"fact": 1, "operation": "add"}]}',
            "is too long",
        ),
    ],
)
def test_a_bad_decision_is_rejected_and_nothing_is_applied(
    store: MemoryStore, make_pipeline: Any, decision: str, reason: str
) -> None:
    old = _with_old(store)
    replies = {"extract": [facts(NEW)], "decision": [decision]}
    pipeline = make_pipeline(store, CallableProvider(scripted(replies)), update_policy="apply")
    pipeline.remember_turns(ACME, [("user", "I moved from Acme to Globex.")])
    outcome = pipeline.run_once()
    assert outcome is not None
    assert outcome.state == "failed"
    assert reason in (outcome.error or "")
    assert store.get(ACME, old) is not None
    assert len(store.memories(ACME)) == 2  # the old fact and the turns
    assert rows(store, "SELECT outcome FROM model_calls ORDER BY id") == [("ok",), ("rejected",)]


def test_the_per_minute_budget_defers_a_job_before_its_first_call(
    store: MemoryStore, make_pipeline: Any, clock: Clock
) -> None:
    replies = {"extract": [facts(FACT), facts()]}
    pipeline = make_pipeline(store, CallableProvider(scripted(replies)), max_calls_per_minute=1)
    pipeline.remember_turns(ACME, TURNS)
    pipeline.remember_turns(ACME, [("user", "Thanks, bye.")])
    first, second = pipeline.run_once(), pipeline.run_once()
    assert first is not None
    assert second is not None
    assert (first.state, second.state) == ("done", "deferred")
    job = pipeline.job(second.job_id)
    assert job is not None
    assert (job.state, job.attempts, job.run_after) == ("pending", 0, clock.now + 60.0)
    assert pipeline.run_once() is None
    clock.now += 60.0
    third = pipeline.run_once()
    assert third is not None
    assert third.state == "done"


def test_a_job_that_made_calls_waits_for_the_budget_instead(
    store: MemoryStore, make_pipeline: Any, clock: Clock
) -> None:
    _with_old(store)
    replies = {"extract": [facts(NEW)], "decision": [_decide("add")]}
    pipeline = make_pipeline(store, CallableProvider(scripted(replies)), max_calls_per_minute=1)
    pipeline.remember_turns(ACME, [("user", "I moved from Acme to Globex.")])
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(pipeline.run_once()))
    thread.start()
    for _ in range(600):  # until the extraction call is made and the decision waits
        if rows(store, "SELECT COUNT(*) FROM model_calls") == [(1,)]:
            break
        threading.Event().wait(0.05)
    assert thread.is_alive()
    clock.now += 60.0
    thread.join(30)
    assert result[0].state == "done"
    assert rows(store, "SELECT kind FROM model_calls ORDER BY id") == [("extract",), ("decision",)]


def test_a_worker_that_lost_its_lease_applies_nothing(
    store: MemoryStore, make_pipeline: Any, clock: Clock
) -> None:
    entered, release = threading.Event(), threading.Event()
    answers = iter([facts(FACT), facts(FACT)])

    def model(request: object) -> str:
        if not entered.is_set():
            entered.set()
            release.wait(30)
        return next(answers)

    slow = make_pipeline(store, CallableProvider(model), lease_s=150.0)
    fast = make_pipeline(store, CallableProvider(model), lease_s=150.0)
    slow.remember_turns(ACME, TURNS)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(slow.run_once()))
    thread.start()
    assert entered.wait(30)
    clock.now += 151.0  # the slow worker's lease has run out
    taken = fast.run_once()
    release.set()
    thread.join(30)
    assert taken is not None
    assert taken.state == "done"
    assert result[0].state == "lost"
    assert rows(store, "SELECT COUNT(*) FROM memory_audit") == [(1,)]
    assert rows(store, "SELECT COUNT(*) FROM memory_proposals") == [(1,)]
    assert rows(store, "SELECT attempts, state FROM memory_jobs") == [(2, "done")]
