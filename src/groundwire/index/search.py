"""Searching a knowledge base: words to ranked, explained hits (a mixin of KnowledgeBase).

:class:`Searching` holds the query path of :class:`~groundwire.index.KnowledgeBase`: word
codes, BM25 top-k through the C kernel (or numpy), exact/alias phrase boosts, lazy
breakdowns and ``explain``. It reads the knowledge base's parts and keeps no state of its
own beyond the word-code cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from functools import partial
from itertools import repeat

from groundwire.access.authorize import check_callback
from groundwire.config import DEFAULT_ALIAS_BOOST, DEFAULT_EXACT_BOOST, DEFAULT_MAX_QUERY_CHARS
from groundwire.errors import KnowledgeIndexError
from groundwire.index.delta import DeltaIndex
from groundwire.index.lexical import SKIP, UNKNOWN, LexicalIndex, MaskArray
from groundwire.index.lookups import Masks, Phrases
from groundwire.index.query import (
    Breakdown,
    QueryIds,
    Ranking,
    check_boosts,
    check_k,
    check_query,
)
from groundwire.model import Hit, KnowledgeEntry, Scope
from groundwire.text import Analyzer

__all__ = ["WORD_CACHE_LIMIT", "Searching"]

#: Query words whose codes a knowledge base remembers (see Searching._word_codes).
WORD_CACHE_LIMIT = 65_536
_NO_PHRASE_HITS: Set[int] = frozenset()
# Hit._make without its Python-level frame: searches build up to k hits per query.
_new_hit = partial(tuple.__new__, Hit)


class Searching:
    """The query methods of a knowledge base (see the module docstring)."""

    __slots__ = ()
    _analyzer: Analyzer
    _entries: Sequence[KnowledgeEntry]
    _entry_ids: list[str] | None
    _lexical: LexicalIndex | DeltaIndex
    _masks: Masks
    _phrases: Phrases
    _position: Mapping[str, int]
    _word_cache: dict[str, int]
    _word_lock: threading.Lock

    def _eligible(
        self,
        scope: Scope | None,
        blocked_domains: Iterable[str],
        allow: Callable[[KnowledgeEntry], object] | None,
    ) -> tuple[MaskArray, MaskArray | None]:
        raise NotImplementedError  # pragma: no cover - KnowledgeBase defines it

    # -- scoring ------------------------------------------------------------------------------
    def query_ids(self, segments: Iterable[Sequence[str]]) -> list[int]:
        """The BM25 query of analyzed text segments: each segment's term ids and, when the
        index has term pairs, its adjacent pairs (a pair never spans two segments)."""
        query_ids = self._lexical.query_ids
        return [tid for terms in segments for tid in query_ids(terms)]

    def _word_codes(self, words: list[str]) -> list[int]:
        """The word codes of normalized query words (from ``Analyzer.words``): each word's
        term id, SKIP for a stop word, UNKNOWN for a word whose term is not indexed.

        Each distinct word is analyzed and looked up once, then remembered (up to
        WORD_CACHE_LIMIT words; the cache is emptied when full), so a known word costs one
        dictionary lookup instead of the analyzer's stem cache plus the vocabulary.
        Thread-safe: lookups only read; new words are added under a lock, and a search
        uses the codes it read or computed even if another thread empties the cache.
        """
        known = self._word_cache
        try:
            return [known[word] for word in words]
        except KeyError:
            return self._learn_words(words)

    def _learn_words(self, words: list[str]) -> list[int]:
        known = self._word_cache
        codes = {word: code for word in words if (code := known.get(word)) is not None}
        new = [word for word in dict.fromkeys(words) if word not in codes]
        get = self._lexical.vocabulary.get
        learned = {
            word: get(term, UNKNOWN) if term else SKIP  # "" is a stop word
            for word, term in zip(new, self._analyzer.analyze_words(new), strict=True)
        }
        with self._word_lock:
            if len(known) + len(learned) > WORD_CACHE_LIMIT:
                known.clear()
            known.update(learned)
        codes.update(learned)
        return [codes[word] for word in words]

    def phrase_matches(self, terms: Sequence[str]) -> tuple[set[int], set[int]]:
        """Positions of entries whose exact (id/title) or alias phrase occurs in ``terms``.

        Checks every contiguous n-gram of the terms up to the longest indexed phrase.
        """
        return self._phrases.matches(terms)

    def rank(
        self,
        lexical_ids: Sequence[int],
        phrase_terms: Sequence[str],
        *,
        lexical_k: int,
        limit: int,
        mask: MaskArray | None = None,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
    ) -> Ranking:
        """Union of the BM25 top ``lexical_k`` (for term ids from :meth:`query_ids`) and
        phrase hits, boosted, sorted, capped.

        Only positions allowed by ``mask`` take part (before top-k). A boost of 0
        turns its phrase channel off.
        """
        lexical_index = self._lexical
        skip = self._masks.skip(mask)
        if skip is None:
            mask = None  # everything is eligible: skip masking work
        doc_list, value_list = lexical_index.top(lexical_ids, lexical_k, skip)
        exact: set[int] = set()
        alias: set[int] = set()
        if exact_boost > 0 or alias_boost > 0:
            exact, alias = self.phrase_matches(phrase_terms)
            exact = {d for d in exact if mask is None or mask[d]} if exact_boost > 0 else set()
            alias = {d for d in alias if mask is None or mask[d]} if alias_boost > 0 else set()
        if not exact and not alias:  # top() already sorted by score, then position
            head = value_list[:limit]
            return Ranking(doc_list[:limit], head, head, exact, alias, len(doc_list))
        lexical = dict(zip(doc_list, value_list, strict=True))
        for doc in exact | alias:
            if doc not in lexical:
                lexical[doc] = lexical_index.score_of_ids(lexical_ids, doc)
        order = sorted(
            (
                -(
                    lex
                    + (exact_boost if doc in exact else 0.0)
                    + (alias_boost if doc in alias else 0.0)
                ),
                doc,
                lex,
            )
            for doc, lex in lexical.items()
        )[:limit]
        return Ranking(
            [doc for _, doc, _ in order],
            [-negative for negative, _, _ in order],
            [lex for _, _, lex in order],
            exact,
            alias,
            len(lexical),
        )

    def breakdown(
        self, lexical_ids: Sequence[int], doc: int, exact: float = 0.0, alias: float = 0.0
    ) -> Breakdown:
        """The lazily computed explanation of position ``doc`` with the boosts it received."""
        return Breakdown(self._lexical, lexical_ids, doc, exact, alias)

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        scope: Scope | None = None,
        blocked_domains: Iterable[str] = (),
        allow: Callable[[KnowledgeEntry], object] | None = None,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> list[Hit]:
        """The ``k`` best active entries for ``query``: BM25 plus exact/alias boosts.

        Ties break on id (code point order). ``scope``, ``blocked_domains`` and
        ``allow`` restrict eligibility before ranking (see :meth:`eligibility`).
        Each hit's ``breakdown`` explains its score per field and boost.
        """
        found = self._ranked(
            query, k, scope, blocked_domains, allow, exact_boost, alias_boost, max_query_chars
        )
        if found is None:
            return []
        docs, scores, exact, alias, ids = found
        index = self._lexical
        breakdowns: Iterable[Breakdown]
        if exact or alias:
            breakdowns = [
                Breakdown(
                    index,
                    ids,
                    doc,
                    exact_boost if doc in exact else 0.0,
                    alias_boost if doc in alias else 0.0,
                )
                for doc in docs
            ]
        else:  # no phrase hits among the results (the common case): no Python-level loop
            breakdowns = map(Breakdown, repeat(index), repeat(ids), docs)
        return list(map(_new_hit, zip(self._ids_of(docs), scores, breakdowns, strict=True)))

    def search_ids(
        self,
        query: str,
        k: int = 10,
        *,
        scope: Scope | None = None,
        blocked_domains: Iterable[str] = (),
        allow: Callable[[KnowledgeEntry], object] | None = None,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> tuple[list[str], list[float]]:
        """:meth:`search` reduced to ranked ids and scores, without explanations.

        Same ranking as :meth:`search`; cheaper when only the order matters (evaluation,
        pipelines that fetch entries themselves).
        """
        found = self._ranked(
            query, k, scope, blocked_domains, allow, exact_boost, alias_boost, max_query_chars
        )
        if found is None:
            return [], []
        return self._ids_of(found[0]), found[1]

    def _ids_of(self, docs: list[int]) -> list[str]:
        """The entry ids at positions ``docs``."""
        ids = self._entry_ids
        if ids is not None:
            return [ids[doc] for doc in docs]
        entries = self._entries
        return [entries[doc].id for doc in docs]

    def _ranked(
        self,
        query: str,
        k: int,
        scope: Scope | None,
        blocked_domains: Iterable[str],
        allow: Callable[[KnowledgeEntry], object] | None,
        exact_boost: float,
        alias_boost: float,
        max_query_chars: int,
    ) -> tuple[list[int], list[float], Set[int], Set[int], Sequence[int]] | None:
        """Validate a search and rank it; None when the query has no terms.

        Returns the documents and scores, best first, the exact and alias phrase hits
        among the candidates, and the query's term ids (resolved lazily, for breakdowns).
        Without phrase boosts to apply (boosts 0, or no phrase keys at all, e.g. documents),
        the query goes from word codes to results in one kernel call
        (:meth:`LexicalIndex.top_codes`); otherwise through :meth:`rank`, which gives the
        same BM25 order.
        """
        words = self._analyzer.words(check_query(query, max_query_chars))
        check_k("k", k)
        check_callback(allow, "allow")
        if exact_boost is not DEFAULT_EXACT_BOOST or alias_boost is not DEFAULT_ALIAS_BOOST:
            check_boosts(exact_boost, alias_boost)  # the defaults are valid
        codes = self._word_codes(words)
        if codes.count(SKIP) == len(codes):  # no words, or only stop words
            return None
        mask, skip = self._eligible(scope, blocked_domains, allow)
        lexical = self._lexical
        if (exact_boost > 0 or alias_boost > 0) and self._phrases:
            ids = lexical.ids_of_codes(codes)
            ranking = self.rank(
                ids,
                self._analyzer.terms(words),
                lexical_k=k,
                limit=k,
                mask=mask,
                exact_boost=exact_boost,
                alias_boost=alias_boost,
            )
            return ranking.docs, ranking.scores, ranking.exact, ranking.alias, ids
        docs, scores = lexical.top_codes(codes, k, skip)
        return docs, scores, _NO_PHRASE_HITS, _NO_PHRASE_HITS, QueryIds(lexical, codes)

    def explain(
        self,
        query: str,
        entry_id: str,
        *,
        exact_boost: float = DEFAULT_EXACT_BOOST,
        alias_boost: float = DEFAULT_ALIAS_BOOST,
        max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    ) -> Hit:
        """The score of one entry for ``query`` with its breakdown, eligible or not.

        Takes the same boosts as :meth:`search`, so the two agree on every hit.
        """
        doc = self._position.get(entry_id)
        if doc is None:
            raise KnowledgeIndexError(f"no entry with id {entry_id!r} in this knowledge base")
        terms = self._analyzer.tokens(check_query(query, max_query_chars))
        lexical_ids = self._lexical.query_ids(terms)
        exact, alias = (
            self.phrase_matches(terms) if exact_boost > 0 or alias_boost > 0 else ((), ())
        )
        lexical = self._lexical.score_of_ids(lexical_ids, doc)
        breakdown = self.breakdown(
            lexical_ids,
            doc,
            exact_boost if doc in exact else 0.0,
            alias_boost if doc in alias else 0.0,
        )
        return Hit(entry_id, lexical + breakdown["exact"] + breakdown["alias"], breakdown)
