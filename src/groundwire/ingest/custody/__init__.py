"""Document custody: originals by SHA-256, readability, the evidence ledger, citations.

- :mod:`~groundwire.ingest.custody.originals`: verified, insert-only original bytes
  (folder and S3 stores), provenance, quarantine;
- :mod:`~groundwire.ingest.custody.media`: declared media type vs magic numbers;
- :mod:`~groundwire.ingest.custody.extract`: extractors and readability states;
- :mod:`~groundwire.ingest.custody.ledger`: runs, evidence, fragments, supersession,
  withdrawal;
- :mod:`~groundwire.ingest.custody.resolve`: citations resolved, or rejected with why.
"""

from groundwire.ingest.custody.extract import (
    NEXT_ACTIONS,
    READABILITY_STATES,
    REASON_CODES,
    Extraction,
    Extractor,
    ExtractorRegistry,
    OcrEngine,
    ReadabilityReason,
    TesseractOcr,
)
from groundwire.ingest.custody.ledger import EvidenceLedger, EvidenceRecord, RecordOutcome
from groundwire.ingest.custody.originals import (
    Admission,
    Custody,
    FolderStore,
    OriginalStore,
    Provenance,
    S3Store,
)
from groundwire.ingest.custody.resolve import RESOLUTION_PROBLEMS, EvidenceResolver, Resolution

__all__ = [
    "NEXT_ACTIONS",
    "READABILITY_STATES",
    "REASON_CODES",
    "RESOLUTION_PROBLEMS",
    "Admission",
    "Custody",
    "EvidenceLedger",
    "EvidenceRecord",
    "EvidenceResolver",
    "Extraction",
    "Extractor",
    "ExtractorRegistry",
    "FolderStore",
    "OcrEngine",
    "OriginalStore",
    "Provenance",
    "ReadabilityReason",
    "RecordOutcome",
    "Resolution",
    "S3Store",
    "TesseractOcr",
]
