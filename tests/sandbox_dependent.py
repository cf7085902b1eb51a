"""The tests whose outcome depends on which OS sandbox runs their commands (marker ``sandbox``).

``.ci/run`` runs them a second time with ``JIDO_SANDBOX_MODE=landlock`` (decision 0316): on a
machine with bubblewrap, ``auto`` never reaches Landlock, and the fallback every machine without
bubblewrap gets would otherwise go untested. They are the tests that start sandboxed processes
(bash calls, quality checks, git runs, CLI providers, stdio MCP servers, skill scripts) under the
default mode. A test already parametrised over both sandboxes (a ``mode`` parameter, see
``tests/security/sandbox_support.py``) runs under each in the first pass and is not marked.

    ./dev test -m sandbox                           # these tests, under the default sandbox
    JIDO_SANDBOX_MODE=landlock ./dev test -m sandbox  # the second pass of .ci/run
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

__all__ = ["MARKER", "SANDBOX_DEPENDENT", "mark_if_sandbox_dependent"]

MARKER: Final = "sandbox"
#: What ``pytest --markers`` says of the marker.
DESCRIPTION: Final = (
    f"{MARKER}: starts sandboxed processes under the default mode (tests/sandbox_dependent.py); "
    ".ci/run runs them again with JIDO_SANDBOX_MODE=landlock"
)

#: Test files (relative to the repository), or single tests (``file::name``), that start sandboxed
#: processes under ``auto``. Not here: ``tests/unit/prd/test_quality.py``, bubblewrap's by design
#: (its fixture skips without it) with Landlock cases of its own.
SANDBOX_DEPENDENT: Final = frozenset(
    {
        "tests/contract/test_acp.py::test_rewind_lists_the_messages_then_restores_files_the_editor_allowed",
        "tests/contract/test_prd_providers.py",
        "tests/e2e/test_chat.py::test_cancel_in_the_middle_of_a_long_bash",
        "tests/e2e/test_chat_prd.py",
        "tests/e2e/test_console.py",
        "tests/e2e/test_lifecycle.py",
        "tests/e2e/test_mcp_stdio.py",
        "tests/integration/assets/test_skill_signals_bus.py",
        "tests/integration/conversation/test_subagents.py::test_cancel_of_the_parent_cancels_the_child_and_its_bash",
        "tests/integration/conversation/test_tools_bridge.py",
        "tests/integration/egress/test_web_fetch_system.py::test_a_programs_connection_under_an_ask_rule_asks_through_the_sdk",
        "tests/integration/gateway/test_console_rewind.py",
        "tests/integration/mcp/test_prd_tools.py",
        "tests/integration/mcp/test_rewind_tools.py",
        "tests/integration/prd/test_finish.py",
        "tests/integration/prd/test_finish_push.py::test_a_remote_on_a_denied_host_is_refused_naming_it",
        "tests/integration/prd/test_finish_push.py::test_a_repository_that_rewrites_the_push_url_is_refused_naming_the_key",
        "tests/integration/rewind/test_rewind.py",
        "tests/integration/tools/test_mcp_servers_bus.py",
        "tests/integration/tools/test_tool_runner_bus.py",
        "tests/security/test_policy_bus.py",
        "tests/security/test_runtime_attacks.py",
        "tests/security/test_sandbox_worktree.py",
        "tests/unit/prd/test_gitrun.py",
        "tests/unit/prd/test_notify.py::test_a_command_hook_runs_in_the_sandbox_with_the_notice_as_arguments",
        "tests/unit/tools/test_builtin_tools.py",
    }
)
_MODES: Final = ("bubblewrap", "landlock")
_REPO: Final = Path(__file__).resolve().parent.parent


def _parametrised_over_modes(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("mode") in _MODES


def mark_if_sandbox_dependent(item: pytest.Item) -> None:
    """Add the ``sandbox`` marker to ``item`` when it (or its file) is listed and it does not pick a
    mode itself."""
    try:
        rel = item.path.resolve().relative_to(_REPO).as_posix()
    except ValueError:
        return
    name = getattr(item, "originalname", item.name)
    listed = rel in SANDBOX_DEPENDENT or f"{rel}::{name}" in SANDBOX_DEPENDENT
    if listed and not _parametrised_over_modes(item):
        item.add_marker(MARKER)
