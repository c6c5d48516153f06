"""File kinds by extension, text decoding and hashing shared by the loaders and chunkers."""

from __future__ import annotations

import codecs
import hashlib
from pathlib import PurePosixPath
from typing import Final

from groundwire.errors import SourceError

__all__ = ["KINDS", "decode", "resolve_kind", "sha256_hex"]

#: Every document kind a loader produces.
KINDS: Final[frozenset[str]] = frozenset(
    {"markdown", "html", "json", "latex", "text", "csv", "yaml", "xml", "code", "pdf"}
)

_PLAIN: Final[dict[str, tuple[str, ...]]] = {
    "markdown": ("md", "markdown", "mdx", "mdown", "mkd", "mkdn"),
    "html": ("html", "htm", "xhtml"),
    "json": ("json",),
    "latex": ("tex", "latex", "ltx"),
    "text": (
        *("txt", "text", "rst", "adoc", "asciidoc", "org", "log", "jsonl", "ndjson"),
        *("toml", "ini", "cfg", "conf", "properties"),
    ),
    "csv": ("csv", "tsv"),
    "yaml": ("yaml", "yml"),
    "xml": ("xml", "xsd", "rss", "atom"),
    "pdf": ("pdf",),
}
_CODE: Final[dict[str, tuple[str, ...]]] = {
    "python": ("py", "pyi"),
    "javascript": ("js", "mjs", "cjs", "jsx"),
    "typescript": ("ts", "tsx", "mts", "cts"),
    "java": ("java",),
    "go": ("go",),
    "rust": ("rs",),
    "ruby": ("rb",),
    "php": ("php",),
    "c": ("c", "h"),
    "cpp": ("cc", "cpp", "cxx", "hpp", "hh", "hxx"),
    "csharp": ("cs",),
    "swift": ("swift",),
    "kotlin": ("kt", "kts"),
    "scala": ("scala",),
    "shell": ("sh", "bash", "zsh"),
    "sql": ("sql",),
    "lua": ("lua",),
    "r": ("r",),
    "perl": ("pl", "pm"),
    "elixir": ("ex", "exs"),
    "haskell": ("hs",),
    "clojure": ("clj", "cljs"),
    "dart": ("dart",),
    "julia": ("jl",),
    "vue": ("vue",),
    "svelte": ("svelte",),
    "groovy": ("groovy", "gradle"),
    "powershell": ("ps1",),
}
_BY_NAME: Final[dict[str, tuple[str, str | None]]] = {
    **{ext: (kind, None) for kind, exts in _PLAIN.items() for ext in exts},
    **{ext: ("code", language) for language, exts in _CODE.items() for ext in exts},
    **{language: ("code", language) for language in _CODE},
    **{kind: (kind, None) for kind in KINDS},
}


def resolve_kind(name: str) -> tuple[str, str | None] | None:
    """``(kind, language)`` of a path, an extension (``.md``, ``md``) or a kind name.

    The language is set for source code only. None when the type is unknown.
    """
    text = name.replace("\\", "/").strip()
    suffix = PurePosixPath(text).suffix.lower()
    key = suffix[1:] if suffix else text.lower().lstrip(".")
    return _BY_NAME.get(key)


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def decode(data: bytes, where: str, encoding: str | None = None) -> str:
    """Bytes to text: UTF-8 by default, byte-order marks honoured, newlines made ``\\n``.

    Raises :class:`SourceError` naming ``where`` for undecodable or binary content.
    """
    if data.startswith(codecs.BOM_UTF8):
        data, encoding = data[len(codecs.BOM_UTF8) :], "utf-8"
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    codec = encoding or "utf-8"
    try:
        text = data.decode(codec)
    except LookupError as exc:
        raise SourceError(
            f"{where}: unknown text encoding {codec!r}; serve or save it as UTF-8"
        ) from exc
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"{where}: not valid {codec} text (byte {exc.start:,}); save it as UTF-8"
        ) from exc
    if "\x00" in text:
        raise SourceError(f"{where}: looks like a binary file (it contains NUL characters)")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text
