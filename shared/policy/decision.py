"""The policy of one project and its decision function, pure (apart from ``realpath``).

``authorize(policy, tool, args) -> Decision``:

1. Tool arguments are checked first: a file tool's path goes through the
   :class:`PathSandbox` (outside the root, sensitive, protected → *deny*).
2. Rules: any matching **deny** rule → *deny*; else any matching **ask**
   rule → *ask*; else a matching **allow** rule → *allow*; else the
   configured ``default`` (*deny* when unset).
3. ``bash``: every command found by :func:`analyze` is judged on its own and
   the strictest result wins. A command with ``flags`` (program-valued option,
   unsafe environment prefix …) is never covered by an allow rule: at best
   *ask*. An unprovable string (parse error, ``eval`` …) is *ask* unless a deny
   rule matches. Redirections to protected or sensitive files → *deny*;
   outside the root → *ask*.

Deny beats ask beats allow throughout. Nothing here reads a tool argument to
widen the policy: the root, the rules and the default come from the project.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from .paths import Access, PathSandbox, bad_path_chars
from .rules import PATH_TOOLS, InvalidRule, PermissionRule, parse_rules
from .shell import ShellAnalysis, ShellCommand, analyze

__all__ = [
    "PATH_ARGS",
    "Decision",
    "Effect",
    "Policy",
    "authorize",
    "filter_tools",
]


class Effect(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


_RANK: Final = {Effect.ALLOW: 0, Effect.ASK: 1, Effect.DENY: 2}

#: The path argument of each built-in file tool, its default and its access mode.
PATH_ARGS: Final[dict[str, tuple[str, str | None, Access]]] = {
    "read_file": ("path", None, "read"),
    "write_file": ("path", None, "write"),
    "edit_file": ("path", None, "write"),
    "list_dir": ("path", ".", "read"),
    "glob": ("path", ".", "read"),
    "grep": ("path", ".", "read"),
}


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


def _worst(decisions: list[Decision]) -> Decision:
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

    @property
    def root(self) -> str:
        return self.sandbox.root

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
            "protected": [".git/**", ".jido_code/**", f"{self.sandbox.data_dir}/settings*.json", ".mcp.json"],
            "sensitive": "denied by default (.env, *.pem, *.key, id_rsa*, .ssh/ …)",
        }


# --- path tools ---------------------------------------------------------------------


def _path_decision(policy: Policy, tool: str, args: Mapping[str, Any]) -> Decision:
    arg, default, access = PATH_ARGS[tool]
    raw = args.get(arg, default)
    if not isinstance(raw, str):
        return Decision(effect=Effect.DENY, reason=f"{tool}: argument {arg!r} must be a string path")
    pre = policy.sandbox.check(raw, access) if not raw or bad_path_chars(raw) else None
    if pre is not None:
        return Decision(effect=Effect.DENY, reason=pre.message, details={"sandbox": pre.reason})
    lexical = policy.sandbox.lexical(raw)
    resolved = os.path.realpath(lexical)
    # An explicit (pattern) allow rule naming the path lifts the sensitive-file default.
    explicit = any(
        r.pattern is not None
        and r.covers_tool(tool)
        and r.matches_path(resolved, root=policy.root, home=policy.home)
        for r in policy.allow
    )
    check = policy.sandbox.check(raw, access, allow_sensitive=explicit)
    if not check.ok:
        return Decision(
            effect=Effect.DENY,
            reason=check.message,
            path=check.path,
            details={"sandbox": check.reason},
        )
    path = check.path
    candidates = {path, lexical}
    for effect, rules in ((Effect.DENY, policy.deny), (Effect.ASK, policy.ask), (Effect.ALLOW, policy.allow)):
        for r in rules:
            if r.covers_tool(tool) and any(
                r.matches_path(p, root=policy.root, home=policy.home) for p in candidates
            ):
                return Decision(
                    effect=effect, reason=f"{effect.value} by rule {r.raw}", rule=r.raw, path=path
                )
    return Decision(
        effect=policy.default,
        reason=f"no rule allows {tool} on {raw!r}; default is {policy.default.value}",
        path=path,
    )


# --- bash ----------------------------------------------------------------------------


#: Programs whose file arguments they create, modify or remove (protected targets are denied).
_WRITERS: Final = frozenset(
    {
        "cp",
        "mv",
        "tee",
        "ln",
        "install",
        "touch",
        "rm",
        "rmdir",
        "unlink",
        "shred",
        "chmod",
        "chown",
        "chgrp",
        "truncate",
        "dd",
        "sed",
        "rsync",
        "patch",
        "mkdir",
    }
)


#: Programs that only read their file arguments (protected files may be named).
_READERS: Final = frozenset(
    {
        "cat",
        "head",
        "tail",
        "less",
        "more",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "ls",
        "wc",
        "diff",
        "file",
        "stat",
        "du",
        "tree",
        "md5sum",
        "sha1sum",
        "sha256sum",
        "echo",
        "printf",
        "readlink",
        "realpath",
        "basename",
        "dirname",
        "test",
        "[",
        "cd",
        "pwd",
    }
)


def _arg_paths(argv: tuple[str, ...]) -> list[str]:
    """Words of a command that may name files (option values after ``=`` included)."""
    out: list[str] = []
    for w in argv[1:]:
        if w.startswith("-"):
            if "=" in w:
                out.append(w.split("=", 1)[1])
        elif os.path.basename(argv[0]) == "dd" and w[:3] in ("if=", "of="):
            out.append(w[3:])
        else:
            out.append(w)
    return [w for w in out if w and "\x00" not in w and "$" not in w and "`" not in w]


def _argument_decision(policy: Policy, cmd: ShellCommand) -> Decision | None:
    """Arguments that name sensitive files (ask) or protected files for a writer (deny).

    A heuristic on top of the rules: it sees the words of the command, not
    the files a program really opens (docs/security.md).
    """
    sandbox = policy.sandbox
    program = os.path.basename(cmd.argv[0])
    writer = program in _WRITERS
    for word in _arg_paths(cmd.argv):
        if bad_path_chars(word) or len(word) > 4096:
            continue
        expanded = policy.home + word[1:] if word == "~" or word.startswith("~/") else word
        lexical = sandbox.lexical(expanded)
        resolved = os.path.realpath(lexical)
        if writer and (sandbox.is_protected(lexical) or sandbox.is_protected(resolved)):
            return Decision(
                effect=Effect.DENY,
                reason=f"{cmd.text!r} would modify the protected file {word!r}",
                details={"sandbox": "protected"},
            )
        if program not in _READERS and (sandbox.is_protected(lexical) or sandbox.is_protected(resolved)):
            return Decision(
                effect=Effect.ASK,
                reason=f"{cmd.text!r} names the protected file {word!r}; not covered by allow rules",
                details={"sandbox": "protected"},
            )
        if sandbox.is_sensitive(lexical) or sandbox.is_sensitive(resolved):
            return Decision(
                effect=Effect.ASK,
                reason=f"{cmd.text!r} names the sensitive file {word!r}; not covered by allow rules",
                details={"sandbox": "sensitive"},
            )
    return None


def _command_decision(policy: Policy, cmd: ShellCommand) -> Decision:
    text = cmd.text
    for r in policy.deny:
        if r.covers_tool("bash") and r.matches_command(cmd.argv, loose=True):
            return Decision(effect=Effect.DENY, reason=f"{text!r} denied by rule {r.raw}", rule=r.raw)
    by_args = _argument_decision(policy, cmd) if cmd.argv else None
    if by_args is not None and by_args.effect is Effect.DENY:
        return by_args
    for r in policy.ask:
        if r.covers_tool("bash") and r.matches_command(cmd.argv, loose=True):
            return Decision(effect=Effect.ASK, reason=f"{text!r} needs approval (rule {r.raw})", rule=r.raw)
    if by_args is not None:
        return by_args
    if cmd.flags:
        return Decision(
            effect=Effect.ASK,
            reason=f"{text!r} is not covered by allow rules: {'; '.join(cmd.flags)}",
            details={"flags": list(cmd.flags)},
        )
    if cmd.neutral:
        return Decision(effect=Effect.ALLOW, reason=f"{text!r} runs nothing")
    for r in policy.allow:
        if not r.covers_tool("bash"):
            continue
        if cmd.open_args and r.pattern is not None and not r.prefix:
            continue  # xargs adds arguments: only a prefix rule can cover it
        if r.matches_command(cmd.argv):
            return Decision(effect=Effect.ALLOW, reason=f"{text!r} allowed by rule {r.raw}", rule=r.raw)
    return Decision(
        effect=policy.default,
        reason=f"no rule allows {text!r}; default is {policy.default.value}",
    )


def _bash_decision(policy: Policy, args: Mapping[str, Any]) -> Decision:
    command = args.get("command")
    if not isinstance(command, str):
        return Decision(effect=Effect.DENY, reason="bash: argument 'command' must be a string")
    analysis: ShellAnalysis = analyze(command)
    decisions: list[Decision] = []
    if analysis.unprovable:
        # a deny rule still wins when the whole string visibly starts with a denied command
        words = tuple(command.split())
        for r in policy.deny:
            if r.covers_tool("bash") and r.matches_command(words, loose=True):
                return Decision(effect=Effect.DENY, reason=f"denied by rule {r.raw}", rule=r.raw)
        decisions.append(
            Decision(
                effect=Effect.ASK,
                reason=f"cannot prove the command safe: {'; '.join(analysis.unprovable)}",
                details={"unprovable": list(analysis.unprovable)},
            )
        )
    for cmd in analysis.commands:
        decisions.append(_command_decision(policy, cmd))
    for red in analysis.redirects:
        decisions.append(_redirect_decision(policy, red))
    if not decisions:
        return Decision(effect=Effect.ASK, reason="no command found")
    worst = _worst(decisions)
    if worst.effect is Effect.ALLOW:
        rules = sorted({d.rule for d in decisions if d.rule})
        return Decision(
            effect=Effect.ALLOW,
            reason="every command is allowed" + (f" ({', '.join(rules)})" if rules else ""),
            rule=rules[0] if len(rules) == 1 else None,
        )
    return worst


def _redirect_decision(policy: Policy, red: Any) -> Decision:
    target: str = red.target
    if red.after_cd:
        # after a cd the relative target is somewhere else: check it both ways, ask at best
        check = policy.sandbox.check(os.path.basename(target), "write" if red.write else "read")
        if not check.ok and check.reason in ("protected", "sensitive"):
            return Decision(effect=Effect.DENY, reason=f"redirection {red.op} {target}: {check.message}")
        return Decision(effect=Effect.ASK, reason=f"redirection {red.op} {target} after cd: target unknown")
    access: Access = "write" if red.write else "read"
    check = policy.sandbox.check(target, access)
    if check.ok:
        return Decision(effect=Effect.ALLOW, reason="redirection inside the sandbox")
    if check.reason == "outside_root":
        return Decision(effect=Effect.ASK, reason=f"redirection {red.op} {target}: {check.message}")
    return Decision(effect=Effect.DENY, reason=f"redirection {red.op} {target}: {check.message}")


# --- everything else -----------------------------------------------------------------------


def _named_decision(policy: Policy, tool: str) -> Decision:
    for effect, rules in ((Effect.DENY, policy.deny), (Effect.ASK, policy.ask), (Effect.ALLOW, policy.allow)):
        for r in rules:
            if r.covers_tool(tool) and r.pattern is None:
                return Decision(effect=effect, reason=f"{effect.value} by rule {r.raw}", rule=r.raw)
    return Decision(effect=policy.default, reason=f"no rule allows {tool}; default is {policy.default.value}")


def authorize(policy: Policy, tool: str, args: Mapping[str, Any]) -> Decision:
    """Decide one call. Pure: the same policy, tool and arguments give the same decision."""
    if not isinstance(args, Mapping):
        return Decision(effect=Effect.DENY, reason="arguments must be an object")
    if tool in PATH_TOOLS:
        return _path_decision(policy, tool, args)
    if tool == "bash":
        return _bash_decision(policy, args)
    return _named_decision(policy, tool)


def tool_exposed(policy: Policy, tool: str) -> bool:
    """Whether some call of ``tool`` could be allowed or asked (else hide it from the model)."""
    for r in policy.deny:
        if r.covers_tool(tool) and r.pattern is None:
            return False
    if policy.default is Effect.ASK:
        return True
    return any(r.covers_tool(tool) for r in (*policy.allow, *policy.ask))


def filter_tools(policy: Policy, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool specs the model may see: those not denied outright by the policy."""
    return [s for s in specs if isinstance(s.get("name"), str) and tool_exposed(policy, s["name"])]
