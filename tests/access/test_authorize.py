"""The one fail-closed evaluation of host callbacks (access/authorize.py), and every caller.

Issue 9, defect 1: ``kb.search(q, allow=pred)`` checked truthiness, so an ``async def``
predicate (a coroutine object is truthy) or one returning ``"no"`` let every entry
through, and so did the ``search_knowledge_base`` tool. Each test named
``test_defect1_*`` fails on the code before the fix.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import groundwire as gw
from groundwire.access.authorize import authorize_items, authorize_mask, check_callback

HANDBOOK_QUERY = "rotate an api key"


HANDBOOK = Path(__file__).resolve().parents[2] / "examples" / "handbook"


@pytest.fixture(scope="module")
def handbook() -> gw.KnowledgeBase:
    return gw.KnowledgeBase.from_sources(gw.load_sources(HANDBOOK))


# -- the call site: only synchronous callables --------------------------------------------------
async def _async_allow(entry: object) -> bool:
    return False


class _AsyncCall:
    async def __call__(self, entry: object) -> bool:
        return False


@pytest.mark.parametrize(
    "fn",
    [_async_allow, _AsyncCall(), functools.partial(_async_allow)],
    ids=["async-def", "async-call", "partial-of-async"],
)
def test_an_async_callback_is_refused_at_the_call_site(fn: Any) -> None:
    with pytest.raises(gw.ConfigError, match=r"is an async function.*synchronous"):
        check_callback(fn, "allow")


def test_a_non_callable_is_refused() -> None:
    with pytest.raises(gw.ConfigError, match="expected a callable returning True or False"):
        check_callback("yes", "allow")
    check_callback(None, "allow")  # no callback is fine
    check_callback(lambda e: True, "allow")


# -- per item: only True allows ------------------------------------------------------------------
class BoomError(Exception):
    pass


def _verdicts(values: list[Any]) -> tuple[list[bool], tuple[str, ...]]:
    def decide(n: int) -> Any:
        value = values[n]
        if isinstance(value, Exception):
            raise value
        return value() if callable(value) else value

    result = authorize_items(list(range(len(values))), decide, option="allow", noun="entry")
    return result.allowed.tolist(), result.errors


def test_only_true_allows_and_every_other_answer_is_a_failure() -> None:
    async def coro() -> bool:
        return True

    allowed, errors = _verdicts(
        [True, False, "no", 1, None, np.bool_(True), BoomError("secret-id-7"), coro]
    )
    assert allowed == [True, False, False, False, False, False, False, False]
    assert errors == (
        "allow returned str, not True or False for 1 entry; denied",
        "allow returned int, not True or False for 1 entry; denied",
        "allow returned NoneType, not True or False for 1 entry; denied",
        "allow returned numpy.bool, not True or False for 1 entry; denied",
        "allow raised BoomError for 1 entry; denied",
        "allow returned an awaitable (is it an async function?) for 1 entry; denied",
    )


def test_failures_are_counted_by_kind_and_never_name_the_item(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="groundwire.access"):
        result = authorize_items(
            ["alpha-secret", "beta-secret", "gamma-secret"],
            lambda item: item.upper(),
            option="authorize",
            noun="source",
            describe=repr,
        )
    assert result.denied == 3
    assert result.errors == ("authorize returned str, not True or False for 3 sources; denied",)
    assert "'alpha-secret'" in caplog.text  # the operator's log has the item


def test_a_returned_coroutine_is_closed_not_left_unawaited() -> None:
    async def later() -> bool:
        return True

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would be an error
        allowed, _ = _verdicts([lambda: later()])
    assert allowed == [False]


def test_no_items_means_no_calls() -> None:
    result = authorize_items([], lambda item: True, option="allow", noun="entry")
    assert (result.allowed.tolist(), result.denied, result.errors) == ([], 0, ())


def test_authorize_mask_asks_only_about_candidates() -> None:
    asked: list[int] = []

    def decide(n: int) -> bool:
        asked.append(n)
        return n % 2 == 0

    mask = np.array([True, True, False, True, True])
    narrowed, verdicts = authorize_mask(mask, lambda n: n, decide, option="allow", noun="entry")
    assert asked == [0, 1, 3, 4]
    assert narrowed.tolist() == [True, False, False, False, True]
    assert verdicts.denied == 2


# -- the deadline (issue 9: a slow authorizer has no time bound) ---------------------------------
def test_a_callback_past_its_deadline_denies_what_it_did_not_decide() -> None:
    release = threading.Event()

    def decide(n: int) -> bool:
        if n == 2:
            release.wait(10)  # hangs until the test lets it go
        return True

    try:
        result = authorize_items(
            list(range(5)), decide, option="authorize", noun="source", timeout_ms=50
        )
    finally:
        release.set()
    assert result.allowed.tolist() == [True, True, False, False, False]
    assert result.denied == 3
    assert result.errors == (
        "authorize did not finish within 50 ms; 3 sources not checked; denied",
    )


def test_the_deadline_worker_sees_the_callers_context_variables() -> None:
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
    tenant.set("acme")
    seen: list[str] = []

    def decide(n: int) -> bool:
        seen.append(tenant.get())
        return True

    result = authorize_items([1, 2], decide, option="allow", noun="entry", timeout_ms=10_000)
    assert result.allowed.tolist() == [True, True]
    assert seen == ["acme", "acme"]


# -- every caller shares the evaluation ----------------------------------------------------------
def test_defect1_search_refuses_an_async_predicate(handbook: gw.KnowledgeBase) -> None:
    for search in (handbook.search, handbook.search_ids):
        with pytest.raises(gw.ConfigError, match="async function"):
            search(HANDBOOK_QUERY, allow=_async_allow)
    with pytest.raises(gw.ConfigError, match="async function"):
        handbook.eligibility(allow=_async_allow)


@pytest.mark.parametrize(
    "verdict",
    ["no", "false", 1, [], None, np.bool_(True)],
    ids=["no", "false-string", "one", "list", "none", "numpy-true"],
)
def test_defect1_search_denies_anything_but_true(
    handbook: gw.KnowledgeBase, verdict: object
) -> None:
    assert handbook.search(HANDBOOK_QUERY, allow=lambda entry: verdict) == []
    assert handbook.search_ids(HANDBOOK_QUERY, allow=lambda entry: verdict) == ([], [])
    assert not handbook.eligibility(allow=lambda entry: verdict).any()


def test_defect1_a_predicate_returning_a_coroutine_denies(handbook: gw.KnowledgeBase) -> None:
    async def check(entry: object) -> bool:
        return True

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert handbook.search(HANDBOOK_QUERY, allow=lambda entry: check(entry)) == []


def test_defect1_a_raising_predicate_denies_only_what_it_raised_on(
    handbook: gw.KnowledgeBase,
) -> None:
    def allow(entry: gw.KnowledgeEntry) -> bool:
        if entry.domain == "security":
            raise RuntimeError("policy service down")
        return True

    found = handbook.search(HANDBOOK_QUERY, k=20, allow=allow)
    assert found
    assert all(not hit.id.startswith("security.") for hit in found)


def test_defect1_the_search_tool_refuses_async_and_denies_non_bools(
    handbook: gw.KnowledgeBase,
) -> None:
    with pytest.raises(gw.ConfigError, match="async function"):
        gw.search_knowledge_base_tool(handbook, allow=_async_allow)
    tool = gw.search_knowledge_base_tool(handbook, allow=lambda entry: "no")
    assert tool.run({"query": HANDBOOK_QUERY})["results"] == []
    allowed = gw.search_knowledge_base_tool(handbook, allow=lambda entry: True)
    assert allowed.run({"query": HANDBOOK_QUERY})["results"]


def test_every_callback_parameter_refuses_async(handbook: gw.KnowledgeBase) -> None:
    """retrieve(), the engine, readers and evidence: one rule at every call site."""

    async def authorize(principal: object, item: object) -> bool:
        return True

    request = gw.RetrievalRequest(HANDBOOK_QUERY)
    with pytest.raises(gw.ConfigError, match="async function"):
        gw.retrieve(handbook, request, gw.RetrievalConfig(), allow=_async_allow)
    with pytest.raises(gw.ConfigError, match="async function"):
        gw.GroundingEngine(gw.GroundingConfig(authorize=authorize))
    with pytest.raises(gw.ConfigError, match="async function"):
        handbook.reader(None, authorize=authorize)
    chunks = gw.chunk_text("webhooks retry with backoff", "a.md")
    docs = gw.KnowledgeBase.from_documents(gw.chunks_to_documents(chunks), gw.chunk_settings())
    with pytest.raises(gw.ConfigError, match="async function"):
        gw.retrieve_evidence(docs, "webhooks", principal="p", authorize=authorize)


def test_retrieve_reports_predicate_failures_and_denies(handbook: gw.KnowledgeBase) -> None:
    def allow(entry: gw.KnowledgeEntry) -> Any:
        return "yes" if entry.domain == "security" else True

    selection = gw.retrieve(
        handbook, gw.RetrievalRequest(HANDBOOK_QUERY), gw.RetrievalConfig(), allow=allow
    )
    assert selection.primary
    assert all(item.entry.domain != "security" for item in selection.primary)
    assert all(entry.domain != "security" for entry in selection.expanded)
    assert len(selection.authorization_errors) == 1
    assert selection.authorization_errors[0].startswith("allow returned str, not True or False")


def _slow_after(count: int, release: threading.Event) -> Callable[..., bool]:
    calls = {"n": 0}

    def authorize(principal: object, item: object) -> bool:
        calls["n"] += 1
        if calls["n"] > count:
            release.wait(10)
        return True

    return authorize


def test_issue9_a_slow_evidence_authorizer_is_cut_off_and_reported() -> None:
    texts = {f"doc{n}.md": f"webhook retries number {n}" for n in range(4)}
    chunks = [c for name, text in texts.items() for c in gw.chunk_text(text, name)]
    kb = gw.KnowledgeBase.from_documents(gw.chunks_to_documents(chunks), gw.chunk_settings())
    release = threading.Event()
    try:
        result = gw.retrieve_evidence(
            kb,
            "webhook retries",
            principal="p",
            authorize=_slow_after(2, release),
            authorize_timeout_ms=50,
        )
    finally:
        release.set()
    assert result.status == "ready"
    assert {e.source_id for e in result.excerpts} == {"doc0.md", "doc1.md"}
    assert result.denied_sources == 2
    assert result.authorization_errors == (
        "authorize did not finish within 50 ms; 2 sources not checked; denied",
    )


def test_issue9_a_slow_engine_authorizer_is_reported_in_the_turn_metadata() -> None:
    release = threading.Event()
    config = gw.GroundingConfig(
        sources=gw.load_sources(HANDBOOK),
        authorize=_slow_after(3, release),
        retrieval=gw.RetrievalConfig(authorize_timeout_ms=100),
        timeout_ms=5_000,
    )
    with gw.GroundingEngine(config) as engine:
        assert engine.ready(30)
        try:
            outcome = engine.ground(HANDBOOK_QUERY)
        finally:
            release.set()
    errors = outcome.metadata.authorization_errors
    assert len(errors) == 1
    assert errors[0].startswith("allow did not finish within 100 ms;")
    assert outcome.metadata.candidate_count <= 3  # only what was decided before the deadline


def test_the_authorize_deadline_must_leave_the_turn_time_to_finish() -> None:
    with pytest.raises(gw.ConfigError, match="less than timeout_ms"):
        gw.GroundingConfig(retrieval=gw.RetrievalConfig(authorize_timeout_ms=800), timeout_ms=800)
    with pytest.raises(gw.ConfigError, match="authorize_timeout_ms"):
        gw.RetrievalConfig(authorize_timeout_ms=0)
    with pytest.raises(gw.ConfigError, match="authorize_timeout_ms"):
        gw.EvidenceSettings(authorize_timeout_ms=-1)


def test_async_ground_passes_the_principal() -> None:
    source = {
        "id": "s",
        "version": "1",
        "entries": [
            {
                "id": "acme.secret",
                "title": "Rotate",
                "summary": "rotate keys",
                "domain": "d",
                "integrations": [],
                "tenant": "acme",
            }
        ],
    }
    with gw.GroundingEngine(gw.GroundingConfig(sources=[source])) as engine:
        assert engine.ready(30)
        anonymous = asyncio.run(engine.aground("rotate keys"))
        acme = asyncio.run(engine.aground("rotate keys", principal=gw.Principal("acme", "a")))
    assert anonymous.block is None
    assert acme.metadata.selected_ids == ("acme.secret",)


def test_error_lines_count_in_plain_english() -> None:
    def deny(item: str) -> object:
        return "no"

    entries = authorize_items(["a", "b", "c"], deny, option="allow", noun="entry")
    assert entries.errors == ("allow returned str, not True or False for 3 entries; denied",)
    sources = authorize_items(["a", "b"], deny, option="authorize", noun="source")
    assert sources.errors == ("authorize returned str, not True or False for 2 sources; denied",)
