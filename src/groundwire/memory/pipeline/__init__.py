"""The memory write pipeline: what turns conversations into memories and learns from use.

A host writes through :class:`MemoryPipeline`; background jobs in the store's
``memory_jobs`` queue do the rest, each with bounded, recorded model calls through
groundwire's providers:

- ``extract``: raw conversation turns → facts with entities, relations and attributes
  (schema-validated, all or nothing), a decision per fact (add / update / delete /
  none) against similar memories, contradiction checks, the update policy, the audit;
- ``prospective_index``: questions a memory may answer, stored as hints;
- ``session_feedback``: aspect weights from what a session's recalls matched, decay;
- ``continuity_score``: how well the injected memories served the session.

This package sits above ``groundwire.llm`` (it calls models); the store below it never
imports it. Modules: ``jobs`` (the queue), ``calls`` (budgeted model calls, reply
cleaning), ``extract`` and ``proposals`` (extraction, decisions, policy, audit),
``contradiction``, ``hints``, ``session`` (feedback, decay, scoring), ``summary`` (the
recall summary card), ``worker`` (:class:`MemoryPipeline` and its job loop).
"""

from groundwire.memory.pipeline.jobs import JOB_KINDS, Job
from groundwire.memory.pipeline.summary import SummarizedRecall, SummaryCard
from groundwire.memory.pipeline.worker import JobOutcome, MemoryPipeline

__all__ = ["JOB_KINDS", "Job", "JobOutcome", "MemoryPipeline", "SummarizedRecall", "SummaryCard"]
