"""Context: token estimation, rendering, budgeting and citations."""

from groundwire.config import estimate_tokens
from groundwire.context.assemble import OPENING, assemble_context, render_entry

__all__ = ["OPENING", "assemble_context", "estimate_tokens", "render_entry"]
