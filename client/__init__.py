"""The JidoCode client SDK over NATS (seed 003): connect, configure_tools, send_message,
get_history, reset_session, get_context_usage, cancel, resume; seed 000's slash commands
(run_command, parse_slash_command) and reload_assets; rewind (issue 30)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._callbacks import ApprovalAnswer
from ._client import (
    ApprovalRequest,
    ApproveCallback,
    ContextUsage,
    Decision,
    JidoClient,
    TurnFailed,
    connect,
)
from ._commands import RenderedCommand, SlashCommand, is_command_name, parse_slash_command
from ._compaction import CompactionResult
from ._rewind import RewindOutcome, RewindWhat, UserMessageRef, rewindable_messages
from ._turn import TurnOutcome, TurnTracker

if TYPE_CHECKING:
    from ._plugins import Plugin, PluginRegistry


def __getattr__(name: str) -> Any:
    """The plugin registry's names, imported on first use (its models cost a CLI's start)."""
    if name in ("Plugin", "PluginRegistry"):
        from . import _plugins

        return getattr(_plugins, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "ApproveCallback",
    "CompactionResult",
    "ContextUsage",
    "Decision",
    "JidoClient",
    "Plugin",
    "PluginRegistry",
    "RenderedCommand",
    "RewindOutcome",
    "RewindWhat",
    "SlashCommand",
    "TurnFailed",
    "TurnOutcome",
    "TurnTracker",
    "UserMessageRef",
    "connect",
    "is_command_name",
    "parse_slash_command",
    "rewindable_messages",
]
