"""The grounded client: generate and stream over providers, with opt-in knowledge grounding.

``Client.generate(input, ...)`` (and ``stream``, ``agenerate``, ``astream``) builds one
:class:`~groundwire.llm.base.ChatRequest` per call and hands it to the providers in
fallback order. Only a call that sets ``use_knowledge_grounding=True`` and has a
non-empty input is grounded, in this order:

1. the call's options are copied into a private, immutable record (the caller's
   objects are never changed);
2. the recent turns — ``conversation_messages`` when given, else the session's
   memory — are filtered to user/assistant and cut to the last four;
3. the engine runs once, with ``knowledge_context`` as the scope;
4. the system prompt resolves (a callable is called now) and the knowledge block is
   appended to it (``f"{system}\\n\\n{block}"``, or the block alone);
5. that one enriched request goes to every provider the fallback tries: no second
   retrieval, no second append.

Grounding fails open: an engine that reports a failure or raises leaves the turn
ungrounded, and ``result.knowledge.failure_reason`` says why. The knowledge block
belongs to this turn's system prompt only; memory receives the user input and the
final assistant text, nothing else.

With agent memory (``Client(memory=store, memory_scope=scope)``, a
:class:`~groundwire.MemoryStore`), every call with input also recalls the memories
that fit the input for the call's scope and adds them as a second block beside the
knowledge block: quoted, untrusted data whose memories the model cites as
``[MEM:<id>]`` (check them with ``validate_citations(text, knowledge,
memories=result.memory)``). Recall fails open too (``result.memory.failure_reason``);
nothing is ever written into agent memory by a call, the knowledge block least of all.
Conversation memory (the session's raw turns) is ``conversation_memory=``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from groundwire.config import (
    DEFAULT_MAX_TOOL_ROUNDS,
    DEFAULT_RECENT_TURNS,
    MEMORY_BLOCK_MAX_TOKENS,
)
from groundwire.embed import Embedder
from groundwire.errors import ConfigError, ProviderError, QueryError
from groundwire.ground import GroundingEngine
from groundwire.llm.base import (
    ChatRequest,
    Completion,
    Message,
    Provider,
    StreamEvent,
    ToolCall,
    ToolSpec,
    Usage,
)
from groundwire.llm.fallback import (
    AsyncFallbackStream,
    Candidate,
    FallbackProvider,
    FallbackResult,
    FallbackStream,
    acomplete_with_fallback,
    astream_with_fallback,
    complete_with_fallback,
    stream_with_fallback,
)
from groundwire.llm.memory import ConversationMemory
from groundwire.llm.tools import (
    FileInput,
    arun_tool_loop,
    files_knowledge_base,
    run_tool_loop,
    search_knowledge_base_tool,
)
from groundwire.memory import MemoryContext, MemoryScope, MemoryStore, render_memory_block
from groundwire.model import GroundingMetadata, KnowledgeBlock, Principal, Scope, Turn

__all__ = ["AsyncStreamResult", "Client", "GenerateResult", "StreamResult", "SystemPrompt"]

logger = logging.getLogger("groundwire")

#: A system prompt: text, or a function called once per call that returns the text.
SystemPrompt = str | Callable[[], str]
_ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class GenerateResult:
    """A finished turn: the answer, any tool calls, who answered, and the grounding used.

    ``knowledge`` is the turn's grounding metadata (selected ids, confidence, tokens,
    ``failure_reason``), or None when the call did not ask for grounding (or had no input).
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    provider: str | None = None
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    knowledge: GroundingMetadata | None = None
    finish_reason: str | None = None
    memory: MemoryContext | None = None


@dataclass(frozen=True, slots=True)
class _Call:
    """One call's options, copied from the caller's arguments (never shared with them)."""

    input: str
    system_prompt: SystemPrompt | None
    history: tuple[Message, ...]  # earlier messages: explicit, or read from memory
    session_id: str | None
    reads_memory: bool  # no explicit messages were given: the session's memory supplies them
    ground: bool
    scope: Scope | Mapping[str, Any] | None
    principal: Principal | None  # the verified principal grounding runs as (None: anonymous)
    model: str | None
    temperature: float | None
    max_tokens: int | None
    tools: tuple[ToolSpec, ...]
    timeout_s: float | None
    memory_scope: MemoryScope | None = None


