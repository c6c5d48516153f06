"""Mutation governance: dry runs, approvals, idempotency, send gates and an audit trail.

A host describes a change to an outside system (send an email, update a ticket, write a
knowledge space) as a :class:`MutationRequest` and hands groundwire the action that
performs it. :func:`evaluate` returns the :class:`MutationPlan` — ``ready``,
``dry_run`` or ``blocked``, with the missing evidence and the block reasons — without
running anything. :func:`execute` runs the action only for a ``ready`` plan:

- a dry run never executes (its plan still lists what a real run would lack);
- a run needs an idempotency key and audit evidence (``evidence_ref``)
  [``idempotency-key-missing``, ``audit-evidence-missing``];
- an operation that requires approval, and every outbound send, needs at least one
  approval ref [``approval-missing``]; an outbound send also needs a send gate
  [``send-gate-missing``] whose status is ``approved`` [``send-gate-not-approved``];
- it needs an audit sink to record it [``audit-sink-missing``]; the sink stores the
  idempotency key: a key already executed returns the first result without running the
  action again (``replayed``), a key used for a different request is refused
  [``idempotency-key-conflict``], and a key whose execution has not recorded an outcome
  is refused [``idempotency-in-progress``].

Every result carries an :class:`~groundwire.access.audit.AuditEnvelope`, and every
decision (dry run, block, start, outcome, replay) is appended to the sink when one is
given. An action that raises is recorded as ``failed``; its key is spent, so a retry
replays the failure rather than risking a second send: retry with a new key on purpose.
Results are stored as JSON; a replay returns the stored JSON value.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Literal, get_args

from groundwire.access.audit import AuditEnvelope, AuditSink, canonical_json
from groundwire.config import MAX_GOVERNANCE_REF_CHARS
from groundwire.errors import ConfigError
from groundwire.i18n import DEFAULT_LOCALE, message
from groundwire.model import Principal

__all__ = [
    "BLOCK_REASONS",
    "BlockReason",
    "Governance",
    "MutationPlan",
    "MutationRequest",
    "MutationResult",
    "SendGate",
    "aexecute",
    "evaluate",
    "execute",
]

BlockCode = Literal[
    "idempotency-key-missing",
    "audit-evidence-missing",
    "approval-missing",
    "send-gate-missing",
    "send-gate-not-approved",
    "audit-sink-missing",
    "idempotency-key-conflict",
    "idempotency-in-progress",
]
#: Every reason a mutation can be blocked, in the order they are checked.
BLOCK_REASONS: Final[tuple[str, ...]] = get_args(BlockCode)
GateStatus = Literal["approved", "pending", "rejected"]
_GATE_STATUSES: Final[tuple[str, ...]] = get_args(GateStatus)
Clock = Callable[[], datetime]


def _ref(option: str, value: object, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_GOVERNANCE_REF_CHARS:
        raise ConfigError(
            f"{option}={value!r} is invalid: expected a non-empty string of at most "
            f"{MAX_GOVERNANCE_REF_CHARS} characters"
        )
    return value


@dataclass(frozen=True, slots=True)
class SendGate:
    """The outbound-send gate of one send: ``approved``, ``pending`` or ``rejected``."""

    status: GateStatus
    evidence_ref: str | None = None

    def __post_init__(self) -> None:
        if self.status not in _GATE_STATUSES:
            raise ConfigError(
                f"SendGate.status={self.status!r} is invalid: expected one of {_GATE_STATUSES}"
            )
        _ref("SendGate.evidence_ref", self.evidence_ref)


@dataclass(frozen=True, slots=True)
class Governance:
    """The evidence a mutation brings: dry run, idempotency key, audit evidence, approvals, gate."""

    dry_run: bool = False
    idempotency_key: str | None = None
    evidence_ref: str | None = None
    approval_refs: tuple[str, ...] = ()
    send_gate: SendGate | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dry_run, bool):
            raise ConfigError(f"dry_run={self.dry_run!r} is invalid: expected True or False")
        _ref("idempotency_key", self.idempotency_key)
        _ref("evidence_ref", self.evidence_ref)
        refs = self.approval_refs
        if isinstance(refs, str) or not isinstance(refs, list | tuple):
            raise ConfigError(f"approval_refs={refs!r} is invalid: expected a list of refs")
        object.__setattr__(
            self,
            "approval_refs",
            tuple(_ref("approval_refs[]", r, optional=False) or "" for r in refs),
        )
        if self.send_gate is not None and not isinstance(self.send_gate, SendGate):
            raise ConfigError("send_gate must be a SendGate(status, evidence_ref) or None")


@dataclass(frozen=True, slots=True)
class MutationRequest:
    """A proposed change: what (``operation``, ``target``, ``payload``), by whom, and how governed.

    ``requires_approval`` and ``outbound_send`` raise the bar (see the module docstring).
    ``payload`` (JSON values) describes the change; with the operation, flags, principal
    and target it makes the request's fingerprint, so one idempotency key cannot be
    reused for a different change.
    """

    operation: str
    governance: Governance = field(default_factory=Governance)
    requires_approval: bool = False
    outbound_send: bool = False
    principal: Principal | None = None
    target: str | None = None
    payload: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        _ref("operation", self.operation, optional=False)
        _ref("target", self.target)
        for name in ("requires_approval", "outbound_send"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"{name}={getattr(self, name)!r} is invalid: expected True or False"
                )
        if not isinstance(self.governance, Governance):
            raise ConfigError("governance must be a Governance(...)")
        if self.principal is not None and not isinstance(self.principal, Principal):
            raise ConfigError("principal must be a Principal or None")
        try:
            canonical_json(self.payload)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"payload must hold JSON values only ({exc})") from exc

    def fingerprint(self) -> str:
        """SHA-256 of the request's identity: everything but its governance evidence."""
        identity = {
            "operation": self.operation,
            "requires_approval": self.requires_approval,
            "outbound_send": self.outbound_send,
            "principal": _principal(self.principal),
            "target": self.target,
            "payload": self.payload,
        }
        return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class BlockReason:
    """Why a mutation may not run: a stable ``code`` and a localized ``message``."""

    code: BlockCode
    message: str


