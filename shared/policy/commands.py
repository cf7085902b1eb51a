"""The bash decision: every command, redirection and named path of one string, judged (pure but for the file system's answers).

``bash_decision(policy, args)``:

1. :func:`~.shell.analyze` finds every simple command and redirection. What
   it cannot prove safe is *asked* (the commands found before the failure
   are still judged). Whenever the outcome would be *ask* — unprovable,
   flagged, outside paths — :func:`~.fallback.fallback_decision` first
   matches deny rules against a crude split of the whole string, so a parse
   failure or an approving human never runs a denied command.
2. Each command: a deny rule matching its words → *deny*; a path it names
   that must not be touched → *deny* (see below); an ask rule → *ask*; a
   path that needs a human → *ask*; ``flags`` (program-valued options …) →
   *ask*; running in a directory the walk could not follow, or outside the
   project → *ask*; inert builtins need no rule; else allow rules, else the
   default.
3. Paths (:mod:`.operands` says which words name files and how), resolved
   against each directory the shell may be in, ``~`` expanded, globs
   expanded against the file system (bounded), symlinks resolved:

   - any use: a deny rule of a tool of that kind (``Read(…)`` for reads,
     ``Edit(…)`` for writes) → *deny*; a recursive read (``grep -r``,
     ``rg``, ``find``, ``tar c``) is denied when a deny rule *may* match
     below the directory;
   - writes to protected files → *deny*; a copy that spreads unknown names
     (``cp -r payload/. .``) into a directory holding protected files →
     *deny*;
   - outside the project, sensitive files, ask rules, a value computed at
     run time (``cat "$HOME/…"``, ``cat /proc/$PPID/environ``), a ``~user``
     form, a path that may be a link made earlier in the same call
     (``ln -s /x l; echo > l``) → *ask*.

4. Redirections: the same path checks; a redirection into a sensitive file
   is *deny*, as for the file tools.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .builtins import READ_TOOLS, WRITE_TOOLS
from .expand import MAX_GLOB_ENTRIES, MAX_GLOB_MATCHES, glob_paths
from .fallback import fallback_decision
from .model import Decision, Effect, Policy, worst
from .operands import ALL, NON_FILE, Operands, Transfer, operands
from .path_uses import covers, judge_path
from .paths import PROTECTED_DIR_NAMES, PROTECTED_FILE_NAMES, is_within
from .rules import PermissionRule
from .shell import Redirect, ShellAnalysis, ShellCommand, Word, analyze
from .suggest import bash_rule

__all__ = ["bash_decision"]

_LITERAL: Final = Word()
#: Taint entries: (index of the command that may create links there, absolute prefix or ALL).
_Taint = list[tuple[int, str]]


# --- where a word points -------------------------------------------------------------------


def _locate(
    policy: Policy, text: str, word: Word, whole: bool, cwd: tuple[str, ...] | None
) -> list[str] | str:
    """The absolute paths ``text`` may name, or why they cannot be known."""
    if word.dynamic:
        return "is computed at run time"
    if text.startswith("~") and word.tilde:
        head, sep, tail = text.partition("/")
        if head == "~":
            text = policy.home + sep + tail
        elif head == "~+":
            text = "." + sep + tail
        else:
            return f"uses {head}, which the analysis does not expand"
    if os.path.isabs(text):
        bases = [""]
    elif cwd is None:
        return "is relative to a directory that a cd changed"
    else:
        bases = [os.path.normpath(os.path.join(policy.root, c)) for c in cwd]
    out: list[str] = []
    for base in bases:
        lexical = os.path.normpath(os.path.join(base, text)) if base else os.path.normpath(text)
        if whole and word.glob:
            matches = glob_paths(base, text)
            if matches is None:
                return (
                    f"matches more than {MAX_GLOB_MATCHES} files (or scans over {MAX_GLOB_ENTRIES} entries)"
                )
            out.extend(matches or [lexical])
        else:
            out.append(lexical)
    return list(dict.fromkeys(out))


def _tainted(taint: _Taint, path: str, me: int) -> bool:
    return any(i != me and (t == ALL or is_within(path, t)) for i, t in taint)


def _unknown_path(policy: Policy, kind: str, label: str) -> Decision:
    """A path the analysis cannot know (computed at run time, after a lost ``cd``, from ``xargs``).

    *ask*, or *deny* when deny rules of its kind exist: an approving human
    could otherwise reach a denied file (``cd sec*; cat k``).
    """
    tools = WRITE_TOOLS if kind == "write" else READ_TOOLS
    rules = [r.raw for r in policy.deny if covers(r, tools)]
    if rules:
        return Decision(
            effect=Effect.DENY,
            reason=f"{label}; it cannot be checked against the deny rules ({', '.join(rules)}): "
            "name the path literally",
            rule=rules[0],
        )
    return Decision(effect=Effect.ASK, reason=label)


def _through_new_link(policy: Policy, label: str) -> Decision:
    """A path that may be a link made earlier in the call: its target is unknown.

    With path deny rules in force that is a *deny* (an approving human could
    otherwise read a denied file through ``ln -s . l; cat l/secrets/k``);
    in separate calls the link exists and is resolved.
    """
    rules = [r.raw for r in policy.deny if covers(r, (*READ_TOOLS, *WRITE_TOOLS))]
    if rules:
        return Decision(
            effect=Effect.DENY,
            reason=f"{label}: may go through a link made earlier in the same command, so the deny rules "
            f"({', '.join(rules)}) cannot be checked; run these commands in separate calls",
            rule=rules[0],
        )
    return Decision(
        effect=Effect.ASK,
        reason=f"{label}: may go through a link made earlier in the same command; its target is unknown",
    )


# --- one command -----------------------------------------------------------------------------


def _holds_protected(policy: Policy, directory: str) -> bool:
    """Whether unknown names written into ``directory`` could land on protected files."""
    resolved = os.path.realpath(directory)
    sandbox = policy.sandbox
    if sandbox.is_protected(directory) or sandbox.is_protected(resolved):
        return True
    if any(is_within(base, resolved) for base in (policy.root, *sandbox.additional_directories)):
        return True  # the root or above: .git, the data dir, .mcp.json live there
    names = PROTECTED_DIR_NAMES | PROTECTED_FILE_NAMES | {sandbox.data_dir.split("/")[0]}
    return any(os.path.lexists(os.path.join(resolved, n)) for n in names)


def _spreads(text: str, word: Word, recursive: bool) -> bool:
    """A source whose *contents* land in the destination under names not in the command."""
    stripped = text.rstrip("/")
    return (
        word.dynamic
        or word.glob
        or stripped in ("", ".", "..")
        or stripped.endswith(("/.", "/.."))
        or (recursive and text.endswith("/"))
    )


def _transfer_targets(policy: Policy, cmd: ShellCommand, tr: Transfer) -> tuple[list[str], list[str]] | str:
    """(paths written, directories receiving unknown names), or why they cannot be known."""
    idx, text = tr.dest
    dests = _locate(policy, text, cmd.word(idx) if idx else _LITERAL, idx > 0, cmd.cwd)
    if isinstance(dests, str):
        return f"its destination {text!r} {dests}"
    written: list[str] = []
    spread: list[str] = []
    for d in dests:
        into_dir = tr.into_dir if tr.into_dir is not None else os.path.isdir(d)
        if not into_dir:
            written.append(d)
            continue
        for i, src in tr.sources:
            if _spreads(src, cmd.word(i), tr.recursive):
                spread.append(d)
            else:
                written.append(os.path.join(d, os.path.basename(src.rstrip("/"))))
    return written, spread


def _path_decisions(
    policy: Policy, cmd: ShellCommand, ops: Operands, taint: _Taint, me: int
) -> list[Decision]:
    """Every decision about the paths command ``me`` names, reads at run time, or transfers into."""
    judge = _PathJudge(policy, cmd, ops, taint, me)
    judge.named_paths()
    judge.run_time_names()
    if ops.transfer is not None:
        judge.transfer(ops.transfer)
    return judge.out


@dataclass
class _PathJudge:
    """The path decisions of one command, collected in :attr:`out`."""

    policy: Policy
    cmd: ShellCommand
    ops: Operands
    taint: _Taint
    me: int
    out: list[Decision] = field(default_factory=list)

    def __post_init__(self) -> None:
        text = self.cmd.text
        self.text = text if len(text) <= 200 else text[:200] + "…"
        self.reader = not any(u.kind == "mention" for u in self.ops.uses)

    def judge(self, path: str, kind: str, label: str) -> None:
        """Judge one resolved path; a path a link made earlier in the call may redirect is asked."""
        d = judge_path(self.policy, path, kind, label=label, reader=self.reader)
        tainted = kind not in ("link", "mention") and _tainted(self.taint, path, self.me)
        if (d is None or d.effect is not Effect.DENY) and tainted:
            d = _through_new_link(self.policy, label)
        if d is not None:
            self.out.append(d)

    def named_paths(self) -> None:
        """Each word (or value) that names a path, at each directory the shell may be in."""
        for use in self.ops.uses:
            word = self.cmd.word(use.index) if use.index > 0 else _LITERAL
            label = f"{self.text!r} ({use.text!r})"
            located = _locate(self.policy, use.text, word, use.whole, self.cmd.cwd)
            if isinstance(located, str):
                if use.kind != "mention" or word.tilde:
                    self.out.append(_unknown_path(self.policy, use.kind, f"{label}: the path {located}"))
                continue
            for path in located:
                self.judge(path, use.kind, label)

    def run_time_names(self) -> None:
        """File names that arrive at run time (``xargs``): unknown paths of each operand kind."""
        cmd, ops = self.cmd, self.ops
        if cmd.open_args and ops.known and os.path.basename(cmd.argv[0]) not in NON_FILE:
            found = [
                _unknown_path(self.policy, k, f"{self.text!r} gets file names at run time (xargs)")
                for k in ops.operand_kinds
            ]
            self.out.append(worst(found))

    def transfer(self, tr: Transfer) -> None:
        """Where a copy, move or link lands: each written name, link target and spread directory."""
        targets = _transfer_targets(self.policy, self.cmd, tr)
        label = f"{self.text!r}"
        if isinstance(targets, str):
            self.out.append(_unknown_path(self.policy, "write", f"{label}: {targets}"))
            return
        written, spread = targets
        for path in written:
            self.judge(path, "write", f"{label} ({os.path.relpath(path, self.policy.root)!r})")
            self.link_targets(tr, path, label)
        for d in spread:
            if _holds_protected(self.policy, d):
                self.out.append(
                    Decision(
                        effect=Effect.DENY,
                        reason=f"{label} copies names that are not in the command into {d}, "
                        "which holds protected files",
                        details={"sandbox": "protected"},
                    )
                )
            else:
                self.judge(d, "write", label)

    def link_targets(self, tr: Transfer, path: str, label: str) -> None:
        """A relative symlink target is resolved from the link's directory, not the shell's."""
        uses = self.ops.uses
        for i, src in tr.sources:
            if (
                uses
                and any(u.kind == "link" and u.index == i for u in uses)
                and not os.path.isabs(src)
                and not self.cmd.word(i).dynamic
            ):
                target = os.path.normpath(os.path.join(os.path.dirname(path), src))
                self.judge(target, "link", f"{label} (link target {src!r})")


def _cwd_decision(policy: Policy, cmd: ShellCommand, taint: _Taint, me: int) -> Decision | None:
    """Where a command runs: a directory the walk lost, outside the project, or through a new link."""
    if cmd.cwd is None:
        return Decision(effect=Effect.ASK, reason=f"{cmd.text!r} runs after a cd the analysis cannot follow")
    for c in cmd.cwd:
        if c == ".":
            continue
        lexical = os.path.normpath(os.path.join(policy.root, c))
        if policy.sandbox.base_of(os.path.realpath(lexical)) is None:
            return Decision(effect=Effect.ASK, reason=f"{cmd.text!r} runs in {c}, outside the project")
        if _tainted(taint, lexical, me):
            return _through_new_link(policy, f"{cmd.text!r} runs in {c}, which")
    return None


def _command_decision(policy: Policy, cmd: ShellCommand, ops: Operands, taint: _Taint, me: int) -> Decision:
    """One command: deny rules, denied paths, ask rules, other path decisions, flags, where, allow."""
    text = cmd.text
    denied = _first_match(policy.deny, cmd)
    if denied is not None:
        return Decision(effect=Effect.DENY, reason=f"{text!r} denied by rule {denied.raw}", rule=denied.raw)
    by_paths = _path_decisions(policy, cmd, ops, taint, me) if cmd.argv else []
    for d in by_paths:
        if d.effect is Effect.DENY:
            return d
    asked = _first_match(policy.ask, cmd)
    if asked is not None:
        return Decision(
            effect=Effect.ASK, reason=f"{text!r} needs approval (rule {asked.raw})", rule=asked.raw
        )
    if by_paths:
        return by_paths[0]
    if cmd.flags:
        return Decision(
            effect=Effect.ASK,
            reason=f"{text!r} is not covered by allow rules: {'; '.join(cmd.flags)}",
            details={"flags": list(cmd.flags)},
        )
    if cmd.argv and not cmd.neutral and os.path.basename(cmd.argv[0]) not in NON_FILE:
        where = _cwd_decision(policy, cmd, taint, me)
        if where is not None:
            return where
    if cmd.neutral:
        return Decision(effect=Effect.ALLOW, reason=f"{text!r} runs nothing")
    return _allowed_or_default(policy, cmd)


def _first_match(rules: tuple[PermissionRule, ...], cmd: ShellCommand) -> PermissionRule | None:
    """The first bash rule of ``rules`` whose pattern matches the command's words (loosely)."""
    return next((r for r in rules if r.covers_tool("bash") and r.matches_command(cmd.argv, loose=True)), None)


