"""What every built-in tool shares: its shared spec, its runner and its call context."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from jidocode.shared.policy import Decision, Effect, Policy, authorize, is_within
from jidocode.shared.sandbox import TRUNCATION_MARK, cap_text
from jidocode.shared.tools import BuiltinSpec, ToolInput

if TYPE_CHECKING:
    from jidocode.shared.egress import Pass

__all__ = [
    "DEFAULT_OUTPUT_CAP",
    "DEFAULT_TIMEOUT_S",
    "TRUNCATION_MARK",
    "BuiltinTool",
    "ToolContext",
    "cap_text",
]

DEFAULT_TIMEOUT_S: Final = 30.0
DEFAULT_OUTPUT_CAP: Final = 256 * 1024


@dataclass(frozen=True)
class ToolContext:
    """One authorized call: the policy, its decision and the limits of the project."""

    policy: Policy
    decision: Decision
    timeout_s: float = DEFAULT_TIMEOUT_S
    output_cap: int = DEFAULT_OUTPUT_CAP
    #: The call's pass of the replica's egress proxy (``None`` outside a tool runner, and for a
    #: tool that reaches no network): its processes and ``web_fetch`` go out through it.
    egress: Pass | None = None

    @property
    def path(self) -> str:
        """The resolved path the policy checked (file tools)."""
        path = self.decision.path
        if path is None:
            raise RuntimeError("this call has no checked path")
        return str(path)

    @property
    def base(self) -> str:
        base = self.policy.sandbox.base_of(self.path)
        if base is None:  # the policy already refused such a path
            raise RuntimeError("checked path is outside the sandbox")
        return str(base)

    def rel(self, path: str) -> str:
        """``path`` as shown to the model: relative to the root when inside it."""
        return os.path.relpath(path, self.policy.root) if is_within(path, self.policy.root) else path

    def may_read(self, tool: str, path: str) -> bool:
        """Whether a file met while walking a tree may be opened (no deny rule, not sensitive, inside)."""
        d = authorize(self.policy, tool, {"path": path})
        return not (d.effect is Effect.DENY and (d.rule is not None or "sandbox" in d.details))


Runner = Callable[[Any, ToolContext], Awaitable[Any]]


@dataclass(frozen=True)
class BuiltinTool:
    """A built-in tool: its shared spec (what the model sees) and the code that runs it."""

    definition: BuiltinSpec
    run: Runner

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def description(self) -> str:
        return self.definition.description

    @property
    def input_model(self) -> type[ToolInput]:
        return self.definition.input_model

    def spec(self) -> dict[str, Any]:
        """The tool spec for LLM exposure: name, description, JSON-schema input."""
        return self.definition.spec()