@dataclass(frozen=True, slots=True)
class MutationPlan:
    """What :func:`evaluate` decided: ``ready``, ``dry_run`` or ``blocked``.

    ``missing_evidence`` names the governance fields a real run lacks;
    ``block_reasons`` says why it may not run (also listed for a dry run).
    """

    request: MutationRequest
    status: Literal["ready", "dry_run", "blocked"]
    missing_evidence: tuple[str, ...]
    block_reasons: tuple[BlockReason, ...]
    message: str

    @property
    def allowed(self) -> bool:
        """Whether :func:`execute` would run the action."""
        return self.status == "ready"

    @property
    def codes(self) -> tuple[str, ...]:
        """The block reason codes, in order."""
        return tuple(reason.code for reason in self.block_reasons)


@dataclass(frozen=True, slots=True)
class MutationResult:
    """The outcome of :func:`execute`: ``executed``, ``failed``, ``dry_run`` or ``blocked``.

    ``result`` is the action's return value (the stored JSON value when ``replayed``),
    ``error`` the failure of an action that raised; ``envelope`` the audit record.
    """

    status: Literal["executed", "failed", "dry_run", "blocked"]
    plan: MutationPlan
    envelope: AuditEnvelope
    result: Any = None
    error: str | None = None
    replayed: bool = False


def _principal(principal: Principal | None) -> dict[str, Any] | None:
    if principal is None:
        return None
    return {
        "tenant": principal.tenant,
        "subject": principal.subject,
        "groups": list(principal.groups),
    }


def _reason(code: BlockCode, template: str, locale: str, /, **params: object) -> BlockReason:
    return BlockReason(code, message(template, locale, **params))


