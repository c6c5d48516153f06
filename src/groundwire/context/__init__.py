"""Context: token estimation, rendering, budgeting and citations."""

from groundwire.config import estimate_tokens
from groundwire.context.assemble import OPENING, assemble_context, render_entry
from groundwire.context.evidence import PackedEvidence, pack_evidence, render_evidence

__all__ = [
    "OPENING",
    "PackedEvidence",
    "assemble_context",
    "estimate_tokens",
    "pack_evidence",
    "render_entry",
    "render_evidence",
]