def _allowed_or_default(policy: Policy, cmd: ShellCommand) -> Decision:
    """The first allow rule covering the command, else the policy's default."""
    text = cmd.text
    for r in policy.allow:
        if not r.covers_tool("bash"):
            continue
        if cmd.open_args and r.pattern is not None and not r.prefix:
            continue  # xargs adds arguments: only a prefix rule can cover it
        if r.matches_command(cmd.argv):
            return Decision(effect=Effect.ALLOW, reason=f"{text!r} allowed by rule {r.raw}", rule=r.raw)
    return policy.by_default(repr(text), allow_rule=bash_rule(cmd.argv))


def _redirect_decision(policy: Policy, red: Redirect, taint: _Taint) -> Decision:
    label = f"redirection {red.op} {red.target}"
    kind = "write" if red.write else "read"
    if red.dynamic:
        return _unknown_path(policy, kind, f"{label}: the target is computed at run time")
    located = _locate(policy, red.target, Word(tilde=red.tilde), False, red.cwd)
    if isinstance(located, str):
        return _unknown_path(policy, kind, f"{label}: the target {located}")
    found: list[Decision] = []
    for path in located:
        kinds = ("read", "write") if red.op == "<>" else ("write",) if red.write else ("read",)
        for kind in kinds:
            d = judge_path(policy, path, kind, label=label, redirect=True)
            if d is not None:
                found.append(d)
        if _tainted(taint, path, -1):
            found.append(_through_new_link(policy, label))
    return worst(found) if found else Decision(effect=Effect.ALLOW, reason="redirection inside the sandbox")


