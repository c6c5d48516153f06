"""Shaping internals that recall's speed rests on: each must give the plain answer."""

from __future__ import annotations

import math
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from memory_helpers import ACME, Clock

from groundwire import MemoryRecallConfig
from groundwire.memory import MemoryStore
from groundwire.memory.shaping import Candidate, _NearDuplicates, apply_facets, shown


def near_by_every_pair(terms: frozenset[str], kept: list[frozenset[str]], t: float) -> bool:
    """The reference: Jaccard similarity against every kept set (sizes ruling out first)."""
    for other in kept:
        small, large = sorted((len(terms), len(other)))
        if not large or small < t * large:
            continue
        common = len(terms & other)
        if common >= t * (len(terms) + len(other) - common):
            return True
    return False


TERM_SETS = st.lists(st.frozensets(st.sampled_from("abcdefghijkl"), max_size=10), max_size=14)


@given(TERM_SETS, st.one_of(st.sampled_from([0.0, 0.5, 0.8, 1.0]), st.floats(0.0, 1.0)))
@settings(max_examples=300, deadline=None)
def test_prefix_filtered_near_duplicates_match_comparing_every_pair(
    sets: list[frozenset[str]], t: float
) -> None:
    kept: list[frozenset[str]] = []
    index = _NearDuplicates(t)
    for terms in sets:
        expected = near_by_every_pair(terms, kept, t)
        assert index.near(terms) == expected
        if not expected:
            kept.append(terms)
            index.add(terms)


def facet_factors_by_every_pair(
    sets: list[frozenset[str]], facets: list[frozenset[str]], cfg: MemoryRecallConfig
) -> list[float]:
    """The reference facet stage: each candidate compared with every better one kept."""
    kept: list[frozenset[str]] = []
    covered: set[int] = set()
    factors = []
    for terms in sets[: cfg.facet_window]:
        factor = 1.0
        if near_by_every_pair(terms, kept, cfg.near_duplicate_jaccard):
            factor *= cfg.near_duplicate_penalty
        else:
            kept.append(terms)
        if len(facets) >= 2:
            new = {i for i, facet in enumerate(facets) if facet & terms} - covered
            if new and factor == 1.0:
                factor *= 1.0 + cfg.facet_bonus
                covered |= new
        factors.append(factor)
    return factors


@given(
    st.lists(st.frozensets(st.sampled_from("abcdefghij"), max_size=8), max_size=16),
    st.lists(st.frozensets(st.sampled_from("abcdefghij"), min_size=1, max_size=3), max_size=3),
    st.one_of(st.sampled_from([0.0, 0.5, 0.8, 1.0]), st.floats(0.0, 1.0)),
    st.integers(1, 16),
)
@settings(max_examples=300, deadline=None)
def test_facet_stage_matches_comparing_every_pair(
    sets: list[frozenset[str]], facets: list[frozenset[str]], t: float, window: int
) -> None:
    """Candidates whose terms are too little shared to be near anything skip the
    comparisons: the factors are still those of comparing every pair."""
    cfg = MemoryRecallConfig(near_duplicate_jaccard=t, facet_window=window)
    ranked = [
        Candidate(f"m{i}", "", " ".join(sorted(terms)), "fact", 0.5, False, 0.0, 0.0, score=1.0)
        for i, terms in enumerate(sets)
    ]
    apply_facets(ranked, facets, cfg)
    expected = facet_factors_by_every_pair(sets, facets, cfg)
    assert [c.stages.get("facets", 1.0) for c in ranked[:window]] == expected
    assert all("facets" not in c.stages for c in ranked[window:])


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


@given(st.floats(allow_nan=False))
@settings(max_examples=2_000, deadline=None)
def test_shown_is_round_to_six_decimals_bit_for_bit(value: float) -> None:
    assert bits(shown(value)) == bits(round(value, 6))


@given(st.integers(0, 10**9), st.integers(-4, 4))
@settings(max_examples=2_000, deadline=None)
def test_shown_near_a_half_is_round_to_six_decimals(units: int, steps: int) -> None:
    """Values next to k + 0.5 millionths, where the scaled value's rounding could decide."""
    value = (units + 0.5) / 1e6
    for _ in range(abs(steps)):
        value = math.nextafter(value, math.copysign(math.inf, steps))
    assert bits(shown(value)) == bits(round(value, 6))


def test_shown_keeps_signed_zeros_and_special_values() -> None:
    for value in (0.0, -0.0, -4.8e-7, 4.8e-7, 5e-7, math.inf, -math.inf, 1e300, 0.15, 1.2):
        assert bits(shown(value)) == bits(round(value, 6))
    assert math.isnan(shown(math.nan))


def test_candidate_terms_are_split_once_and_checked_without_the_set() -> None:
    candidate = Candidate("m", "content", "march plan  budget", "fact", 0.5, False, 0.0, 0.0)
    assert candidate.mentions_any(frozenset({"march"}))  # from the text, no set built
    assert not candidate.mentions_any(frozenset({"marc", "plans"}))
    assert candidate.terms == frozenset({"march", "plan", "budget"})
    assert candidate.terms is candidate.terms
    assert candidate.mentions_any(frozenset({"budget"}))  # from the set, once built


def test_recalled_memories_are_the_stored_rows_as_read(store: MemoryStore, clock: Clock) -> None:
    """Recall ranks on a few columns and completes the returned rows: each must equal the
    stored memory as the recall read it (before its own access count)."""
    store.remember(
        ACME,
        "The deploy freeze starts on 2025-12-20 for the payments team.",
        type="constraint",
        importance=0.9,
        pinned=True,
        sources=["turn-1", "turn-2"],
        metadata={"speaker": "Ana", "session": 3},
    )
    store.remember(ACME, "Payments deploys need two reviewers.", sources=["turn-3"])
    store.remember(ACME, "The payments team owns the ledger.", acl=["group:payments"])
    store.add_hints(ACME, store.memories(ACME)[0].id, ["when can payments deploy?"])
    scope = ACME.__class__(ACME.tenant, ACME.agent, groups=("payments",))
    before = {m.id: m for m in store.memories(scope)}
    clock.now += 60.0
    result = store.recall(scope, "payments deploy team")
    assert len(result.memories) == 3
    for item in result.memories:
        assert item.memory == before[item.id]
    after = store.recall(scope, "payments deploy team", touch=False)
    for item in after.memories:
        assert item.memory.access_count == before[item.id].access_count + 1
        assert item.memory.accessed_at == clock.now
