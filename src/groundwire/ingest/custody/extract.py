"""Extractors and readability: what text an original yields, and how far it can be trusted.

:class:`ExtractorRegistry` picks an extractor by media type (falling back on the file
name's extension) and returns an :class:`Extraction` in one of four states:

- ``readable``: the whole text was extracted;
- ``partial``: some text, some not (PDF pages without a text layer, OCR below
  :data:`~groundwire.config.OCR_MIN_CONFIDENCE`): the reasons say what is missing;
- ``unreadable``: no usable text (undecodable, malformed, encrypted, no extractor,
  a missing extra, or **empty output** — empty text is never a success);
- ``needs_ocr``: images only (a scanned PDF without a text layer, a photo) and no OCR
  engine is registered.

Each reason is typed (:data:`REASON_CODES`) and the extraction names its next action.
The built-in extractors are groundwire's document loaders (Markdown, HTML, JSON, LaTeX,
text, CSV/YAML/XML, code, PDF). An OCR engine is pluggable (:class:`OcrEngine`;
:class:`TesseractOcr` runs Debian's ``tesseract`` when it is installed); OCR text is
``partial`` unless its confidence is high, so partial OCR never claims completeness.

The registry's **plan** for a media type names every extractor that would run, with its
version: re-ingesting the same bytes under the same plan is a replay (evidence ledger).
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol, get_args, runtime_checkable

from groundwire.config import OCR_MIN_CONFIDENCE, OCR_PAGE_SHARE, OCR_TIMEOUT_S
from groundwire.errors import MissingExtraError, SourceError
from groundwire.ingest.custody.media import declared_type
from groundwire.ingest.loaders import load_bytes
from groundwire.ingest.loaders._kinds import resolve_kind, sha256_hex
from groundwire.model import LoadedDocument, Section

__all__ = [
    "NEXT_ACTIONS",
    "READABILITY_STATES",
    "REASON_CODES",
    "Extraction",
    "Extractor",
    "ExtractorRegistry",
    "OcrEngine",
    "Readability",
    "ReadabilityReason",
    "TesseractOcr",
]

Readability = Literal["readable", "partial", "unreadable", "needs_ocr"]
READABILITY_STATES: Final[tuple[str, ...]] = get_args(Readability)
ReasonCode = Literal[
    "empty-output",
    "no-extractor",
    "undecodable",
    "malformed",
    "encrypted",
    "missing-extra",
    "no-text-layer",
    "pages-without-text",
    "ocr-low-confidence",
    "ocr-failed",
]
REASON_CODES: Final[tuple[str, ...]] = get_args(ReasonCode)
#: What a person (or the host) should do next, per reason.
NEXT_ACTIONS: Final[dict[str, str]] = {
    "empty-output": "check the original: it holds no text to index",
    "no-extractor": "register an extractor for this media type, or convert the file",
    "undecodable": "save the original as UTF-8 text",
    "malformed": "repair or re-export the original; it does not parse",
    "encrypted": "provide an unencrypted copy",
    "missing-extra": "install the extra named in the reason",
    "no-text-layer": "register an OCR engine (TesseractOcr, or the host's own)",
    "pages-without-text": "register an OCR engine to read the pages without text",
    "ocr-low-confidence": "review the OCR text or provide a text version",
    "ocr-failed": "check the OCR engine, or provide a text version",
}
_KIND_OF_TYPE: Final[dict[str, str]] = {
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/json": "json",
    "text/csv": "csv",
    "text/tab-separated-values": "csv",
    "text/xml": "xml",
    "application/xml": "xml",
    "text/yaml": "yaml",
    "application/yaml": "yaml",
    "application/x-yaml": "yaml",
    "application/x-tex": "latex",
    "text/x-tex": "latex",
    "application/pdf": "pdf",
    "message/rfc822": "text",
}
_IMAGE_TYPES: Final = frozenset(
    {"image/png", "image/jpeg", "image/tiff", "image/gif", "image/bmp", "image/webp"}
)


@dataclass(frozen=True, slots=True)
class ReadabilityReason:
    """One typed reason an extraction is not (wholly) readable, with its detail."""

    code: ReasonCode
    detail: str


@dataclass(frozen=True, slots=True)
class Extraction:
    """The outcome of extracting one original: its state, the document when usable, why."""

    state: Readability
    document: LoadedDocument | None
    reasons: tuple[ReadabilityReason, ...] = ()
    extractor: str = ""

    @property
    def usable(self) -> bool:
        """Whether there is text to index (``readable`` or ``partial``)."""
        return self.state in ("readable", "partial") and self.document is not None

    @property
    def next_action(self) -> str | None:
        """What to do next (from the first reason), or None when readable."""
        return NEXT_ACTIONS[self.reasons[0].code] if self.reasons else None

    def describe(self) -> str:
        """One line: the state and every reason."""
        details = "; ".join(f"{r.code}: {r.detail}" for r in self.reasons)
        return f"{self.state}" + (f" ({details})" if details else "")


def _failed(state: Readability, code: ReasonCode, detail: str, extractor: str) -> Extraction:
    return Extraction(state, None, (ReadabilityReason(code, detail),), extractor)


@runtime_checkable
class Extractor(Protocol):
    """Turns bytes of some media types into a document; ``version`` enters the plan."""

    name: str
    version: str

    def extract(self, data: bytes, *, media_type: str, name: str, source_id: str) -> Extraction:
        """The extraction of ``data`` (never raises for bad content: an unreadable state)."""
        ...


@runtime_checkable
class OcrEngine(Protocol):
    """Reads text from an image: ``(text, mean confidence 0-100)``; raises when it cannot."""

    name: str
    version: str

    def recognize(self, image: bytes, media_type: str) -> tuple[str, float]:
        """The text of ``image`` and the engine's mean confidence."""
        ...


