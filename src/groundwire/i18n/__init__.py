"""Messages people read — guard decisions, governance reasons, grounding prompts, ingest
summaries — in English, Spanish and French, with locale fallback.

Each catalog (``en.json``, ``es.json``, ``fr.json`` next to this module) maps a dotted
key (``guard.space_not_writable``) to a :meth:`str.format` template with named
placeholders (``{space}``). :func:`message` looks a key up along :func:`locale_chain`:
``es-MX`` tries ``es-MX``, then ``es``, then ``en``, so a regional catalog only needs the
messages that differ. English is complete by construction and a test checks that every
catalog has every key with the same placeholders.

Why a small catalog rather than :mod:`gettext`: gettext keys messages by their English
text (rewording a message silently orphans every translation) and reads compiled ``.mo``
files, which need a build step the standard library does not ship (``msgfmt`` is a
separate tool). Keyed JSON catalogs are read as-is, diff cleanly in review, and let a test
prove completeness and placeholder agreement; plural forms, gettext's other strength,
are not needed by these messages.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Final

from groundwire.errors import ConfigError

__all__ = [
    "DEFAULT_LOCALE",
    "SUPPORTED_LOCALES",
    "catalog",
    "check_locale",
    "locale_chain",
    "message",
    "placeholders",
]

#: The catalog every lookup falls back to; it holds every key.
DEFAULT_LOCALE: Final = "en"
#: Locales with a catalog of their own.
SUPPORTED_LOCALES: Final[tuple[str, ...]] = ("en", "es", "fr")
# BCP 47-like: a language subtag, then region/script/variant subtags; "_" accepted as "-".
_LOCALE = re.compile(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8})*")


def check_locale(locale: object) -> str:
    """``locale`` normalized (``es_mx.UTF-8`` → ``es-MX``); ConfigError when malformed.

    An encoding (``.UTF-8``) or modifier (``@euro``) suffix, as POSIX locales carry, is
    dropped. Any well-formed tag is accepted: one without a catalog falls back.
    """
    if not isinstance(locale, str):
        raise ConfigError(f"locale={locale!r} is invalid: expected a tag such as 'en' or 'es-MX'")
    tag = locale.split(".", 1)[0].split("@", 1)[0]
    if not _LOCALE.fullmatch(tag):
        raise ConfigError(f"locale={locale!r} is invalid: expected a tag such as 'en' or 'es-MX'")
    language, *rest = tag.replace("_", "-").split("-")
    region = [part.upper() if len(part) == 2 else part for part in rest]
    return "-".join([language.lower(), *region])


def locale_chain(locale: str | None) -> tuple[str, ...]:
    """The catalogs a lookup tries, most specific first, ending with :data:`DEFAULT_LOCALE`.

    ``es-MX`` → ``("es-MX", "es", "en")``; None → ``("en",)``. Only locales with a
    catalog are listed.
    """
    if locale is None:
        return (DEFAULT_LOCALE,)
    parts = check_locale(locale).split("-")
    tags = ["-".join(parts[:n]) for n in range(len(parts), 0, -1)]
    chain = [tag for tag in tags if _has_catalog(tag)]
    return (*dict.fromkeys([*chain, DEFAULT_LOCALE]),)


@cache
def _has_catalog(locale: str) -> bool:
    return resources.files(__package__).joinpath(f"{locale}.json").is_file()


@cache
def catalog(locale: str) -> Mapping[str, str]:
    """The messages of one catalog (read once), or an empty mapping when it has none."""
    if not _has_catalog(locale):
        return MappingProxyType({})
    text = resources.files(__package__).joinpath(f"{locale}.json").read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in data.items()
    ):
        raise ConfigError(f"message catalog {locale}.json must map keys to strings")
    return MappingProxyType(data)


def placeholders(template: str) -> frozenset[str]:
    """The named placeholders of a template (``{space}`` → ``space``)."""
    return frozenset(name for _, name, _, _ in string.Formatter().parse(template) if name)


def message(key: str, locale: str | None = None, /, **params: object) -> str:
    """The message ``key`` in ``locale`` (with fallback), its placeholders filled in.

    Raises KeyError for a key no catalog has, and ConfigError for a malformed locale.
    """
    for tag in locale_chain(locale):
        template = catalog(tag).get(key)
        if template is not None:
            return template.format_map(params)
    raise KeyError(f"no message {key!r} in the {DEFAULT_LOCALE} catalog")
