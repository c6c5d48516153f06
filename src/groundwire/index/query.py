"""What a search returns and checks: ranked records, lazy breakdowns, argument checks."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple, overload

from groundwire.config import MAX_SEARCH_K
from groundwire.errors import QueryError
from groundwire.index.delta import DeltaIndex
from groundwire.index.lexical import LexicalIndex

__all__ = [
    "Breakdown",
    "QueryIds",
    "Ranked",
    "Ranking",
    "check_boosts",
    "check_k",
    "check_query",
]

_NUMBER = (int, float)


class Ranked(NamedTuple):
    """One ranked document of a query (internal numbering) and why it scored."""

    doc: int
    score: float
    lexical: float
    exact: bool
    alias: bool


class Ranking(NamedTuple):
    """A ranked list as parallel lists (cheap to build for large k) plus the phrase hits."""

    docs: list[int]
    scores: list[float]
    lexical: list[float]
    exact: set[int]
    alias: set[int]
    total: int  # size of the candidate union before the cap

    def items(self) -> list[Ranked]:
        """The ranked documents as records, best first."""
        return [
            Ranked(doc, score, lex, doc in self.exact, doc in self.alias)
            for doc, score, lex in zip(self.docs, self.scores, self.lexical, strict=True)
        ]


class QueryIds(Sequence[int]):
    """A query's term ids (:meth:`LexicalIndex.ids_of_codes` of its word codes), found on
    first use: the breakdowns of one search share them, and most searches never read them.
    Resolving is deterministic, so two threads racing to do it agree."""

    __slots__ = ("_codes", "_ids", "_lexical")

    def __init__(self, lexical: LexicalIndex | DeltaIndex, codes: list[int]) -> None:
        self._lexical = lexical
        self._codes = codes
        self._ids: list[int] | None = None

    def ids(self) -> list[int]:
        """The term ids, as a list."""
        ids = self._ids
        if ids is None:
            ids = self._ids = self._lexical.ids_of_codes(self._codes)
        return ids

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self.ids()[index]

    def __len__(self) -> int:
        return len(self.ids())

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids())

    def __repr__(self) -> str:
        return f"QueryIds({self.ids()!r})"


class Breakdown(Mapping[str, float]):
    """Per-field BM25 contributions plus ``exact``/``alias`` boosts, computed on first read.

    Explaining costs more than scoring, so a hit only pays for it when asked. The
    computation is deterministic, so two threads racing to resolve it agree.
    """

    __slots__ = ("_args", "_values")

    def __init__(
        self,
        lexical: LexicalIndex | DeltaIndex,
        ids: Sequence[int],
        doc: int,
        exact: float = 0.0,
        alias: float = 0.0,
    ) -> None:
        self._args = (lexical, ids, doc, exact, alias)
        self._values: dict[str, float] | None = None

    def _resolve(self) -> dict[str, float]:
        values = self._values
        if values is None:
            lexical, ids, doc, exact, alias = self._args
            values = lexical.explain_ids(ids, doc)
            values["exact"] = exact
            values["alias"] = alias
            self._values = values
        return values

    def __getitem__(self, key: str) -> float:
        return self._resolve()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolve())

    def __len__(self) -> int:
        return len(self._resolve())

    def __repr__(self) -> str:
        return repr(self._resolve())


def check_query(query: object, max_chars: int) -> str:
    """Validate a query's type and length (``max_query_chars``); returns it."""
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    if len(query) > max_chars:
        raise QueryError(
            f"query has {len(query):,} characters, over max_query_chars={max_chars:,}; "
            "shorten it or raise the limit"
        )
    return query


def check_boosts(exact_boost: object, alias_boost: object) -> None:
    """Validate the exact and alias boosts: finite numbers >= 0."""
    for name, boost in (("exact_boost", exact_boost), ("alias_boost", alias_boost)):
        if not isinstance(boost, _NUMBER) or not 0 <= boost < math.inf:
            raise QueryError(f"{name}={boost!r} is invalid: expected a finite number >= 0")


def check_k(name: str, k: object) -> int:
    """Validate a result count."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEARCH_K:
        raise QueryError(f"{name}={k!r} is invalid: expected an integer from 1 to {MAX_SEARCH_K}")
    return k
