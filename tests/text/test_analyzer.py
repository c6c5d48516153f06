"""The analyzer: normalization, words, CJK bigrams, stop words, stemming, caching."""

from __future__ import annotations

import random
import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import groundwire.text.analyzer as analyzer_module
from groundwire import Analyzer, AnalyzerConfig, ConfigError
from groundwire.text.stopwords import LUCENE_ENGLISH as ENGLISH

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return Analyzer()


@pytest.fixture(scope="module")
def folding() -> Analyzer:
    return Analyzer(AnalyzerConfig(fold_diacritics=True))


# -- normalization -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ﬁnance", "finance"),  # ligature fi (U+FB01)
        ("ﬂow", "flow"),  # ligature fl (U+FB02)
        ("１２３", "123"),  # full-width digits
        ("ＡＢＣ", "abc"),  # full-width Latin capitals
        ("ｶﾀｶﾅ", "カタカナ"),  # half-width katakana
        ("Straße", "strasse"),  # case folding, not lower()
        ("ẞ", "ss"),  # capital sharp s
        ("ΣΊΣΥΦΟΣ", "σίσυφοσ"),  # casefold: final sigma folds like any sigma
        ("Ⅻ", "xii"),  # roman numeral compatibility character
        ("㎏", "kg"),
        ("HELLO World", "hello world"),
    ],
)
def test_normalize_nfkc_and_case_folding(analyzer: Analyzer, text: str, expected: str) -> None:
    assert analyzer.normalize(text) == expected


def test_diacritics_kept_by_default(analyzer: Analyzer) -> None:
    assert analyzer.normalize("Café Naïve Ångström") == "café naïve ångström"
    assert analyzer.tokens("café") == ["café"]


def test_diacritic_folding_on(folding: Analyzer) -> None:
    assert folding.normalize("Café Naïve Ångström") == "cafe naive angstrom"
    # decomposed input folds the same as precomposed input
    assert folding.normalize("cafe\u0301") == "cafe"
    assert folding.tokens("résumé") == folding.tokens("resume")


def test_diacritic_folding_off_distinguishes(analyzer: Analyzer) -> None:
    assert analyzer.tokens("résumé") != analyzer.tokens("resume")
    # but precomposed and decomposed spellings are the same word (NFKC composes)
    assert analyzer.tokens("re\u0301sume\u0301") == analyzer.tokens("résumé")


