"""The conservative reading of a command string, for deny rules only.

When the analysis of a string ends in *ask* (it could not prove the string
safe, a command is flagged, a path needs a human), an approving user would
run whatever the string holds, a denied command included. So deny rules are
then also matched against a deliberately crude split of the whole string: on
``;``, ``&&``, ``||``, ``|``, ``&``, newlines, parentheses, ``$(``, ``<(``,
``>(`` and backticks, with every quote and backslash removed from the words
and braces expanded (``t{o,}uch``), at every word position (``sudo touch x``,
``X=1 touch x``, ``echo 'touch x' | sh`` and ``find -exec touch`` all meet
``Bash(touch:*)``). A path deny rule (``Read(secrets/**)``) meets any word
naming such a path (globs matched against the file system), and a protected
file named after ``>`` or to a writing program is denied as it would be in a
parsed string.

Over-matching here only turns an *ask* into a *deny*; it never allows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Final

from .builtins import PATH_TOOLS
from .expand import brace_expand, glob_paths
from .model import Decision, Effect, Policy

__all__ = ["fallback_decision", "segments"]

_SPLIT: Final = re.compile(r"\|\||&&|;;|\$\(|<\(|>\(|[;&|\n`()]")
_QUOTES: Final = re.compile(r"[\"'\\]")
_REDIRECT_TARGET: Final = re.compile(r"[0-9&]?>>?\|?\s*([^\s;&|<>()`]+)")
_WRITERS: Final = frozenset(
    {"cp", "mv", "tee", "ln", "install", "touch", "rm", "truncate", "dd", "sed", "rsync", "chmod", "mkdir"}
)


def _clean(word: str) -> str:
    return _QUOTES.sub("", word.replace("$'", "'").replace('$"', '"'))


def segments(command: str) -> Iterator[tuple[str, ...]]:
    """The words of each crude segment of ``command``: quotes and backslashes removed, braces expanded."""
    text = command.replace("\\\n", "")
    for seg in _SPLIT.split(text):
        words = tuple(x for w in seg.split() for x in brace_expand(_clean(w)) if x not in ("", "{", "}"))
        if words:
            yield words


def _absolute(policy: Policy, token: str) -> list[str]:
    """The paths ``token`` may name (globs expanded against the file system, bounded)."""
    if not token or token.startswith("-") or len(token) > 4096 or "\x00" in token:
        return []
    if token == "~" or token.startswith("~/"):
        token = policy.home + token[1:]
    lexical = policy.sandbox.lexical(token)
    if any(c in token for c in "*?["):
        return [lexical, *(glob_paths(policy.root, token) or [])]
    return [lexical]


def _path_denied(policy: Policy, path: str) -> str | None:
    for r in policy.deny:
        if r.kind != "path" or not any(r.covers_tool(t) for t in PATH_TOOLS):
            continue
        if r.matches_path(path, root=policy.root, home=policy.home, below=True):
            return r.raw
    return None


def fallback_decision(policy: Policy, command: str) -> Decision | None:
    """*deny* when a deny rule or a protected write shows anywhere in ``command``; else ``None``."""
    for words in segments(command):
        denied = _denied_command(policy, words) or _denied_words(policy, words)
        if denied is not None:
            return denied
    return _protected_redirect(policy, command)


def _denied_command(policy: Policy, words: tuple[str, ...]) -> Decision | None:
    """A bash deny rule matching the segment from any of its words on."""
    for i in range(len(words)):
        rest = words[i:]
        for r in policy.deny:
            if r.covers_tool("bash") and r.matches_command(rest, loose=True):
                return Decision(
                    effect=Effect.DENY,
                    reason=f"{' '.join(rest)!r} denied by rule {r.raw} (found in the whole string, which "
                    "could not be proven safe)",
                    rule=r.raw,
                )
    return None


def _denied_words(policy: Policy, words: tuple[str, ...]) -> Decision | None:
    """A word of the segment naming a denied path, or a protected one when the segment writes."""
    writer = any(os.path.basename(w) in _WRITERS for w in words)
    for w in words:
        for token in re.split(r"[<>=,:]", w):
            for path in _absolute(policy, token):
                denied = _denied_path(policy, path, token, words[0] if writer else None)
                if denied is not None:
                    return denied
    return None


def _protected_redirect(policy: Policy, command: str) -> Decision | None:
    for m in _REDIRECT_TARGET.finditer(command):
        for target in brace_expand(_clean(m.group(1))):
            for path in _absolute(policy, target):
                if policy.sandbox.is_protected(path):
                    return Decision(
                        effect=Effect.DENY,
                        reason=f"redirection to the protected file {m.group(1)!r}",
                        details={"sandbox": "protected"},
                    )
    return None


def _denied_path(policy: Policy, path: str, token: str, writer: str | None) -> Decision | None:
    rule = _path_denied(policy, path)
    if rule is not None:
        return Decision(effect=Effect.DENY, reason=f"{token!r} is denied by rule {rule}", rule=rule)
    if writer is not None and policy.sandbox.is_protected(path):
        return Decision(
            effect=Effect.DENY,
            reason=f"{writer} would modify the protected file {token!r}",
            details={"sandbox": "protected"},
        )
    return None