def _finish(
    document: LoadedDocument, extractor: str, reasons: Iterable[ReadabilityReason] = ()
) -> Extraction:
    """Empty text is never a success; text with reasons is partial."""
    kept = tuple(reasons)
    if not document.text.strip():
        empty = ReadabilityReason("empty-output", "the extractor returned no text")
        return Extraction("unreadable", None, (*kept, empty), extractor)
    return Extraction("partial" if kept else "readable", document, kept, extractor)


class LoaderExtractor:
    """A groundwire document loader (:func:`~groundwire.ingest.loaders.load_bytes`) of one kind."""

    version = "1"

    def __init__(self, kind: str | None = None) -> None:
        self.kind = kind
        self.name = f"loader:{kind or 'by-name'}"

    def extract(self, data: bytes, *, media_type: str, name: str, source_id: str) -> Extraction:
        """Load the bytes; decode and parse failures become unreadable reasons."""
        label = f"{self.name}@{self.version}"
        try:
            document = load_bytes(data, source_id, path=name or source_id, kind=self.kind)
        except MissingExtraError as exc:
            return _failed("unreadable", "missing-extra", str(exc), label)
        except SourceError as exc:
            message = str(exc)
            code: ReasonCode = (
                "undecodable" if "text" in message or "binary" in message else "malformed"
            )
            if "encrypted" in message:
                code = "encrypted"
            return _failed("unreadable", code, message, label)
        return _finish(document, label)


def _page_texts(document: LoadedDocument) -> list[str]:
    starts = list(document.metadata.get("page_starts") or ())
    bounds = [*starts[1:], len(document.text)]
    return [document.text[a:b].strip() for a, b in zip(starts, bounds, strict=True)]


