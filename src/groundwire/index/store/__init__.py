"""Snapshot folders: the file format (versions 1 and 2), atomic writes, verified loads.

``save_parts`` writes a knowledge base's :class:`~groundwire.index.parts.Parts`;
``load_parts`` opens one (see ``docs/INDEX.md`` for the layout and guarantees).
"""

from groundwire.index.store.reader import describe, is_snapshot, load_parts
from groundwire.index.store.writer import save_parts

__all__ = ["describe", "is_snapshot", "load_parts", "save_parts"]