def test_combining_marks_stay_inside_words(analyzer: Analyzer) -> None:
    # Devanagari vowel signs are combining marks: the word must not split on them
    assert analyzer.words("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]


def test_punctuation_and_underscore_separate_words(analyzer: Analyzer) -> None:
    assert analyzer.words("snake_case, kebab-case; dot.ted!") == [
        "snake",
        "case",
        "kebab",
        "case",
        "dot",
        "ted",
    ]
    assert analyzer.words("snake_case — é") == ["snake", "case", "é"]


# -- CJK ----------------------------------------------------------------------------------------


def test_han_runs_become_overlapping_bigrams(analyzer: Analyzer) -> None:
    assert analyzer.tokens("东京都") == ["东京", "京都"]


def test_kana_runs_become_bigrams(analyzer: Analyzer) -> None:
    assert analyzer.tokens("ひらがな") == ["ひら", "らが", "がな"]
    assert analyzer.tokens("カタカナ") == ["カタ", "タカ", "カナ"]


def test_hangul_runs_become_bigrams(analyzer: Analyzer) -> None:
    assert analyzer.tokens("한국어") == ["한국", "국어"]


def test_single_cjk_character_is_a_unigram(analyzer: Analyzer) -> None:
    assert analyzer.tokens("中") == ["中"]
    assert analyzer.tokens("中 文") == ["中", "文"]


def test_mixed_scripts_split_at_script_boundaries(analyzer: Analyzer) -> None:
    # Latin words are stemmed, CJK bigrams are never stemmed
    assert analyzer.tokens("Running東京tests") == ["run", "東京", "test"]
    assert analyzer.words("abc東京def") == ["abc", "東京", "def"]


def test_cjk_bigrams_off_keeps_whole_runs() -> None:
    plain = Analyzer(AnalyzerConfig(cjk_bigrams=False))
    assert plain.tokens("東京都に行きます") == ["東京都に行きます"]
    assert plain.tokens("中") == ["中"]


def test_cjk_bigrams_are_ordinary_terms_for_stopwords() -> None:
    custom = Analyzer(AnalyzerConfig(stopwords=frozenset({"東京"})))
    # stop words apply to CJK bigrams too (they are ordinary terms after splitting)
    assert custom.tokens("東京都") == ["京都"]


# -- stop words ---------------------------------------------------------------------------------


def test_default_english_stopwords_are_lucenes_list(analyzer: Analyzer) -> None:
    assert len(ENGLISH) == 33
    assert {"the", "a", "of", "and", "with", "will"} <= ENGLISH
    # question words stay searchable
    assert "how" not in ENGLISH
    assert "why" not in ENGLISH
    assert analyzer.tokens("The cost of the plan") == ["cost", "plan"]
    assert analyzer.tokens("how and why") == ["how", "whi"]
    assert analyzer.tokens(" ".join(sorted(ENGLISH))) == []


def test_stopwords_none_keeps_every_word() -> None:
    keep = Analyzer(AnalyzerConfig(stopwords=None))
    assert keep.tokens("the cost of the plan") == ["the", "cost", "of", "the", "plan"]


def test_custom_stopwords_are_normalized_like_text() -> None:
    custom = Analyzer(AnalyzerConfig(stopwords={"THE", "Straße", "ﬁle"}))
    # "the" is dropped even though given upper-case; "of" is no longer a stop word
    assert custom.tokens("The STRASSE strasse of file ﬁle") == ["of"]


def test_custom_stopwords_replace_the_default_list() -> None:
    custom = Analyzer(AnalyzerConfig(stopwords=frozenset({"plan"})))
    assert custom.tokens("the plan") == ["the"]


def test_custom_stopwords_with_diacritic_folding() -> None:
    custom = Analyzer(AnalyzerConfig(stopwords={"café"}, fold_diacritics=True))
    assert custom.tokens("cafe CAFÉ bar") == ["bar"]


def test_stopwords_checked_before_stemming(analyzer: Analyzer) -> None:
    # "is" is a stop word; "its" is not (stemmed to "it", which must survive)
    assert analyzer.tokens("is its") == ["it"]


# -- stemming -----------------------------------------------------------------------------------


def test_english_stemming(analyzer: Analyzer) -> None:
    assert analyzer.tokens("running runs ran") == ["run", "run", "ran"]
    assert analyzer.tokens("connections connected connecting") == ["connect"] * 3


def test_stemming_off() -> None:
    raw = Analyzer(AnalyzerConfig(stem=False))
    assert raw.tokens("Running connections") == ["running", "connections"]
    # stop words still apply without stemming
    assert raw.tokens("the running") == ["running"]


def test_german_stemming_without_builtin_stopwords() -> None:
    german = Analyzer(AnalyzerConfig(language="german"))
    assert german.tokens("Häuser Kinder laufen") == ["haus", "kind", "lauf"]
    # no German list ships, so "die"/"und" are not stop words
    assert german.tokens("die und") == ["die", "und"]


def test_unknown_language_raises_config_error_listing_languages() -> None:
    with pytest.raises(ConfigError) as info:
        Analyzer(AnalyzerConfig(language="klingon"))
    message = str(info.value)
    assert "klingon" in message
    for language in ("english", "german", "french", "russian"):
        assert language in message
    assert "stem=False" in message


def test_unknown_language_without_stemming_is_accepted() -> None:
    plain = Analyzer(AnalyzerConfig(language="klingon", stem=False))
    assert plain.tokens("Qapla batlh") == ["qapla", "batlh"]


def test_empty_language_is_rejected() -> None:
    with pytest.raises(ConfigError, match="language"):
        AnalyzerConfig(language="")


def test_invalid_stopwords_value_is_rejected() -> None:
    with pytest.raises(ConfigError, match="stopwords"):
        AnalyzerConfig(stopwords="english")  # type: ignore[arg-type]


# -- phrase keys ------------------------------------------------------------------------------


def test_phrase_key_joins_terms_with_single_spaces(analyzer: Analyzer) -> None:
    assert analyzer.phrase("The Refund Policy!") == "refund polici"
    assert analyzer.phrase("  refund\n\tpolicies ") == "refund polici"
    assert analyzer.phrase("billing.refund-policy") == "bill refund polici"


def test_phrase_key_empty_for_no_terms(analyzer: Analyzer) -> None:
    assert analyzer.phrase("") == ""
    assert analyzer.phrase("the of and") == ""
    assert analyzer.phrase("!!! ---") == ""


def test_phrase_key_equal_for_equivalent_spellings(analyzer: Analyzer) -> None:
    assert analyzer.phrase("ＲＥＦＵＮＤ Policies") == analyzer.phrase("refund policy")


# -- ASCII fast path ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Hello, World! How are you today?",
        "snake_case CamelCase kebab-case 123abc abc123",
        "The quick brown fox jumps over the lazy dogs' backs",
        "tabs\tand\nnewlines\r\nmixed   spaces",
        "",
        "!!!",
    ],
)
def test_ascii_fast_path_matches_unicode_path(analyzer: Analyzer, text: str) -> None:
    # appending a non-ASCII word forces the Unicode path for the same ASCII prefix
    assert text.isascii()
    assert analyzer.words(text + " 中") == [*analyzer.words(text), "中"]
    assert analyzer.tokens(text + " 中") == [*analyzer.tokens(text), "中"]
    assert analyzer.normalize(text + "é")[:-1] == analyzer.normalize(text)