def evaluate(request: MutationRequest, *, locale: str = DEFAULT_LOCALE) -> MutationPlan:
    """The plan for ``request``: status, missing evidence and block reasons. Runs nothing."""
    if not isinstance(request, MutationRequest):
        raise ConfigError(f"request must be a MutationRequest, got {type(request).__name__}")
    gov, op = request.governance, request.operation
    missing: list[str] = []
    reasons: list[BlockReason] = []
    if gov.idempotency_key is None:
        missing.append("governance.idempotency_key")
        reasons.append(
            _reason(
                "idempotency-key-missing",
                "governance.idempotency_key_missing",
                locale,
                operation=op,
            )
        )
    if gov.evidence_ref is None:
        missing.append("governance.evidence_ref")
        reasons.append(
            _reason(
                "audit-evidence-missing", "governance.audit_evidence_missing", locale, operation=op
            )
        )
    if (request.requires_approval or request.outbound_send) and not gov.approval_refs:
        missing.append("governance.approval_refs")
        reasons.append(
            _reason("approval-missing", "governance.approval_missing", locale, operation=op)
        )
    if request.outbound_send:
        if gov.send_gate is None:
            missing.append("governance.send_gate")
            reasons.append(
                _reason("send-gate-missing", "governance.send_gate_missing", locale, operation=op)
            )
        elif gov.send_gate.status != "approved":
            missing.append("governance.send_gate.status")
            reasons.append(
                _reason(
                    "send-gate-not-approved",
                    "governance.send_gate_not_approved",
                    locale,
                    operation=op,
                    status=gov.send_gate.status,
                )
            )
    if gov.dry_run:
        status: Literal["ready", "dry_run", "blocked"] = "dry_run"
        summary = message("governance.dry_run", locale, operation=op)
    elif reasons:
        status, summary = "blocked", " ".join(reason.message for reason in reasons)
    else:
        status, summary = "ready", message("governance.ready", locale, operation=op)
    return MutationPlan(request, status, tuple(missing), tuple(reasons), summary)


def _blocked(plan: MutationPlan, reason: BlockReason) -> MutationPlan:
    reasons = (*plan.block_reasons, reason)
    return replace(plan, status="blocked", block_reasons=reasons, message=reason.message)


def _envelope(plan: MutationPlan, event: str, clock: Clock, **extra: Any) -> AuditEnvelope:
    request, gov = plan.request, plan.request.governance
    gate = gov.send_gate
    return AuditEnvelope(
        event=event,  # type: ignore[arg-type]
        operation=request.operation,
        recorded_at=clock().astimezone(UTC).isoformat(timespec="microseconds"),
        fingerprint=request.fingerprint(),
        principal=_principal(request.principal),
        target=request.target,
        idempotency_key=gov.idempotency_key,
        evidence_ref=gov.evidence_ref,
        approval_refs=gov.approval_refs,
        send_gate=None
        if gate is None
        else {"status": gate.status, "evidence_ref": gate.evidence_ref},
        requires_approval=request.requires_approval,
        outbound_send=request.outbound_send,
        block_reasons=plan.codes,
        missing_evidence=plan.missing_evidence,
        **extra,
    )


def _record(audit: AuditSink | None, envelope: AuditEnvelope) -> AuditEnvelope:
    return audit.append(envelope) if audit is not None else envelope


def _jsonable(value: Any) -> Any:
    """The action's result as stored: itself when JSON, else its repr (said in the docs)."""
    try:
        return json.loads(canonical_json(value))
    except (TypeError, ValueError):
        return {"repr": repr(value)}


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Go:
    """An execution that reserved its key: the plan and the ``started`` record."""

    plan: MutationPlan
    started: AuditEnvelope


