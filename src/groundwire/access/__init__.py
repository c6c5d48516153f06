"""Who may see and change what: labels, authorization callbacks, filters, guard, governance.

- :mod:`~groundwire.access.labels`: the tenant and ACL labels records carry.
- :mod:`~groundwire.access.authorize`: the one fail-closed evaluation of host callbacks.
- :mod:`~groundwire.access.filters`: a :class:`~groundwire.Filter` on one record, or as a mask.
- :mod:`~groundwire.access.guard`: may a workflow or agent read, search or write a space.
- :mod:`~groundwire.access.governance` and :mod:`~groundwire.access.audit`: governed
  mutations (dry run, approvals, idempotency, send gate) and their hash-chained audit log.

See docs/ACCESS.md ("Who sees what") for the model, its guarantees and its limits.
"""

from groundwire.access.audit import AuditEnvelope, AuditSink, JsonLinesAuditSink, MemoryAuditSink
from groundwire.access.audit_sqlite import SQLiteAuditSink
from groundwire.access.authorize import Authorization, authorize_items, check_callback
from groundwire.access.filters import LabelIndex, admits
from groundwire.access.governance import (
    BLOCK_REASONS,
    BlockReason,
    Governance,
    MutationPlan,
    MutationRequest,
    MutationResult,
    SendGate,
    aexecute,
    evaluate,
    execute,
)
from groundwire.access.guard import (
    GUARD_REASONS,
    AccessContext,
    AccessDecision,
    KnowledgeAccessGuard,
    KnowledgeSpace,
)
from groundwire.access.labels import Labels, parse_acl, parse_tenant, read_labels

__all__ = [
    "BLOCK_REASONS",
    "GUARD_REASONS",
    "AccessContext",
    "AccessDecision",
    "AuditEnvelope",
    "AuditSink",
    "Authorization",
    "BlockReason",
    "Governance",
    "JsonLinesAuditSink",
    "KnowledgeAccessGuard",
    "KnowledgeSpace",
    "LabelIndex",
    "Labels",
    "MemoryAuditSink",
    "MutationPlan",
    "MutationRequest",
    "MutationResult",
    "SQLiteAuditSink",
    "SendGate",
    "admits",
    "aexecute",
    "authorize_items",
    "check_callback",
    "evaluate",
    "execute",
    "parse_acl",
    "parse_tenant",
    "read_labels",
]
