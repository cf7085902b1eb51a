"""Deleting a conversation for good: the explicit act that takes its record off the disk.

The journal has no age limit (decision 0033), so this is how a conversation's
entries leave ``JIDO_JOURNAL``. :func:`purge_conversation` removes, by subject,
everything stored for one conversation in the three streams (journal, output
events, input) and its ownership lease. The caller stops the conversation first
so no actor appends while it runs, and then writes a tombstone record.

Why a tombstone, not nothing: entry ids are derived from the conversation and a
step counter (so a replica repeating a step is deduplicated), and the streams
remember ``Nats-Msg-Id`` for their duplicate window even after a purge. A new
conversation under the same id inside that window would have its first entries
dropped as duplicates. So the id answers as unknown, and ``start`` refuses it
until :data:`REUSE_AFTER_S` has passed (``conflict``, saying when). The token
ledger keeps its usage: the project's totals do not change when a conversation
is deleted.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

import nats.js.errors

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.conversation import ConversationDeleted
from jidocode.shared.ledger import BUCKET_LEDGER, ledger_key

from .record import record_key

__all__ = ["REUSE_AFTER_S", "drop_key", "forget_usage", "purge_conversation", "reusable_at"]

#: JetStream's default duplicate window (the conversation streams keep it), plus a margin.
REUSE_AFTER_S = 130.0


def reusable_at(deleted_at: str) -> datetime:
    """When the id of a conversation deleted at ``deleted_at`` (ISO time) can be started again."""
    return datetime.fromisoformat(deleted_at.replace("Z", "+00:00")) + timedelta(seconds=REUSE_AFTER_S)


async def _purge(bus: Bus, stream: str, subject: str) -> int:
    """Remove every message of ``subject`` (a filter) from ``stream``; how many there were."""
    try:
        info = await bus.js.stream_info(stream, subjects_filter=subject)
    except nats.js.errors.NotFoundError:
        return 0
    count = sum((info.state.subjects or {}).values())
    if count:
        await bus.js.purge_stream(stream, subject=subject)
    return count


async def drop_key(bus: Bus, bucket: str, key: str, *, children: bool = False) -> int:
    """Remove ``key`` of KV ``bucket`` with its history and delete marker (``children``: its
    ``<key>.>`` keys too), so nothing of it stays on the server; how many messages went."""
    gone = await _purge(bus, f"KV_{bucket}", f"$KV.{bucket}.{key}")
    if children:
        gone += await _purge(bus, f"KV_{bucket}", f"$KV.{bucket}.{key}.>")
    return gone


async def forget_usage(bus: Bus, project_id: str, conversation_id: str) -> int:
    """Remove a conversation's token ledger entries (its totals and its sub-agents'): what a
    prune does after the delete (decision 0325); the project's totals lose its usage."""
    return await drop_key(bus, BUCKET_LEDGER, ledger_key(project_id, conversation_id), children=True)


async def purge_conversation(bus: Bus, project_id: str, conversation_id: str) -> ConversationDeleted:
    """Purge one (stopped) conversation's journal, output, input and records."""
    journal = await _purge(bus, subjects.STREAM_JOURNAL, subjects.journal(project_id, conversation_id))
    events = await _purge(
        bus, subjects.STREAM_EVENTS, subjects.conversation_out_filter(project_id, conversation_id)
    )
    inputs = await _purge(bus, subjects.STREAM_CONV_IN, subjects.conversation_in(project_id, conversation_id))
    owners = await bus.kv(subjects.BUCKET_OWNERS)
    with contextlib.suppress(nats.js.errors.KeyNotFoundError):
        await owners.purge(record_key(project_id, conversation_id))
    return ConversationDeleted(
        project_id=project_id,
        conversation_id=conversation_id,
        journal_entries=journal,
        events=events,
        inputs=inputs,
    )
