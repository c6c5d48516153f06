"""The knowledge access guard: may this workflow or agent read, search or write this space?

Where :class:`~groundwire.Filter` decides which *records* a principal sees, the guard
decides whether an *automation* (a workflow, an agent) may use a *knowledge space* at
all. :meth:`KnowledgeAccessGuard.check` applies these rules in order and the first that
fails decides (reason codes in brackets):

1. a space bound to a tenant is only for principals of that tenant [``tenant-mismatch``];
2. writes to a space whose category is blocked for writes — ``external`` and
   ``ephemeral`` by default — are denied [``write-category-blocked``];
3. writes to a space that is not automation-writable are denied [``space-not-writable``];
4. a workflow binding is required by default [``workflow-binding-required``]; when the
   space lists its workflows, a workflow not on the list [``workflow-not-allowed``] or no
   workflow at all [``workflow-not-allowed``] is denied, never waved through;
5. an agent binding is optional by default [``agent-binding-required`` when required];
   when the space lists its agents, the same allow-list rule applies
   [``agent-not-allowed``].

Otherwise the decision is ``allowed``. Every decision carries its reason code and a
message in the caller's locale (see :mod:`groundwire.i18n`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from groundwire.errors import AccessDeniedError, ConfigError
from groundwire.i18n import DEFAULT_LOCALE, check_locale, message
from groundwire.model import Principal

__all__ = [
    "GUARD_REASONS",
    "AccessContext",
    "AccessDecision",
    "GuardReason",
    "KnowledgeAccessGuard",
    "KnowledgeSpace",
    "Operation",
]

Operation = Literal["read", "write", "search"]
GuardReason = Literal[
    "allowed",
    "tenant-mismatch",
    "write-category-blocked",
    "space-not-writable",
    "workflow-binding-required",
    "workflow-not-allowed",
    "agent-binding-required",
    "agent-not-allowed",
]
#: Every reason code a guard decision can carry.
GUARD_REASONS: Final[tuple[str, ...]] = get_args(GuardReason)
_OPERATIONS: Final[tuple[str, ...]] = get_args(Operation)
#: Space categories that refuse writes unless the guard is told otherwise: content that is
#: not ours (external) or not meant to last (ephemeral).
DEFAULT_BLOCKED_WRITE_CATEGORIES: Final = frozenset({"external", "ephemeral"})


_OPERATION_KEYS: Final = {
    "read": "guard.operation.read",
    "write": "guard.operation.write",
    "search": "guard.operation.search",
}


@dataclass(frozen=True, slots=True)
class _BindingRule:
    """The reason codes and message keys of one kind of binding (workflow or agent)."""

    required: GuardReason
    not_allowed: GuardReason
    required_key: str
    unnamed_key: str
    not_allowed_key: str


_BINDING_RULES: Final = {
    "workflow": _BindingRule(
        "workflow-binding-required",
        "workflow-not-allowed",
        "guard.workflow_binding_required",
        "guard.workflow_unnamed",
        "guard.workflow_not_allowed",
    ),
    "agent": _BindingRule(
        "agent-binding-required",
        "agent-not-allowed",
        "guard.agent_binding_required",
        "guard.agent_unnamed",
        "guard.agent_not_allowed",
    ),
}


def _names(option: str, value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple | frozenset | set):
        raise ConfigError(f"{option}={value!r} is invalid: expected a list of names or None")
    if not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{option}={value!r} is invalid: expected non-empty names")
    return tuple(sorted(set(value)))


@dataclass(frozen=True, slots=True)
class KnowledgeSpace:
    """A named body of knowledge and how automation may use it.

    ``category`` (e.g. ``canonical``, ``operational``, ``external``, ``ephemeral``) decides
    whether writes are blocked; ``automation_writable=False`` blocks every automated write.
    ``tenant`` binds the space to one tenant (None: any). ``workflows``/``agents`` are
    allow-lists (None: no list; an empty list allows none).
    """

    key: str
    category: str = "canonical"
    automation_writable: bool = True
    tenant: str | None = None
    workflows: tuple[str, ...] | None = None
    agents: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("key", "category"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"KnowledgeSpace.{name}={value!r} is invalid: expected a name")
        if not isinstance(self.automation_writable, bool):
            raise ConfigError("KnowledgeSpace.automation_writable must be True or False")
        object.__setattr__(self, "workflows", _names("KnowledgeSpace.workflows", self.workflows))
        object.__setattr__(self, "agents", _names("KnowledgeSpace.agents", self.agents))


@dataclass(frozen=True, slots=True)
class AccessContext:
    """Who asks: the workflow and agent bindings of the run, its principal, its locale."""

    workflow: str | None = None
    agent: str | None = None
    principal: Principal | None = None
    locale: str = DEFAULT_LOCALE

    def __post_init__(self) -> None:
        object.__setattr__(self, "locale", check_locale(self.locale))
        if self.principal is not None and not isinstance(self.principal, Principal):
            raise ConfigError("AccessContext.principal must be a Principal or None")


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """The guard's answer: allowed or not, the reason code and a localized message."""

    allowed: bool
    reason: GuardReason
    message: str
    operation: Operation
    space: str

    def require(self) -> AccessDecision:
        """This decision, or :class:`~groundwire.AccessDeniedError` when it denies."""
        if not self.allowed:
            raise AccessDeniedError(self.message, reason=self.reason)
        return self