class Client:
    """Generate and stream over one provider or a fallback list, optionally grounded.

    ``providers``: a :class:`~groundwire.llm.base.Provider`, or a list tried in order whose
    items are providers or ``(provider, model)`` pairs (one provider, several models).
    ``grounding``: the engine used by calls that pass ``use_knowledge_grounding=True``.
    ``memory``: agent memory (a :class:`~groundwire.MemoryStore`) recalled on every call
    for ``memory_scope`` (or the call's ``memory_scope``), into a block cited ``[MEM:<id>]``;
    at most ``memory_max_tokens`` tokens. ``conversation_memory``: the session history
    for calls that pass ``session_id`` (a ConversationMemory given as ``memory`` is
    still accepted, with a DeprecationWarning).
    ``system_prompt``: the default system prompt (text, or a zero-argument callable
    resolved on every call). ``timeout_s``: the default time limit of one provider
    attempt. Retries belong to each provider (its ``RetryPolicy``), which retries its
    transient errors before the next one is tried. ``embedder``: with ``files=``, the
    chunks are embedded in memory and the ``search_knowledge_base`` tool ranks by hybrid
    retrieval (BM25 and cosine fused) instead of BM25 alone.
    """

    def __init__(
        self,
        providers: Provider | Sequence[Candidate],
        *,
        grounding: GroundingEngine | None = None,
        memory: MemoryStore | ConversationMemory | None = None,
        system_prompt: SystemPrompt | None = None,
        timeout_s: float | None = None,
        embedder: Embedder | None = None,
        conversation_memory: ConversationMemory | None = None,
        memory_scope: MemoryScope | None = None,
        memory_max_tokens: int = MEMORY_BLOCK_MAX_TOKENS,
    ) -> None:
        self._providers = _check_candidates(providers)
        self._embedder = embedder  # files=: hybrid search over chunk vectors when set
        self._grounding = grounding
        if memory is not None and not isinstance(memory, MemoryStore):
            if conversation_memory is not None:
                raise ConfigError(
                    "memory= takes a MemoryStore (agent memory); pass the conversation "
                    "history as conversation_memory= only"
                )
            warnings.warn(
                "Client(memory=<ConversationMemory>) is deprecated: pass it as "
                "conversation_memory=; memory= is for agent memory (MemoryStore)",
                DeprecationWarning,
                stacklevel=2,
            )
            memory, conversation_memory = None, memory
        if memory_scope is not None and not isinstance(memory_scope, MemoryScope):
            raise ConfigError(f"memory_scope={memory_scope!r} is invalid: expected a MemoryScope")
        self._memory = conversation_memory
        self._store = memory
        self._memory_scope = memory_scope
        self._memory_tokens = memory_max_tokens
        tokens = memory_max_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ConfigError(
                f"memory_max_tokens={memory_max_tokens!r} is invalid: expected an integer >= 1"
            )
        self._system_prompt = _check_system_prompt(system_prompt)
        self._timeout_s = _check_timeout(timeout_s)

    @property
    def providers(self) -> tuple[Candidate, ...]:
        """The providers (or ``(provider, model)`` pairs), in fallback order."""
        return self._providers

    # -- public calls ------------------------------------------------------------------------
    def generate(
        self,
        input: str = "",
        *,
        system_prompt: SystemPrompt | None = None,
        conversation_messages: Sequence[Message | Mapping[str, Any]] | None = None,
        session_id: str | None = None,
        use_knowledge_grounding: bool = False,
        knowledge_context: Scope | Mapping[str, Any] | None = None,
        knowledge_principal: Principal | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tools: Sequence[ToolSpec] | None = None,
        timeout_s: float | None = None,
        memory_scope: MemoryScope | None = None,
        files: Sequence[FileInput] | None = None,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
    ) -> GenerateResult:
        """Answer ``input`` (after the earlier messages); grounded only when asked.

        ``system_prompt`` overrides the client's for this call. ``conversation_messages``
        are the earlier messages (they replace the session's memory for this call);
        ``session_id`` reads and extends the client's memory. ``knowledge_context`` is
        the grounding scope (a :class:`~groundwire.Scope` or ``{"enabled_integrations":
        [...]}``); ``knowledge_principal`` the verified principal it grounds as (None:
        anonymous: only entries without tenant and ACL labels). ``files`` (paths or
        loaded documents) are chunked into an in-memory index offered to the model as
        the ``search_knowledge_base`` tool; the tool loop
        runs at most ``max_tool_rounds`` model calls. Raises
        :class:`~groundwire.ProviderError` when every provider failed.
        """
        call = self._call(
            input, system_prompt, conversation_messages, session_id, use_knowledge_grounding,
            knowledge_context, model, temperature, max_tokens, tools, timeout_s, memory_scope,
            knowledge_principal,
        )  # fmt: skip
        if call.reads_memory:
            call = replace(call, history=self._read_memory(call))
        knowledge, block = self._ground(call)
        memory = self._recall(call)
        request = self._request(call, block, memory)
        if files:
            provider = FallbackProvider(self._providers)
            tool = search_knowledge_base_tool(files_knowledge_base(files), embedder=self._embedder)
            loop = run_tool_loop(provider, request, [tool], max_rounds=max_tool_rounds)
            self._remember(call, loop.text)
            return _tool_loop_result(loop.completion, knowledge, provider.last, memory)
        answered = complete_with_fallback(self._providers, request)
        self._remember(call, answered.completion.text)
        return _result(answered.completion, knowledge, answered.provider, answered.model, memory)

    def stream(
        self,
        input: str = "",
        *,
        system_prompt: SystemPrompt | None = None,
        conversation_messages: Sequence[Message | Mapping[str, Any]] | None = None,
        session_id: str | None = None,
        use_knowledge_grounding: bool = False,
        knowledge_context: Scope | Mapping[str, Any] | None = None,
        knowledge_principal: Principal | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tools: Sequence[ToolSpec] | None = None,
        timeout_s: float | None = None,
        memory_scope: MemoryScope | None = None,
    ) -> StreamResult:
        """Stream the answer: grounds now, calls the provider as the result is iterated.

        Takes the options of :meth:`generate`. The returned :class:`StreamResult` has
        ``knowledge`` at once; iterate it for text deltas; ``result`` is set when done.
        """
        call = self._call(
            input, system_prompt, conversation_messages, session_id, use_knowledge_grounding,
            knowledge_context, model, temperature, max_tokens, tools, timeout_s, memory_scope,
            knowledge_principal,
        )  # fmt: skip
        if call.reads_memory:
            call = replace(call, history=self._read_memory(call))
        knowledge, block = self._ground(call)
        memory = self._recall(call)
        request = self._request(call, block, memory)
        events = stream_with_fallback(self._providers, request)
        return StreamResult(events, knowledge, lambda text: self._remember(call, text), memory)

    async def agenerate(
        self,
        input: str = "",
        *,
        system_prompt: SystemPrompt | None = None,
        conversation_messages: Sequence[Message | Mapping[str, Any]] | None = None,
        session_id: str | None = None,
        use_knowledge_grounding: bool = False,
        knowledge_context: Scope | Mapping[str, Any] | None = None,
        knowledge_principal: Principal | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tools: Sequence[ToolSpec] | None = None,
        timeout_s: float | None = None,
        memory_scope: MemoryScope | None = None,
        files: Sequence[FileInput] | None = None,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
    ) -> GenerateResult:
        """Async :meth:`generate` (grounding runs through ``GroundingEngine.aground``)."""
        call = self._call(
            input, system_prompt, conversation_messages, session_id, use_knowledge_grounding,
            knowledge_context, model, temperature, max_tokens, tools, timeout_s, memory_scope,
            knowledge_principal,
        )  # fmt: skip
        if call.reads_memory:
            call = replace(call, history=await asyncio.to_thread(self._read_memory, call))
        knowledge, block = await self._aground(call)
        memory = await asyncio.to_thread(self._recall, call)
        request = self._request(call, block, memory)
        if files:
            provider = FallbackProvider(self._providers)
            kb = await asyncio.to_thread(files_knowledge_base, files)
            tool = await asyncio.to_thread(search_knowledge_base_tool, kb, embedder=self._embedder)
            loop = await arun_tool_loop(provider, request, [tool], max_rounds=max_tool_rounds)
            await asyncio.to_thread(self._remember, call, loop.text)
            return _tool_loop_result(loop.completion, knowledge, provider.last, memory)
        answered = await acomplete_with_fallback(self._providers, request)
        await asyncio.to_thread(self._remember, call, answered.completion.text)
        return _result(answered.completion, knowledge, answered.provider, answered.model, memory)

    async def astream(
        self,
        input: str = "",
        *,
        system_prompt: SystemPrompt | None = None,
        conversation_messages: Sequence[Message | Mapping[str, Any]] | None = None,
        session_id: str | None = None,
        use_knowledge_grounding: bool = False,
        knowledge_context: Scope | Mapping[str, Any] | None = None,
        knowledge_principal: Principal | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tools: Sequence[ToolSpec] | None = None,
        timeout_s: float | None = None,
        memory_scope: MemoryScope | None = None,
    ) -> AsyncStreamResult:
        """Async :meth:`stream`: ``s = await client.astream(...)``, then ``async for``."""
        call = self._call(
            input, system_prompt, conversation_messages, session_id, use_knowledge_grounding,
            knowledge_context, model, temperature, max_tokens, tools, timeout_s, memory_scope,
            knowledge_principal,
        )  # fmt: skip
        if call.reads_memory:
            call = replace(call, history=await asyncio.to_thread(self._read_memory, call))
        knowledge, block = await self._aground(call)
        memory = await asyncio.to_thread(self._recall, call)
        request = self._request(call, block, memory)
        events = astream_with_fallback(self._providers, request)

        async def remember(text: str) -> None:
            await asyncio.to_thread(self._remember, call, text)

        return AsyncStreamResult(events, knowledge, remember, memory)

    # -- one call, step by step ----------------------------------------------------------------
    def _call(
        self,
        input: str,
        system_prompt: SystemPrompt | None,
        conversation_messages: Sequence[Message | Mapping[str, Any]] | None,
        session_id: str | None,
        use_knowledge_grounding: bool,
        knowledge_context: Scope | Mapping[str, Any] | None,
        model: str | None,
        temperature: float | None,
        max_tokens: int | None,
        tools: Sequence[ToolSpec] | None,
        timeout_s: float | None,
        memory_scope: MemoryScope | None = None,
        principal: Principal | None = None,
    ) -> _Call:
        """Copy and check the call's options: nothing below touches the caller's objects."""
        if not isinstance(input, str):
            raise QueryError(f"input must be a string, got {type(input).__name__}")
        history = _messages(conversation_messages)
        if session_id is not None and self._memory is None and self._store is None:
            raise ConfigError(
                "session_id needs conversation memory: create the client with "
                "Client(..., conversation_memory=InMemoryConversationMemory())"
            )
        if memory_scope is not None and not isinstance(memory_scope, MemoryScope):
            raise ConfigError(f"memory_scope={memory_scope!r} is invalid: expected a MemoryScope")
        scope = memory_scope if memory_scope is not None else self._memory_scope
        if self._store is not None and scope is None:
            raise ConfigError(
                "agent memory needs a scope: pass memory_scope=MemoryScope(tenant, agent, ...) "
                "to the Client or to this call"
            )
        return _Call(
            input=input,
            system_prompt=_check_system_prompt(system_prompt)
            if system_prompt is not None
            else self._system_prompt,
            history=history,
            session_id=session_id,
            reads_memory=session_id is not None
            and conversation_messages is None
            and self._memory is not None,
            # The opt-in is exactly True: a truthy string or 1 does not ground a turn.
            ground=use_knowledge_grounding is True,
            scope=_copy_scope(knowledge_context),
            principal=principal,
            model=model,
            temperature=temperature,
            max_tokens=max_tokens,
            tools=_tools(tools),
            timeout_s=_check_timeout(timeout_s) if timeout_s is not None else self._timeout_s,
            memory_scope=scope,
        )

    def _read_memory(self, call: _Call) -> tuple[Message, ...]:
        assert self._memory is not None  # checked in _call
        assert call.session_id is not None
        return tuple(self._memory.history(call.session_id))

    def _wants_grounding(self, call: _Call) -> bool:
        return call.ground and self._grounding is not None and bool(call.input.strip())

    def _ground(self, call: _Call) -> tuple[GroundingMetadata | None, KnowledgeBlock | None]:
        if not self._wants_grounding(call):
            return None, None
        assert self._grounding is not None
        started = time.perf_counter()
        try:
            outcome = self._grounding.ground(
                call.input, _recent_turns(call.history), call.scope, **_as_principal(call)
            )
        except Exception:  # the engine never raises; a replacement might: fail open
            logger.exception("knowledge grounding failed; continuing without knowledge")
            return _error_metadata(started), None
        return outcome.metadata, outcome.block

    async def _aground(self, call: _Call) -> tuple[GroundingMetadata | None, KnowledgeBlock | None]:
        if not self._wants_grounding(call):
            return None, None
        assert self._grounding is not None
        started = time.perf_counter()
        try:
            outcome = await self._grounding.aground(
                call.input, _recent_turns(call.history), call.scope, **_as_principal(call)
            )
        except Exception:
            logger.exception("knowledge grounding failed; continuing without knowledge")
            return _error_metadata(started), None
        return outcome.metadata, outcome.block

    def _recall(self, call: _Call) -> MemoryContext | None:
        """Recall agent memory for the input; fails open (the turn goes on without it)."""
        if self._store is None or not call.input.strip() or call.memory_scope is None:
            return None
        started = time.perf_counter()
        try:
            found = self._store.recall(call.memory_scope, call.input, touch=False)
            block = render_memory_block(found, max_tokens=self._memory_tokens)
        except Exception:
            logger.exception("agent memory recall failed; continuing without memories")
            elapsed = round((time.perf_counter() - started) * 1000.0, 3)
            return MemoryContext(None, failure_reason="error", duration_ms=elapsed)
        if block is not None:  # bookkeeping of what the model is shown; best effort
            self._store.track(call.memory_scope, call.session_id, found, injected=block.memory_ids)
        reason = None if block else ("budget-exhausted" if found.memories else "no-match")
        elapsed = round((time.perf_counter() - started) * 1000.0, 3)
        return MemoryContext(block, found.ids, found.timed_out, reason, elapsed)  # type: ignore[arg-type]

    def _request(
        self, call: _Call, block: KnowledgeBlock | None, memory: MemoryContext | None = None
    ) -> ChatRequest:
        """The one enriched request every provider attempt receives."""
        if not call.input and not call.history:
            raise QueryError("nothing to send: pass input, or conversation_messages to answer")
        system = _resolve(call.system_prompt)  # a callable resolves before the append
        if block is not None and block.content:
            system = f"{system}\n\n{block.content}" if system else block.content
        if memory is not None and memory.block is not None:  # beside the knowledge block
            recalled = memory.block.content
            system = f"{system}\n\n{recalled}" if system else recalled
        messages = (*call.history, Message("user", call.input)) if call.input else call.history
        return ChatRequest(
            messages=messages,
            system=system or None,
            model=call.model,
            tools=call.tools,
            temperature=call.temperature,
            max_tokens=call.max_tokens,
            timeout_s=call.timeout_s,
        )

    def _remember(self, call: _Call, answer: str) -> None:
        """Store the user input and the final answer text: never the system prompt or block."""
        if call.session_id is None or self._memory is None:
            return
        if call.input:
            self._memory.append(call.session_id, Message("user", call.input))
        if answer:
            self._memory.append(call.session_id, Message("assistant", answer))


