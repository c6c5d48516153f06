"""validate_citations: both syntaxes, valid/invalid/malformed, every evidence shape, properties."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import (
    Citation,
    CitationReport,
    Excerpt,
    KnowledgeBase,
    KnowledgeBlock,
    chunk_text,
    chunks_to_documents,
    retrieve_evidence,
    validate_citations,
)


def excerpt(
    excerpt_id: str, version: str = "abc123abc123", chunk_ids: tuple[str, ...] = ()
) -> Excerpt:
    source = excerpt_id.split("#")[0]
    return Excerpt(
        id=excerpt_id,
        source_id=source,
        path=source,
        headings=(),
        start=0,
        end=4,
        text="text",
        version=version,
        sha256="0" * 64,
        score=1.0,
        chunk_ids=chunk_ids or (excerpt_id,),
    )


EVIDENCE = [excerpt("guide.md#0"), excerpt("faq.md#2", "fff000fff000", ("faq.md#1", "faq.md#2"))]


def test_evidence_citations_of_offered_ids_are_valid() -> None:
    report = validate_citations(
        "Quokkas smile [evidence:guide.md#0] often [evidence:faq.md#1].", EVIDENCE
    )
    assert report.ok
    assert report.cited
    assert report.cited_ids == ("guide.md#0", "faq.md#1")  # a merged chunk counts
    assert [c.kind for c in report.citations] == ["evidence", "evidence"]
    assert all(c.version is None for c in report.citations)
    assert report.invalid == ()


def test_kb_citations_check_id_and_version() -> None:
    text = (
        "A [KB:guide.md#0@abc123abc123] B [KB:guide.md#0@999999999999] "
        "C [KB:nope.md#0@abc123abc123]"
    )
    report = validate_citations(text, EVIDENCE)
    assert [c.problem for c in report.citations] == [None, "wrong-version", "unknown-id"]
    assert not report.ok
    assert report.invalid_tags == ("[KB:guide.md#0@999999999999]", "[KB:nope.md#0@abc123abc123]")


def test_ids_outside_the_evidence_are_invalid() -> None:
    report = validate_citations("See [evidence:secret.md#4].", EVIDENCE)
    assert report.cited
    assert not report.ok
    assert report.invalid[0].id == "secret.md#4"
    assert report.invalid[0].problem == "unknown-id"


def test_no_citation_is_not_ok() -> None:
    report = validate_citations("Quokkas are marsupials.", EVIDENCE)
    assert (report.cited, report.ok, report.citations) == (False, False, ())


def test_malformed_kb_citation_without_version_is_reported() -> None:
    report = validate_citations("see [KB:guide.md#0] and [KB:faq.md#2@fff000fff000]", EVIDENCE)
    assert [c.problem for c in report.citations] == ["malformed", None]
    assert report.citations[0].tag == "[KB:guide.md#0]"
    assert not report.ok


def test_positions_and_tags_are_exact() -> None:
    text = "x [ evidence: guide.md#0 ] y"
    (check,) = validate_citations(text, EVIDENCE).citations
    assert text[check.start : check.end] == check.tag == "[ evidence: guide.md#0 ]"
    assert check.id == "guide.md#0"
    assert check.valid


def test_prefixes_are_case_insensitive() -> None:
    report = validate_citations("[Evidence:guide.md#0] [kb:faq.md#2@fff000fff000]", EVIDENCE)
    assert report.ok
    assert len(report.citations) == 2


def test_ids_with_brackets_and_at_signs() -> None:
    evidence = [excerpt("pages/[slug].md#0"), excerpt("me@host.md#1", "v1")]
    text = "[evidence:pages/[slug].md#0] [KB:me@host.md#1@v1] [evidence:me@host.md#1]"
    report = validate_citations(text, evidence)
    assert [c.id for c in report.citations] == ["pages/[slug].md#0", "me@host.md#1", "me@host.md#1"]
    assert report.ok


def test_evidence_with_a_version_suffix_is_read() -> None:
    report = validate_citations("[evidence:guide.md#0@abc123abc123]", EVIDENCE)
    assert report.ok
    assert report.citations[0].version == "abc123abc123"


def test_accepts_citations_blocks_and_evidence_results() -> None:
    block = KnowledgeBlock("ctx", (Citation("security.keys", "2026-11-15"),), {})
    assert validate_citations("[KB:security.keys@2026-11-15]", block).ok
    assert validate_citations("[evidence:security.keys]", [Citation("security.keys", "1")]).ok
    chunks = chunk_text("Quokkas live on Rottnest Island.", "island.md", kind="markdown")
    kb = KnowledgeBase.from_documents(chunks_to_documents(chunks))
    result = retrieve_evidence(kb, "quokkas island")
    assert result.ready
    assert validate_citations(f"Yes {result.citations[0].tag}.", result).ok
    assert validate_citations("Yes [evidence:island.md#0].", result).ok
    assert validate_citations("Yes [evidence:island.md#0].", chunks).ok


def test_bad_evidence_and_text_types_are_type_errors() -> None:
    with pytest.raises(TypeError, match="Excerpt, Citation"):
        validate_citations("x", [object()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="EvidenceResult"):
        validate_citations("x", "guide.md#0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a string"):
        validate_citations(None, EVIDENCE)  # type: ignore[arg-type]


def test_report_type() -> None:
    assert isinstance(validate_citations("", []), CitationReport)
    assert validate_citations("", []).offered == ()


# -- properties -------------------------------------------------------------------------------
# Ids as chunkers make them: a path (maybe with balanced brackets or "@") and "#n".
_SEGMENT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="[]@\n\r#"),
    min_size=1,
    max_size=12,
).filter(lambda s: s.strip() == s and s != "")
_IDS = st.builds(
    lambda head, bracket, n: f"{head}{f'[{bracket}]' if bracket else ''}.md#{n}",
    _SEGMENT,
    st.one_of(st.none(), _SEGMENT),
    st.integers(0, 999),
)
_VERSIONS = st.text("0123456789abcdef", min_size=12, max_size=12)


# Arbitrary text, with the pieces of the syntax mixed in so near-citations are common.
_TEXT = st.lists(
    st.one_of(
        st.text(max_size=20),
        st.sampled_from(["[", "]", "[KB:", "[evidence:", "[kb: ", "@", "#0", "\n", " ", ".md"]),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXT, st.lists(_IDS, max_size=4))
def test_never_crashes_on_arbitrary_text(text: str, ids: list[str]) -> None:
    report = validate_citations(text, [excerpt(i) for i in ids])
    for check in report.citations:
        assert text[check.start : check.end] == check.tag
        assert check.valid == (check.problem is None)
    assert report.ok == (report.cited and not report.invalid)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_IDS, _VERSIONS), min_size=1, max_size=5, unique_by=lambda t: t[0]),
    st.lists(
        st.text(st.characters(blacklist_characters="[]"), max_size=30), min_size=1, max_size=6
    ),
)
def test_round_trip_of_every_offered_tag(pairs: list[tuple[str, str]], filler: list[str]) -> None:
    """Every offered citation written as its tag (or as [evidence:ID]) is found, valid, exact."""
    evidence = [excerpt(i, v) for i, v in pairs]
    tags = [f"[evidence:{i}]" if n % 2 else Citation(i, v).tag for n, (i, v) in enumerate(pairs)]
    text = "".join(f"{f}{t}" for f, t in zip(filler * len(tags), tags, strict=False)) + filler[0]
    report = validate_citations(text, evidence)
    assert report.ok
    assert [c.tag for c in report.citations] == tags
    assert report.cited_ids == tuple(dict.fromkeys(i for i, _ in pairs))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_IDS, _VERSIONS), min_size=1, max_size=4), _IDS)
def test_an_id_not_offered_is_always_invalid(pairs: list[tuple[str, str]], other: str) -> None:
    offered = {i for i, _ in pairs}
    evidence = [excerpt(i, v) for i, v in pairs]
    report = validate_citations(f"claim [evidence:{other}]", evidence)
    assert report.cited
    assert report.ok == (other in offered)


# -- crafted model output (issue 9, defect 2) ----------------------------------------------
# The pattern validate_citations used before it became linear: the reference semantics.
# Lazy ids between optional blanks backtrack polynomially on "[evidence:" + spaces
# (4,000 spaces took 23 s), so it only ever sees short texts here.
_OLD_ID = r"(?:[^\[\]\n]|\[[^\[\]\n]*\])+?"
_OLD = re.compile(
    r"\[[ \t]*(?:"
    rf"(?P<ev>(?i:evidence)):[ \t]*(?P<evid>{_OLD_ID})"
    rf"|(?P<mem>(?i:MEM)):[ \t]*(?P<memid>{_OLD_ID})"
    rf"|(?P<kb>(?i:KB)):[ \t]*(?P<kbid>{_OLD_ID})@(?P<version>[^@\[\]\n]+?)"
    rf"|(?P<bad>(?i:KB)):(?P<badid>{_OLD_ID})"
    r")[ \t]*\]"
)


def _reference(text: str) -> list[tuple[str, str, str | None, int, int]]:
    found = []
    for m in _OLD.finditer(text):
        if m.group("ev") is not None:
            found.append(("evidence", m.group("evid").strip(), None, m.start(), m.end()))
        elif m.group("mem") is not None:
            found.append(("memory", m.group("memid").strip(), None, m.start(), m.end()))
        elif m.group("kb") is not None:
            cited = (m.group("kbid").strip(), m.group("version").strip())
            found.append(("kb", *cited, m.start(), m.end()))
        else:
            found.append(("kb", m.group("badid").strip(), None, m.start(), m.end()))
    return found


_PIECES = ["[", "]", "[KB:", "[kb: ", "[evidence:", "[ Evidence:", "[MEM:", "@", "@v1", " ", "\t"]
_PIECES += ["\n"]
_PIECES += ["a", "x/y", "[s]", ":", "a@v1", "#3"]


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)
    | st.text(st.sampled_from(list("[]:@ \tKBkbevidencEMa#/\n")), max_size=30)
)
def test_the_linear_scan_finds_exactly_what_the_old_pattern_found(text: str) -> None:
    report = validate_citations(text, [Citation("a", "v1"), Citation("x/y", "v1")])
    found = []
    for check in report.citations:
        cited = check.id
        if check.kind == "evidence" and check.version is not None:  # read as ID@VERSION
            cited = f"{check.id}@{check.version}"
        version = None if check.kind == "evidence" else check.version
        found.append((check.kind, cited, version, check.start, check.end))
        assert text[check.start : check.end] == check.tag
    assert found == _reference(text)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text",
    [
        "[evidence:" + " " * 200_000,
        "[KB:" + " " * 200_000,
        "[KB:a" + "@" * 200_000,
        "[KB: @" * 50_000,
        "[KB:" + "[x]" * 100_000,
        "[ " * 200_000 + "evidence:x]",
    ],
)
def test_crafted_output_is_checked_in_linear_time(text: str) -> None:
    # Old: polynomial backtracking (the 200,000-space case would run for days); the
    # timeout is only a backstop, the work is linear in the text.
    report = validate_citations(text, [Citation("x", "v")])
    assert not report.truncated
    assert report.ok == text.endswith("evidence:x]")


def test_text_past_the_bound_is_not_read_and_never_ok() -> None:
    from groundwire.config import MAX_CITATION_TEXT_CHARS

    cited = "Rotate it [KB:a@v1]. "
    text = cited + "x" * MAX_CITATION_TEXT_CHARS + " [KB:invented@v1]"
    report = validate_citations(text, [Citation("a", "v1")])
    assert report.truncated
    assert [c.id for c in report.citations] == ["a"]  # the tail was not read
    assert not report.ok
    assert validate_citations(cited, [Citation("a", "v1")]).ok
