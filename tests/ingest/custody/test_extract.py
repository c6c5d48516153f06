"""Readability: each state with its typed reasons and next action; OCR is pluggable."""

from __future__ import annotations

import shutil

import pytest

from groundwire.ingest.custody import NEXT_ACTIONS, REASON_CODES, ExtractorRegistry, TesseractOcr
from synctools import JPEG, pdf_with_pages


class HostOcr:
    """A host's OCR engine: reads a fixed text from any JPEG (stands in for a real one)."""

    name = "host-ocr"
    version = "7"

    def __init__(self, confidence: float = 95.0, fail: bool = False) -> None:
        self.confidence = confidence
        self.fail = fail
        self.calls: list[str] = []

    def recognize(self, image: bytes, media_type: str) -> tuple[str, float]:
        self.calls.append(media_type)
        if self.fail:
            raise RuntimeError("engine offline")
        assert image == JPEG
        return "Scanned: visitors must wear badges.", self.confidence


def _extract(registry: ExtractorRegistry, data: bytes, media_type: str, name: str):  # type: ignore[no-untyped-def]
    return registry.extract(data, media_type=media_type, name=name, source_id="src/doc")


def test_every_reason_has_a_next_action() -> None:
    assert set(NEXT_ACTIONS) == set(REASON_CODES)


def test_readable_text_markdown_and_code() -> None:
    registry = ExtractorRegistry()
    md = _extract(registry, b"# Title\n\nBody text.\n", "text/markdown", "a.md")
    assert md.state == "readable"
    assert md.document is not None
    assert md.document.kind == "markdown"
    assert md.next_action is None
    assert md.usable
    code = _extract(registry, b"def rotate():\n    return 1\n", "text/plain", "tools/rotate.py")
    assert code.document is not None
    assert code.document.kind == "code"


def test_empty_output_is_never_a_success() -> None:
    empty = _extract(ExtractorRegistry(), b"  \n\n ", "text/plain", "blank.txt")
    assert empty.state == "unreadable"
    assert not empty.usable
    assert [r.code for r in empty.reasons] == ["empty-output"]
    blank_pdf = _extract(
        ExtractorRegistry(), pdf_with_pages([(None, False)]), "application/pdf", "blank.pdf"
    )
    assert blank_pdf.state == "unreadable"
    assert blank_pdf.reasons[-1].code == "empty-output"


def test_unreadable_states_name_their_reason() -> None:
    registry = ExtractorRegistry()
    latin1 = _extract(registry, "café".encode("latin-1"), "text/plain", "menu.txt")
    assert latin1.state == "unreadable"
    assert latin1.reasons[0].code == "undecodable"
    assert latin1.next_action == NEXT_ACTIONS["undecodable"]
    broken = _extract(registry, b"%PDF-1.4\nnot really a pdf", "application/pdf", "broken.pdf")
    assert broken.state == "unreadable"
    assert broken.reasons[0].code == "malformed"
    zipped = _extract(registry, b"PK\x03\x04rest", "application/zip", "archive.zip")
    assert zipped.state == "unreadable"
    assert zipped.reasons[0].code == "no-extractor"
    assert "application/zip" in zipped.reasons[0].detail


def test_a_scanned_pdf_without_a_text_layer_needs_ocr() -> None:
    scanned = _extract(
        ExtractorRegistry(),
        pdf_with_pages([(None, True), (None, True)]),
        "application/pdf",
        "scan.pdf",
    )
    assert scanned.state == "needs_ocr"
    assert not scanned.usable
    assert scanned.reasons[0].code == "no-text-layer"
    assert "2 of 2" in scanned.reasons[0].detail
    photo = _extract(ExtractorRegistry(), JPEG, "image/jpeg", "whiteboard.jpg")
    assert photo.state == "needs_ocr"


def test_a_pdf_with_some_scanned_pages_is_partial_and_names_them() -> None:
    data = pdf_with_pages([("Page one has text", False), (None, True)])
    partial = _extract(ExtractorRegistry(), data, "application/pdf", "mixed.pdf")
    assert partial.state == "partial"
    assert partial.usable
    assert partial.reasons[0].code == "pages-without-text"
    assert "pages 2" in partial.reasons[0].detail
    assert partial.document is not None
    assert "Page one has text" in partial.document.text


def test_ocr_plugs_in_for_scanned_pages_and_enters_the_plan() -> None:
    registry = ExtractorRegistry()
    before = registry.plan("application/pdf", "scan.pdf")
    engine = HostOcr()
    registry.register_ocr(engine)
    assert registry.plan("application/pdf", "scan.pdf") == before + "+host-ocr@7"
    read = _extract(
        registry,
        pdf_with_pages([("Cover page", False), (None, True)]),
        "application/pdf",
        "scan.pdf",
    )
    assert read.state == "readable", read.describe()
    assert read.document is not None
    assert "visitors must wear badges" in read.document.text
    assert read.document.metadata["ocr_pages"] == (2,)
    assert engine.calls == ["image/jpeg"]


def test_partial_ocr_never_claims_completeness() -> None:
    low = ExtractorRegistry(ocr=HostOcr(confidence=41.0))
    result = _extract(low, pdf_with_pages([(None, True)]), "application/pdf", "scan.pdf")
    assert result.state == "partial"
    assert result.reasons[0].code == "ocr-low-confidence"
    failing = ExtractorRegistry(ocr=HostOcr(fail=True))
    failed = _extract(
        failing, pdf_with_pages([("Cover", False), (None, True)]), "application/pdf", "scan.pdf"
    )
    assert failed.state == "partial"
    assert failed.reasons[0].code == "ocr-failed"
    photo = _extract(failing, JPEG, "image/jpeg", "board.jpg")
    assert photo.state == "unreadable"
    assert photo.reasons[0].code == "ocr-failed"


def test_registering_an_extractor_replaces_the_built_in_one() -> None:
    class Upper:
        name = "upper"
        version = "2"

        def extract(self, data, *, media_type, name, source_id):  # type: ignore[no-untyped-def]
            return ExtractorRegistry().extract(
                data.upper(), media_type="text/plain", name="x.txt", source_id=source_id
            )

    registry = ExtractorRegistry()
    registry.register(["text/x-shout"], Upper())
    assert registry.plan("text/x-shout", "a.shout") == "upper@2"
    result = _extract(registry, b"quiet words", "text/x-shout", "a.shout")
    assert result.document is not None
    assert result.document.text == "QUIET WORDS"
    with pytest.raises(TypeError):
        registry.register(["text/plain"], object())  # type: ignore[arg-type]


@pytest.mark.skipif(
    shutil.which("tesseract") is None,
    reason="tesseract is not installed (apt-get install tesseract-ocr)",
)
def test_tesseract_reports_its_version() -> None:
    engine = TesseractOcr()
    assert engine.version
    assert engine.name == "tesseract"