class StreamResult(Iterator[str]):
    """A streamed answer: iterate for text deltas; single use.

    ``knowledge`` is the turn's grounding metadata, available before iterating.
    ``result`` is the :class:`GenerateResult` once the stream is exhausted (None until
    then); :meth:`events` yields the raw :class:`~groundwire.llm.base.StreamEvent`s
    (text, tool calls, done) instead of text. The provider is called on the first
    iteration. Memory is written only when the stream completes.
    """

    def __init__(
        self,
        events: FallbackStream,
        knowledge: GroundingMetadata | None,
        on_done: Callable[[str], None],
        memory: MemoryContext | None = None,
    ) -> None:
        self._events = events
        self.knowledge = knowledge
        self.memory = memory
        self._on_done = on_done
        self._result: GenerateResult | None = None

    @property
    def result(self) -> GenerateResult | None:
        """The finished turn, or None while the stream is still running."""
        return self._result

    def events(self) -> Iterator[StreamEvent]:
        """The stream's events, ``done`` last (sharing this stream: single use)."""
        for event in self._events:
            if event.kind == "done":
                self._finish(event)
            yield event

    def __next__(self) -> str:
        while True:
            event = next(self._events)  # StopIteration ends this iterator too
            if event.kind == "done":
                self._finish(event)
            elif event.kind == "text" and event.text:
                return event.text

    def _finish(self, event: StreamEvent) -> None:
        completion = _done_completion(event)
        self._on_done(completion.text)
        self._result = _result(
            completion, self.knowledge, self._events.provider, self._events.model, self.memory
        )

    def close(self) -> None:
        """Stop the stream early (nothing is written to memory)."""
        self._events.close()

    def __enter__(self) -> StreamResult:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncStreamResult(AsyncIterator[str]):
    """Async :class:`StreamResult`: ``async for delta in stream``; ``result`` when done."""

    def __init__(
        self,
        events: AsyncFallbackStream,
        knowledge: GroundingMetadata | None,
        on_done: Callable[[str], Awaitable[None]],
        memory: MemoryContext | None = None,
    ) -> None:
        self._events = events
        self.knowledge = knowledge
        self.memory = memory
        self._on_done = on_done
        self._result: GenerateResult | None = None

    @property
    def result(self) -> GenerateResult | None:
        """The finished turn, or None while the stream is still running."""
        return self._result

    async def events(self) -> AsyncIterator[StreamEvent]:
        """The stream's events, ``done`` last (sharing this stream: single use)."""
        async for event in self._events:
            if event.kind == "done":
                await self._finish(event)
            yield event

    async def __anext__(self) -> str:
        while True:
            event = await anext(self._events)  # StopAsyncIteration ends this iterator too
            if event.kind == "done":
                await self._finish(event)
            elif event.kind == "text" and event.text:
                return event.text

    async def _finish(self, event: StreamEvent) -> None:
        completion = _done_completion(event)
        await self._on_done(completion.text)
        self._result = _result(
            completion, self.knowledge, self._events.provider, self._events.model, self.memory
        )

    async def aclose(self) -> None:
        """Stop the stream early (nothing is written to memory)."""
        await self._events.aclose()

    async def __aenter__(self) -> AsyncStreamResult:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


