"""The summary card at recall: validated citations, fail-open reasons, the prompt block."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from memory_helpers import ACME

from groundwire import MemoryStore, render_memory_block
from groundwire.memory.pipeline.summary import check_card


def _memories(store: MemoryStore) -> list[str]:
    return [
        store.remember(ACME, "Alice prefers email over phone calls.").id,
        store.remember(ACME, "Alice works at Acme as a data engineer.").id,
    ]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_valid_card_is_prepended_to_the_block(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any, kind: str
) -> None:
    email, work = _memories(store)
    endpoint = getattr(fake, kind)
    endpoint.enqueue_text(
        f"<think>two facts</think>Alice is a data engineer at Acme [MEM:{work}] who wants "
        f"email, not calls [MEM:{email}]."
    )
    pipeline = make_pipeline(store, provider_for(kind))
    result = pipeline.recall(ACME, "how should I contact alice at acme", session_id="s1")
    card = result.card
    assert card.failure_reason is None
    assert card.text == (
        f"Alice is a data engineer at Acme [MEM:{work}] who wants email, not calls [MEM:{email}]."
    )
    assert card.cited_ids == (work, email)
    assert result.recall.tracked  # the recall itself went on as usual
    sent = str(endpoint.requests[0].json)
    assert f"[MEM:{email}] Alice prefers email" in sent
    block = render_memory_block(result.recall, summary=card.text, summary_ids=card.cited_ids)
    assert block is not None
    assert block.summary == card.text
    assert block.content.index("<memory_summary>") < block.content.index("<recalled_memories>")


CARDS = [
    ("Alice likes email.", "no-citation"),
    ("Alice likes email [MEM:0123456789abcdef0123456789abcdef].", "invalid-citation"),
    ("   ", "empty"),
    ("<think>only thinking</think>", "empty"),
    ("Alice likes email [MEM:{email}]. " + "More. " * 200, "too-long"),
]


@pytest.mark.parametrize(("text", "reason"), CARDS)
def test_an_invalid_card_is_dropped_with_its_reason(
    store: MemoryStore, text: str, reason: str
) -> None:
    email, work = _memories(store)
    card = check_card(text.format(email=email), [email, work], 800)
    assert (card.text, card.failure_reason) == (None, reason)


def test_the_card_fails_open(
    store: MemoryStore, fake: Any, provider_for: Any, make_pipeline: Any
) -> None:
    _memories(store)
    gate = threading.Event()
    fake.openai.enqueue_error(500, "boom", times=2)
    fake.openai.enqueue_text("late", wait=gate)
    fake.openai.enqueue_text("no citation here")
    pipeline = make_pipeline(store, provider_for("openai"), summary_timeout_s=1.0)
    reasons = []
    for _ in range(3):
        result = pipeline.recall(ACME, "alice email")
        assert len(result.recall.memories) == 2
        reasons.append((result.card.failure_reason, (result.card.detail or "")[:27]))
    gate.set()
    assert reasons == [
        ("failed", "openai (gpt-test): HTTP 500"),
        ("failed", "the model call took longer "),
        ("no-citation", ""),
    ]
    assert pipeline.recall(ACME, "alice email", summary=False).card.failure_reason == "disabled"
    assert pipeline.recall(ACME, "zebra").card.failure_reason == "no-memories"
    no_model = make_pipeline(store)
    assert no_model.recall(ACME, "alice email").card.detail == "no provider configured"


def test_a_card_citing_a_memory_left_out_of_the_block_is_left_out(store: MemoryStore) -> None:
    email, _ = _memories(store)
    found = store.recall(ACME, "alice email acme")
    block = render_memory_block(found, summary="Alice [MEM:x].", summary_ids=("x",))
    assert block is not None
    assert block.summary is None
    assert "<memory_summary>" not in block.content
    tight = render_memory_block(found, max_tokens=120, summary="S " * 400, summary_ids=(email,))
    assert tight is not None
    assert tight.summary is None  # the memories fit, the card did not
