"""Labels at ingest: the access.yaml policy, the host labeler, and labels through snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import groundwire as gw
from groundwire.access.labels import Labels

POLICY = """
rules:
  - paths: ["hr/**"]
    tenant: acme
    acl: [group:hr]
  - paths: ["guide/*.md", "README.md"]
    tenant: acme
  - paths: "public/**"
"""


def chunks_for(*paths: str) -> list[gw.Chunk]:
    return [c for path in paths for c in gw.chunk_text(f"Text of {path}.", path)]


def write(tmp_path: Path, text: str, name: str = "access.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_first_matching_rule_labels_each_chunk(tmp_path: Path) -> None:
    policy = gw.AccessPolicy.load(write(tmp_path, POLICY))
    chunks, skipped = gw.label_chunks(
        chunks_for("hr/pay/2026.md", "guide/setup.md", "public/faq.md"), policy
    )
    labels = {c.source_id: (c.metadata.get("tenant"), c.metadata.get("acl")) for c in chunks}
    assert labels == {
        "hr/pay/2026.md": ("acme", ("group:hr",)),
        "guide/setup.md": ("acme", None),
        "public/faq.md": (None, None),  # a rule without labels shares on purpose
    }
    assert skipped == []


def test_a_path_no_rule_matches_is_not_indexed_without_a_default(tmp_path: Path) -> None:
    policy = gw.AccessPolicy.load(write(tmp_path, POLICY))
    chunks, skipped = gw.label_chunks(chunks_for("guide/setup.md", "notes/plan.md"), policy)
    assert [c.source_id for c in chunks] == ["guide/setup.md"]
    assert [s.path for s in skipped] == ["notes/plan.md"]
    assert "add a rule or a default" in skipped[0].reason
    with_default = gw.AccessPolicy.from_mapping(
        {"rules": [], "default": {"tenant": "acme", "acl": ["group:staff"]}}
    )
    chunks, skipped = gw.label_chunks(chunks_for("notes/plan.md"), with_default)
    assert chunks[0].metadata["acl"] == ("group:staff",)
    assert skipped == []


def test_globs_stay_within_path_segments(tmp_path: Path) -> None:
    policy = gw.AccessPolicy.load(write(tmp_path, POLICY))
    assert policy.labels_for("guide/setup.md") == Labels("acme")
    assert policy.labels_for("guide/deep/setup.md") is None  # * does not cross "/"
    assert policy.labels_for("hr/a/b/c.txt") == Labels("acme", ("group:hr",))
    assert policy.labels_for("README.md") == Labels("acme")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "rules:\n  - paths: [a]\n    acls: [group:x]\n",
            r"rules\[0\]: unknown key 'acls'; did you mean 'acl'\?",
        ),
        (
            "rules:\n  - paths: [a]\n    tenant: acme corp\n",
            r"rules\[0\]\.tenant: tenant 'acme corp'",
        ),
        (
            "rules:\n  - paths: [a]\n    acl: [role:admin]\n",
            r"rules\[0\]\.acl: acl label 'role:admin'",
        ),
        ("rules:\n  - paths: []\n", r"rules\[0\]\.paths: expected a list of glob patterns"),
        ("rules:\n  - paths: [../x]\n", r"not a relative glob pattern"),
        ("rules:\n  - tenant: acme\n", r"rules\[0\]\.paths"),
        ("rules: {a: 1}\n", "rules: expected a list"),
        ("rulez: []\n", "unknown key 'rulez'; did you mean 'rules'"),
        ("default: {tenant: acme, group: x}\n", "default: unknown key 'group'"),
        ("- just a list\n", "an access policy is a mapping"),
        ("rules: [\n", r"access\.yaml:\d+: invalid YAML"),
    ],
)
def test_a_malformed_policy_names_the_file_and_field(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(gw.SourceError, match=fragment) as info:
        gw.AccessPolicy.load(path)
    assert str(path) in str(info.value)


def test_a_missing_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(gw.SourceError, match="no such access policy file"):
        gw.AccessPolicy.load(tmp_path / "nope.yaml")


def test_the_labeler_decides_after_the_policy(tmp_path: Path) -> None:
    policy = gw.AccessPolicy.load(write(tmp_path, POLICY))
    seen: list[Any] = []

    def labeler(chunk: gw.Chunk, labels: Labels | None) -> Labels | None:
        seen.append((chunk.source_id, labels))
        if chunk.source_id.startswith("public/"):
            return None  # the host leaves this chunk out
        return Labels("acme", ("user:carol",))

    chunks, skipped = gw.label_chunks(chunks_for("hr/a.md", "public/b.md"), policy, labeler)
    assert [(c.source_id, c.metadata["acl"]) for c in chunks] == [("hr/a.md", ("user:carol",))]
    assert seen == [("hr/a.md", Labels("acme", ("group:hr",))), ("public/b.md", Labels())]
    assert skipped == []


@pytest.mark.parametrize(
    ("labeler", "fragment"),
    [
        (lambda c, labels: 1 / 0, "the labeler raised ZeroDivisionError"),
        (lambda c, labels: {"tenant": "acme"}, "returned dict, not Labels"),
        (lambda c, labels: Labels("bad tenant"), "returned invalid labels"),
    ],
)
def test_a_failing_labeler_leaves_the_whole_source_out(labeler: Any, fragment: str) -> None:
    text = "\n\n".join(f"Section {n} " + "word " * 400 for n in range(4))
    chunks = [*gw.chunk_text(text, "big.md"), *chunks_for("other.md")]
    assert len([c for c in chunks if c.source_id == "big.md"]) > 1

    def host(chunk: gw.Chunk, labels: Labels | None) -> Any:
        return labeler(chunk, labels) if chunk.source_id == "big.md" else Labels()

    kept, skipped = gw.label_chunks(chunks, None, host)
    assert {c.source_id for c in kept} == {"other.md"}
    assert [s.path for s in skipped] == ["big.md"]
    assert fragment in skipped[0].reason


def test_chunk_labels_survive_a_snapshot_round_trip(tmp_path: Path) -> None:
    policy = gw.AccessPolicy.load(write(tmp_path, POLICY))
    chunks, _ = gw.label_chunks(chunks_for("hr/pay.md", "guide/setup.md"), policy)
    kb = gw.KnowledgeBase.from_documents(gw.chunks_to_documents(chunks), gw.chunk_settings())
    kb.save(tmp_path / "snap")
    loaded = gw.KnowledgeBase.load(tmp_path / "snap")
    assert [e.metadata.get("acl") for e in loaded] == [e.metadata.get("acl") for e in kb]
    hr = gw.Principal("acme", "h", ["hr"])
    staff = gw.Principal("acme", "s")
    for snapshot in (kb, loaded):
        assert {
            e.source_id for e in gw.retrieve_evidence(snapshot, "text", principal=hr).excerpts
        } == {
            "hr/pay.md",
            "guide/setup.md",
        }
        assert {
            e.source_id for e in gw.retrieve_evidence(snapshot, "text", principal=staff).excerpts
        } == {"guide/setup.md"}
        assert gw.retrieve_evidence(snapshot, "text").status == "insufficient"  # anonymous


def test_entry_labels_survive_a_snapshot_round_trip(tmp_path: Path) -> None:
    entries = [
        {"id": "a", "title": "Rotate", "summary": "rotate keys", "domain": "d",
         "integrations": [], "tenant": "acme", "acl": ["group:eng", "user:bob"]},
        {"id": "b", "title": "Shared", "summary": "rotate keys shared", "domain": "d",
         "integrations": []},
    ]  # fmt: skip
    kb = gw.KnowledgeBase.from_sources([{"id": "s", "version": "1", "entries": entries}])
    kb.save(tmp_path / "snap")
    loaded = gw.KnowledgeBase.load(tmp_path / "snap")
    assert loaded.get("a").metadata == {"tenant": "acme", "acl": ("group:eng", "user:bob")}  # type: ignore[union-attr]
    for snapshot in (kb, loaded):
        assert [h.id for h in snapshot.reader(gw.Principal("acme", "bob")).search("rotate")] == [
            "a",
            "b",
        ]
        assert [h.id for h in snapshot.reader(gw.Principal("acme", "eve")).search("rotate")] == [
            "b"
        ]
        assert [h.id for h in snapshot.reader(None).search("rotate")] == ["b"]


def test_entry_labels_from_front_matter(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "source.yaml").write_text("id: s\nversion: '1'\n", encoding="utf-8")
    (folder / "a.md").write_text(
        "---\nid: a\ntitle: A\nsummary: s\ndomain: d\nintegrations: []\n"
        "tenant: acme\nacl: [group:eng]\n---\nBody.\n",
        encoding="utf-8",
    )
    (folder / "b.md").write_text(
        "---\nid: b\ntitle: B\nsummary: s\ndomain: d\nintegrations: []\nacl: [team:x]\n---\n",
        encoding="utf-8",
    )
    report = gw.normalize_and_validate(gw.load_sources(folder))
    [issue] = report.errors
    assert (issue.code, issue.field, issue.entry_id) == ("acl-invalid", "acl", "b")
    assert issue.origin is not None
    assert issue.origin.endswith("b.md")
    assert "b.md" in issue.describe()
    ok = [e for e in report.entries if e.id == "a"]
    assert ok[0].metadata == {"tenant": "acme", "acl": ("group:eng",)}


def test_entries_built_in_python_carry_labels_in_metadata() -> None:
    entry = gw.KnowledgeEntry(
        "a", "A", "s", "d", (), metadata={"tenant": "acme", "acl": ["group:eng"]}
    )
    report = gw.normalize_and_validate([gw.KnowledgeSource("s", "1", (entry,))])
    assert report.ok
    assert report.entries[0].metadata == {"tenant": "acme", "acl": ("group:eng",)}
    clash = gw.normalize_and_validate(
        [
            {
                "id": "s",
                "version": "1",
                "entries": [
                    {
                        "id": "a",
                        "title": "A",
                        "summary": "s",
                        "domain": "d",
                        "integrations": [],
                        "tenant": "acme",
                        "metadata": {"tenant": "beta"},
                    }
                ],
            }
        ]
    )
    assert [i.code for i in clash.errors] == ["field-invalid"]
    assert "both at the top level and in 'metadata'" in clash.errors[0].message