def _page_images(data: bytes, pages: list[int]) -> dict[int, list[tuple[bytes, str]]]:
    """Images drawn on the given (1-based) pages of a PDF: ``{page: [(bytes, media type)]}``.

    Found in each page's resources without decoding anything. JPEG and JPEG 2000 images
    are handed over as they are stored; other encodings need pypdf's image support
    (Pillow), and are listed with empty bytes when it is missing (the OCR of that page
    then fails with the reason).
    """
    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(data))
    found: dict[int, list[tuple[bytes, str]]] = {}
    for number in pages:
        images: list[tuple[bytes, str]] = []
        try:
            page = reader.pages[number - 1]
            resources = page.get("/Resources")
            xobjects = resources.get_object().get("/XObject") if resources is not None else None
            contents = page.get_contents()
            drawn = contents.get_data() if contents is not None else b""
            for name, reference in xobjects.get_object().items() if xobjects is not None else ():
                image = reference.get_object()
                if image.get("/Subtype") != "/Image":
                    continue
                if not re.search(re.escape(str(name).encode()) + rb"\s+Do\b", drawn):
                    continue  # listed in the resources but never drawn on this page
                filters = image.get("/Filter")
                names = [str(f) for f in filters] if isinstance(filters, list) else [str(filters)]
                if "/DCTDecode" in names:
                    images.append((bytes(image._data), "image/jpeg"))
                elif "/JPXDecode" in names:
                    images.append((bytes(image._data), "image/jp2"))
                else:
                    images.append((_decoded_image(reader, number), "image/png"))
        except Exception:  # pypdf raises many types for damaged resources: no images found
            images = images or []
        found[number] = images
    return found


def _decoded_image(reader: Any, number: int) -> bytes:
    """The first image of a page decoded by pypdf (needs Pillow), else empty bytes."""
    try:
        return bytes(reader.pages[number - 1].images[0].data)
    except Exception:  # ImportError without Pillow, or an undecodable image
        return b""


class PdfExtractor:
    """PDF text by page (pypdf); pages without a text layer are named, and OCRed if possible."""

    name = "pdf"
    version = "1"

    def __init__(self, registry: ExtractorRegistry) -> None:
        self.registry = registry

    def extract(self, data: bytes, *, media_type: str, name: str, source_id: str) -> Extraction:
        """Text pages as loaded; image-only pages go to OCR, or make the result needs_ocr."""
        loaded = LoaderExtractor("pdf").extract(
            data, media_type=media_type, name=name, source_id=source_id
        )
        label = f"{self.name}@{self.version}"
        document = loaded.document
        if document is None:
            if loaded.reasons and loaded.reasons[0].code == "empty-output":
                document = load_bytes(data, source_id, path=name or source_id, kind="pdf")
            else:
                return replace(loaded, extractor=label)
        texts = _page_texts(document)
        blank = [n for n, text in enumerate(texts, start=1) if not text]
        if not blank:
            return _finish(document, label)
        images = _page_images(data, blank)
        scanned = [n for n in blank if images.get(n)]
        if not scanned:
            return _finish(document, label)  # blank pages: nothing is missing
        ocr = self.registry.ocr
        if ocr is None:
            if len(scanned) >= OCR_PAGE_SHARE * len(texts) or not "".join(texts).strip():
                return _failed(
                    "needs_ocr",
                    "no-text-layer",
                    f"{len(scanned)} of {len(texts)} page(s) are images without a text layer",
                    label,
                )
            pages = ", ".join(map(str, scanned))
            reason = ReadabilityReason("pages-without-text", f"pages {pages} have no text layer")
            return _finish(document, label, [reason])
        return self._ocr(document, texts, scanned, images, ocr, label)

    def _ocr(
        self,
        document: LoadedDocument,
        texts: list[str],
        scanned: list[int],
        images: dict[int, list[tuple[bytes, str]]],
        ocr: OcrEngine,
        label: str,
    ) -> Extraction:
        reasons: list[ReadabilityReason] = []
        confidences: list[float] = []
        for number in scanned:
            parts = []
            for image, kind in images[number]:
                if not image:
                    reasons.append(
                        ReadabilityReason(
                            "ocr-failed",
                            f"page {number}: its image encoding needs pypdf's image support "
                            "(pip install 'pypdf[image]')",
                        )
                    )
                    continue
                try:
                    text, confidence = ocr.recognize(image, kind)
                except Exception as exc:  # the host's engine: any failure leaves the page unread
                    reasons.append(ReadabilityReason("ocr-failed", f"page {number}: {exc}"))
                    continue
                parts.append(text.strip())
                confidences.append(confidence)
            texts[number - 1] = "\n".join(p for p in parts if p)
        mean = sum(confidences) / len(confidences) if confidences else 0.0
        if confidences and mean < OCR_MIN_CONFIDENCE:
            reasons.append(ReadabilityReason("ocr-low-confidence", f"mean confidence {mean:.0f}"))
        parts_out: list[str] = []
        sections: list[Section] = []
        length = 0
        for number, text in enumerate(texts, start=1):
            if parts_out:
                parts_out.append("\n\n")
                length += 2
            sections.append(Section(length, 1, f"page {number}"))
            parts_out.append(text)
            length += len(text)
        text = "".join(parts_out)
        metadata = {
            **document.metadata,
            "page_starts": tuple(s.start for s in sections),
            "ocr_pages": tuple(scanned),
        }
        merged = replace(
            document,
            text=text,
            text_sha256=sha256_hex(text.encode("utf-8")),
            sections=tuple(sections),
            metadata=metadata,
        )
        plan = f"{label}+{ocr.name}@{ocr.version}"
        return _finish(merged, plan, reasons)


