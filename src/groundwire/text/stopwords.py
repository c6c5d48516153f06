"""Built-in stop word lists.

``AnalyzerConfig.stopwords`` takes ``"default"`` (the language's default list),
a list name from :data:`NAMED`, ``None`` (no stop words) or your own collection.
English is the only language with built-in lists; for others pass your own words.

Curated entries default to the short Lucene list: on the example handbook's
evaluation set the extended list cost 4 nDCG points, because titles and aliases
then collapse into short, over-matching phrase keys. Plain documents default to the
extended list, which helped on SciFact and CACM (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from typing import Final

__all__ = ["NAMED", "STOPWORDS", "resolve_stopwords", "stopwords_for"]

_LUCENE = """
a an and are as at be but by for if in into is it no not of on or such that the
their then there these they this to was will with
"""

# Function words: articles, pronouns, auxiliaries, conjunctions, prepositions,
# question words and common adverbs. Content words never appear here.
_EXTENDED = """
a about above after again against all am an and any are aren't as at be because been
before being below between both but by can can't cannot could couldn't did didn't do
does doesn't doing don't down during each few for from further had hadn't has hasn't
have haven't having he he'd he'll he's her here here's hers herself him himself his how
how's i i'd i'll i'm i've if in into is isn't it it's its itself just me more
most mustn't my myself no nor not now of off on once only or other ought our ours
ourselves out over own same shan't she she'd she'll she's should shouldn't so some such
than that that's the their theirs them themselves then there there's these they they'd
they'll they're they've this those through to too under until up very was wasn't we
we'd we'll we're we've were weren't what what's when when's where where's which while
who who's whom why why's will with would wouldn't you you'd you'll you're you've
your yours yourself yourselves s t d ll m o re ve y
"""

#: English, the classic 33-word list of Lucene's EnglishAnalyzer (also bm25s' "en").
LUCENE_ENGLISH: Final[frozenset[str]] = frozenset(_LUCENE.split())
#: English, ~180 function words (question words and auxiliaries included).
EXTENDED_ENGLISH: Final[frozenset[str]] = frozenset(
    part for word in _EXTENDED.split() for part in word.replace("'", " ").split()
)

#: Named lists usable as ``AnalyzerConfig(stopwords=<name>)``.
NAMED: Final[dict[str, frozenset[str]]] = {
    "lucene": LUCENE_ENGLISH,
    "extended": EXTENDED_ENGLISH,
}
#: The default list per Snowball language.
STOPWORDS: Final[dict[str, frozenset[str]]] = {
    "english": LUCENE_ENGLISH,
    "porter": LUCENE_ENGLISH,
}


def stopwords_for(language: str) -> frozenset[str]:
    """The default list for ``language``, or an empty set when none is shipped."""
    return STOPWORDS.get(language.lower(), frozenset())


def resolve_stopwords(spec: str | frozenset[str] | None, language: str) -> frozenset[str]:
    """Turn an ``AnalyzerConfig.stopwords`` value into the set of words it means."""
    if spec is None:
        return frozenset()
    if isinstance(spec, frozenset):
        return spec
    if spec == "default":
        return stopwords_for(language)
    return NAMED[spec]
