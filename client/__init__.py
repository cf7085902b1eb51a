"""The JidoCode client SDK over NATS (seed 003): connect, configure_tools, send_message,
get_history, reset_session, get_context_usage, cancel, resume; seed 000's slash commands
(run_command, parse_slash_command) and reload_assets."""

from __future__ import annotations

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
from ._plugins import Plugin, PluginRegistry
from ._turn import TurnOutcome, TurnTracker

__all__ = [
    "ApprovalRequest",
    "ApproveCallback",
    "CompactionResult",
    "ContextUsage",
    "Decision",
    "JidoClient",
    "Plugin",
    "PluginRegistry",
    "RenderedCommand",
    "SlashCommand",
    "TurnFailed",
    "TurnOutcome",
    "TurnTracker",
    "connect",
    "is_command_name",
    "parse_slash_command",
]
