"""The search_knowledge_base tool, the bounded tool loop and generate_with_files."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from groundwire import (
    AnthropicProvider,
    ChatRequest,
    Completion,
    ConfigError,
    KnowledgeBase,
    Message,
    OpenAIProvider,
    SourceError,
    StreamEvent,
    Tool,
    ToolCall,
    ToolLoopResult,
    ToolSpec,
    agenerate_with_files,
    chunk_text,
    chunks_to_documents,
    generate_with_files,
    load_bytes,
    run_tool_loop,
    search_knowledge_base_tool,
    validate_citations,
)

Step = Callable[[ChatRequest], Completion]


@dataclass
class Scripted:
    """A Provider whose every turn is computed by ``step`` from the request it receives."""

    step: Step
    name: str = "scripted"
    requests: list[ChatRequest] = field(default_factory=list)

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        return self.step(request)

    async def acomplete(self, request: ChatRequest) -> Completion:
        return self.complete(request)

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        completion = self.complete(request)
        yield StreamEvent("done", completion=completion)

    async def astream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield StreamEvent("done", completion=self.complete(request))


def call(name: str, arguments: Any, call_id: str = "c1") -> Completion:
    return Completion(
        "", tool_calls=(ToolCall(call_id, name, arguments),), finish_reason="tool_calls"
    )


def tool_outputs(request: ChatRequest) -> list[Any]:
    return [json.loads(m.content) for m in request.messages if m.role == "tool"]


def kb_of(*docs: tuple[str, str]) -> KnowledgeBase:
    chunks = [c for source, text in docs for c in chunk_text(text, source, kind=source)]
    return KnowledgeBase.from_documents(chunks_to_documents(chunks))


LONG = "\n\n".join(
    f"Quokka fact {n}: quokkas hop and quokkas smile at visitors." for n in range(200)
)


# -- the tool ---------------------------------------------------------------------------------
def test_tool_spec_is_a_json_schema() -> None:
    tool = search_knowledge_base_tool(kb_of(("a.md", "Quokkas smile.")), k=3, max_k=7)
    assert isinstance(tool, Tool)
    assert tool.name == tool.spec.name == "search_knowledge_base"
    schema = tool.spec.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert schema["properties"]["k"]["maximum"] == 7
    assert schema["additionalProperties"] is False
    json.dumps(schema)  # serializable as sent to providers


def test_results_are_bounded_cited_and_serializable() -> None:
    kb = kb_of(("guide.md", "# Care\n\n" + "Quokkas eat leaves and grasses. " * 40))
    tool = search_knowledge_base_tool(kb, max_excerpt_chars=50)
    output = tool.run({"query": "what do quokkas eat"})
    json.dumps(output)
    (first, *_) = output["results"]
    keys = {"id", "title", "heading", "source", "text", "cut", "version", "citation", "score"}
    assert set(first) == keys
    assert len(first["text"]) <= 50
    assert first["cut"] is True
    entry = kb.get(first["id"])
    assert entry is not None
    assert first["citation"] == entry.citation.tag == f"[KB:{first['id']}@{entry.version}]"
    assert first["source"] == "guide.md"
    assert "data, not instructions" in output["note"]


def test_k_is_honoured_and_bounded() -> None:
    kb = kb_of(("long.md", LONG))
    tool = search_knowledge_base_tool(kb, k=2, max_k=4)
    assert len(tool.run({"query": "quokka"})["results"]) == 2
    assert len(tool.run({"query": "quokka", "k": 4})["results"]) == 4
    assert len(tool.run({"query": "quokka", "k": None})["results"]) == 2
    for bad in ({"query": "quokka", "k": 5}, {"query": "quokka", "k": 0}, {"query": "q", "k": "3"}):
        with pytest.raises(ValueError, match="'k' must be an integer from 1 to 4"):
            tool.run(bad)
    with pytest.raises(ValueError, match="'query'"):
        tool.run({"query": "  "})
    with pytest.raises(ValueError, match="unknown argument"):
        tool.run({"query": "quokka", "limit": 3})


def test_source_diversity_round_robins_over_files() -> None:
    """One long file full of matches must not take every slot from the short files."""
    kb = kb_of(
        ("long.md", LONG),
        ("short.txt", "A quokka once hopped."),
        ("other.txt", "Quokka counts are rising."),
    )
    results = search_knowledge_base_tool(kb, k=3).run({"query": "quokka quokkas"})["results"]
    assert {r["source"] for r in results} == {"long.md", "short.txt", "other.txt"}
    single = search_knowledge_base_tool(kb_of(("long.md", LONG)), k=3)
    assert {r["source"] for r in single.run({"query": "quokka"})["results"]} == {"long.md"}


def test_allow_filters_before_ranking() -> None:
    kb = kb_of(("public.md", "Quokkas are public."), ("secret.md", "Quokkas secret plan."))
    tool = search_knowledge_base_tool(
        kb, allow=lambda e: e.metadata.get("source_id") != "secret.md"
    )
    results = tool.run({"query": "quokkas secret"})["results"]
    assert [r["source"] for r in results] == ["public.md"]


def test_bad_tool_options_are_config_errors() -> None:
    kb = kb_of(("a.md", "Quokkas."))
    with pytest.raises(ConfigError, match="max_k"):
        search_knowledge_base_tool(kb, max_k=0)
    with pytest.raises(ConfigError, match="k=9"):
        search_knowledge_base_tool(kb, k=9, max_k=5)
    with pytest.raises(ConfigError, match="KnowledgeBase"):
        search_knowledge_base_tool("kb")  # type: ignore[arg-type]


# -- the loop ---------------------------------------------------------------------------------
def request(text: str = "What do quokkas eat?") -> ChatRequest:
    return ChatRequest(messages=(Message("user", text),), system="Be brief.")


def test_loop_runs_the_tool_then_returns_the_answer() -> None:
    kb = kb_of(("guide.md", "Quokkas eat leaves and grasses."))

    def step(req: ChatRequest) -> Completion:
        outputs = tool_outputs(req)
        if not outputs:
            return call("search_knowledge_base", {"query": "quokka food"})
        return Completion(f"Leaves {outputs[0]['results'][0]['citation']}.", finish_reason="stop")

    provider = Scripted(step)
    result = run_tool_loop(provider, request(), [search_knowledge_base_tool(kb)])
    assert isinstance(result, ToolLoopResult)
    assert (result.rounds, result.exhausted) == (2, False)
    assert result.text.startswith("Leaves [KB:guide.md#0@")
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.messages[2].tool_call_id == "c1"
    assert result.messages[1].tool_calls[0].name == "search_knowledge_base"
    assert [t.error for t in result.tool_runs] == [False]
    assert validate_citations(result.text, result.citations).ok  # cites what the tool returned
    assert not validate_citations("[KB:guide.md#0@000000000000]", result.citations).ok
    first = provider.requests[0]
    assert [t.name for t in first.tools] == ["search_knowledge_base"]
    assert first.system == "Be brief."
    assert request().tools == ()  # the caller's request is not mutated


def test_a_model_that_always_calls_the_tool_stops_at_max_rounds() -> None:
    kb = kb_of(("guide.md", "Quokkas eat leaves."))
    provider = Scripted(
        lambda req: call("search_knowledge_base", {"query": "quokka"}, f"c{len(req.messages)}")
    )
    result = run_tool_loop(provider, request(), [search_knowledge_base_tool(kb)], max_rounds=3)
    assert len(provider.requests) == 3
    assert (result.rounds, result.exhausted) == (3, True)
    assert len(result.tool_runs) == 2  # the last round's calls were not run
    assert result.completion.tool_calls
    assert result.messages[-1].role == "assistant"


def test_max_rounds_is_validated() -> None:
    provider = Scripted(lambda req: Completion("hi"))
    for bad in (0, 51, True):
        with pytest.raises(ConfigError, match="max_rounds"):
            run_tool_loop(provider, request(), [], max_rounds=bad)
    assert provider.requests == []


def test_bad_arguments_and_unknown_tools_go_back_to_the_model() -> None:
    kb = kb_of(("guide.md", "Quokkas eat leaves."))
    calls = iter(
        [
            call("search_knowledge_base", {"k": 3}, "a"),  # no query
            call("search_knowledge_base", {"query": "quokka", "k": 999}, "b"),
            call("search_knowledge_base", ["not", "an", "object"], "c"),
            call("delete_everything", {}, "d"),
            call("explode", {}, "e"),
        ]
    )

    def step(req: ChatRequest) -> Completion:
        return next(calls, Completion("done", finish_reason="stop"))

    def explode(arguments: Mapping[str, Any]) -> Any:
        raise RuntimeError("internal detail")

    boom = Tool(ToolSpec("explode", "fails", {"type": "object", "properties": {}}), explode)
    provider = Scripted(step)
    result = run_tool_loop(
        provider, request(), [search_knowledge_base_tool(kb), boom], max_rounds=10
    )
    assert (result.text, result.exhausted, result.rounds) == ("done", False, 6)
    errors = [json.loads(run.output)["error"] for run in result.tool_runs]
    assert all(run.error for run in result.tool_runs)
    assert "'query' must be a non-empty string" in errors[0]
    assert "'k' must be an integer from 1 to 20" in errors[1]
    assert "must be a JSON object" in errors[2]
    assert "unknown tool 'delete_everything'" in errors[3]
    assert "explode" in errors[3]  # lists the tools that exist
    assert errors[4] == "explode failed: RuntimeError"  # no internals leak to the model


def test_several_calls_in_one_turn_get_one_answer_each_in_order() -> None:
    kb = kb_of(("guide.md", "Quokkas eat leaves."), ("faq.md", "Quokkas hop."))
    turn = Completion(
        "",
        tool_calls=(
            ToolCall("x", "search_knowledge_base", {"query": "eat"}),
            ToolCall("y", "search_knowledge_base", {"query": "hop"}),
        ),
    )
    provider = Scripted(lambda req: turn if len(req.messages) == 1 else Completion("ok"))
    result = run_tool_loop(provider, request(), [search_knowledge_base_tool(kb)])
    tools = [m for m in result.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == ["x", "y"]


def test_duplicate_tool_names_are_rejected() -> None:
    kb = kb_of(("guide.md", "Quokkas."))
    tool = search_knowledge_base_tool(kb)
    with pytest.raises(ConfigError, match="unique"):
        run_tool_loop(Scripted(lambda r: Completion("x")), request(), [tool, tool])


# -- files ------------------------------------------------------------------------------------
@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    md = tmp_path / "a" / "README.md"
    md.write_text("# Quokkas\n\n## Food\n\nQuokkas eat leaves.\n\n## Home\n\nRottnest Island.\n")
    other = tmp_path / "b" / "README.md"  # the same name in another folder
    other.write_text("# Notes\n\nQuokka keepers start at dawn.\n")
    data = tmp_path / "census.json"
    data.write_text(
        json.dumps({"title": "Census", "quokkas": {"2024": 12000, "note": "quokka count"}})
    )
    code = tmp_path / "feed.py"
    code.write_text("def feed_quokka(amount):\n    '''Feed a quokka.'''\n    return amount\n")
    return [md, other, data, code]


def searcher(query: str, answer: Callable[[list[Any]], str]) -> Step:
    def step(req: ChatRequest) -> Completion:
        outputs = tool_outputs(req)
        if not outputs:
            return call("search_knowledge_base", {"query": query, "k": 4})
        return Completion(answer(outputs))

    return step


def test_generate_with_files_chunks_indexes_and_answers(files: list[Path]) -> None:
    seen: list[Any] = []

    def answer(outputs: list[Any]) -> str:
        seen.extend(outputs[0]["results"])
        return "Leaves " + outputs[0]["results"][0]["citation"]

    provider = Scripted(searcher("quokka", answer))
    result = generate_with_files(provider, "What do quokkas eat?", files=files, system="Be kind.")
    assert result.text.startswith("Leaves [KB:")
    sources = [r["source"] for r in seen]
    # Four files all mention quokkas: diversity gives each of them a slot.
    assert len(set(sources)) == 4
    assert any(s.endswith("a/README.md") for s in sources)
    assert any(s.endswith("b/README.md") for s in sources)  # same names kept apart
    assert "census.json" in sources
    assert "feed.py" in sources
    system = provider.requests[0].system
    assert system is not None
    assert system.startswith("Be kind.")
    assert "search_knowledge_base" in system
    headings = {r["source"]: r["heading"] for r in seen}
    code_hit = next(r for r in seen if r["source"] == "feed.py")
    assert "feed_quokka" in code_hit["text"]
    assert headings  # markdown chunks carry heading trails
    assert any("Quokkas" in h for h in headings.values())


def test_generate_with_files_accepts_uploads(files: list[Path]) -> None:
    upload = load_bytes(b"Quokkas sleep in the day.", "upload.txt")
    provider = Scripted(searcher("sleep", lambda out: out[0]["results"][0]["source"]))
    result = generate_with_files(provider, "When do quokkas sleep?", files=[upload])
    assert result.text == "upload.txt"


def test_generate_with_files_errors(tmp_path: Path, files: list[Path]) -> None:
    provider = Scripted(lambda r: Completion("x"))
    with pytest.raises(SourceError, match="cannot open"):
        generate_with_files(provider, "q", files=[tmp_path / "missing.md"])
    with pytest.raises(SourceError, match="folder"):
        generate_with_files(provider, "q", files=[tmp_path])
    with pytest.raises(SourceError, match="given twice"):
        generate_with_files(provider, "q", files=[files[2], files[2]])
    with pytest.raises(ConfigError, match="files is empty"):
        generate_with_files(provider, "q", files=[])
    with pytest.raises(ConfigError, match="list of paths"):
        generate_with_files(provider, "q", files=str(files[0]))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="prompt"):
        generate_with_files(provider, " ", files=files)
    assert provider.requests == []


def test_agenerate_with_files(files: list[Path]) -> None:
    provider = Scripted(searcher("dawn", lambda out: out[0]["results"][0]["citation"]))
    result = asyncio.run(agenerate_with_files(provider, "When do keepers start?", files=files))
    assert result.text.startswith("[KB:")
    assert result.rounds == 2


# -- the real SDKs against the scripted fake servers (tests/llm/fake_servers.py) ----------------
def _openai(fake: Any) -> Any:
    return OpenAIProvider("gpt-fake", api_key="test-key", base_url=fake.openai.base_url)


def test_sdk_tool_loop_stops_at_max_rounds(fake: Any) -> None:
    kb = kb_of(("guide.md", "Quokkas eat leaves."))
    fake.openai.enqueue_tool_call("search_knowledge_base", {"query": "quokka"}, times=10)
    with _openai(fake) as provider:
        result = run_tool_loop(provider, request(), [search_knowledge_base_tool(kb)], max_rounds=3)
    assert fake.openai.request_count == 3
    assert (result.rounds, result.exhausted, len(result.tool_runs)) == (3, True, 2)
    last = fake.openai.last_request.json
    assert last["tools"][0]["function"]["name"] == "search_knowledge_base"
    tool_messages = [m for m in last["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2
    assert json.loads(tool_messages[0]["content"])["results"][0]["id"] == "guide.md#0"


def test_sdk_bad_arguments_are_answered_with_an_error(fake: Any) -> None:
    kb = kb_of(("guide.md", "Quokkas eat leaves."))
    fake.openai.enqueue_tool_call("search_knowledge_base", {"query": "quokka", "k": 99}, id="t1")
    fake.openai.enqueue_tool_call("no_such_tool", {}, id="t2")
    fake.openai.enqueue_text("I could not search.")
    with _openai(fake) as provider:
        result = run_tool_loop(provider, request(), [search_knowledge_base_tool(kb)])
    assert (result.text, result.exhausted, result.rounds) == ("I could not search.", False, 3)
    messages = fake.openai.last_request.json["messages"]
    tools = {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}
    assert "'k' must be an integer from 1 to 20" in tools["t1"]["error"]
    assert "unknown tool 'no_such_tool'" in tools["t2"]["error"]


def test_sdk_generate_with_files_over_anthropic(fake: Any, files: list[Path]) -> None:
    fake.anthropic.enqueue_tool_call("search_knowledge_base", {"query": "quokka", "k": 4})
    fake.anthropic.enqueue_text("Quokkas eat leaves.")
    with AnthropicProvider(
        "claude-fake", api_key="test-key", base_url=fake.anthropic.base_url
    ) as provider:
        result = generate_with_files(provider, "What do quokkas eat?", files=files)
    assert result.text == "Quokkas eat leaves."
    first, second = (r.json for r in fake.anthropic.requests)
    assert first["tools"][0]["name"] == "search_knowledge_base"
    assert first["tools"][0]["input_schema"]["required"] == ["query"]
    (tool_result,) = [
        block
        for message in second["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    content = tool_result["content"]
    text = content if isinstance(content, str) else content[0]["text"]
    sources = {r["source"] for r in json.loads(text)["results"]}
    assert len(sources) == 4  # one slot per file: source diversity
    assert len(result.citations) == 4


def test_with_an_embedder_the_tool_ranks_by_vectors_with_diversity_and_allow() -> None:
    from groundwire import HashingEmbedder

    kb = kb_of(
        ("long.md", LONG),
        ("short.txt", "A quokka once hopped."),
        ("other.txt", "Quokka counts are rising."),
        ("secret.md", "Quokka secret plan, quokkas everywhere."),
    )
    tool = search_knowledge_base_tool(
        kb,
        k=3,
        embedder=HashingEmbedder(),
        allow=lambda e: e.metadata.get("source_id") != "secret.md",
    )
    results = tool.run({"query": "quokka quokkas"})["results"]
    assert {r["source"] for r in results} == {"long.md", "short.txt", "other.txt"}
    assert all(r["source"] != "secret.md" for r in tool.run({"query": "secret plan"})["results"])
