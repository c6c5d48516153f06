"""A static retriever: line-level substring matching over a few small texts, for tests and
tiny spaces. It is not ranking: every matching line scores 1.0.

``StaticRetriever({"product-canon": "Rotate API keys from Settings > API.\\n..."})``
holds named spaces of text. :meth:`StaticRetriever.retrieve` returns, as cited
:class:`~groundwire.Excerpt` records, the lines whose case-folded text contains the
case-folded query, in space-key order then line order, at most ``top_k``, none when
``min_score`` is above 1.0. A space may carry tenant and ACL labels
(:class:`StaticSpace`); a principal sees only the spaces its labels admit, exactly as
for entries and chunks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from groundwire.access.filters import admits_labels
from groundwire.access.labels import Labels, parse_acl, parse_tenant
from groundwire.config import (
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_STATIC_TOP_K,
    MAX_SEARCH_K,
    MAX_STATIC_SPACE_CHARS,
)
from groundwire.errors import ConfigError, QueryError
from groundwire.index.knowledge_base import check_query
from groundwire.model import Excerpt, Filter, Principal

__all__ = ["StaticRetriever", "StaticSpace"]

#: The score of every matching line.
STATIC_SCORE = 1.0


@dataclass(frozen=True, slots=True)
class StaticSpace:
    """The text of one static space and its access labels (no tenant: shared)."""

    text: str
    tenant: str | None = None
    acl: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Line:
    number: int
    start: int
    text: str
    folded: str


@dataclass(frozen=True, slots=True)
class _Space:
    key: str
    version: str
    labels: Labels
    lines: tuple[_Line, ...]


def _space(key: object, value: object) -> _Space:
    if not isinstance(key, str) or not key.strip():
        raise ConfigError(f"static space key {key!r} is invalid: expected a non-empty name")
    space = StaticSpace(value) if isinstance(value, str) else value
    if not isinstance(space, StaticSpace) or not isinstance(space.text, str):
        raise ConfigError(f"static space {key!r}: expected text or a StaticSpace(text, ...)")
    if len(space.text) > MAX_STATIC_SPACE_CHARS:
        raise ConfigError(
            f"static space {key!r} has {len(space.text):,} characters, over "
            f"{MAX_STATIC_SPACE_CHARS:,}; index large texts as documents instead"
        )
    try:
        labels = Labels(parse_tenant(space.tenant), parse_acl(space.acl))
    except ValueError as exc:
        raise ConfigError(f"static space {key!r}: {exc}") from exc
    lines, offset = [], 0
    for number, line in enumerate(space.text.split("\n"), start=1):
        if line.strip():
            lines.append(_Line(number, offset, line, line.casefold()))
        offset += len(line) + 1
    version = hashlib.sha256(space.text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return _Space(key, version, labels, tuple(lines))


class StaticRetriever:
    """Line-level substring retrieval over named texts (see the module docstring)."""

    def __init__(self, spaces: Mapping[str, str | StaticSpace]) -> None:
        if not isinstance(spaces, Mapping):
            raise ConfigError("spaces must map space keys to text (or StaticSpace)")
        self._spaces = {key: _space(key, value) for key, value in sorted(spaces.items())}

    @property
    def spaces(self) -> tuple[str, ...]:
        """The space keys, sorted."""
        return tuple(self._spaces)

    def retrieve(
        self,
        query: str,
        *,
        space: str | None = None,
        top_k: int = DEFAULT_STATIC_TOP_K,
        min_score: float = 0.0,
        principal: Principal | None = None,
    ) -> list[Excerpt]:
        """Lines containing ``query`` (case-insensitive), each scored 1.0, at most ``top_k``.

        ``space`` restricts the search to one space (an unknown or invisible one gives
        nothing); ``principal`` (None: anonymous) sees only the spaces its labels admit.
        """
        needle = check_query(query, DEFAULT_MAX_QUERY_CHARS).strip().casefold()
        if not needle:
            raise QueryError("query is empty; pass the words to look for")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_SEARCH_K:
            raise QueryError(f"top_k={top_k!r} is invalid: expected 1 to {MAX_SEARCH_K}")
        if not isinstance(min_score, int | float) or isinstance(min_score, bool):
            raise QueryError(f"min_score={min_score!r} is invalid: expected a number")
        if min_score > STATIC_SCORE:
            return []
        flt = Filter.of(principal)
        found: list[Excerpt] = []
        for key, held in self._spaces.items():
            if (space is not None and key != space) or not admits_labels(flt, held.labels):
                continue
            for line in held.lines:
                if needle not in line.folded:
                    continue
                found.append(_excerpt(held, line))
                if len(found) == top_k:
                    return found
        return found


def _excerpt(space: _Space, line: _Line) -> Excerpt:
    line_id = f"{space.key}#L{line.number}"
    return Excerpt(
        id=line_id,
        source_id=space.key,
        path=space.key,
        headings=(),
        start=line.start,
        end=line.start + len(line.text),
        text=line.text,
        version=space.version,
        sha256=hashlib.sha256(line.text.encode("utf-8", "surrogatepass")).hexdigest(),
        score=STATIC_SCORE,
        chunk_ids=(line_id,),
    )