# -- helpers ------------------------------------------------------------------------------------
def _check_system_prompt(value: object) -> SystemPrompt | None:
    if value is None or isinstance(value, str) or callable(value):
        return value
    raise ConfigError(
        f"system_prompt={value!r} is invalid: expected a string or a function returning one"
    )


def _check_timeout(value: object) -> float | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or float(value) <= 0:  # type: ignore[arg-type]
        raise ConfigError(f"timeout_s={value!r} is invalid: expected a number of seconds > 0")
    return float(value)  # type: ignore[arg-type]


def _resolve(system_prompt: SystemPrompt | None) -> str:
    if system_prompt is None or isinstance(system_prompt, str):
        return system_prompt or ""
    text = system_prompt()
    if not isinstance(text, str):
        raise ConfigError(
            f"the system_prompt function returned {type(text).__name__}: it must return a string"
        )
    return text


def _messages(items: Sequence[Message | Mapping[str, Any]] | None) -> tuple[Message, ...]:
    """Copy explicit conversation messages into immutable records."""
    if items is None:
        return ()
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        raise QueryError(
            "conversation_messages must be a list of Message or {'role', 'content'} mappings"
        )
    out: list[Message] = []
    for index, item in enumerate(items):
        if isinstance(item, Message):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            raise QueryError(
                f"conversation_messages[{index}] is {type(item).__name__}: expected a Message "
                "or a {'role', 'content'} mapping"
            )
        role = item.get("role")
        if role not in _ROLES:
            raise QueryError(
                f"conversation_messages[{index}].role={role!r} is invalid: expected one of "
                f"{', '.join(sorted(_ROLES))}"
            )
        content = item.get("content")
        # Non-text content (images, parts) is kept out of the turn's text, as for grounding.
        out.append(Message(role, content if isinstance(content, str) else ""))
    return tuple(out)


