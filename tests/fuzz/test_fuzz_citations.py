"""Fuzz: the citation validator never raises and reports what is really in the text."""

from __future__ import annotations

import pytest
from fuzz_support import FUZZ, ran
from hypothesis import given
from hypothesis import strategies as st

from groundwire import Citation, validate_citations

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PIECES = ["[", "]", "[KB:", "[kb:", "[evidence:", "[ EVIDENCE: ", "@", "@v1", " ", "\t", "\n"]
PIECES += ["[MEM:", "a", "docs/[slug].md#0", "x@y", ":", "\u200b", "]]", "[[", "a@v1]", "\\"]
TEXTS = (
    st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=60).map("".join)
    | st.text(max_size=300)
    | st.tuples(st.sampled_from(PIECES), st.integers(1, 50_000)).map(lambda p: p[0] * p[1])
)
OFFERED = [Citation("a", "v1"), Citation("docs/[slug].md#0", "v1"), Citation("x@y", "v1")]


@FUZZ
@given(TEXTS, TEXTS)
def test_citations(prefix: str, text: str) -> None:
    ran("validate_citations")
    full = prefix + text
    report = validate_citations(full, OFFERED)
    last = 0
    for check in report.citations:
        assert full[check.start : check.end] == check.tag
        assert check.start >= last  # in text order, never overlapping
        last = check.end
        assert "\n" not in check.tag
        if check.valid:
            assert (check.id, check.version or "v1") in {(c.id, c.version) for c in OFFERED}
    assert report.ok == (bool(report.citations) and not report.invalid)