class ImageExtractor:
    """Images: OCR when an engine is registered, else ``needs_ocr``."""

    name = "image"
    version = "1"

    def __init__(self, registry: ExtractorRegistry) -> None:
        self.registry = registry

    def extract(self, data: bytes, *, media_type: str, name: str, source_id: str) -> Extraction:
        """The OCR text of the image, or needs_ocr."""
        ocr = self.registry.ocr
        label = f"{self.name}@{self.version}"
        if ocr is None:
            return _failed("needs_ocr", "no-text-layer", f"{media_type} holds no text layer", label)
        label = f"{label}+{ocr.name}@{ocr.version}"
        try:
            text, confidence = ocr.recognize(data, media_type)
        except Exception as exc:  # the host's engine
            return _failed("unreadable", "ocr-failed", str(exc), label)
        document = LoadedDocument(
            source_id=source_id,
            path=name or source_id,
            kind="text",
            title=(name or source_id).rsplit("/", 1)[-1],
            text=text.strip(),
            sha256=sha256_hex(data),
            text_sha256=sha256_hex(text.strip().encode("utf-8")),
            metadata={"ocr_confidence": round(confidence, 1)},
        )
        reasons = []
        if confidence < OCR_MIN_CONFIDENCE:
            reasons.append(
                ReadabilityReason("ocr-low-confidence", f"mean confidence {confidence:.0f}")
            )
        return _finish(document, label, reasons)


class TesseractOcr:
    """OCR with Debian's ``tesseract`` (package ``tesseract-ocr``), when it is on PATH."""

    name = "tesseract"

    def __init__(self, language: str = "eng", timeout: float = OCR_TIMEOUT_S) -> None:
        binary = shutil.which("tesseract")
        if binary is None:
            raise MissingExtraError(
                "tesseract", "ocr", "OCR with tesseract (apt-get install tesseract-ocr)"
            )
        self.binary = binary
        self.language = language
        self.timeout = timeout
        done = subprocess.run(
            [binary, "--version"], capture_output=True, timeout=timeout, check=False
        )
        first = (done.stdout or done.stderr).decode("utf-8", "replace").splitlines()
        self.version = first[0].split()[-1] if first else "unknown"

    def recognize(self, image: bytes, media_type: str) -> tuple[str, float]:
        """Run ``tesseract stdin stdout tsv``: the words joined by line, their mean confidence."""
        done = subprocess.run(
            [self.binary, "stdin", "stdout", "-l", self.language, "tsv"],
            input=image,
            capture_output=True,
            timeout=self.timeout,
            check=False,
        )
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise RuntimeError(
                f"tesseract exited {done.returncode}: {detail[-1] if detail else ''}"
            )
        lines: dict[tuple[str, str, str], list[str]] = {}
        confidences = []
        for row in done.stdout.decode("utf-8", "replace").splitlines()[1:]:
            cells = row.split("\t")
            if len(cells) == 12 and cells[11].strip() and float(cells[10]) >= 0:
                lines.setdefault((cells[2], cells[3], cells[4]), []).append(cells[11])
                confidences.append(float(cells[10]))
        text = "\n".join(" ".join(words) for _, words in sorted(lines.items()))
        return text, (sum(confidences) / len(confidences) if confidences else 0.0)