class KnowledgeAccessGuard:
    """Read/write/search checks per knowledge space with the rules in the module docstring.

    ``blocked_write_categories`` defaults to ``{"external", "ephemeral"}``;
    ``require_workflow`` to True and ``require_agent`` to False.
    """

    def __init__(
        self,
        *,
        blocked_write_categories: frozenset[str] | set[str] = DEFAULT_BLOCKED_WRITE_CATEGORIES,
        require_workflow: bool = True,
        require_agent: bool = False,
    ) -> None:
        if isinstance(blocked_write_categories, str) or not all(
            isinstance(c, str) for c in blocked_write_categories
        ):
            raise ConfigError("blocked_write_categories must be a set of category names")
        for name, value in (
            ("require_workflow", require_workflow),
            ("require_agent", require_agent),
        ):
            if not isinstance(value, bool):
                raise ConfigError(f"{name}={value!r} is invalid: expected True or False")
        self.blocked_write_categories = frozenset(blocked_write_categories)
        self.require_workflow = require_workflow
        self.require_agent = require_agent

    def check(
        self, operation: Operation, space: KnowledgeSpace, context: AccessContext | None = None
    ) -> AccessDecision:
        """The decision for ``operation`` on ``space`` by ``context`` (rules in order)."""
        if operation not in _OPERATIONS:
            raise ConfigError(f"operation={operation!r} is invalid: expected one of {_OPERATIONS}")
        if not isinstance(space, KnowledgeSpace):
            raise ConfigError(f"space must be a KnowledgeSpace, got {type(space).__name__}")
        context = context if context is not None else AccessContext()
        reason, key, extra = self._rule(operation, space, context)
        text = message(
            key,
            context.locale,
            operation=message(_OPERATION_KEYS[operation], context.locale),
            space=space.key,
            **extra,
        )
        return AccessDecision(reason == "allowed", reason, text, operation, space.key)

    def _rule(
        self, operation: Operation, space: KnowledgeSpace, context: AccessContext
    ) -> tuple[GuardReason, str, dict[str, str]]:
        principal = context.principal
        if space.tenant is not None and (principal is None or principal.tenant != space.tenant):
            return "tenant-mismatch", "guard.tenant_mismatch", {}
        if operation == "write":
            if space.category in self.blocked_write_categories:
                return (
                    "write-category-blocked",
                    "guard.write_category_blocked",
                    {"category": space.category},
                )
            if not space.automation_writable:
                return "space-not-writable", "guard.space_not_writable", {}
        binding = self._binding(
            "workflow", context.workflow, space.workflows, required=self.require_workflow
        )
        if binding is None:
            binding = self._binding("agent", context.agent, space.agents, self.require_agent)
        return binding if binding is not None else ("allowed", "guard.allowed", {})

    @staticmethod
    def _binding(
        kind: Literal["workflow", "agent"],
        name: str | None,
        allow_list: tuple[str, ...] | None,
        required: bool,
    ) -> tuple[GuardReason, str, dict[str, str]] | None:
        """The denial of a workflow or agent binding, or None when it passes."""
        rule = _BINDING_RULES[kind]
        if not name:
            if allow_list is not None:  # a list exists: a missing name is denied, not waved on
                return rule.not_allowed, rule.unnamed_key, {}
            if required:
                return rule.required, rule.required_key, {}
            return None
        if allow_list is not None and name not in allow_list:
            return rule.not_allowed, rule.not_allowed_key, {kind: name}
        return None

    def check_read(
        self, space: KnowledgeSpace, context: AccessContext | None = None
    ) -> AccessDecision:
        """:meth:`check` for ``read``."""
        return self.check("read", space, context)

    def check_search(
        self, space: KnowledgeSpace, context: AccessContext | None = None
    ) -> AccessDecision:
        """:meth:`check` for ``search``."""
        return self.check("search", space, context)

    def check_write(
        self, space: KnowledgeSpace, context: AccessContext | None = None
    ) -> AccessDecision:
        """:meth:`check` for ``write``."""
        return self.check("write", space, context)
