"""Prospective hints: the residue filter, table-driven; the prospective_index job against the
loopback model servers (stored and searchable, fences and think blocks, 5xx, empty
answers, timeouts, forgotten memories, the per-memory call budget)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_helpers import ACME

from groundwire import MemoryStore
from groundwire.memory.pipeline.hints import clean_hints

RESIDUE = [
    # (reply, kept)
    (
        "Where does Alice work?\nWho employs Alice?",
        ["Where does Alice work?", "Who employs Alice?"],
    ),
    (
        "Here are some questions:\n1. Where does Alice work?\n2) Who is Alice's employer?",
        ["Where does Alice work?", "Who is Alice's employer?"],
    ),
    (
        "Sure! Here are 3 hints.\n- What is Alice's job?\n* Where is Acme?\n• Who is Alice?",
        ["What is Alice's job?", "Where is Acme?", "Who is Alice?"],
    ),
    (
        "\"Where does Alice work?\"\n“Who employs Alice?”\n'Is Alice an engineer?'",
        ["Where does Alice work?", "Who employs Alice?", "Is Alice an engineer?"],
    ),
    (
        "Where does Alice work?\nwhere does alice   work\nWHERE DOES ALICE WORK?",
        ["Where does Alice work?"],
    ),
    (
        "Q1: What does Alice do?\nQ2. Where does Alice work?",
        ["What does Alice do?", "Where does Alice work?"],
    ),
    (
        '["Where does Alice work?", "Who employs Alice?"]',
        ["Where does Alice work?", "Who employs Alice?"],
    ),
    ('{"hints": ["Where does Alice work?"]}', ["Where does Alice work?"]),
    (
        '```\n"Where does Alice work?",\n"Who employs Alice?",\n```',
        ["Where does Alice work?", "Who employs Alice?"],
    ),
    (
        "<think>the user may ask about work</think>\nWhere does Alice work?",
        ["Where does Alice work?"],
    ),
    ("Possible questions:\n\n   \n?\n1.\nWhere does Alice work?", ["Where does Alice work?"]),
    ("What " + "very " * 60 + "long question?\nShort one?", ["Short one?"]),
    (
        "\n".join(f"Question number {n}?" for n in range(1, 9)),
        [f"Question number {n}?" for n in range(1, 6)],
    ),
    ("", []),
]


@pytest.mark.parametrize(("reply", "kept"), RESIDUE)
def test_the_residue_filter(reply: str, kept: list[str]) -> None:
    assert clean_hints(reply, 5, 200) == kept


@settings(max_examples=200, deadline=None)
@given(
    st.text(st.characters(codec="utf-8"), max_size=400),
    st.integers(1, 20),
    st.integers(1, 300),
)
def test_the_filter_never_fails_and_keeps_its_bounds(reply: str, limit: int, most: int) -> None:
    kept = clean_hints(reply, limit, most)
    assert len(kept) <= limit
    assert all(0 < len(h) <= most and h == h.strip() and "\n" not in h for h in kept)
    keys = [" ".join(h.casefold().rstrip("?").split()) for h in kept]
    assert len(set(keys)) == len(keys)


def test_the_limit_and_the_length_bound_are_parameters() -> None:
    reply = "Where does Alice work?\nWho employs Alice?\nIs Alice an engineer?"
    assert clean_hints(reply, 1, 200) == ["Where does Alice work?"]
    assert clean_hints(reply, 5, 20) == ["Who employs Alice?"]


def _hint_rows(store: MemoryStore, memory_id: str) -> list[str]:
    details = store.details(ACME, memory_id)
    assert details is not None
    return list(details["hints"])


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_hints_job_stores_searchable_hints(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any, kind: str
) -> None:
    endpoint = getattr(fake, kind)
    pipeline = make_pipeline(store, provider_for(kind), hints=True, hints_max=3)
    memory = pipeline.remember(ACME, "Alice pays for Spotify Premium every month.")
    endpoint.enqueue_text(
        "<think>music</think>\n```text\nHere are 3 questions:\n1. Which music streaming "
        "service does Alice use?\n2. What subscriptions does Alice pay for?\n3. Does Alice "
        "listen to music?\n4. Is there a fourth?\n```"
    )
    [outcome] = pipeline.run_pending()
    assert (outcome.kind, outcome.state) == ("prospective_index", "done")
    assert outcome.result == {"hints": 3, "new": 3}
    assert _hint_rows(store, memory.id) == [
        "Which music streaming service does Alice use?",
        "What subscriptions does Alice pay for?",
        "Does Alice listen to music?",
    ]
    found = store.recall(ACME, "music streaming service")
    assert found.ids == (memory.id,)
    assert "hint" in found.memories[0].channels
    sent = endpoint.requests[0].json
    assert "Spotify Premium" in str(sent)
    assert "up to 3" in str(sent)
    assert pipeline.run_pending() == []  # nothing left; the job ran once


def test_hints_are_off_by_default_and_never_for_episodes(
    store: MemoryStore, make_pipeline: Any
) -> None:
    off = make_pipeline(store)
    off.remember(ACME, "Alice likes tea.")
    on = make_pipeline(store, hints=True)
    on.remember(ACME, "user: hello", type="episode")
    assert store.stats(ACME)["jobs"] == {}


def test_bad_answers_fail_the_attempt_and_are_recorded(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(store, provider_for("openai"), hints=True)
    memory = pipeline.remember(ACME, "Alice pays for Spotify Premium every month.")
    fake.openai.enqueue_empty()
    fake.openai.enqueue_text("Here are some questions:\n")
    fake.openai.enqueue_error(500, "boom", times=2)
    fake.openai.enqueue_text("What does Alice pay for?")
    states = [o.state for o in (pipeline.run_once() for _ in range(4)) if o is not None]
    assert states == ["failed", "failed", "failed", "done"]
    assert _hint_rows(store, memory.id) == ["What does Alice pay for?"]
    with store._read() as conn:
        calls = conn.execute(
            "SELECT outcome, error, output FROM model_calls ORDER BY id"
        ).fetchall()
        job = conn.execute("SELECT attempts, state FROM memory_jobs").fetchone()
    assert [c[0] for c in calls] == ["empty", "rejected", "error", "ok"]
    assert calls[1][1] == "no usable hint in the answer"
    assert calls[1][2] == "Here are some questions:\n"
    assert job == (4, "done")


def test_a_timeout_fails_the_attempt(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(store, provider_for("anthropic"), hints=True, hints_timeout_s=5.0)
    pipeline.remember(ACME, "Alice pays for Spotify Premium every month.")
    gate = threading.Event()
    fake.anthropic.enqueue_text("Too late?", wait=gate)
    outcome = pipeline.run_once()
    gate.set()
    assert outcome is not None
    assert outcome.state == "failed"
    assert outcome.error == "CallTimeoutError: the model call took longer than 5 s"


def test_a_forgotten_memory_gets_no_hints_and_no_call(
    store: MemoryStore, make_pipeline: Any, fake: Any, provider_for: Any
) -> None:
    pipeline = make_pipeline(store, provider_for("openai"), hints=True)
    memory = pipeline.remember(ACME, "Alice pays for Spotify Premium every month.")
    store.forget(ACME, memory.id)
    [outcome] = pipeline.run_pending()
    assert (outcome.state, outcome.result) == ("done", {"skipped": "the memory was forgotten"})
    assert fake.openai.request_count == 0


def test_the_per_memory_budget_ends_the_job(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(store, provider_for("openai"), hints=True, max_calls_per_memory=2)
    pipeline.remember(ACME, "Alice pays for Spotify Premium every month.")
    fake.openai.enqueue_empty(times=2)
    outcomes = pipeline.run_pending()
    assert [o.state for o in outcomes] == ["failed", "failed", "dead"]
    assert outcomes[-1].error is not None
    assert "max_calls_per_memory" in outcomes[-1].error
    assert fake.openai.request_count == 2