def _tools(tools: Sequence[ToolSpec] | None) -> tuple[ToolSpec, ...]:
    """Copy the tool specs, schemas included, so no provider can touch the caller's."""
    if tools is None:
        return ()
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise QueryError("tools must be a list of ToolSpec")
    out: list[ToolSpec] = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, ToolSpec):
            raise QueryError(f"tools[{index}] is {type(tool).__name__}: expected a ToolSpec")
        out.append(replace(tool, parameters=copy.deepcopy(tool.parameters)))
    return tuple(out)


def _as_principal(call: _Call) -> dict[str, Any]:
    """The principal keyword for the engine, only when there is one (an engine stand-in
    written before principals existed keeps working for anonymous calls)."""
    return {} if call.principal is None else {"principal": call.principal}


def _copy_scope(scope: Scope | Mapping[str, Any] | None) -> Scope | Mapping[str, Any] | None:
    # A Scope is frozen; a mapping is copied so the engine never holds the caller's object.
    return scope if scope is None or isinstance(scope, Scope) else copy.deepcopy(scope)


def _recent_turns(history: Sequence[Message]) -> tuple[Turn, ...]:
    """The last user/assistant messages, as the engine's recent turns."""
    turns = [Turn(m.role, m.content) for m in history if m.role in ("user", "assistant")]
    return tuple(turns[-DEFAULT_RECENT_TURNS:])


