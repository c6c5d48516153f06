"""Message catalogs: complete in every language, placeholders agree, every message used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import groundwire as gw
from groundwire.i18n import (
    DEFAULT_LOCALE,
    SUPPORTED_LOCALES,
    catalog,
    check_locale,
    locale_chain,
    message,
    placeholders,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "groundwire"
ENGLISH = catalog(DEFAULT_LOCALE)


def test_every_supported_locale_has_a_catalog() -> None:
    assert SUPPORTED_LOCALES == ("en", "es", "fr")
    for locale in SUPPORTED_LOCALES:
        assert catalog(locale), locale


@pytest.mark.parametrize("locale", SUPPORTED_LOCALES)
def test_every_key_exists_in_every_catalog(locale: str) -> None:
    assert set(catalog(locale)) == set(ENGLISH)


@pytest.mark.parametrize("key", sorted(ENGLISH))
def test_placeholders_agree_across_catalogs(key: str) -> None:
    expected = placeholders(ENGLISH[key])
    for locale in SUPPORTED_LOCALES:
        assert placeholders(catalog(locale)[key]) == expected, (locale, key)


@pytest.mark.parametrize("key", sorted(ENGLISH))
def test_every_message_renders_in_all_three_languages(key: str) -> None:
    params = {name: f"<{name}>" for name in placeholders(ENGLISH[key])}
    rendered = {locale: message(key, locale, **params) for locale in SUPPORTED_LOCALES}
    for locale, text in rendered.items():
        assert text.strip(), (locale, key)
        assert all(value in text for value in params.values()), (locale, key)
        assert "{" not in text.replace("{example}", ""), (locale, key)
    assert len(set(rendered.values())) == 3, f"{key} is not translated"


def _source_text() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8") for path in SRC.rglob("*.py") if "i18n" not in path.parts
    )


@pytest.mark.parametrize("key", sorted(ENGLISH))
def test_every_message_is_used_somewhere(key: str) -> None:
    """Each key appears as a literal in the code that shows it (no dead messages)."""
    assert re.search(rf'"{re.escape(key)}"', _source_text()), f"{key} is not used"


def test_locale_fallback_goes_from_region_to_language_to_english() -> None:
    assert locale_chain("es-MX") == ("es", "en")
    assert locale_chain("fr_CA.UTF-8") == ("fr", "en")
    assert locale_chain("de") == ("en",)
    assert locale_chain(None) == ("en",)
    assert locale_chain("EN-gb") == ("en",)
    assert message("guard.space_not_writable", "es-MX", space="x") == message(
        "guard.space_not_writable", "es", space="x"
    )
    assert message("guard.space_not_writable", "de", space="x") == message(
        "guard.space_not_writable", "en", space="x"
    )


@pytest.mark.parametrize(
    ("given", "normalized"),
    [("es_mx", "es-MX"), ("fr-CA@euro", "fr-CA"), ("zh-Hant-TW", "zh-Hant-TW"), ("EN", "en")],
)
def test_locales_are_normalized(given: str, normalized: str) -> None:
    assert check_locale(given) == normalized


@pytest.mark.parametrize("bad", ["", "e", "english language", "en--US", 42, None])
def test_malformed_locales_are_config_errors(bad: object) -> None:
    with pytest.raises(gw.ConfigError, match="locale"):
        check_locale(bad)


def test_an_unknown_key_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="no message"):
        message("nothing.here")


def test_the_block_openings_follow_the_configured_locale() -> None:
    entry = gw.KnowledgeEntry("a.b", "Rotate", "Rotate keys.", "d", (), body="x" * 4000)
    for locale in SUPPORTED_LOCALES:
        context = gw.assemble_context([entry], [], gw.ContextConfig(max_tokens=200, locale=locale))
        assert message("context.opening", locale) in context.text
        assert message("context.summary_only", locale) in context.text
    excerpt = gw.Excerpt("a#0", "a", "a", (), 0, 4, "text", "v1", "h", 1.0)
    for locale in SUPPORTED_LOCALES:
        block = gw.render_evidence("q", [excerpt], locale)
        assert message("evidence.opening", locale) in block
    english = gw.render_evidence("q", [excerpt])
    assert message("evidence.opening") in english  # English by default, as before
