"""The fusion kernel (index/_fusion.c) fuses exactly as the numpy path: same hits, same
fused scores bit for bit, same breakdowns; what it does not compute falls back to numpy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundwire import HybridSettings
from groundwire.index import _fusion
from groundwire.retrieve import channels
from groundwire.retrieve.channels import ChannelList, FusedHit, fuse

pytestmark = pytest.mark.skipif(not _fusion.available(), reason="fusion kernel not built")


@contextmanager
def numpy_fusion() -> Iterator[None]:
    """Fusion without the kernel (as when it is not built)."""
    with mock.patch.object(channels._fusion, "available", return_value=False):
        yield


def _both(lists: list[ChannelList], hs: HybridSettings, limit: int | None, scorers: Any):
    native = fuse(lists, hs, limit, scorers)
    with numpy_fusion():
        reference = fuse(lists, hs, limit, scorers)
    return native, reference


def _same(native: list[FusedHit], reference: list[FusedHit]) -> None:
    assert [(h.doc, h.score) for h in native] == [(h.doc, h.score) for h in reference]
    assert native == reference  # the breakdowns too (rank, raw, normalized, contribution)


# Few distinct scores, so ties (within and across channels) are common.
SCORES = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 3.5, 7.25, -0.5, -1.0, 0.1, 1 / 3])


@st.composite
def channel_lists(draw: st.DrawFn) -> list[ChannelList]:
    names = draw(st.lists(st.sampled_from(channels.CHANNELS), min_size=1, max_size=3, unique=True))
    out = []
    for name in names:
        docs = draw(st.lists(st.integers(0, 40), max_size=15, unique=True))
        scores = sorted((draw(SCORES) for _ in docs), reverse=True)
        if name != "dense":
            scores = [abs(s) for s in scores]
        out.append(ChannelList.of(name, docs, sorted(scores, reverse=True)))
    return out


@settings(max_examples=150, deadline=None)
@given(
    lists=channel_lists(),
    fusion=st.sampled_from(["weighted", "rrf"]),
    normalization=st.sampled_from(["minmax", "tmm", "zscore", "dbsf", "list"]),
    weight=st.sampled_from([0.0, 0.3, 0.5, 1.0, 0.7]),
    limit=st.one_of(st.none(), st.integers(0, 30)),
    fill=st.booleans(),
)
def test_the_kernel_fuses_exactly_as_numpy(
    lists: list[ChannelList],
    fusion: str,
    normalization: str,
    weight: float,
    limit: int | None,
    fill: bool,
) -> None:
    hs = HybridSettings(fusion=fusion, normalization=normalization, dense_weight=weight)  # type: ignore[arg-type]
    scorers = (
        {
            "lexical": lambda docs: (docs % 7) * 0.5,
            "dense": lambda docs: [((d * 37) % 11 - 5) / 5 for d in docs.tolist()],
        }
        if fill
        else None
    )
    _same(*_both(lists, hs, limit, scorers))


def test_scorers_are_asked_for_the_members_a_channel_did_not_list() -> None:
    lexical = ChannelList.of("lexical", [3, 1], [2.0, 1.0])
    dense = ChannelList.of("dense", [1, 5, 0], [0.9, 0.5, 0.1])
    asked: dict[str, list[int]] = {}

    def scorer(name: str) -> Any:
        def score(docs: np.ndarray) -> list[float]:
            asked.setdefault(name, []).extend(docs.tolist())
            return [0.25] * len(docs)

        return score

    scorers = {"lexical": scorer("lexical"), "dense": scorer("dense")}
    hits = fuse([lexical, dense], HybridSettings(), None, scorers)
    assert asked == {"lexical": [0, 5], "dense": [3]}
    with numpy_fusion():
        _same(hits, fuse([lexical, dense], HybridSettings(), None, scorers))


def test_a_list_naming_a_position_twice_falls_back_to_numpy() -> None:
    odd = ChannelList.of("lexical", [2, 2, 1], [3.0, 2.0, 1.0])
    dense = ChannelList.of("dense", [1, 4], [0.5, 0.25])
    _same(*_both([odd, dense], HybridSettings(), None, None))
    docs, scores = [odd.docs, dense.docs], [odd.scores, dense.scores]
    refused = _fusion.fuse_lists(
        docs, scores, [_fusion.MINMAX] * 2, [0.5, 0.5], [0.0, -1.0], 60, None, lambda c, d: None
    )
    assert refused is None


def test_an_unknown_fusion_method_is_left_to_numpy() -> None:
    lists = [ChannelList.of("lexical", [0, 1], [2.0, 1.0])]
    hs = HybridSettings()
    object.__setattr__(hs, "fusion", "future-method")  # a method added later
    assert channels._kinds(lists, hs) is None
