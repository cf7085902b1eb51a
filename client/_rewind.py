"""``JidoClient.rewind()``: go back before a user message — its files, the conversation, or both.

The implementation is :mod:`jidocode.shared.rewind` (the console's routes and the MCP server's
``rewind`` tool use it too, decision 0346); the SDK's names are re-exported here. See
docs/rewind.md.
"""

from __future__ import annotations

from jidocode.shared.rewind import (
    CHECKPOINT_TIMEOUT_S,
    Confirm,
    RewindOutcome,
    RewindWhat,
    UserMessageRef,
    checkpoint_before,
    rewind,
    rewindable_messages,
)

__all__ = [
    "CHECKPOINT_TIMEOUT_S",
    "Confirm",
    "RewindOutcome",
    "RewindWhat",
    "UserMessageRef",
    "checkpoint_before",
    "rewind",
    "rewindable_messages",
]
