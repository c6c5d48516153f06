"""Session end: aspect feedback and decay with exact arithmetic; continuity scoring against
the loopback model servers (fences, think blocks, defaults, clamps, prefixes, failures)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from memory_helpers import ACME, DAY, Clock

from groundwire import MemoryAttribute, MemoryPipeline, MemoryStore, QueryError
from groundwire.memory.pipeline.session import parse_score


def aspects(store: MemoryStore) -> dict[str, float]:
    with store._read() as conn:
        return dict(conn.execute("SELECT name, weight FROM aspects ORDER BY name").fetchall())


def remember_claims(store: MemoryStore, *claims: tuple[str, str, str]) -> list[str]:
    """One memory per (text, aspect, value), each with an attribute of Alice's."""
    return [
        store.remember(ACME, text, attributes=[MemoryAttribute("Alice", aspect, value)]).id
        for text, aspect, value in claims
    ]


def end(pipeline: MemoryPipeline, session: str) -> dict[str, Any]:
    pipeline.end_session(ACME, session)
    [outcome] = [o for o in pipeline.run_pending() if o.kind == "session_feedback"]
    assert outcome.state == "done", outcome.error
    return dict(outcome.result or {})


def test_confirmed_aspects_gain_delta_times_confirmations(
    store: MemoryStore, make_pipeline: Any
) -> None:
    remember_claims(
        store,
        ("Alice drinks oolong tea", "drink", "oolong"),
        ("Alice drinks green tea at work", "drink", "green tea"),
        ("Alice lives in Lisbon", "home", "Lisbon"),
        ("Alice plays chess", "hobby", "chess"),
    )
    pipeline = make_pipeline(store, scoring=False, aspect_delta=0.25)
    store.recall(ACME, "which tea drinks", session_id="s1")  # both drink memories
    store.recall(ACME, "lisbon", session_id="s1")
    assert end(pipeline, "s1") == {
        "aspects_updated": 2,
        "fts_confirmations": 3,
        "decayed_aspects": 0,
        "propagated_attributes": 3,
    }
    assert aspects(store) == {"drink": 1.0 + 0.25 * 2, "home": 1.0 + 0.25 * 1, "hobby": 1.0}
    assert pipeline.status(ACME)["feedback"] == {
        "aspects_updated": 2,
        "fts_confirmations": 3,
        "decayed_aspects": 0,
        "propagated_attributes": 3,
    }


def test_a_memory_recalled_without_a_text_hit_confirms_nothing(
    store: MemoryStore, make_pipeline: Any
) -> None:
    [tea] = remember_claims(store, ("Alice drinks oolong tea", "drink", "oolong"))
    found = store.recall(ACME, "oolong", session_id="s1")
    assert found.ids == (tea,)
    with store._write() as conn:  # as if it had come by the vector channel only
        conn.execute("UPDATE session_memories SET fts_hit_count = 0")
    assert end(make_pipeline(store, scoring=False), "s1")["fts_confirmations"] == 0
    assert aspects(store) == {"drink": 1.0}


@pytest.mark.parametrize(
    ("delta", "confirm", "minimum", "maximum", "expected"),
    [
        (0.1, 3, 0.1, 2.0, 1.0 + 0.1 * 3),
        (0.4, 3, 0.1, 2.0, 2.0),  # clamped at the ceiling
        (0.0, 3, 0.1, 2.0, 1.0),
        (0.3, 1, 1.5, 3.0, 1.5),  # a weight below the floor is raised to it
    ],
)
def test_feedback_arithmetic_and_clamps(
    store: MemoryStore,
    make_pipeline: Any,
    delta: float,
    confirm: int,
    minimum: float,
    maximum: float,
    expected: float,
) -> None:
    remember_claims(
        store, *[(f"Alice owns cat number {n}", "pets", f"cat {n}") for n in range(confirm)]
    )
    pipeline = make_pipeline(
        store,
        scoring=False,
        aspect_delta=delta,
        aspect_min_weight=minimum,
        aspect_max_weight=maximum,
    )
    store.recall(ACME, "cat", session_id="s1")
    assert end(pipeline, "s1")["fts_confirmations"] == confirm
    assert aspects(store) == {"pets": expected}


def test_feedback_is_applied_once_per_session(store: MemoryStore, make_pipeline: Any) -> None:
    remember_claims(store, ("Alice drinks oolong tea", "drink", "oolong"))
    pipeline = make_pipeline(store, scoring=False)
    store.recall(ACME, "oolong tea", session_id="s1")
    end(pipeline, "s1")
    assert pipeline.end_session(ACME, "s1") == pipeline.end_session(ACME, "s1")  # same job
    assert pipeline.run_pending() == []
    with store._write() as conn:  # even a job forced to run again changes nothing twice
        conn.execute("UPDATE memory_jobs SET state = 'pending'")
    [again] = pipeline.run_pending()
    assert again.result == {"skipped": "feedback already applied"}
    assert aspects(store) == {"drink": 1.0 + 0.1}


