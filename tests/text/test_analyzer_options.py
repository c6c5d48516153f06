"""Analyzer options: named stop lists, possessives, hyphenated compounds, numbers."""

from __future__ import annotations

import pytest

from groundwire import Analyzer, AnalyzerConfig, ConfigError
from groundwire.text.stopwords import (
    EXTENDED_ENGLISH,
    LUCENE_ENGLISH,
    NAMED,
    resolve_stopwords,
    stopwords_for,
)

SENTENCE = "The cat which would sit, don't they? Isn't it"


def tokens(text: str, **options: object) -> list[str]:
    return Analyzer(AnalyzerConfig(**options)).tokens(text)  # type: ignore[arg-type]


def words(text: str, **options: object) -> list[str]:
    return Analyzer(AnalyzerConfig(**options)).words(text)  # type: ignore[arg-type]


# -- named stop lists --------------------------------------------------------------------
def test_lucene_list_is_the_classic_33_words() -> None:
    assert len(LUCENE_ENGLISH) == 33
    assert {"a", "the", "of", "with", "such", "will", "into"} <= LUCENE_ENGLISH
    assert "which" not in LUCENE_ENGLISH
    assert NAMED["lucene"] is LUCENE_ENGLISH


def test_extended_list_holds_function_words_only() -> None:
    assert LUCENE_ENGLISH <= EXTENDED_ENGLISH
    assert {"which", "would", "what", "how", "should", "our", "yourselves"} <= EXTENDED_ENGLISH
    # Contractions are stored as the words the analyzer splits them into.
    assert {"don", "isn", "t", "s", "ll", "ve"} <= EXTENDED_ENGLISH
    assert not any("'" in word for word in EXTENDED_ENGLISH)
    for content in ("data", "system", "cell", "protein", "key", "api", "computer", "time"):
        assert content not in EXTENDED_ENGLISH
    assert NAMED["extended"] is EXTENDED_ENGLISH


def test_lucene_list_drops_only_its_words() -> None:
    assert tokens(SENTENCE, stopwords="lucene") == [
        *("cat", "which", "would", "sit", "don", "t", "isn", "t"),
    ]


def test_extended_list_also_drops_question_words_auxiliaries_and_contractions() -> None:
    assert tokens(SENTENCE, stopwords="extended") == ["cat", "sit"]


def test_default_is_the_languages_list() -> None:
    # English: the Lucene list.
    assert tokens(SENTENCE, stopwords="default") == tokens(SENTENCE, stopwords="lucene")
    assert resolve_stopwords("default", "english") == LUCENE_ENGLISH
    # A language without a shipped list drops nothing.
    assert stopwords_for("german") == frozenset()
    assert tokens("die Katze und der Hund", language="german") == [
        *("die", "katz", "und", "der", "hund"),
    ]


def test_no_stop_words() -> None:
    assert tokens("the cat of the hat", stopwords=None, stem=False) == [
        *("the", "cat", "of", "the", "hat"),
    ]


def test_unknown_stop_list_name_is_rejected() -> None:
    with pytest.raises(ConfigError, match="stopwords='spanish-ish' is invalid"):
        AnalyzerConfig(stopwords="spanish-ish")


def test_named_lists_are_distinct_cache_keys() -> None:
    keys = {AnalyzerConfig(stopwords=name).key() for name in ("default", "lucene", "extended")}
    assert len(keys) == 3


# -- possessives -----------------------------------------------------------------------------
@pytest.mark.parametrize("apostrophe", ["'", "\u2019"])
def test_possessive_s_is_stripped_by_default(apostrophe: str) -> None:
    text = f"John{apostrophe}s car and James{apostrophe}s bike"
    assert tokens(text, stopwords=None, stem=False) == ["john", "car", "and", "james", "bike"]


@pytest.mark.parametrize("apostrophe", ["'", "\u2019"])
def test_possessive_s_is_a_separate_token_when_off(apostrophe: str) -> None:
    text = f"John{apostrophe}s car"
    assert tokens(text, stopwords=None, stem=False, strip_possessives=False) == [
        *("john", "s", "car"),
    ]


def test_possessive_stripping_leaves_other_apostrophes_alone() -> None:
    # Plural possessive (no s after the apostrophe), a quoted word starting with s, and
    # an apostrophe not preceded by a letter keep their letters.
    assert tokens("students' books", stopwords=None, stem=False) == ["students", "books"]
    assert tokens("the 'sole' reason", stopwords=None, stem=False) == [
        *("the", "sole", "reason"),
    ]
    assert tokens("'s alone", stopwords=None, stem=False) == ["s", "alone"]


def test_possessives_match_between_query_and_document() -> None:
    analyzer = Analyzer(AnalyzerConfig())
    assert analyzer.tokens("Alzheimer's disease") == analyzer.tokens("Alzheimer disease")
    assert analyzer.tokens("Alzheimer\u2019s disease") == analyzer.tokens("alzheimer disease")


# -- hyphenated compounds ---------------------------------------------------------------------
def test_hyphenated_words_are_split_by_default() -> None:
    assert words("send e-mail now") == ["send", "e", "mail", "now"]


def test_join_hyphenated_adds_the_joined_form_after_the_parts() -> None:
    assert words("send e-mail now", join_hyphenated=True) == [
        *("send", "e", "mail", "now", "email"),
    ]
    assert words("state-of-the-art", join_hyphenated=True) == [
        *("state", "of", "the", "art", "stateoftheart"),
    ]
    # Non-ASCII text takes the same rule.
    assert words("naïve-bayes", join_hyphenated=True) == ["naïve", "bayes", "naïvebayes"]


def test_join_hyphenated_lets_the_joined_spelling_match() -> None:
    joined = Analyzer(AnalyzerConfig(join_hyphenated=True))
    plain = Analyzer(AnalyzerConfig())
    assert "email" in joined.tokens("E-mail settings")
    assert "email" not in plain.tokens("E-mail settings")
    # The parts are always indexed, so "mail" still finds it.
    assert "mail" in joined.tokens("E-mail settings")


def test_dangling_and_double_hyphens_join_nothing() -> None:
    assert words("re--entry -x- pre-", join_hyphenated=True) == ["re", "entry", "x", "pre"]


# -- numbers ------------------------------------------------------------------------------
def test_numbers_are_kept_by_default() -> None:
    assert words("version 2 of 3d, 2024") == ["version", "2", "of", "3d", "2024"]


def test_keep_numbers_false_drops_digit_only_tokens() -> None:
    # "3d" and "42nd" hold letters and stay; "1.5" is two digit tokens and goes.
    assert words("version 2 of 3d 2024 1.5 42nd", keep_numbers=False) == [
        *("version", "of", "3d", "42nd"),
    ]
    # Any Unicode decimal digits count (Arabic-Indic three).
    assert words("\u0663 items", keep_numbers=False) == ["items"]


@pytest.mark.parametrize("option", ["strip_possessives", "join_hyphenated", "keep_numbers"])
def test_boolean_options_reject_other_values(option: str) -> None:
    with pytest.raises(ConfigError, match=f"{option}='yes' is invalid: expected True or False"):
        AnalyzerConfig(**{option: "yes"})  # type: ignore[arg-type]


def test_options_are_part_of_the_cache_key() -> None:
    base = AnalyzerConfig()
    for option in ("strip_possessives", "join_hyphenated", "keep_numbers"):
        changed = AnalyzerConfig(**{option: not getattr(base, option)})  # type: ignore[arg-type]
        assert changed.key() != base.key()
