"""The static retriever: line-level substring matches, each scored 1.0, labels applied."""

from __future__ import annotations

import pytest

import groundwire as gw

CANON = "Rotate API keys from Settings > API.\n\nOnly cite reviewed canon content in answers.\n"


def retriever() -> gw.StaticRetriever:
    return gw.StaticRetriever(
        {
            "product-canon": CANON,
            "hr": gw.StaticSpace(
                "Rotate payroll keys quarterly.", tenant="acme", acl=("group:hr",)
            ),
            "beta": gw.StaticSpace("rotate beta tokens", tenant="beta"),
        }
    )


def test_matching_lines_come_back_as_cited_excerpts_scored_one() -> None:
    [hit] = retriever().retrieve("ROTATE api", space="product-canon")
    assert (hit.id, hit.text, hit.score) == (
        "product-canon#L1",
        "Rotate API keys from Settings > API.",
        1.0,
    )
    assert CANON[hit.start : hit.end] == hit.text
    later = retriever().retrieve("canon", space="product-canon")[0]
    assert later.id == "product-canon#L3"
    assert CANON[later.start : later.end] == later.text
    assert hit.citation.tag.startswith("[KB:product-canon#L1@")


def test_top_k_and_min_score() -> None:
    spaces = {"s": "a line\nanother line\nthird line"}
    static = gw.StaticRetriever(spaces)
    assert [e.id for e in static.retrieve("line", top_k=2)] == ["s#L1", "s#L2"]
    assert static.retrieve("line", min_score=1.0)
    assert static.retrieve("line", min_score=1.5) == []
    assert static.retrieve("nothing") == []


def test_spaces_are_searched_in_key_order_and_labels_apply() -> None:
    static = retriever()
    assert [e.source_id for e in static.retrieve("rotate")] == ["product-canon"]  # anonymous
    hr = gw.Principal("acme", "h", ["hr"])
    assert [e.source_id for e in static.retrieve("rotate", principal=hr)] == ["hr", "product-canon"]
    beta = gw.Principal("beta", "b")
    assert [e.source_id for e in static.retrieve("rotate", principal=beta)] == [
        "beta",
        "product-canon",
    ]
    assert static.retrieve("rotate", space="hr") == []  # invisible is the same as unknown
    assert static.retrieve("rotate", space="nowhere") == []
    assert static.spaces == ("beta", "hr", "product-canon")


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.retrieve("   "), gw.QueryError),
        (lambda s: s.retrieve("x", top_k=0), gw.QueryError),
        (lambda s: s.retrieve("x", min_score="high"), gw.QueryError),
        (lambda s: s.retrieve(42), gw.QueryError),
        (lambda s: gw.StaticRetriever({"": "x"}), gw.ConfigError),
        (lambda s: gw.StaticRetriever({"s": 3}), gw.ConfigError),
        (lambda s: gw.StaticRetriever({"s": gw.StaticSpace("x", acl=("role:x",))}), gw.ConfigError),
        (lambda s: gw.StaticRetriever({"s": "x" * 1_000_001}), gw.ConfigError),
    ],
)
def test_bad_input_is_a_clear_error(call: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        call(retriever())  # type: ignore[operator]
