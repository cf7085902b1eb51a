"""glob and grep: walk the tree under the checked path, never following symlinks.

Every file met is authorized on its own, as ``read_file`` would be:

- a file the policy denies (a deny rule, a sensitive file, anything
  resolving outside the sandbox) is skipped silently — its name and its
  content never appear;
- a file under an **ask** rule is *withheld*: it is not searched (grep) or
  listed (glob), and the result says how many were withheld and which, so
  the model can ask for them one by one with ``read_file`` (which asks the
  user). When the call itself was approved under that same ask rule, the
  files it covers are searched.

The regular expressions (the grep pattern, and the globs turned into
regexes) run under the ``regex`` module with a deadline equal to the call's
timeout and with the interpreter lock released, so a catastrophic pattern
(``(a|aa)+$``) ends as a ``timeout`` error and never stalls other calls on
the same runner.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import regex

from jidocode.services.tool_runner import fsops
from jidocode.shared.errors import InvalidInput, JidoError, NotFound, RequestTimeout
from jidocode.shared.policy import Effect, authorize
from jidocode.shared.policy.rules import glob_to_regex
from jidocode.shared.tools import specs
from jidocode.shared.tools.inputs import GlobInput, GrepInput

from .base import BuiltinTool, ToolContext

__all__ = ["GLOB", "GREP", "MAX_WITHHELD_LISTED"]

_SKIP_DIRS: Final = frozenset({".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".ruff_cache"})
_MAX_FILE: Final = 4 * 1024 * 1024
_MAX_LINE: Final = 2000
#: At most this many withheld paths are named in a result (all are counted).
MAX_WITHHELD_LISTED: Final = 20


def _walk(top: str) -> Iterator[str]:
    """Regular files below ``top`` (symlinks neither followed nor listed), sorted."""
    if os.path.isfile(top) and not os.path.islink(top):
        yield top
        return
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                yield full


#: Share of the call's budget a regex search may use. The ``regex`` module looks at its
#: clock coarsely: a catastrophic search given a timeout of t ran 1.3-1.7 t (measured
#: idle, more with both cores busy), so half the budget keeps the call within its limit.
_REGEX_SHARE = 0.5


class _Deadline:
    """The call's time budget; every regex match gets a share of what is left as its timeout."""

    def __init__(self, seconds: float, what: str) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left

    def expired(self) -> RequestTimeout:
        return RequestTimeout(
            f"{self.what} did not finish within {self.seconds:g} s (a pattern with catastrophic "
            "backtracking, or too much to search); narrow the pattern or the path",
            details={"timeout_s": self.seconds},
        )

    def match(self, rx: regex.Pattern[str], text: str) -> bool:
        try:
            return rx.match(text, timeout=self.left() * _REGEX_SHARE, concurrent=True) is not None
        except TimeoutError:
            raise self.expired() from None

    def search(self, rx: regex.Pattern[str], text: str) -> bool:
        try:
            return rx.search(text, timeout=self.left() * _REGEX_SHARE, concurrent=True) is not None
        except TimeoutError:
            raise self.expired() from None


def _glob_rx(pattern: str) -> regex.Pattern[str]:
    return regex.compile("^" + glob_to_regex(pattern) + "$", regex.DOTALL)


@dataclass
class _Access:
    """Which files of a walk may be opened; what was withheld under ask rules."""

    ctx: ToolContext
    tool: str
    withheld: list[str] = field(default_factory=list)
    withheld_count: int = 0

    def verdict(self, path: str) -> Literal["open", "skip", "withhold"]:
        d = authorize(self.ctx.policy, self.tool, {"path": path})
        if d.effect is Effect.DENY and (d.rule is not None or "sandbox" in d.details):
            return "skip"
        if d.effect is Effect.ASK:
            approved = self.ctx.decision.effect is Effect.ASK and self.ctx.decision.rule == d.rule
            if not approved:
                self.withheld_count += 1
                if len(self.withheld) < MAX_WITHHELD_LISTED:
                    self.withheld.append(self.ctx.rel(path))
                return "withhold"
        return "open"

    def report(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.withheld_count:
            out["withheld"] = self.withheld
            out["withheld_count"] = self.withheld_count
            out["note"] = (
                f"{self.withheld_count} file(s) fall under ask rules and were not "
                f"{'searched' if self.tool == 'grep' else 'listed'}; read one with read_file to ask the "
                "user for it"
            )
        return out


def _glob(args: GlobInput, ctx: ToolContext) -> dict[str, Any]:
    if not os.path.isdir(ctx.path):
        raise NotFound(f"{args.path}: no such directory")
    deadline = _Deadline(ctx.timeout_s, "glob")
    rx = _glob_rx(args.pattern.lstrip("/"))
    access = _Access(ctx, "glob")
    matches: list[str] = []
    truncated = False
    for full in _walk(ctx.path):
        rel = os.path.relpath(full, ctx.path)
        if deadline.match(rx, rel) or ("/" not in args.pattern and deadline.match(rx, os.path.basename(rel))):
            if access.verdict(full) != "open":
                continue
            if len(matches) >= args.max_results:
                truncated = True
                break
            matches.append(ctx.rel(full))
    out = {"pattern": args.pattern, "path": ctx.rel(ctx.path), "matches": matches, "truncated": truncated}
    return access.report(out)


def _grep(args: GrepInput, ctx: ToolContext) -> dict[str, Any]:
    deadline = _Deadline(ctx.timeout_s, "grep")
    try:
        rx = regex.compile(args.pattern, regex.IGNORECASE if args.case_insensitive else 0)
    except (regex.error, ValueError, OverflowError) as exc:
        raise InvalidInput(f"invalid regular expression: {exc}") from None
    name_rx = _glob_rx(args.glob) if args.glob else None
    if not os.path.exists(ctx.path):
        raise NotFound(f"{args.path}: no such file or directory")
    access = _Access(ctx, "grep")
    results: list[dict[str, Any]] = []
    truncated = False
    budget = ctx.output_cap
    files = 0
    for full in _walk(ctx.path):
        rel_top = os.path.relpath(full, ctx.path)
        if name_rx is not None and not (
            deadline.match(name_rx, rel_top) or deadline.match(name_rx, os.path.basename(full))
        ):
            continue
        if access.verdict(full) != "open":
            continue
        try:
            raw = fsops.read_bytes(ctx.base, full, limit=_MAX_FILE)
        except (JidoError, OSError):  # unreadable, too large or raced: skipped, grep is best effort
            continue
        if b"\x00" in raw[:8192]:
            continue
        files += 1
        for lineno, line in enumerate(raw.decode("utf-8", "replace").splitlines(), start=1):
            if deadline.search(rx, line):
                text = line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + "…"
                budget -= len(text) + len(full) + 16
                if len(results) >= args.max_results or budget < 0:
                    truncated = True
                    break
                results.append({"path": ctx.rel(full), "line": lineno, "text": text})
        if truncated:
            break
    out = {"pattern": args.pattern, "matches": results, "files_searched": files, "truncated": truncated}
    return access.report(out)


async def _glob_tool(args: GlobInput, ctx: ToolContext) -> dict[str, Any]:
    return await asyncio.to_thread(_glob, args, ctx)


async def _grep_tool(args: GrepInput, ctx: ToolContext) -> dict[str, Any]:
    return await asyncio.to_thread(_grep, args, ctx)


GLOB = BuiltinTool(specs.GLOB, _glob_tool)  # type: ignore[arg-type]
GREP = BuiltinTool(specs.GREP, _grep_tool)  # type: ignore[arg-type]
