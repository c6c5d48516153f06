"""The recalled-memory block: quoted, labelled, cited, within its token budget."""

from __future__ import annotations

import json

import pytest
from memory_helpers import ACME

from groundwire import ConfigError, MemoryAttribute, MemoryStore, render_memory_block


def test_block_quotes_each_memory_with_its_tag_and_note(store: MemoryStore) -> None:
    def claim(value: str) -> list[MemoryAttribute]:
        return [MemoryAttribute("Bob", "team", value, claim_key="c")]

    old = store.remember(ACME, 'Bob is on the "payments" team.', attributes=claim("payments"))
    store.remember(ACME, "Bob is on the search team.", attributes=claim("search"))
    block = render_memory_block(store.recall(ACME, "bob team"))
    assert block is not None
    assert block.kind == "memory"
    assert block.trusted is False
    lines = block.content.splitlines()
    assert lines[1] == "<recalled_memories>"
    assert lines[-1] == "</recalled_memories>"
    items = [json.loads(line) for line in lines[2:-1]]
    assert [i["cite"] for i in items] == [f"[MEM:{mid}]" for mid in block.memory_ids]
    stale = next(i for i in items if i["cite"] == old.tag)
    assert stale["text"] == 'Bob is on the "payments" team.'
    assert "search" in stale["note"]


def test_block_budget_and_nothing_to_show(store: MemoryStore) -> None:
    store.remember(ACME, "Carol " + "x" * 4000)
    recall = store.recall(ACME, "carol")
    assert render_memory_block(recall, max_tokens=50) is None
    assert render_memory_block(store.recall(ACME, "nothing matches this")) is None
    with pytest.raises(ConfigError, match="max_tokens"):
        render_memory_block(recall, max_tokens=0)
