"""Mutation governance: every block reason, dry runs, idempotent replay, the audit envelope."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import groundwire as gw
from groundwire.access.governance import BLOCK_REASONS

ALICE = gw.Principal("acme", "alice", ["support"])
NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
SRC = Path(__file__).resolve().parents[2] / "src"


def clock() -> datetime:
    return NOW


def governed(**fields: Any) -> gw.Governance:
    base: dict[str, Any] = {"idempotency_key": "acme:send:1", "evidence_ref": "audit://send/1"}
    base.update(fields)
    return gw.Governance(**base)


def send(**fields: Any) -> gw.MutationRequest:
    """An approved outbound send with every piece of evidence, unless a field overrides it."""
    governance = fields.pop(
        "governance",
        governed(
            approval_refs=("approval-123",),
            send_gate=gw.SendGate("approved", "gate://send/1"),
        ),
    )
    fields.setdefault("payload", {"subject": "Your refund", "thread": 42})
    return gw.MutationRequest(
        operation="gmail.message.send",
        governance=governance,
        requires_approval=True,
        outbound_send=True,
        principal=ALICE,
        target="support@example.com",
        **fields,
    )


class Action:
    """A counting action: the test sees exactly how often the mutation ran."""

    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.calls = 0
        self.result = {"message_id": "m-1"} if result is None else result
        self.error = error

    def __call__(self) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture(params=["memory", "jsonl", "sqlite"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[gw.AuditSink]:
    made: gw.AuditSink
    if request.param == "memory":
        made = gw.MemoryAuditSink()
    elif request.param == "jsonl":
        made = gw.JsonLinesAuditSink(tmp_path / "audit.jsonl")
    else:
        made = gw.SQLiteAuditSink(tmp_path / "audit.sqlite")
    with made:
        yield made


# -- block reasons ------------------------------------------------------------------------------
BLOCKED: dict[str, tuple[Callable[[], gw.MutationRequest], str]] = {
    "idempotency-key-missing": (
        lambda: send(
            governance=gw.Governance(
                evidence_ref="audit://1",
                approval_refs=("a",),
                send_gate=gw.SendGate("approved"),
            )
        ),
        "governance.idempotency_key",
    ),
    "audit-evidence-missing": (
        lambda: send(
            governance=gw.Governance(
                idempotency_key="k", approval_refs=("a",), send_gate=gw.SendGate("approved")
            )
        ),
        "governance.evidence_ref",
    ),
    "approval-missing": (
        lambda: gw.MutationRequest(
            "ticket.close", governed(), requires_approval=True, principal=ALICE
        ),
        "governance.approval_refs",
    ),
    "send-gate-missing": (
        lambda: send(governance=governed(approval_refs=("a",))),
        "governance.send_gate",
    ),
    "send-gate-not-approved": (
        lambda: send(governance=governed(approval_refs=("a",), send_gate=gw.SendGate("pending"))),
        "governance.send_gate.status",
    ),
}
EXECUTION_BLOCKS = {"audit-sink-missing", "idempotency-key-conflict", "idempotency-in-progress"}


def test_every_block_reason_is_tested() -> None:
    assert set(BLOCKED) | EXECUTION_BLOCKS == set(BLOCK_REASONS)


@pytest.mark.parametrize("code", sorted(BLOCKED))
def test_each_missing_piece_of_evidence_blocks(code: str, sink: gw.AuditSink) -> None:
    build, missing = BLOCKED[code]
    plan = gw.evaluate_mutation(build())
    assert plan.status == "blocked"
    assert not plan.allowed
    assert plan.codes == (code,)
    assert plan.missing_evidence == (missing,)
    action = Action()
    result = gw.execute_mutation(build(), action, audit=sink, clock=clock)
    assert result.status == "blocked"
    assert action.calls == 0
    assert result.envelope.event == "blocked"
    assert result.envelope.block_reasons == (code,)
    assert result.envelope.sequence == 0  # the block itself is audited


def test_an_outbound_send_needs_approval_even_when_not_marked_as_requiring_it() -> None:
    request = gw.MutationRequest(
        "gmail.message.send",
        governed(send_gate=gw.SendGate("approved")),
        outbound_send=True,
    )
    assert gw.evaluate_mutation(request).codes == ("approval-missing",)


def test_a_rejected_gate_names_its_status() -> None:
    request = send(governance=governed(approval_refs=("a",), send_gate=gw.SendGate("rejected")))
    plan = gw.evaluate_mutation(request)
    assert plan.codes == ("send-gate-not-approved",)
    assert "rejected" in plan.block_reasons[0].message


def test_every_reason_is_listed_at_once_in_order() -> None:
    request = gw.MutationRequest("gmail.message.send", outbound_send=True)
    plan = gw.evaluate_mutation(request)
    assert plan.codes == (
        "idempotency-key-missing",
        "audit-evidence-missing",
        "approval-missing",
        "send-gate-missing",
    )


def test_a_run_without_an_audit_sink_is_blocked() -> None:
    action = Action()
    result = gw.execute_mutation(send(), action, clock=clock)
    assert result.status == "blocked"
    assert result.plan.codes == ("audit-sink-missing",)
    assert action.calls == 0
    assert result.envelope.sequence is None  # nothing recorded it


@pytest.mark.parametrize("locale", ["en", "es", "fr"])
def test_block_messages_are_localized(locale: str) -> None:
    plan = gw.evaluate_mutation(gw.MutationRequest("x", outbound_send=True), locale=locale)
    english = gw.evaluate_mutation(gw.MutationRequest("x", outbound_send=True))
    for reason, reference in zip(plan.block_reasons, english.block_reasons, strict=True):
        assert "{" not in reason.message
        assert (reason.message == reference.message) is (locale == "en")


# -- dry runs -----------------------------------------------------------------------------------
def test_a_dry_run_never_executes_and_lists_what_a_run_would_lack(sink: gw.AuditSink) -> None:
    request = gw.MutationRequest(
        "gmail.message.send", gw.Governance(dry_run=True), outbound_send=True, principal=ALICE
    )
    plan = gw.evaluate_mutation(request)
    assert plan.status == "dry_run"
    assert "approval-missing" in plan.codes
    action = Action()
    result = gw.execute_mutation(request, action, audit=sink, clock=clock)
    assert result.status == "dry_run"
    assert action.calls == 0
    assert result.envelope.event == "dry_run"
    assert "governance.send_gate" in result.envelope.missing_evidence


def test_a_complete_dry_run_still_does_not_execute(sink: gw.AuditSink) -> None:
    request = send(
        governance=governed(dry_run=True, approval_refs=("a",), send_gate=gw.SendGate("approved"))
    )
    action = Action()
    result = gw.execute_mutation(request, action, audit=sink, clock=clock)
    assert (result.status, result.plan.codes, action.calls) == ("dry_run", (), 0)
    # a dry run reserves no idempotency key: the real run afterwards executes
    real = gw.execute_mutation(send(), action, audit=sink, clock=clock)
    assert (real.status, action.calls) == ("executed", 1)


# -- execution, replay and conflicts ------------------------------------------------------------
def test_an_allowed_mutation_runs_once_and_a_replay_returns_the_first_result(
    sink: gw.AuditSink,
) -> None:
    action = Action()
    first = gw.execute_mutation(send(), action, audit=sink, clock=clock)
    assert (first.status, first.result, first.replayed) == (
        "executed",
        {"message_id": "m-1"},
        False,
    )
    again = gw.execute_mutation(send(), Action({"message_id": "m-2"}), audit=sink, clock=clock)
    assert action.calls == 1
    assert (again.status, again.result, again.replayed) == ("executed", {"message_id": "m-1"}, True)
    assert again.envelope.event == "replayed"
    assert again.envelope.replay_of == first.envelope.sequence
    events = [record.event for record in sink.records()]
    assert events == ["started", "executed", "replayed"]


def test_replay_survives_reopening_the_log(tmp_path: Path) -> None:
    for make in (
        lambda: gw.JsonLinesAuditSink(tmp_path / "a.jsonl"),
        lambda: gw.SQLiteAuditSink(tmp_path / "a.sqlite"),
    ):
        action = Action()
        with make() as sink:
            gw.execute_mutation(send(), action, audit=sink, clock=clock)
        with make() as reopened:
            replay = gw.execute_mutation(send(), action, audit=reopened, clock=clock)
        assert action.calls == 1
        assert replay.replayed
        assert replay.result == {"message_id": "m-1"}


def test_a_key_reused_for_a_different_request_is_refused(sink: gw.AuditSink) -> None:
    gw.execute_mutation(send(), Action(), audit=sink, clock=clock)
    other = send(payload={"subject": "Something else"})
    action = Action()
    result = gw.execute_mutation(other, action, audit=sink, clock=clock)
    assert result.status == "blocked"
    assert result.plan.codes == ("idempotency-key-conflict",)
    assert "acme:send:1" in result.plan.message
    assert action.calls == 0


def test_a_key_whose_execution_never_finished_is_refused(sink: gw.AuditSink) -> None:
    plan = gw.evaluate_mutation(send())
    started = gw.AuditEnvelope(
        event="started",
        operation="gmail.message.send",
        recorded_at=NOW.isoformat(),
        fingerprint=plan.request.fingerprint(),
        idempotency_key="acme:send:1",
    )
    assert sink.claim(started).status == "new"  # a process that died before the outcome
    action = Action()
    result = gw.execute_mutation(send(), action, audit=sink, clock=clock)
    assert result.plan.codes == ("idempotency-in-progress",)
    assert action.calls == 0


def test_a_failed_action_is_recorded_and_replayed_not_rerun(sink: gw.AuditSink) -> None:
    action = Action(error=RuntimeError("smtp 451"))
    failed = gw.execute_mutation(send(), action, audit=sink, clock=clock)
    assert (failed.status, failed.error) == ("failed", "RuntimeError: smtp 451")
    again = gw.execute_mutation(send(), action, audit=sink, clock=clock)
    assert (again.status, again.error, again.replayed) == ("failed", "RuntimeError: smtp 451", True)
    assert action.calls == 1


def test_concurrent_executions_of_one_key_run_the_action_once(sink: gw.AuditSink) -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def action() -> str:
        with lock:
            calls.append(1)
        return "sent"

    results: list[gw.MutationResult] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(gw.execute_mutation(send(), action, audit=sink))
        )
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    outcomes = [(r.status, r.replayed, r.plan.codes) for r in results]
    assert len(outcomes) == 8
    assert outcomes.count(("executed", False, ())) == 1
    others = {("executed", True, ()), ("blocked", False, ("idempotency-in-progress",))}
    assert all(o in others for o in outcomes if o != ("executed", False, ()))
    sink.verify()


_WORKER = """
import sys
import groundwire as gw
kind, path, marker = sys.argv[1:]
sink = gw.JsonLinesAuditSink(path) if kind == "jsonl" else gw.SQLiteAuditSink(path)
request = gw.MutationRequest("ticket.close", gw.Governance(idempotency_key="k-1", evidence_ref="e"))
def action():
    with open(marker, "a") as out:
        out.write("ran\\n")
    return "closed"
