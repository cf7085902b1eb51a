"""The project policy (seed 000 ``Project.Policy``, seed 001 permissions): a pure core.

- :mod:`.paths`: the path sandbox (root, outside directories, sensitive and protected files)
- :mod:`.rules`: ``Tool(pattern)`` permission rules, their parser and their path anchors
- :mod:`.model`: :class:`Effect`, :class:`Decision`, :class:`Policy`
- :mod:`.shell`: shell command analysis with bashlex (commands, words, redirections, working directory)
- :mod:`.programs`: program-valued options and which builtins are inert
- :mod:`.scripts`: sed scripts and awk programs that run commands or touch files
- :mod:`.operands`: which words of a command name files, and how each is used
- :mod:`.commands`: the bash decision (commands, paths, links made in the call)
- :mod:`.fallback`: deny rules against a crude split of the whole string
- :mod:`.decision`: :func:`authorize` (deny beats ask beats allow)
- :mod:`.suggest`: the allow rule a default decision names (``Bash(npm test:*)``)
- :mod:`.starter`: the permissions while no settings say what is allowed (reads, then ask)
- :mod:`.loader`: the policy of a project from its settings.json layers

``docs/security.md`` ("Shell analysis") says what the bash reading claims and
what it does not; decision 0120 why it is built this way.
"""

from __future__ import annotations

from .decision import PATH_ARGS, Decision, Effect, Policy, authorize, filter_tools, tool_exposed
from .loader import policy_from_settings
from .paths import PathCheck, PathSandbox, bad_path_chars, is_within
from .rules import InvalidRule, PermissionRule, parse_rule, parse_rules
from .shell import Redirect, ShellAnalysis, ShellCommand, analyze

__all__ = [
    "PATH_ARGS",
    "Decision",
    "Effect",
    "InvalidRule",
    "PathCheck",
    "PathSandbox",
    "PermissionRule",
    "Policy",
    "Redirect",
    "ShellAnalysis",
    "ShellCommand",
    "analyze",
    "authorize",
    "bad_path_chars",
    "filter_tools",
    "is_within",
    "parse_rule",
    "parse_rules",
    "policy_from_settings",
    "tool_exposed",
]
