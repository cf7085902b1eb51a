"""What the policy is made of: effects, decisions and the policy of one project (pure data)."""

from __future__ import annotations

import os
import shlex
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from .domains import NetworkRules
from .paths import TOOL_RUN_PATHS, PathSandbox
from .rules import InvalidRule, PermissionRule, parse_rules

__all__ = ["Decision", "Effect", "Policy", "worst"]


class Effect(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


_RANK: Final = {Effect.ALLOW: 0, Effect.ASK: 1, Effect.DENY: 2}


class Decision(BaseModel):
    """The outcome of authorizing one call."""

    model_config = ConfigDict(frozen=True)

    effect: Effect
    reason: str
    #: The rule that decided, when one did.
    rule: str | None = None
    #: For file tools: the resolved path the tool must use (never the raw argument).
    path: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def allowed(self) -> bool:
        return self.effect is Effect.ALLOW


def worst(decisions: list[Decision]) -> Decision:
    """The strictest of ``decisions`` (deny beats ask beats allow); the first among equals."""
    return max(decisions, key=lambda d: _RANK[d.effect])


class Policy(BaseModel):
    """The effective policy of one project (built once, at project start or settings reload)."""

    model_config = ConfigDict(frozen=True)

    sandbox: PathSandbox
    home: str
    allow: tuple[PermissionRule, ...] = ()
    deny: tuple[PermissionRule, ...] = ()
    ask: tuple[PermissionRule, ...] = ()
    default: Effect = Effect.DENY
    #: Whether the user trusts the root (its own settings count in full).
    trusted: bool = True
    #: No settings said what is allowed: the starter permissions are in force (``starter.py``).
    starter: bool = False
    #: ``sandbox.allowed_domains`` / ``denied_domains``: what the egress proxy lets through.
    network: NetworkRules = Field(default_factory=NetworkRules)

    @property
    def root(self) -> str:
        return self.sandbox.root

    def by_default(self, what: str, *, allow_rule: str | None, path: str | None = None) -> Decision:
        """The decision when no rule matches ``what``: the default, and how to change it.

        The reason names the rule to add to ``permissions.allow`` (``allow_rule``),
        or, for an untrusted project, the ``jidocode projects trust`` command to run
        first; ``details["allow_rule"]`` carries the rule for clients.
        """
        reason = f"no rule allows {what}; default is {self.default.value}"
        hint = self._hint(allow_rule)
        return Decision(
            effect=self.default,
            reason=f"{reason} ({hint})" if hint else reason,
            path=path,
            details={"allow_rule": allow_rule} if allow_rule else {},
        )

    def _hint(self, allow_rule: str | None) -> str:
        trust = f"`jidocode projects trust {shlex.quote(self.root)}`"
        if not self.trusted and self.starter:
            return f"the project is not trusted, so only reads run; {trust} lets edits and commands ask"
        if allow_rule is None:
            return "" if self.trusted else f"the project is not trusted: {trust} lets its settings count"
        add = f'add "{allow_rule}" to permissions.allow in {self.sandbox.data_dir}/settings.json'
        goal = "to allow it without asking" if self.default is Effect.ASK else "to allow it"
        return f"{goal}, {add}" if self.trusted else f"{goal}, run {trust} and {add}"

    @classmethod
    def build(
        cls,
        root: str,
        *,
        allow: list[str] | tuple[str, ...] = (),
        deny: list[str] | tuple[str, ...] = (),
        ask: list[str] | tuple[str, ...] = (),
        default: str = "deny",
        additional_directories: list[str] | tuple[str, ...] = (),
        data_dir: str = ".jido",
        jido_home: str | None = None,
        home: str | None = None,
        trusted: bool = True,
        starter: bool = False,
        allowed_domains: list[str] | tuple[str, ...] = (),
        denied_domains: list[str] | tuple[str, ...] = (),
    ) -> Policy:
        """Parse every rule; raise :class:`InvalidRule` naming each bad one (a startup error)."""
        if default not in ("deny", "ask"):
            raise InvalidRule(default, "permissions.default must be 'deny' or 'ask'")
        home_dir = os.path.realpath(home or os.path.expanduser("~"))
        problems: list[str] = []
        parsed: dict[str, tuple[PermissionRule, ...]] = {}
        for what, raws in (("allow", allow), ("deny", deny), ("ask", ask)):
            try:
                parsed[what] = parse_rules(list(raws), what=f"permissions.{what}")
            except InvalidRule as exc:
                problems.append(exc.problem)
        try:
            network = NetworkRules.parse(allowed_domains, denied_domains)
        except ValueError as exc:
            problems.append(str(exc))
        if problems:
            raise InvalidRule("permissions", "; ".join(problems))
        sandbox = PathSandbox.create(
            root,
            additional_directories=tuple(additional_directories),
            data_dir=data_dir,
            jido_home=jido_home,
            home=home_dir,
        )
        return cls(
            sandbox=sandbox,
            home=home_dir,
            allow=parsed["allow"],
            deny=parsed["deny"],
            ask=parsed["ask"],
            default=Effect(default),
            trusted=trusted,
            starter=starter,
            network=network,
        )

    def summary(self) -> dict[str, Any]:
        """What the policy is, as data (``project.policy`` endpoint, ``jidocode tools``)."""
        return {
            "root": self.root,
            "additional_directories": list(self.sandbox.additional_directories),
            "allow": [r.raw for r in self.allow],
            "deny": [r.raw for r in self.deny],
            "ask": [r.raw for r in self.ask],
            "default": self.default.value,
            "protected": [
                ".git/**",
                ".jido_code/**",
                f"{self.sandbox.data_dir}/settings*.json",
                *TOOL_RUN_PATHS,
            ],
            "sensitive": "denied by default (.env, *.pem, *.key, id_rsa*, .ssh/ …)",
            **self.network.summary(),
        }