def _prepare(
    request: MutationRequest, audit: AuditSink | None, clock: Clock, locale: str
) -> MutationResult | _Go:
    """Everything before the action runs: a final result, or the go-ahead."""
    plan = evaluate(request, locale=locale)
    if plan.status == "dry_run":
        return MutationResult("dry_run", plan, _record(audit, _envelope(plan, "dry_run", clock)))
    if plan.status == "ready" and audit is None:
        plan = _blocked(
            plan,
            _reason(
                "audit-sink-missing",
                "governance.audit_sink_missing",
                locale,
                operation=request.operation,
            ),
        )
    if plan.status == "blocked":
        return MutationResult("blocked", plan, _record(audit, _envelope(plan, "blocked", clock)))
    assert audit is not None
    key = request.governance.idempotency_key
    claim = audit.claim(_envelope(plan, "started", clock))
    if claim.status == "new":
        return _Go(plan, claim.record)
    if claim.status == "done":
        first = claim.record
        envelope = audit.append(
            _envelope(
                plan,
                "replayed",
                clock,
                result=first.result,
                error=first.error,
                replay_of=first.sequence,
            )
        )
        status: Literal["executed", "failed"] = (
            "executed" if first.event == "executed" else "failed"
        )
        return MutationResult(status, plan, envelope, first.result, first.error, replayed=True)
    if claim.status == "conflict":
        reason = _reason(
            "idempotency-key-conflict", "governance.idempotency_conflict", locale, key=key
        )
    else:
        reason = _reason(
            "idempotency-in-progress", "governance.idempotency_in_progress", locale, key=key
        )
    plan = _blocked(plan, reason)
    return MutationResult("blocked", plan, audit.append(_envelope(plan, "blocked", clock)))


def _finish(
    go: _Go, audit: AuditSink, clock: Clock, value: Any, error: BaseException | None
) -> MutationResult:
    if error is not None:
        text = f"{type(error).__name__}: {error}"
        envelope = audit.append(_envelope(go.plan, "failed", clock, error=text))
        return MutationResult("failed", go.plan, envelope, None, text)
    envelope = audit.append(_envelope(go.plan, "executed", clock, result=_jsonable(value)))
    return MutationResult("executed", go.plan, envelope, value)


def _check_action(action: object, *, awaitable: bool) -> None:
    if not callable(action):
        raise ConfigError(f"action={action!r} is invalid: expected a function of no arguments")
    if not awaitable and inspect.iscoroutinefunction(action):
        raise ConfigError("action is an async function: use aexecute() to run it")


def execute(
    request: MutationRequest,
    action: Callable[[], Any],
    *,
    audit: AuditSink | None = None,
    locale: str = DEFAULT_LOCALE,
    clock: Clock = _now,
) -> MutationResult:
    """Run ``action()`` only when ``request``'s plan is ready (rules in the module docstring).

    Returns the result with its audit envelope; an action that raises is a ``failed``
    result (recorded), not an exception. Raises ConfigError for a malformed request and
    AuditIntegrityError when the audit log does not verify.
    """
    _check_action(action, awaitable=False)
    prepared = _prepare(request, audit, clock, locale)
    if isinstance(prepared, MutationResult):
        return prepared
    assert audit is not None
    try:
        value = action()
    except Exception as exc:
        return _finish(prepared, audit, clock, None, exc)
    return _finish(prepared, audit, clock, value, None)


async def aexecute(
    request: MutationRequest,
    action: Callable[[], Awaitable[Any]],
    *,
    audit: AuditSink | None = None,
    locale: str = DEFAULT_LOCALE,
    clock: Clock = _now,
) -> MutationResult:
    """:func:`execute` for an async action (``await action()``)."""
    _check_action(action, awaitable=True)
    prepared = _prepare(request, audit, clock, locale)
    if isinstance(prepared, MutationResult):
        return prepared
    assert audit is not None
    try:
        value = await action()
    except Exception as exc:
        return _finish(prepared, audit, clock, None, exc)
    return _finish(prepared, audit, clock, value, None)
