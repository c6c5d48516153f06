"""Loading knowledge sources from Python objects, JSON/YAML files and Markdown folders."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import groundwire.ingest.sources as sources_module
from groundwire import KnowledgeEntry, KnowledgeSource, SourceError, load_sources
from groundwire.ingest import normalize_and_validate, read_front_matter

EntryFactory = Callable[..., dict[str, Any]]
SourceFactory = Callable[..., dict[str, Any]]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def entry_md(entry_id: str, text: str = "", **extra: str) -> str:
    """A Markdown entry file: front matter (``extra`` adds/overrides keys), then ``text``."""
    fields = {
        "id": entry_id,
        "title": f"Title of {entry_id}",
        "summary": f"Summary of {entry_id}.",
        "domain": entry_id.split(".")[0],
        "integrations": "[]",
        **extra,
    }
    front = "".join(f"{key}: {value}\n" for key, value in fields.items())
    return f"---\n{front}---\n{text}"


# -- Python objects -----------------------------------------------------------------------------


def test_load_from_dict(entry_factory: EntryFactory, source_factory: SourceFactory) -> None:
    loaded = load_sources(source_factory(entry_factory("a.one"), source_id="s", version="3"))
    assert len(loaded) == 1
    source = loaded[0]
    assert isinstance(source, KnowledgeSource)
    assert (source.id, source.version) == ("s", "3")
    assert isinstance(source.entries, tuple)
    assert [e["id"] for e in source.entries] == ["a.one"]  # type: ignore[index]


def test_load_from_list_of_dicts(
    entry_factory: EntryFactory, source_factory: SourceFactory
) -> None:
    loaded = load_sources(
        [
            source_factory(entry_factory("a.one"), source_id="first"),
            source_factory(entry_factory("b.two"), entry_factory("b.three"), source_id="second"),
        ]
    )
    assert [s.id for s in loaded] == ["first", "second"]
    assert [len(s.entries) for s in loaded] == [1, 2]


def test_load_from_knowledge_source_returns_it_unchanged() -> None:
    entry = KnowledgeEntry("a.one", "Title", "Summary", "a", ())
    source = KnowledgeSource("s", "v1", (entry,))
    assert load_sources(source) == [source]
    assert load_sources(source)[0] is source
    assert load_sources([source, source]) == [source, source]


def test_load_from_mixed_list(entry_factory: EntryFactory, source_factory: SourceFactory) -> None:
    source = KnowledgeSource("ks", "v2", ())
    loaded = load_sources([source, source_factory(entry_factory("a.one"), source_id="dict")])
    assert [s.id for s in loaded] == ["ks", "dict"]


def test_load_from_unsupported_object_raises() -> None:
    with pytest.raises(SourceError, match="int"):
        load_sources(42)  # type: ignore[arg-type]


def test_numeric_and_date_versions_become_strings() -> None:
    import datetime as dt

    assert load_sources({"id": "s", "version": 3, "entries": []})[0].version == "3"
    loaded = load_sources({"id": "s", "version": dt.date(2026, 11, 15), "entries": []})
    assert loaded[0].version == "2026-11-15"


# -- JSON and YAML files ----------------------------------------------------------------------


def test_load_json_file_with_one_object(
    tmp_path: Path, entry_factory: EntryFactory, source_factory: SourceFactory
) -> None:
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(source_factory(entry_factory("a.one"), source_id="j")))
    loaded = load_sources(path)
    assert len(loaded) == 1
    assert loaded[0].id == "j"
    assert loaded[0].origin == str(path)
    assert [e["id"] for e in loaded[0].entries] == ["a.one"]  # type: ignore[index]


def test_load_json_file_with_a_list(
    tmp_path: Path, entry_factory: EntryFactory, source_factory: SourceFactory
) -> None:
    path = tmp_path / "kb.json"
    data = [
        source_factory(entry_factory("a.one"), source_id="j1"),
        source_factory(entry_factory("b.one"), source_id="j2"),
    ]
    path.write_text(json.dumps(data))
    loaded = load_sources(str(path))  # str paths work as well as Path
    assert [s.id for s in loaded] == ["j1", "j2"]
    assert {s.origin for s in loaded} == {str(path)}


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "kb.json", '{\n  "id": "s",\n  "version": oops\n}\n')
    with pytest.raises(SourceError) as info:
        load_sources(path)
    assert f"{path}:3" in str(info.value)


def test_json_item_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path / "kb.json", '[{"id": "s", "version": "1", "entries": []}, 5]')
    with pytest.raises(SourceError, match=r"item #2 is a int"):
        load_sources(path)


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".YAML"])
def test_load_yaml_file(tmp_path: Path, suffix: str) -> None:
    path = write(
        tmp_path / f"kb{suffix}",
        "id: y\nversion: 2026-11-15\nentries:\n"
        "  - id: a.one\n    title: One\n    summary: S.\n    domain: a\n    integrations: []\n",
    )
    loaded = load_sources(path)
    assert len(loaded) == 1
    assert loaded[0].id == "y"
    # an unquoted YAML date is read as a date; the version is its ISO string
    assert loaded[0].version == "2026-11-15"
    assert loaded[0].entries[0]["title"] == "One"  # type: ignore[index]


def test_load_yaml_file_with_a_list(tmp_path: Path) -> None:
    path = write(
        tmp_path / "kb.yaml",
        "- id: y1\n  version: '1'\n  entries: []\n- id: y2\n  version: '2'\n  entries: []\n",
    )
    assert [(s.id, s.version) for s in load_sources(path)] == [("y1", "1"), ("y2", "2")]


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "kb.yaml", "id: y\nversion: '1'\nentries: [\n")
    with pytest.raises(SourceError) as info:
        load_sources(path)
    message = str(info.value)
    assert str(path) in message
    assert f"{path}:4" in message  # the stream ends on line 4, where the list is unclosed
    assert "invalid YAML" in message


def test_empty_yaml_file_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path / "kb.yaml", "")
    with pytest.raises(SourceError, match="item #1"):
        load_sources(path)


# -- file errors ------------------------------------------------------------------------------


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "kb.json"
    path.write_bytes(b'{"id": "caf\xe9"}')
    with pytest.raises(SourceError) as info:
        load_sources(path)
    message = str(info.value)
    assert str(path) in message
    assert "UTF-8" in message
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


def test_non_utf8_markdown_entry(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: kb\nversion: '1'\n")
    bad = tmp_path / "a.one.md"
    bad.write_bytes(entry_md("a.one").encode() + b"caf\xe9\n")
    with pytest.raises(SourceError, match="UTF-8") as info:
        load_sources(tmp_path)
    assert str(bad) in str(info.value)


def test_file_over_the_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "kb.json", json.dumps({"id": "s", "version": "1", "entries": []}))
    monkeypatch.setattr(sources_module, "MAX_SOURCE_FILE_BYTES", 10)
    with pytest.raises(SourceError) as info:
        load_sources(path)
    message = str(info.value)
    assert str(path) in message
    assert "limit" in message
    assert "split" in message


def test_file_at_the_size_limit_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps({"id": "s", "version": "1", "entries": []})
    path = write(tmp_path / "kb.json", text)
    monkeypatch.setattr(sources_module, "MAX_SOURCE_FILE_BYTES", len(text.encode()))
    assert load_sources(path)[0].id == "s"


def test_size_limit_applies_to_markdown_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "source.yaml", "id: kb\nversion: '1'\n")
    big = write(tmp_path / "a.one.md", entry_md("a.one", "x" * 500))
    monkeypatch.setattr(sources_module, "MAX_SOURCE_FILE_BYTES", 100)
    with pytest.raises(SourceError, match="limit") as info:
        load_sources(tmp_path)
    assert str(big) in str(info.value)


@pytest.mark.parametrize("name", ["kb.txt", "kb.toml", "kb"])
def test_unsupported_extension(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, "id = 'x'\n")
    with pytest.raises(SourceError) as info:
        load_sources(path)
    message = str(info.value)
    assert "unsupported source file type" in message
    assert ".json" in message
    assert ".yaml" in message


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(SourceError) as info:
        load_sources(missing)
    assert str(missing) in str(info.value)
    assert "no such file or folder" in str(info.value)


# -- Markdown folders -------------------------------------------------------------------------


def test_markdown_folder_front_matter_and_body(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '7'\n")
    write(
        tmp_path / "a.one.md",
        entry_md("a.one", "\n# Heading\n\nFirst paragraph.\n\n", keywords="[x, y]"),
    )
    write(tmp_path / "b.two.md", entry_md("b.two"))
    loaded = load_sources(tmp_path)
    assert len(loaded) == 1
    source = loaded[0]
    assert (source.id, source.version) == ("docs", "7")
    assert source.origin == str(tmp_path / "source.yaml")
    by_id = {e["id"]: e for e in source.entries}  # type: ignore[index]
    assert by_id["a.one"]["body"] == "# Heading\n\nFirst paragraph."  # stripped
    assert by_id["a.one"]["keywords"] == ["x", "y"]
    assert "body" not in by_id["b.two"]  # an empty body adds no key
    assert source.entry_origins == (str(tmp_path / "a.one.md"), str(tmp_path / "b.two.md"))


def test_markdown_folder_with_bom_and_crlf(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    text = "\ufeff" + entry_md("a.one", "Body line.\n").replace("\n", "\r\n")
    (tmp_path / "a.one.md").write_bytes(text.encode("utf-8"))
    entry = load_sources(tmp_path)[0].entries[0]
    assert entry["id"] == "a.one"  # type: ignore[index]
    assert entry["body"] == "Body line."  # type: ignore[index]


def test_nested_folder_with_its_own_manifest_is_a_second_source(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: outer\nversion: '1'\n")
    write(tmp_path / "a.one.md", entry_md("a.one"))
    # a plain subfolder belongs to the outer source
    write(tmp_path / "guides" / "a.two.md", entry_md("a.two"))
    write(tmp_path / "team" / "source.yaml", "id: inner\nversion: '2'\n")
    write(tmp_path / "team" / "b.one.md", entry_md("b.one"))
    # a folder under the inner source belongs to the inner source
    write(tmp_path / "team" / "deep" / "b.two.md", entry_md("b.two"))
    loaded = {s.id: s for s in load_sources(tmp_path)}
    assert set(loaded) == {"outer", "inner"}
    assert sorted(e["id"] for e in loaded["outer"].entries) == ["a.one", "a.two"]  # type: ignore[index]
    assert sorted(e["id"] for e in loaded["inner"].entries) == ["b.one", "b.two"]  # type: ignore[index]
    assert loaded["inner"].version == "2"
    assert loaded["inner"].origin == str(tmp_path / "team" / "source.yaml")


@pytest.mark.parametrize("name", ["README.md", "readme.md", "ReadMe.MD"])
def test_readme_is_skipped(tmp_path: Path, name: str) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    write(tmp_path / name, "# About this knowledge base\n\nNo front matter here.\n")
    write(tmp_path / "a.one.md", entry_md("a.one"))
    entries = load_sources(tmp_path)[0].entries
    assert [e["id"] for e in entries] == ["a.one"]  # type: ignore[index]


def test_non_markdown_files_in_folder_are_ignored(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    write(tmp_path / "notes.txt", "not an entry")
    write(tmp_path / "image.png", "binary-ish")
    write(tmp_path / "a.one.md", entry_md("a.one"))
    assert len(load_sources(tmp_path)[0].entries) == 1


def test_vcs_folders_are_skipped(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    write(tmp_path / ".git" / "junk.md", "not front matter")
    write(tmp_path / "node_modules" / "pkg" / "readme2.md", "not front matter")
    write(tmp_path / "a.one.md", entry_md("a.one"))
    assert len(load_sources(tmp_path)[0].entries) == 1


def test_body_in_front_matter_and_text_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    path = write(
        tmp_path / "a.one.md", entry_md("a.one", "Text body.\n", body="Front matter body.")
    )
    with pytest.raises(SourceError) as info:
        load_sources(tmp_path)
    message = str(info.value)
    assert str(path) in message
    assert "body is given twice" in message


def test_body_in_front_matter_only_is_kept(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    write(tmp_path / "a.one.md", entry_md("a.one", body="Only in front matter."))
    assert load_sources(tmp_path)[0].entries[0]["body"] == "Only in front matter."  # type: ignore[index]


def test_missing_manifest_with_entries(tmp_path: Path) -> None:
    path = write(tmp_path / "a.one.md", entry_md("a.one"))
    with pytest.raises(SourceError) as info:
        load_sources(tmp_path)
    message = str(info.value)
    assert str(path) in message
    assert "source.yaml" in message
    assert "'id' and 'version'" in message


def test_folder_without_manifest_or_entries(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="not a knowledge base folder"):
        load_sources(tmp_path)


def test_manifest_unknown_key(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\nowner: me\n")
    with pytest.raises(SourceError, match=r"unknown key.*owner"):
        load_sources(tmp_path)


def test_manifest_not_a_mapping(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "- id\n- version\n")
    with pytest.raises(SourceError, match="must be a YAML mapping"):
        load_sources(tmp_path)


def test_invalid_manifest_yaml_names_file_and_line(tmp_path: Path) -> None:
    manifest = write(tmp_path / "source.yaml", "id: docs\nversion: '1\n")
    with pytest.raises(SourceError) as info:
        load_sources(tmp_path)
    assert str(manifest) in str(info.value)
    assert "invalid YAML" in str(info.value)


def test_invalid_front_matter_yaml_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    path = write(
        tmp_path / "a.one.md",
        "---\nid: a.one\ntitle: One\nsummary: broken: colon\ndomain: a\nintegrations: []\n---\n",
    )
    with pytest.raises(SourceError) as info:
        load_sources(tmp_path)
    # line 4 of the file (the fence is line 1)
    assert f"{path}:4:" in str(info.value)


def test_missing_front_matter(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    path = write(tmp_path / "a.one.md", "# Just markdown\n")
    with pytest.raises(SourceError, match="missing front matter") as info:
        load_sources(tmp_path)
    assert f"{path}:1" in str(info.value)


def test_unclosed_front_matter(tmp_path: Path) -> None:
    path = write(tmp_path / "a.md", "---\nid: a\n")
    with pytest.raises(SourceError, match="not closed"):
        read_front_matter(path)


def test_front_matter_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path / "a.md", "---\n- a\n- b\n---\nbody\n")
    with pytest.raises(SourceError, match="must be a YAML mapping"):
        read_front_matter(path)


def test_empty_front_matter_reads_as_empty_mapping(tmp_path: Path) -> None:
    path = write(tmp_path / "a.md", "---\n---\nbody\n")
    assert read_front_matter(path) == ({}, "body")


def test_yaml_date_version_in_manifest_becomes_string(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: 2026-11-15\n")
    write(tmp_path / "a.one.md", entry_md("a.one"))
    loaded = load_sources(tmp_path)
    assert loaded[0].version == "2026-11-15"
    report = normalize_and_validate(loaded)
    assert report.ok
    assert report.entries[0].version == "2026-11-15"
    assert report.entries[0].citation.tag == "[KB:a.one@2026-11-15]"


def test_origins_flow_into_validation_issues(tmp_path: Path) -> None:
    write(tmp_path / "source.yaml", "id: docs\nversion: '1'\n")
    write(tmp_path / "a.one.md", entry_md("a.one"))
    bad = write(tmp_path / "b.two.md", entry_md("b.two", kind="essay"))
    report = normalize_and_validate(load_sources(tmp_path))
    assert [(i.code, i.origin, i.entry_id) for i in report.errors] == [
        ("kind-unsupported", str(bad), "b.two")
    ]


# -- the shipped handbook -------------------------------------------------------------------


def test_handbook_loads_with_80_entries(handbook_path: Path) -> None:
    loaded = load_sources(handbook_path)
    assert len(loaded) == 1
    source = loaded[0]
    assert source.id == "relaybird-handbook"
    assert source.version == "2026-11-15"
    assert source.origin == str(handbook_path / "source.yaml")
    assert len(source.entries) == 80
    assert len(source.entry_origins) == 80
    for entry, origin in zip(source.entries, source.entry_origins, strict=True):
        assert origin is not None
        path = Path(origin)
        assert path.parent == handbook_path
        assert path.is_file()
        # each file is named after the entry it holds
        assert path.name == f"{entry['id']}.md"  # type: ignore[index]
    assert len(set(source.entry_origins)) == 80


def test_entry_front_matter_counts_entry_like_markdown_files(tmp_path: Path) -> None:
    from groundwire.ingest.sources import entry_front_matter

    (tmp_path / "sub").mkdir()
    (tmp_path / "a.md").write_text("---\nid: a\nsummary: S\n---\nBody\n", encoding="utf-8")
    (tmp_path / "sub" / "b.md").write_text("---\ntitle: Guide\n---\n# Guide\n", encoding="utf-8")
    (tmp_path / "c.md").write_text("# No front matter\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("---\nid: r\ndomain: d\n---\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("---\nid: t\ndomain: d\n---\n", encoding="utf-8")
    assert entry_front_matter(tmp_path) == (1, 3)