class ExtractorRegistry:
    """Extractors by media type, the optional OCR engine, and the plan they make."""

    def __init__(self, *, ocr: OcrEngine | None = None) -> None:
        self.ocr = ocr
        self._by_type: dict[str, Extractor] = {}
        self._by_name = LoaderExtractor(None)
        self._text = LoaderExtractor("text")
        for media_type, kind in _KIND_OF_TYPE.items():
            self._by_type[media_type] = LoaderExtractor(kind)
        self._by_type["application/pdf"] = PdfExtractor(self)
        for media_type in _IMAGE_TYPES:
            self._by_type[media_type] = ImageExtractor(self)

    def register(self, media_types: Iterable[str], extractor: Extractor) -> None:
        """Use ``extractor`` for these media types (replacing the built-in one)."""
        if not isinstance(extractor, Extractor):
            raise TypeError(
                "an extractor needs name, version and extract(data, media_type=, name=, source_id=)"
            )
        for media_type in media_types:
            self._by_type[media_type.lower()] = extractor

    def register_ocr(self, engine: OcrEngine | None) -> None:
        """Use ``engine`` for images and PDF pages without a text layer (None: no OCR)."""
        if engine is not None and not isinstance(engine, OcrEngine):
            raise TypeError("an OCR engine needs name, version and recognize(image, media_type)")
        self.ocr = engine

    def extractor_for(self, media_type: str, name: str) -> Extractor | None:
        """The extractor for a declared media type; plain text and unknown text types are
        read by the name's extension (``.md``, ``.py``...). None when nothing reads it."""
        kind = declared_type(media_type, name)
        generic = kind in ("text/plain", "message/rfc822", "application/octet-stream")
        if generic or (kind.startswith("text/") and kind not in self._by_type):
            resolved = resolve_kind(name) if name else None
            if resolved is not None and resolved[0] != "pdf":
                return self._by_name
            return self._text if kind != "application/octet-stream" else None
        return self._by_type.get(kind)

    def plan(self, media_type: str, name: str) -> str:
        """The extractors that would run, with versions (the replay key of the ledger)."""
        extractor = self.extractor_for(media_type, name)
        base = f"{extractor.name}@{extractor.version}" if extractor is not None else "none"
        uses_ocr = isinstance(extractor, PdfExtractor | ImageExtractor)
        if uses_ocr and self.ocr is not None:
            base += f"+{self.ocr.name}@{self.ocr.version}"
        return base

    def extract(self, data: bytes, *, media_type: str, name: str, source_id: str) -> Extraction:
        """Extract ``data``; never raises for bad content (an unreadable state instead)."""
        extractor = self.extractor_for(media_type, name)
        if extractor is None:
            kind = declared_type(media_type, name)
            return _failed("unreadable", "no-extractor", f"no extractor for {kind}", "none")
        try:
            return extractor.extract(data, media_type=media_type, name=name, source_id=source_id)
        except (SourceError, MissingExtraError) as exc:  # an extractor that raised anyway
            return _failed(
                "unreadable", "malformed", str(exc), f"{extractor.name}@{extractor.version}"
            )