def test_stale_aspects_decay_every_n_sessions_floored_at_the_minimum(
    store: MemoryStore, make_pipeline: Any, clock: Clock
) -> None:
    remember_claims(
        store,
        ("Alice drinks oolong tea", "drink", "oolong"),
        ("Alice lives in Lisbon", "home", "Lisbon"),
        ("Alice plays chess", "hobby", "chess"),
    )
    with store._write() as conn:  # hobby starts just above the floor
        conn.execute("UPDATE aspects SET weight = 0.15 WHERE name = 'hobby'")
    pipeline = make_pipeline(
        store,
        scoring=False,
        decay_every_sessions=3,
        stale_days=10.0,
        decay_rate=0.2,
        aspect_min_weight=0.1,
    )
    clock.now += 11 * DAY  # everything is stale now...
    decayed = []
    for n in range(1, 8):
        store.recall(ACME, "oolong tea", session_id=f"s{n}")  # ...but drink stays confirmed
        decayed.append(end(pipeline, f"s{n}")["decayed_aspects"])
        clock.now += DAY
    assert decayed == [0, 0, 2, 0, 0, 1, 0]  # sessions 3 and 6; hobby floored by then
    weights = aspects(store)
    assert weights["drink"] == pytest.approx(1.0 + 0.1 * 7)
    assert weights["drink"] == min(2.0, 1.0 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1)
    assert weights["home"] == (1.0 - 0.2) - 0.2
    assert weights["hobby"] == 0.1
    with store._read() as conn:
        counter = conn.execute(
            "SELECT value FROM pipeline_counters WHERE name = 'sessions_since_decay'"
        ).fetchone()[0]
    assert counter == 1  # seven sessions: two sweeps, one session since the last
    assert pipeline.status(ACME)["feedback"]["decayed_aspects"] == 3