@PROPERTY
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_fast_path_property(text: str) -> None:
    analyzer = Analyzer()
    assert analyzer.words(text + " 中") == [*analyzer.words(text), "中"]
    assert analyzer.tokens(text + " 中") == [*analyzer.tokens(text), "中"]


@PROPERTY
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_words_are_those_of_the_regular_expression(text: str) -> None:
    # The ASCII path splits a translated copy instead of running [a-z0-9]+ over the text.
    plain = Analyzer(AnalyzerConfig(strip_possessives=False))
    assert plain.words(text) == re.findall(r"[a-z0-9]+", text.lower())
    without_possessives = analyzer_module._POSSESSIVE.sub("", text.lower())
    assert Analyzer().words(text) == re.findall(r"[a-z0-9]+", without_possessives)


def test_ascii_translation_table() -> None:
    table = analyzer_module._ASCII_WORDS
    assert len(table) == 256
    kept = {chr(byte) for byte in range(256) if table[byte] != ord(" ")}
    assert kept == set(string.ascii_letters + string.digits)
    assert bytes(string.ascii_uppercase, "ascii").translate(table) == b"abcdefghijklmnopqrstuvwxyz"


# -- stem cache ---------------------------------------------------------------------------------


def test_stem_cache_correct_after_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = Analyzer()
    words = [
        "running",
        "connections",
        "policies",
        "refunds",
        "the",
        "of",
        "billing",
        "invoices",
        "東京都",
        "café",
        "workflows",
        "approvals",
    ]
    rng = random.Random(7)
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(200)]
    expected = [reference.tokens(text) for text in texts]

    monkeypatch.setattr(analyzer_module, "STEM_CACHE_SIZE", 3)
    tiny = Analyzer()
    assert [tiny.tokens(text) for text in texts] == expected
    # eviction really happened: the tiny cache holds less than the full vocabulary
    assert len(tiny._cache) < len(reference._cache)


def test_stem_cache_zero_size_still_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analyzer_module, "STEM_CACHE_SIZE", 0)
    tiny = Analyzer()
    assert tiny.tokens("the running runners run") == ["run", "runner", "run"]
    assert tiny.tokens("running of") == ["run"]


def test_terms_recompute_words_evicted_between_learn_and_read() -> None:
    analyzer = Analyzer()
    analyzer.tokens("running")
    analyzer._cache.pop("running")
    assert analyzer.terms(["running", "the", "policies"]) == ["run", "polici"]


