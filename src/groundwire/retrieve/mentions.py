"""Integrations a query names: the turn's relevance scope follows what the user asks about.

Integrations are relevance scope, not authorization: a request that enables none still
means Jira when it asks "jira status doesn't update". :func:`mentions` finds the
integrations a query names, compared as a whole run of the query's normalized words, never
by stem, prefix or edit distance:

* by **name** — the integration as the knowledge base's entries spell it (``jira``,
  ``microsoft-teams`` read as ``Microsoft Teams``, ``Jira's``);
* by an **alias** of one of its entries — the reviewed phrases the knowledge base declares
  for an integration-scoped entry (``aliases: ["ms teams"]`` on the Microsoft Teams entry,
  ``"crm sync"`` on the Salesforce one) name that entry's integrations.

The pipeline enables them for that one turn. Only what the request may see counts
(``visible``: the eligibility without the integration scope, after tenant, ACL, blocked
domains and the host predicate): a name counts when at least one entry of the integration
is visible, an alias when its own entry is, so a name is never confirmed to a principal who
may not see its entries.

A name is scope, not evidence. Among the entries of the integration it names, the name says
nothing about which one fits (every one of them is about it, as a term above the IDF floor
is about everything), so the relevance gate measures their coverage over the query's other
terms (:func:`named_scope`, :class:`groundwire.retrieve.gate.QueryEvidence`): "who founded
Slack" names Slack, and naming it alone makes no Slack entry relevant. For every other
entry the name stays part of what the question is about, and one that neither belongs to
nor mentions the named integration passes only on full coverage. Alias words stay
evidence: an alias is the knowledge base's own phrase for one entry.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from groundwire.index.knowledge_base import KnowledgeBase
from groundwire.index.lexical import IntArray, MaskArray

__all__ = ["Mentions", "NamedScope", "mentions", "named_integrations", "named_scope"]


@dataclass(frozen=True, slots=True)
class NamedScope:
    """An integration named by name: its name's analyzed ``terms`` and its entries' ``docs``
    (ascending snapshot positions)."""

    terms: tuple[str, ...]
    docs: IntArray


@dataclass(frozen=True, slots=True)
class Mentions:
    """What a query names. ``integrations``: casefolded, sorted, visible, including those
    already enabled; ``by_name``: the integrations named by name, each with the query's
    normalized words that named it."""

    integrations: tuple[str, ...] = ()
    by_name: tuple[tuple[str, tuple[str, ...]], ...] = ()


# Alias tables kept per snapshot (each entry holds its knowledge base alive, so an identity
# check never matches a new object at a recycled address): a few snapshots.
_ALIAS_CACHE_LIMIT = 8
_aliases: dict[int, tuple[KnowledgeBase, tuple[tuple[str, int, tuple[str, ...]], ...]]] = {}


def _alias_table(kb: KnowledgeBase) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    """``(" alias words ", entry position, integrations)`` of every alias of every
    integration-scoped entry, remembered per snapshot."""
    cached = _aliases.get(id(kb))
    if cached is not None and cached[0] is kb:
        return cached[1]
    analyzer = kb.analyzer
    rows = []
    for entry in kb.entries:
        if not entry.integrations or not entry.aliases:
            continue
        position = kb.position(entry.id)
        if position is None:
            continue
        names = tuple(sorted({name.casefold() for name in entry.integrations}))
        for alias in entry.aliases:
            words = analyzer.words(alias)
            if words:
                rows.append((f" {' '.join(words)} ", position, names))
    table = tuple(rows)
    if len(_aliases) >= _ALIAS_CACHE_LIMIT:
        _aliases.clear()
    _aliases[id(kb)] = (kb, table)
    return table


def mentions(kb: KnowledgeBase, query: str, visible: MaskArray) -> Mentions:
    """The integrations of ``kb`` that ``query`` names, among what ``visible`` lets in."""
    masks = kb.integration_masks
    if not masks:
        return Mentions()
    analyzer = kb.analyzer
    words = analyzer.words(query)
    if not words:
        return Mentions()
    text = f" {' '.join(words)} "
    named: set[str] = set()
    by_name: list[tuple[str, tuple[str, ...]]] = []
    for name in sorted(masks):
        phrase = analyzer.words(name)
        if phrase and f" {' '.join(phrase)} " in text and bool(np.any(masks[name] & visible)):
            named.add(name)
            by_name.append((name, tuple(phrase)))
    for alias, position, names in _alias_table(kb):
        if alias in text and bool(visible[position]):
            named.update(names)
    return Mentions(tuple(sorted(named)), tuple(by_name))


def named_scope(kb: KnowledgeBase, mentioned: Mentions) -> tuple[NamedScope, ...]:
    """Each integration ``mentioned`` by name, as the relevance gate reads it: the
    analyzed terms of its name and the positions in ``kb`` of its entries."""
    masks = kb.integration_masks
    named = []
    for name, words in mentioned.by_name:
        mask = masks.get(name)
        terms = tuple(dict.fromkeys(kb.analyzer.terms(list(words))))
        if mask is not None and terms:
            named.append(NamedScope(terms, np.flatnonzero(mask).astype(np.int64)))
    return tuple(named)


def named_integrations(
    kb: KnowledgeBase, query: str, visible: MaskArray, enabled: Collection[str] = ()
) -> tuple[str, ...]:
    """The integrations of ``kb`` (casefolded, sorted) that ``query`` names and ``enabled``
    does not hold, among those ``visible`` lets in (see :func:`mentions`)."""
    return tuple(name for name in mentions(kb, query, visible).integrations if name not in enabled)