def test_end_session_of_an_unknown_session_still_scores_it(
    store: MemoryStore, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(store)
    jobs = pipeline.end_session(ACME, "never-recalled")
    assert len(jobs) == 2
    outcomes = pipeline.run_pending()  # no provider: feedback runs, the score waits
    assert [(o.kind, o.state) for o in outcomes] == [("session_feedback", "done")]
    with pytest.raises(QueryError):
        pipeline.end_session(ACME, "")


# -- continuity scoring ---------------------------------------------------------------------------
def _injected(store: MemoryStore) -> list[str]:
    ids = [
        store.remember(ACME, "Alice prefers email over phone calls.").id,
        store.remember(ACME, "Alice works at Acme as a data engineer.").id,
        store.remember(ACME, "Alice's manager is Bob.").id,
    ]
    found = store.recall(ACME, "alice email acme manager")
    assert set(found.ids) == set(ids)
    store.track(ACME, "s1", found, injected=ids[:2])  # the third was recalled, not injected
    return ids


def _score_row(store: MemoryStore) -> tuple[Any, ...]:
    with store._read() as conn:
        return tuple(
            conn.execute(
                "SELECT score, confidence, memories_recalled, memories_used, novel_context_count,"
                " reasoning, continuity_reasoning FROM session_scores WHERE session_id = 's1'"
            ).fetchone()
        )


def _relevance(store: MemoryStore) -> dict[str, float | None]:
    return {r["memory_id"]: r["relevance_score"] for r in store.session_memories(ACME, "s1")}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_session_is_scored_and_relevance_written_back(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any, kind: str
) -> None:
    ids = _injected(store)
    answer = {
        "score": 0.75,
        "confidence": 0.6,
        "memories_used": 1,
        "novel_context_count": 2,
        "reasoning": "The email preference was used.",
        "continuity_reasoning": "good",
        "per_memory": [
            {"id": ids[0][:8], "relevance": 0.9},
            {"id": ids[1][:8], "relevance": -1},
            {"id": "deadbeef", "relevance": 0.5},
            {"id": ids[2][:8], "relevance": 1},
        ],
    }
    endpoint = getattr(fake, kind)
    endpoint.enqueue_text("<think>\nlet me look\n</think>\n```json\n" + json.dumps(answer) + "```")
    pipeline = make_pipeline(store, provider_for(kind))
    pipeline.end_session(ACME, "s1", transcript="user: email me the report\nassistant: sent")
    outcomes = {o.kind: o for o in pipeline.run_pending()}
    assert outcomes["continuity_score"].state == "done"
    assert outcomes["continuity_score"].result == {
        "score": 0.75,
        "confidence": 0.6,
        "memories_recalled": 2,
        "relevance": 2,
        "unresolved": ["deadbeef", ids[2][:8]],  # not injected: not resolvable
    }
    assert _score_row(store) == (0.75, 0.6, 2, 1, 2, "The email preference was used.", "good")
    assert _relevance(store) == {ids[0]: 0.9, ids[1]: 0.0, ids[2]: None}
    sent = json.dumps(endpoint.requests[0].json)
    assert f"[{ids[0][:8]}] Alice prefers email" in sent
    assert ids[2][:8] not in sent  # recalled but not injected
    assert "email me the report" in sent


PARSED = [
    # (answer, score, confidence, used, novel, reasoning)
    ('{"score": 0.5}', 0.5, 0.0, 0, 0, ""),
    (
        '{"score": 3, "confidence": -2, "memories_used": 99, "novel_context_count": -1}',
        1.0,
        0.0,
        2,
        0,
        "",
    ),
    (
        'Sure. {"score": 0.4, "reasoning": 7, "confidence": "high"} Hope it helps.',
        0.4,
        0.0,
        0,
        0,
        "",
    ),
    (
        '```\n{"score": 0, "memories_used": 1.9, "reasoning": "none used"}\n```',
        0.0,
        0.0,
        1,
        0,
        "none used",
    ),
]


@pytest.mark.parametrize(("answer", "score", "confidence", "used", "novel", "why"), PARSED)
def test_defaults_and_clamps(
    answer: str, score: float, confidence: float, used: int, novel: int, why: str
) -> None:
    parsed = parse_score(answer, ["a" * 32, "b" * 32])
    assert (parsed.score, parsed.confidence, parsed.memories_used) == (score, confidence, used)
    assert (parsed.novel_context_count, parsed.reasoning, parsed.memories_recalled) == (
        novel,
        why,
        2,
    )


def test_prefixes_resolve_to_injected_ids_only_when_unambiguous() -> None:
    a, b, c = "12345678" + "a" * 24, "12345678" + "b" * 24, "87654321" + "c" * 24
    answer = {
        "score": 1,
        "per_memory": [
            {"id": "12345678", "relevance": 0.1},
            {"id": "12345678b", "relevance": 0.2},
            {"id": "[MEM:87654321]", "relevance": 0.3},
            {"id": "8765", "relevance": 0.4},
            {"id": 5, "relevance": 0.5},
            "junk",
            {"id": c[:8], "relevance": "high"},
        ],
    }
    parsed = parse_score(json.dumps(answer), [a, b, c])
    assert parsed.relevance == {b: 0.2, c: 0.3}
    assert parsed.unresolved == ("12345678", "8765", "5", c[:8])


@pytest.mark.parametrize(
    "answer", ["no json here", '{"confidence": 1}', '{"score": "high"}', "<think>{...}"]
)
def test_an_answer_without_a_score_is_rejected(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any, answer: str
) -> None:
    _injected(store)
    fake.openai.enqueue_text(answer)
    pipeline = make_pipeline(store, provider_for("openai"), feedback=False)
    pipeline.end_session(ACME, "s1", transcript="user: hi")
    outcome = pipeline.run_once()
    assert outcome is not None
    assert outcome.state == "failed"
    with store._read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM session_scores").fetchone()[0] == 0
        assert conn.execute("SELECT outcome FROM model_calls").fetchall() == [("rejected",)]


def test_scoring_failures_are_retried(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    _injected(store)
    gate = threading.Event()
    fake.anthropic.enqueue_error(500, "boom", times=2)
    fake.anthropic.enqueue_empty()
    fake.anthropic.enqueue_text('{"score": 1}', wait=gate)
    fake.anthropic.enqueue_text('{"score": 0.25}')
    pipeline = make_pipeline(
        store, provider_for("anthropic"), feedback=False, scoring_timeout_s=5.0
    )
    pipeline.end_session(ACME, "s1", transcript="user: hi")
    states = [pipeline.run_once() for _ in range(4)]
    gate.set()
    assert [(o.state, (o.error or "")[:16]) for o in states if o is not None] == [
        ("failed", "CallError: anthr"),
        ("failed", "CallError: conti"),
        ("failed", "CallTimeoutError"),
        ("done", ""),
    ]
    assert _score_row(store)[0] == 0.25


def test_a_session_without_injected_memories_gets_a_valid_row(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(store, provider_for("openai"), feedback=False, extraction=False)
    pipeline.end_session(ACME, "s1")  # nothing recalled, no transcript: no model call
    [outcome] = pipeline.run_pending()
    assert outcome.state == "done"
    assert _score_row(store) == (
        0.0,
        0.0,
        0,
        0,
        0,
        "no memory was injected and there is no transcript",
        "",
    )
    assert fake.openai.request_count == 0
    fake.openai.enqueue_text('{"score": 0.1, "novel_context_count": 3, "per_memory": []}')
    pipeline.remember_turns(ACME, [("user", "I told you my name twice")], session_id="s2")
    pipeline.end_session(ACME, "s2")  # a transcript from the remembered turns
    done = {o.kind: o for o in pipeline.run_pending()}
    assert done["continuity_score"].state == "done"
    assert "I told you my name twice" in json.dumps(fake.openai.requests[0].json)
    assert "(none)" in json.dumps(fake.openai.requests[0].json)
