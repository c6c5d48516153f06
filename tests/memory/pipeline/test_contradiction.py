"""Contradiction detection: the syntactic rules, table-driven; the semantic path against the
loopback model servers (verdicts, timeouts, unparsable answers, the gate)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from groundwire import CallableProvider, MemoryPipelineConfig, MemoryStore
from groundwire.memory.pipeline.calls import ModelCaller, PipelineError, Reply
from groundwire.memory.pipeline.contradiction import check, content_tokens, syntactic_contradiction

SYNTACTIC = [
    # (new, old, contradicts, shared tokens)
    ("The deploy pipeline is enabled", "The deploy pipeline is disabled", True, 2),
    (
        "Guests allow uploads to the shared drive",
        "Guests deny uploads to the shared drive",
        True,
        4,
    ),
    ("Alice does not like spicy food", "Alice likes spicy food", True, 3),
    ("Alice doesn't drink coffee at work", "Alice drinks coffee at work", True, 3),
    ("Alice never drinks coffee", "Alice always drinks coffee", True, 3),
    ("Bob can't access billing reports", "Bob can access billing reports", True, 4),
    ("The staging server is online", "The staging server is offline", True, 2),
    # negated on both sides: same polarity, no antonym
    ("Alice does not like spicy food", "Alice doesn't like spicy food", False, 3),
    # under two shared tokens: never compared, whatever the polarity
    ("Dark mode is enabled", "Notifications are disabled", False, 0),
    ("Alice is not here", "Alice is here", False, 1),
    # overlap without any polarity difference
    ("Alice works at Acme", "Alice works at Globex", False, 2),
    # an antonym pair present on both sides is no difference
    (
        "SSO enabled and MFA disabled for admins",
        "SSO disabled and MFA enabled for admins",
        False,
        3,
    ),
    # case, curly apostrophes and punctuation do not matter
    ("ALICE DOESN’T LIKE TEA.", "alice likes tea!", True, 2),
]


@pytest.mark.parametrize(("new", "old", "contradicts", "shared"), SYNTACTIC)
def test_syntactic_rules(new: str, old: str, contradicts: bool, shared: int) -> None:
    found, overlap, why = syntactic_contradiction(new, old)
    assert (found, overlap) == (contradicts, shared), why
    assert syntactic_contradiction(old, new)[:2] == (found, overlap)  # symmetric


def test_content_tokens_leave_out_stop_and_polarity_words() -> None:
    assert content_tokens("Alice doesn't like the new enabled flags") == {"alice", "new", "flags"}


class _Asked:
    """Records semantic calls and answers with a scripted reply."""

    def __init__(self, answer: str | PipelineError) -> None:
        self.answer, self.calls, self.rejected = answer, 0, []

    def ask(self, system: str, prompt: str) -> Reply:
        self.calls += 1
        if isinstance(self.answer, PipelineError):
            raise self.answer
        return Reply(self.answer, 0)

    def reject(self, reply: Reply, reason: str) -> Exception:
        self.rejected.append(reason)
        return ValueError(reason)


NEW = "The team migrated the billing database to MongoDB last month"
OLD = "The team keeps the billing database on PostgreSQL"


def test_the_slow_path_runs_only_past_three_shared_tokens_and_when_enabled() -> None:
    verdict_json = '{"contradicts": true, "confidence": 0.9, "reasoning": "moved"}'
    asked = _Asked(verdict_json)
    verdict = check(NEW, OLD, semantic=True, ask=asked.ask, reject=asked.reject)
    assert (verdict.method, verdict.contradicts, verdict.confidence) == ("semantic", True, 0.9)
    assert verdict.overlap == 3  # team, billing, database
    off = _Asked(verdict_json)
    assert not check(NEW, OLD, semantic=False, ask=off.ask, reject=off.reject).contradicts
    few = _Asked(verdict_json)
    assert not check(
        "billing moved", "billing database", semantic=True, ask=few.ask, reject=few.reject
    ).contradicts
    syntactic = _Asked(verdict_json)
    found = check(
        "billing database is enabled",
        "billing database is disabled",
        semantic=True,
        ask=syntactic.ask,
        reject=syntactic.reject,
    )
    assert (found.method, found.contradicts) == ("syntactic", True)
    assert (off.calls, few.calls, syntactic.calls) == (0, 0, 0)


@pytest.mark.parametrize(
    "answer",
    ["the two statements conflict", '{"contradicts": "yes"}', '["contradicts"]', '{"x": 1}'],
)
def test_an_unparsable_verdict_means_no_contradiction(answer: str) -> None:
    asked = _Asked(answer)
    verdict = check(NEW, OLD, semantic=True, ask=asked.ask, reject=asked.reject)
    assert not verdict.contradicts
    assert verdict.error is not None
    assert verdict.error.startswith("unparsable")
    assert len(asked.rejected) == 1


def test_confidence_is_clamped_and_fences_and_think_blocks_are_stripped() -> None:
    answer = '<think>compare</think>\n```json\n{"contradicts": true, "confidence": 7}\n```'
    asked = _Asked(answer)
    verdict = check(NEW, OLD, semantic=True, ask=asked.ask, reject=asked.reject)
    assert (verdict.contradicts, verdict.confidence, verdict.reasoning) == (True, 1.0, "")


def _caller(store: MemoryStore, provider: Any, timeout_s: float = 5.0) -> Any:
    config = MemoryPipelineConfig(contradiction_timeout_s=timeout_s)
    caller = ModelCaller(store, provider, config, "w", threading.Event())

    def ask(system: str, prompt: str) -> Reply:
        return caller.ask(
            "contradiction",
            system=system,
            prompt=prompt,
            timeout_s=timeout_s,
            job=None,
            tenant="acme",
            agent="bot",
        )

    return ask, caller.reject


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_semantic_verdicts_over_the_wire(
    store: MemoryStore, fake: Any, provider_for: Any, kind: str
) -> None:
    endpoint = getattr(fake, kind)
    endpoint.enqueue_text('{"contradicts": true, "confidence": 0.8, "reasoning": "moved"}')
    endpoint.enqueue_error(503, "overloaded", times=2)  # both attempts of the provider fail
    endpoint.enqueue_empty()
    endpoint.enqueue_text("```\nnot json at all\n```")
    ask, reject = _caller(store, provider_for(kind))
    found = check(NEW, OLD, semantic=True, ask=ask, reject=reject)
    assert (found.contradicts, found.confidence, found.reasoning) == (True, 0.8, "moved")
    sent = endpoint.requests[0].json
    assert NEW in str(sent)
    assert OLD in str(sent)
    for expected in ("CallError", "CallError", "unparsable"):
        verdict = check(NEW, OLD, semantic=True, ask=ask, reject=reject)
        assert not verdict.contradicts
        assert verdict.error is not None
        assert expected in verdict.error
    with store._read() as conn:
        outcomes = [r[0] for r in conn.execute("SELECT outcome FROM model_calls ORDER BY id")]
    assert outcomes == ["ok", "error", "empty", "rejected"]


def test_a_semantic_timeout_means_no_contradiction(
    store: MemoryStore, fake: Any, provider_for: Any
) -> None:
    gate = threading.Event()
    fake.openai.enqueue_text('{"contradicts": true, "confidence": 1}', wait=gate)
    ask, reject = _caller(store, provider_for("openai"), timeout_s=5.0)
    verdict = check(NEW, OLD, semantic=True, ask=ask, reject=reject)
    gate.set()
    assert not verdict.contradicts
    assert verdict.error is not None
    assert "CallTimeoutError" in verdict.error
    with store._read() as conn:
        assert conn.execute("SELECT outcome FROM model_calls").fetchall() == [("timeout",)]


def test_a_callable_provider_that_raises_is_no_contradiction(store: MemoryStore) -> None:
    def broken(request: object) -> str:
        raise RuntimeError("model crashed")

    ask, reject = _caller(store, CallableProvider(broken))
    verdict = check(NEW, OLD, semantic=True, ask=ask, reject=reject)
    assert not verdict.contradicts
    assert verdict.error is not None
    assert "model crashed" in verdict.error
