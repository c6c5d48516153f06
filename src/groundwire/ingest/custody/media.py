"""Does a declared media type match the bytes? Magic numbers, read with ``puremagic``.

Types are compared by **family** (PDF, ZIP containers, each image format, executables,
archives...): a ``.docx`` declared as ``application/vnd.openxmlformats-...`` is a ZIP by
its bytes, which matches. Text types (``text/*``, JSON, XML, YAML) match any bytes
without a binary signature; a binary family must find its own signature. Unknown or
generic declared types (``application/octet-stream``) are not judged.
"""

from __future__ import annotations

import mimetypes
import re
from typing import Final

from groundwire.errors import MissingExtraError

__all__ = ["declared_type", "detect_family", "media_mismatch"]

#: Media type prefixes/names → family. A family is what the first bytes can prove.
_FAMILIES: Final[tuple[tuple[str, str], ...]] = (
    ("application/pdf", "pdf"),
    ("application/zip", "zip"),
    ("application/vnd.openxmlformats-officedocument", "zip"),
    ("application/vnd.oasis.opendocument", "zip"),
    ("application/epub+zip", "zip"),
    ("application/java-archive", "zip"),
    ("application/gzip", "gzip"),
    ("application/x-gzip", "gzip"),
    ("application/x-tar", "tar"),
    ("application/x-7z-compressed", "7z"),
    ("application/vnd.rar", "rar"),
    ("application/x-rar-compressed", "rar"),
    ("application/msword", "ole"),
    ("application/vnd.ms-excel", "ole"),
    ("application/vnd.ms-powerpoint", "ole"),
    ("application/vnd.ms-outlook", "ole"),
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("image/gif", "gif"),
    ("image/tiff", "tiff"),
    ("image/webp", "webp"),
    ("image/bmp", "bmp"),
    ("application/x-executable", "exe"),
    ("application/x-msdownload", "exe"),
    ("application/x-dosexec", "exe"),
    ("application/x-elf", "exe"),
    ("application/x-sharedlib", "exe"),
)
#: Signatures puremagic may report by extension → family (it names some by extension only).
_EXTENSIONS: Final[dict[str, str]] = {
    ".pdf": "pdf",
    ".zip": "zip",
    ".docx": "zip",
    ".xlsx": "zip",
    ".pptx": "zip",
    ".odt": "zip",
    ".epub": "zip",
    ".jar": "zip",
    ".gz": "gzip",
    ".tar": "tar",
    ".7z": "7z",
    ".rar": "rar",
    ".doc": "ole",
    ".xls": "ole",
    ".msg": "ole",
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".gif": "gif",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".webp": "webp",
    ".bmp": "bmp",
    ".exe": "exe",
    ".dll": "exe",
    ".elf": "exe",
    ".so": "exe",
}
_TEXT_TYPES: Final = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/javascript",
        "application/x-tex",
        "application/x-sh",
        "message/rfc822",
    }
)
_CONTROL: Final = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f-\xff]")
_GENERIC: Final = frozenset({"", "application/octet-stream", "binary/octet-stream"})


def declared_type(media_type: str | None, name: str) -> str:
    """The declared media type, lower-cased without parameters; guessed from ``name`` if empty."""
    value = (media_type or "").partition(";")[0].strip().lower()
    if value and value not in _GENERIC:
        return value
    guessed = mimetypes.guess_type(name, strict=False)[0]
    return (guessed or value or "application/octet-stream").lower()


def _family_of_type(media_type: str) -> str | None:
    for prefix, family in _FAMILIES:
        if media_type.startswith(prefix):
            return family
    return None


def _is_text(media_type: str) -> bool:
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith(("+json", "+xml"))
    )


def detect_family(data: bytes) -> str | None:
    """The family the first bytes prove (``pdf``, ``zip``, ``png``, ``exe``...), or None."""
    try:
        import puremagic
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("puremagic", "sync", "Checking media types of originals") from exc
    head = data[:8192]
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if not _CONTROL.search(head[:64]):
        return None  # every other signature judged here holds a control byte early on
    if head.startswith((b"\x7fELF", b"MZ")):
        return "exe"  # puremagic names these by many extensions; the signature is certain
    try:
        matches = puremagic.magic_string(head)
    except (puremagic.PureError, ValueError):
        return None
    for match in sorted(matches, key=lambda m: -m.confidence):
        family = _family_of_type(match.mime_type or "") or _EXTENSIONS.get(match.extension)
        if family is not None and match.offset == 0:
            return family
    return None


def media_mismatch(media_type: str, data: bytes) -> str | None:
    """Why ``data`` is not of the declared ``media_type``, or None when it may be."""
    if media_type in _GENERIC:
        return None
    detected = detect_family(data)
    if _is_text(media_type):
        if detected is not None:
            return (
                f"declared {media_type} (text) but the bytes carry a {detected.upper()} signature"
            )
        return None
    expected = _family_of_type(media_type)
    if expected is None:
        return None  # a type we hold no signature for: not judged
    if detected == expected:
        return None
    found = f"a {detected.upper()} signature" if detected else "no matching signature"
    return f"declared {media_type} ({expected.upper()}) but the bytes carry {found}"