def _error_metadata(started: float) -> GroundingMetadata:
    elapsed = round((time.perf_counter() - started) * 1000.0, 3)
    return GroundingMetadata(duration_ms=elapsed, failure_reason="error")


def _done_completion(event: StreamEvent) -> Completion:
    if event.completion is None:
        raise ProviderError("the provider's stream ended with a done event carrying no completion")
    return event.completion


def _tool_loop_result(
    completion: Completion,
    knowledge: GroundingMetadata | None,
    last: FallbackResult | None,
    memory: MemoryContext | None = None,
) -> GenerateResult:
    """The result of a tool loop: its last completion, from the provider that gave it."""
    if last is None:
        return _result(completion, knowledge, None, None, memory)
    return _result(completion, knowledge, last.provider, last.model, memory)


def _result(
    completion: Completion,
    knowledge: GroundingMetadata | None,
    provider: Provider | None,
    model: str | None,
    memory: MemoryContext | None = None,
) -> GenerateResult:
    name = getattr(provider, "name", None) if provider is not None else None
    return GenerateResult(
        text=completion.text,
        tool_calls=completion.tool_calls,
        provider=completion.provider or name,
        model=completion.model or model,
        usage=completion.usage,
        knowledge=knowledge,
        finish_reason=completion.finish_reason,
        memory=memory,
    )


def _check_candidates(providers: object) -> tuple[Candidate, ...]:
    """The fallback list, checked now so a wrong item fails at construction, not mid-turn."""
    if isinstance(providers, Provider):
        return (providers,)
    if isinstance(providers, str | bytes) or not isinstance(providers, Sequence):
        raise ConfigError(
            f"providers={providers!r} is invalid: expected a Provider or a list of them"
        )
    if not providers:
        raise ConfigError("providers=[] is invalid: expected at least one provider")
    for item in providers:
        pair = isinstance(item, tuple) and len(item) == 2
        if isinstance(item, Provider) or (
            pair and isinstance(item[0], Provider) and (item[1] is None or isinstance(item[1], str))
        ):
            continue
        raise ConfigError(
            f"providers holds {item!r}, which is neither a Provider (a name plus "
            "complete/acomplete/stream/astream) nor a (provider, model) pair"
        )
    return tuple(providers)
