"""Integrations a query names: the turn's relevance scope follows what the user asks about.

Integrations are relevance scope, not authorization: a request that enables none still
means Jira when it asks "jira status doesn't update". :func:`named_integrations` finds the
integrations a query names exactly — the integration's name as the knowledge base's
entries spell it (``jira``, ``microsoft-teams``), compared as a whole run of the query's
normalized words (``Microsoft Teams``, ``Jira's``), never by stem, prefix or edit distance —
so that the pipeline can enable them for that one turn.

Only integrations with at least one entry the request may see count (``visible``: the
eligibility without the integration scope, after tenant, ACL, blocked domains and the
host predicate): a name is never confirmed to a principal who may not see its entries.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import MaskArray

__all__ = ["named_integrations"]


def named_integrations(
    kb: KnowledgeBase, query: str, visible: MaskArray, enabled: Collection[str] = ()
) -> tuple[str, ...]:
    """The integrations of ``kb`` (casefolded, sorted) that ``query`` names and ``enabled``
    does not hold, among those with an entry in ``visible``."""
    masks = kb.integration_masks
    if not masks:
        return ()
    analyzer = kb.analyzer
    words = analyzer.words(query)
    if not words:
        return ()
    text = f" {' '.join(words)} "
    named = []
    for name in sorted(masks):
        if name in enabled:
            continue
        phrase = analyzer.words(name)
        if phrase and f" {' '.join(phrase)} " in text and bool(np.any(masks[name] & visible)):
            named.append(name)
    return tuple(named)