# -- properties ---------------------------------------------------------------------------------


@PROPERTY
@given(st.text())
def test_normalize_is_idempotent(text: str) -> None:
    for config in (AnalyzerConfig(), AnalyzerConfig(fold_diacritics=True)):
        analyzer = Analyzer(config)
        once = analyzer.normalize(text)
        assert analyzer.normalize(once) == once


@PROPERTY
@given(st.text())
def test_tokens_are_non_empty_and_without_whitespace(text: str) -> None:
    for config in (AnalyzerConfig(), AnalyzerConfig(fold_diacritics=True, cjk_bigrams=False)):
        tokens = Analyzer(config).tokens(text)
        assert isinstance(tokens, list)
        for token in tokens:
            assert isinstance(token, str)
            assert token
            assert not any(ch.isspace() for ch in token)


@PROPERTY
@given(st.text())
def test_tokens_equal_terms_of_words(text: str) -> None:
    analyzer = Analyzer()
    assert analyzer.tokens(text) == analyzer.terms(analyzer.words(text))


@PROPERTY
@given(st.text())
def test_phrase_is_stable_under_reanalysis(text: str) -> None:
    # a phrase key is what the index stores; the key of a key's words must not drift
    analyzer = Analyzer(AnalyzerConfig(stem=False))
    key = analyzer.phrase(text)
    assert analyzer.phrase(key) == key


# Why a space boundary is enough: words never span whitespace, and CJK runs (which are
# bigrammed) are contiguous code points, so "東" + " " + "京" cannot form the bigram "東京".
# Normalization cannot reach across the space either: NFKC composes only a starter with
# following combining marks, and no composition takes a space as its starter. The
# alphabet is the full Unicode range (minus surrogates, which st.text() excludes); the
# explicit CJK-heavy strategy below makes bigram boundaries likely.
_CJK_HEAVY = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0x4E00, max_codepoint=0x4E20),
        st.characters(min_codepoint=0x3041, max_codepoint=0x3060),
        st.sampled_from(list(string.ascii_letters + "éß\u0301 ")),
    )
)


@PROPERTY
@given(st.one_of(st.text(), _CJK_HEAVY), st.one_of(st.text(), _CJK_HEAVY))
def test_tokens_of_space_joined_text_concatenate(left: str, right: str) -> None:
    for config in (AnalyzerConfig(), AnalyzerConfig(fold_diacritics=True)):
        analyzer = Analyzer(config)
        assert analyzer.tokens(left + " " + right) == analyzer.tokens(left) + analyzer.tokens(right)


def test_cjk_without_a_space_does_join(analyzer: Analyzer) -> None:
    # the reason the concatenation property needs the separating space
    assert analyzer.tokens("東" + "京") == ["東京"]
    assert analyzer.tokens("東") + analyzer.tokens("京") == ["東", "京"]


# -- many texts at once (the bulk build's path) ---------------------------------------------------
MANY = st.lists(
    st.text(
        alphabet=st.one_of(
            st.sampled_from(list("ab Z-'’_19\n\t.,é\u0301中文ΣɑßİK")), st.characters()
        ),
        max_size=30,
    ),
    max_size=6,
)


@PROPERTY
@given(texts=MANY, options=st.sampled_from(["default", "join", "plain"]))
def test_joined_words_equal_words_text_by_text(texts: list[str], options: str) -> None:
    config = {
        "default": AnalyzerConfig(),
        "join": AnalyzerConfig(join_hyphenated=True, keep_numbers=False),
        "plain": AnalyzerConfig(strip_possessives=False, fold_diacritics=True),
    }[options]
    analyzer = Analyzer(config)
    buf, ends = analyzer.joined_words(texts)
    assert len(ends) == len(texts)
    assert ends[-1:] in ([], [len(buf)])
    for n, text in enumerate(texts):
        start = ends[n - 1] if n else 0
        assert buf[start : ends[n]].decode().split() == analyzer.words(text)
