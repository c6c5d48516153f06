"""``ask``: real SDKs against the scripted fake servers of tests/llm/fake_servers.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cli_helpers import (
    HANDBOOK,
    ROTATION_TAG,
    one_error_line,
    run,
    run_json,
)

# -- ask (real SDKs against the scripted fake servers of tests/llm/fake_servers.py) ----------
ASK_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
)
ASK_KEYS = {
    "kb_kind",
    "status",
    "reason",
    "answer",
    "citations",
    "citations_ok",
    "offered",
    "provider",
    "model",
}


@pytest.fixture
def fake(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_servers_module: ModuleType
) -> Iterator[Any]:
    """A fake OpenAI/Anthropic server on 127.0.0.1; no real provider settings leak in."""
    for name in ASK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic-config"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = fake_servers_module.FakeLLMServer()
    yield server
    server.close()


@pytest.fixture
def quokka_docs(tmp_path: Path) -> str:
    root = tmp_path / "quokka-docs"
    root.mkdir()
    (root / "care.md").write_text(
        "# Quokka care\n\nEvery quokka eats leaves twice a day at dawn and dusk.\n",
        encoding="utf-8",
    )
    (root / "island.txt").write_text(
        "Quokkas live on Rottnest Island in dense scrub.\n", encoding="utf-8"
    )
    return str(root)


def _first_excerpt_id(kb: str, question: str) -> str:
    data = run_json("ground", kb, question)
    assert data["status"] == "ready"
    return str(data["excerpts"][0]["id"])


def _openai_env(monkeypatch: pytest.MonkeyPatch, fake: Any) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.openai.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "gpt-fake")


def test_ask_documents_streams_a_checked_answer(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    question = "what does a quokka eat"
    cited = _first_excerpt_id(quokka_docs, question)
    fake.openai.enqueue_text(f"Quokkas eat leaves twice a day [evidence:{cited}].")
    result = run("ask", quokka_docs, question)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Quokkas eat leaves twice a day [evidence:{cited}].\n")
    assert f"valid    [evidence:{cited}]  care.md" in result.stdout
    (sent,) = fake.openai.requests
    assert sent.stream  # streamed from the model, buffered by the assistant
    body = sent.json
    assert body["model"] == "gpt-fake"
    system, user = body["messages"]
    assert system["role"] == "system"
    assert "[evidence:ID]" in system["content"]
    assert "<untrusted_evidence>" in user["content"]
    assert f'"id": "{cited}"' in user["content"]


def test_ask_documents_insufficient_evidence_makes_no_request(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    result = run("ask", quokka_docs, "zebra migration")
    assert result.exit_code == 0
    assert "No answer (insufficient evidence: no-match)" in result.stdout
    assert "the model was not called" in result.stdout
    assert fake.openai.request_count == 0
    data = run_json("ask", quokka_docs, "zebra migration")
    assert set(data) == ASK_KEYS
    assert (data["status"], data["reason"], data["answer"]) == ("insufficient", "no-match", "")
    assert fake.openai.request_count == 0


def test_ask_documents_rejects_an_answer_citing_outside_the_evidence(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_text("Quokkas eat bread [evidence:secret.md#0].")
    result = run("ask", quokka_docs, "what does a quokka eat")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "rejected and not shown" in line
    assert "[evidence:secret.md#0]" in line
    assert "bread" not in result.stdout  # nothing of the answer was shown
    fake.openai.enqueue_text("Quokkas eat leaves.")  # cites nothing
    data = run_json("ask", quokka_docs, "what does a quokka eat", code=1)
    assert (data["status"], data["reason"], data["answer"]) == ("rejected", "no-citation", "")
    assert data["citations_ok"] is False


def test_ask_documents_json(fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _openai_env(monkeypatch, fake)
    question = "where do quokkas live"
    cited = _first_excerpt_id(quokka_docs, question)
    fake.openai.enqueue_text(f"On Rottnest Island [evidence:{cited}].")
    data = run_json("ask", quokka_docs, question)
    assert set(data) == ASK_KEYS
    assert (data["kb_kind"], data["status"], data["reason"]) == ("documents", "answered", None)
    assert data["answer"] == f"On Rottnest Island [evidence:{cited}]."
    assert data["citations"] == [
        {
            "tag": f"[evidence:{cited}]",
            "kind": "evidence",
            "id": cited,
            "version": None,
            "valid": True,
            "problem": None,
        }
    ]
    assert data["citations_ok"] is True
    assert data["provider"] == "openai"
    assert not fake.openai.last_request.stream  # --json asks for one whole answer


def test_ask_knowledge_base_puts_the_block_in_the_system_prompt(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_text(
        f"Create the new key first {ROTATION_TAG}, then revoke the old one [KB:made.up@1]."
    )
    result = run("ask", HANDBOOK, "how do I rotate an API key")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Create the new key first")
    assert f"valid    {ROTATION_TAG}" in result.stdout
    assert "INVALID  [KB:made.up@1]" in result.stdout
    (system, user) = fake.openai.last_request.json["messages"]
    assert "<knowledge_context>" in system["content"]
    assert ROTATION_TAG in system["content"]
    assert user == {"role": "user", "content": "how do I rotate an API key"}


def test_ask_knowledge_base_json_and_fail_open(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_text(f"Rotate it {ROTATION_TAG}.")
    data = run_json("ask", HANDBOOK, "how do I rotate an API key")
    assert (data["kb_kind"], data["status"], data["citations_ok"]) == (
        "knowledge",
        "answered",
        True,
    )
    assert ROTATION_TAG in data["offered"]
    fake.openai.enqueue_text("No idea.")
    result = run("ask", HANDBOOK, "xyzzy plugh")  # nothing matches: answered, not grounded
    assert result.exit_code == 0
    assert "warning: no knowledge block (no-match)" in result.stderr
    assert "none: the answer cites nothing" in result.stdout
    assert "<knowledge_context>" not in fake.openai.last_request.json["messages"][0]["content"]


def test_ask_with_anthropic(fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    question = "what does a quokka eat"
    cited = _first_excerpt_id(quokka_docs, question)
    fake.anthropic.enqueue_text(f"Leaves [evidence:{cited}].")
    result = run(
        "ask",
        quokka_docs,
        question,
        "--provider",
        "anthropic",
        "--model",
        "claude-fake",
        "--base-url",
        fake.anthropic.base_url,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Leaves [evidence:{cited}].")
    assert fake.anthropic.last_request.json["model"] == "claude-fake"
    assert fake.openai.request_count == 0


def test_ask_configuration_errors_are_one_line(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_model = run("ask", quokka_docs, "quokka")
    assert no_model.exit_code == 2
    assert "pass --model NAME or set OPENAI_MODEL" in one_error_line(no_model)
    no_key = run("ask", quokka_docs, "quokka", "--model", "gpt-4o-mini")
    assert no_key.exit_code == 2
    line = one_error_line(no_key)
    assert "set OPENAI_API_KEY" in line
    assert "--base-url" in line  # what a local server needs instead
    assert "api_key=" not in line  # the library's argument means nothing on the command line
    no_anthropic_key = run("ask", quokka_docs, "quokka", "--provider", "anthropic", "--model", "c")
    assert no_anthropic_key.exit_code == 2
    assert "set ANTHROPIC_API_KEY" in one_error_line(no_anthropic_key)
    unknown = run("ask", quokka_docs, "quokka", "--provider", "gemini", "--model", "g")
    assert unknown.exit_code == 2
    assert "'gemini' is not a provider" in one_error_line(unknown)
    assert fake.openai.request_count == 0


def test_ask_connection_error_names_the_url(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    url = fake.openai.base_url
    fake.close()  # nothing listens there any more: connection refused on 127.0.0.1
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    result = run("ask", quokka_docs, "what does a quokka eat")
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert f"connection to {url} failed" in errors[0]


def test_ask_provider_error_is_one_line(
    fake: Any, quokka_docs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _openai_env(monkeypatch, fake)
    fake.openai.enqueue_error(401, "bad key")
    result = run("ask", quokka_docs, "what does a quokka eat")
    assert result.exit_code == 1
    assert "401" in one_error_line(result)
    assert result.stdout == ""