result = gw.execute_mutation(request, action, audit=sink)
print(result.status, result.replayed)
"""


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_processes_sharing_a_log_run_the_action_once(kind: str, tmp_path: Path) -> None:
    log = tmp_path / f"audit.{kind}"
    marker = tmp_path / "ran.txt"
    env = {"PYTHONPATH": str(SRC)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, kind, str(log), str(marker)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    outputs = [worker.communicate(timeout=60) for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), outputs
    assert marker.read_text().count("ran") == 1
    lines = sorted(out for out, _ in outputs)
    assert lines.count("executed False\n") == 1


def test_async_actions_run_through_aexecute(sink: gw.AuditSink) -> None:
    calls: list[int] = []

    async def action() -> dict[str, str]:
        calls.append(1)
        return {"id": "x"}

    with pytest.raises(gw.ConfigError, match="aexecute"):
        gw.execute_mutation(send(), action, audit=sink)
    first = asyncio.run(gw.aexecute_mutation(send(), action, audit=sink, clock=clock))
    again = asyncio.run(gw.aexecute_mutation(send(), action, audit=sink, clock=clock))
    assert (first.status, again.replayed, len(calls)) == ("executed", True, 1)


def test_a_result_that_is_not_json_is_stored_as_its_repr(sink: gw.AuditSink) -> None:
    value = object()
    result = gw.execute_mutation(send(), lambda: value, audit=sink, clock=clock)
    assert result.result is value
    assert result.envelope.result == {"repr": repr(value)}


# -- the audit envelope -------------------------------------------------------------------------
def test_the_envelope_records_the_whole_decision(sink: gw.AuditSink) -> None:
    result = gw.execute_mutation(send(), Action(), audit=sink, clock=clock)
    envelope = result.envelope
    assert envelope.event == "executed"
    assert envelope.operation == "gmail.message.send"
    assert envelope.recorded_at == "2026-12-01T09:30:00.000000+00:00"
    assert envelope.principal == {"tenant": "acme", "subject": "alice", "groups": ["support"]}
    assert envelope.target == "support@example.com"
    assert envelope.idempotency_key == "acme:send:1"
    assert envelope.evidence_ref == "audit://send/1"
    assert envelope.approval_refs == ("approval-123",)
    assert envelope.send_gate == {"status": "approved", "evidence_ref": "gate://send/1"}
    assert (envelope.requires_approval, envelope.outbound_send) == (True, True)
    assert envelope.block_reasons == ()
    assert envelope.missing_evidence == ()
    assert envelope.result == {"message_id": "m-1"}
    assert envelope.error is None
    assert envelope.fingerprint == send().fingerprint()
    assert envelope.sequence == 1  # after the "started" record
    assert envelope.hash == envelope.compute_hash()
    assert envelope.previous_hash == sink.records()[0].hash
    assert json.loads(json.dumps(envelope.to_json()))["hash"] == envelope.hash


def test_the_fingerprint_ignores_governance_evidence_but_not_the_change() -> None:
    plain = gw.MutationRequest("ticket.close", payload={"id": 1})
    evidenced = gw.MutationRequest(
        "ticket.close", governed(approval_refs=("a",)), payload={"id": 1}
    )
    assert plain.fingerprint() == evidenced.fingerprint()
    assert (
        plain.fingerprint() != gw.MutationRequest("ticket.close", payload={"id": 2}).fingerprint()
    )


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: gw.MutationRequest(""), "operation"),
        (lambda: gw.MutationRequest("x", payload={"when": object()}), "JSON values"),
        (lambda: gw.Governance(idempotency_key=""), "idempotency_key"),
        (lambda: gw.Governance(approval_refs="approval-1"), "approval_refs"),
        (lambda: gw.Governance(idempotency_key="k" * 600), "at most 512"),
        (lambda: gw.SendGate("maybe"), "SendGate.status"),  # type: ignore[arg-type]
        (lambda: gw.MutationRequest("x", outbound_send="yes"), "outbound_send"),  # type: ignore[arg-type]
    ],
)
def test_malformed_requests_are_config_errors(build: Callable[[], object], fragment: str) -> None:
    with pytest.raises(gw.ConfigError, match=fragment):
        build()