# --- links made during the call ------------------------------------------------------------


def _taint(policy: Policy, commands: tuple[ShellCommand, ...], ops: list[Operands]) -> _Taint:
    out: _Taint = []
    for me, (cmd, op) in enumerate(zip(commands, ops, strict=True)):
        for idx, text in op.links:
            if text == ALL:
                out.append((me, ALL))
                continue
            located = _locate(policy, text, cmd.word(idx) if idx else _LITERAL, idx > 0, cmd.cwd)
            if isinstance(located, str):
                out.append((me, ALL))
            else:
                out.extend((me, p) for p in located)
        tr = op.transfer
        if tr is not None and tr.makes_links:
            targets = _transfer_targets(policy, cmd, tr)
            if isinstance(targets, str):
                out.append((me, ALL))
            else:
                out.extend((me, p) for p in (*targets[0], *targets[1]))
    return out


# --- the whole string -------------------------------------------------------------------------


def bash_decision(policy: Policy, args: Mapping[str, Any]) -> Decision:
    """Decide one ``bash`` call (see the module doc)."""
    command = args.get("command")
    if not isinstance(command, str):
        return Decision(effect=Effect.DENY, reason="bash: argument 'command' must be a string")
    analysis: ShellAnalysis = analyze(command)
    decisions: list[Decision] = []
    if analysis.unprovable:
        decisions.append(
            Decision(
                effect=Effect.ASK,
                reason=f"cannot prove the command safe: {'; '.join(analysis.unprovable)}",
                details={"unprovable": list(analysis.unprovable)},
            )
        )
    ops = [operands(c.argv) for c in analysis.commands]
    taint = _taint(policy, analysis.commands, ops)
    for me, cmd in enumerate(analysis.commands):
        decisions.append(_command_decision(policy, cmd, ops[me], taint, me))
    for red in analysis.redirects:
        decisions.append(_redirect_decision(policy, red, taint))
    if not decisions:
        return Decision(effect=Effect.ASK, reason="no command found")
    strictest = worst(decisions)
    if strictest.effect is Effect.ASK:
        # an approving human would run all of it: a denied command visible anywhere stays denied
        denied = fallback_decision(policy, command)
        if denied is not None:
            return denied
    if strictest.effect is Effect.ALLOW:
        rules = sorted({d.rule for d in decisions if d.rule})
        return Decision(
            effect=Effect.ALLOW,
            reason="every command is allowed" + (f" ({', '.join(rules)})" if rules else ""),
            rule=rules[0] if len(rules) == 1 else None,
        )
    return strictest
