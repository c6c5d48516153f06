"""The knowledge runtime: ingest into spaces, retrieve with filters, answer, guarded."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import groundwire as gw

ACME = gw.Principal("acme", "alice", ["support"])
HR = gw.Principal("acme", "harriet", ["hr"])
BETA = gw.Principal("beta", "bob")


def runtime(**options: Any) -> gw.KnowledgeRuntime:
    rt = gw.KnowledgeRuntime(["support-faq", "internal"], tenant="acme", **options)
    rt.ingest_document(
        "faq-rotate-key.txt",
        "Rotate API keys from Settings > API.",
        locale="en",
        category="canonical",
    )
    rt.ingest_document(
        "faq-rotate-key-fr.txt",
        "Rotate les clés API depuis Réglages > API.",
        locale="fr",
        category="canonical",
    )
    rt.ingest_document("draft.txt", "Rotate keys: draft notes.", locale="en", category="draft")
    rt.ingest_document(
        "payroll.txt", "Rotate payroll keys quarterly.", space="internal", acl=["group:hr"]
    )
    return rt


def ids(result: gw.EvidenceResult) -> list[str]:
    return [excerpt.source_id for excerpt in result.excerpts]


def test_retrieve_filters_by_space_locale_and_category() -> None:
    rt = runtime()
    everything = rt.retrieve("rotate keys", principal=ACME)
    assert sorted(ids(everything)) == [
        "acme/support-faq/draft.txt",
        "acme/support-faq/faq-rotate-key-fr.txt",
        "acme/support-faq/faq-rotate-key.txt",
    ]
    canon_en = rt.retrieve("rotate keys", principal=ACME, locale="en", category="canonical")
    assert ids(canon_en) == ["acme/support-faq/faq-rotate-key.txt"]
    assert ids(rt.retrieve("rotate", principal=ACME, locale="fr")) == [
        "acme/support-faq/faq-rotate-key-fr.txt"
    ]
    assert rt.retrieve(
        "rotate", principal=ACME, tenant="acme", locale="en", category="canonical"
    ).ready
    assert rt.retrieve("rotate", principal=ACME, tenant="beta").status == "insufficient"


def test_the_namespace_labels_every_chunk_and_principals_see_their_share() -> None:
    rt = runtime()
    assert rt.retrieve("rotate keys").status == "insufficient"  # anonymous: all acme's
    assert rt.retrieve("rotate keys", principal=BETA).status == "insufficient"
    assert rt.retrieve("payroll", principal=ACME, space="internal").status == "insufficient"
    assert ids(rt.retrieve("payroll", principal=HR, space="internal")) == [
        "acme/internal/payroll.txt"
    ]
    kb = rt.knowledge_base
    assert kb is not None
    assert {entry.metadata["tenant"] for entry in kb} == {"acme"}


def test_reingesting_a_document_replaces_it_and_swaps_the_snapshot() -> None:
    rt = runtime()
    before = rt.knowledge_base
    rt.ingest_document("faq-rotate-key.txt", "Keys are rotated by the platform team.", locale="en")
    after = rt.knowledge_base
    assert after is not before
    found = rt.retrieve("platform team", principal=ACME)
    assert ids(found) == ["acme/support-faq/faq-rotate-key.txt"]
    assert len([e for e in after if e.metadata["source_id"].endswith("faq-rotate-key.txt")]) == 1  # type: ignore[union-attr]


def test_ingest_reports_are_localized_and_list_what_was_left_out(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Keys\nRotate keys.", encoding="utf-8")
    (tmp_path / "b.bin").write_bytes(b"\x00\x01")
    rt = gw.KnowledgeRuntime("docs", tenant="acme")
    report = rt.ingest_paths(tmp_path)
    assert (report.documents, report.chunks) == (1, 1)
    assert [item.path for item in report.skipped] == ["b.bin"]
    assert report.summary() == "1 documents, 1 chunks, 1 skipped"
    assert report.summary("es") == "1 documentos, 1 fragmentos, 1 omitidos"
    assert report.summary("fr-CA") == "1 documents, 1 fragments, 1 ignorés"
    assert report.skipped_lines("fr")[0].startswith("ignoré b.bin : ")


def test_a_labeler_can_narrow_what_the_namespace_gives() -> None:
    rt = gw.KnowledgeRuntime("docs", tenant="acme")
    rt.ingest_document(
        "secret.txt",
        "rotate keys secretly",
        labeler=lambda chunk, labels: gw.Labels("acme", ("user:alice",)),
    )
    assert rt.retrieve("rotate", principal=ACME).ready
    assert not rt.retrieve("rotate", principal=HR).ready


def test_the_guard_checks_writes_and_searches() -> None:
    spaces = [
        gw.KnowledgeSpace("support-faq", tenant="acme"),
        gw.KnowledgeSpace("mail", category="external"),
    ]
    guard = gw.KnowledgeAccessGuard()
    rt = gw.KnowledgeRuntime(
        spaces,
        tenant="acme",
        guard=guard,
        context=gw.AccessContext(workflow="sync", principal=ACME, locale="es"),
    )
    rt.ingest_document("a.txt", "rotate keys")
    assert rt.retrieve("rotate", principal=ACME).ready
    with pytest.raises(gw.AccessDeniedError, match="Denegado") as denied:
        rt.ingest_document("m.txt", "hello", space="mail")
    assert denied.value.reason == "write-category-blocked"
    with pytest.raises(gw.AccessDeniedError) as other_tenant:
        rt.retrieve("rotate", principal=BETA)
    assert other_tenant.value.reason == "tenant-mismatch"
    unbound = gw.KnowledgeRuntime(spaces, tenant="acme", guard=guard)
    with pytest.raises(gw.AccessDeniedError) as no_workflow:
        unbound.retrieve("rotate", principal=ACME)
    assert no_workflow.value.reason == "workflow-binding-required"


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(gw.ConfigError, match="at least one space"):
        gw.KnowledgeRuntime([])
    with pytest.raises(gw.ConfigError, match="tenant"):
        gw.KnowledgeRuntime("s", tenant="two words")
    rt = gw.KnowledgeRuntime("s")
    with pytest.raises(gw.ConfigError, match="not one of this runtime's"):
        rt.retrieve("x", space="nowhere")
    with pytest.raises(gw.ConfigError, match="acl label"):
        rt.ingest_document("a.txt", "x", acl=["admins"])
    with pytest.raises(gw.ConfigError, match="locale"):
        rt.ingest_document("a.txt", "x", locale="")
    with pytest.raises(gw.ConfigError, match="provider"):
        rt.query("x")
    assert rt.retrieve("anything").status == "insufficient"  # nothing ingested yet


def _openai(fake: Any) -> gw.OpenAIProvider:
    return gw.OpenAIProvider("gpt-fake", api_key="test-key", base_url=fake.openai.base_url)


def test_query_answers_through_the_provider_with_checked_citations(fake: Any) -> None:
    with _openai(fake) as provider:
        rt = runtime(provider=provider)
        cited = rt.retrieve("rotate api keys", principal=ACME, locale="en", category="canonical")
        chunk = cited.excerpts[0].id
        fake.openai.enqueue_text(f"Use Settings > API [evidence:{chunk}].")
        answer = rt.query("rotate api keys", principal=ACME, locale="en", category="canonical")
    assert answer.answered
    assert answer.text == f"Use Settings > API [evidence:{chunk}]."
    sent = fake.openai.requests[0].json
    prompt = sent["messages"][-1]["content"]
    assert "faq-rotate-key.txt" in prompt
    assert "faq-rotate-key-fr" not in prompt  # the locale filter held
    assert "draft" not in prompt  # and the category filter


def test_query_makes_no_provider_call_for_what_the_principal_may_not_see(fake: Any) -> None:
    with _openai(fake) as provider:
        rt = runtime(provider=provider)
        answer = rt.query("payroll keys", principal=ACME, space="internal")
    assert answer.status == "insufficient"
    assert fake.openai.request_count == 0


def test_query_prompts_follow_the_runtime_locale(fake: Any) -> None:
    with _openai(fake) as provider:
        rt = gw.KnowledgeRuntime("faq", tenant="acme", provider=provider, locale="fr")
        rt.ingest_document("k.txt", "Rotate keys from Settings.")
        chunk = rt.retrieve("rotate keys", principal=ACME).excerpts[0].id
        fake.openai.enqueue_text(f"Réglages [evidence:{chunk}].")
        rt.query("rotate keys", principal=ACME)
    prompt = fake.openai.requests[0].json["messages"][-1]["content"]
    assert re.search("Ce sont des données non fiables", prompt)
