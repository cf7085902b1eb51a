"""Retention: the conversations nobody ran for days leave the disk (decision 0325).

``JIDO_JOURNAL``, ``jido_conversations`` and ``jido_llm_ledger`` hold one entry per
conversation ever made; nothing else shrinks them. A prune deletes, through the
path of ``jidocode conversations delete`` (:mod:`.deletion`), each conversation
that has **ended**: no replica runs it (it holds no lease) and its last activity
(its latest journal entry, stop or record change) is older than the cutoff. Its
token ledger entries go too, and the tombstones ``delete`` leaves are dropped
once their id may be used again (:func:`.deletion.reusable_at`).

``jidocode conversations prune`` asks for one project; with the user's
``conversations.retention_days`` set (global settings only: a project cannot
make the engine delete), :class:`RetentionSweep` prunes every project
periodically, on one replica at a time (a lease in :data:`SWEEP_BUCKET`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.conversation import ConversationSummary
from jidocode.shared.kv_keys import kv_keys
from jidocode.shared.lease import BUS_ERRORS, Held, LeaseBucket

from .deletion import reusable_at
from .record import ConversationRecord

__all__ = [
    "SWEEP_BUCKET",
    "RetentionSweep",
    "last_moment",
    "project_ids",
    "prunable",
    "retention_days",
    "tombstone_expired",
]

log = logging.getLogger("jidocode.conversation.retention")

#: The bucket of the sweep's lease (one key): one replica sweeps at a time.
SWEEP_BUCKET: Final = subjects.BUCKET_RETENTION
_SWEEP_KEY: Final = "sweep"
#: How often the sweep runs (seconds; ``JIDO_RETENTION_SWEEP_S``).
DEFAULT_PERIOD_S: Final = 3600.0


# -- decisions ---------------------------------------------------------------------------


def _moment(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def last_moment(summary: ConversationSummary) -> datetime | None:
    """The latest of the conversation's last journal entry, record change and creation."""
    moments = [_moment(v) for v in (summary.last_activity, summary.updated_at, summary.created_at)]
    known = [m for m in moments if m is not None]
    return max(known) if known else None


def prunable(summary: ConversationSummary, cutoff: datetime) -> bool:
    """Whether a prune with ``cutoff`` deletes it: ended (no replica runs it) and last active
    before ``cutoff``. A conversation whose times cannot be read is kept."""
    last = last_moment(summary)
    return summary.owner is None and last is not None and last < cutoff


def tombstone_expired(record: ConversationRecord, now: datetime) -> bool:
    """Whether a deleted conversation's tombstone may go: its id can be started again."""
    if record.status != "deleted" or _moment(record.updated_at) is None:
        return False
    return now > reusable_at(record.updated_at)


def project_ids(record_keys: list[str]) -> list[str]:
    """The projects of the record keys ``<project>.<conversation>`` (two tokens: not the
    ``loaded.<p>.<c>`` keys beside them), sorted."""
    return sorted({key.split(".", 1)[0] for key in record_keys if key.count(".") == 1})


def retention_days(jido_home: Path) -> float | None:
    """The user's ``conversations.retention_days`` (global settings; ``None``: off). Settings
    that fail to load turn the sweep off (it never deletes on a guess)."""
    from jidocode.shared.settings import load_settings

    loaded = load_settings(None, jido_home=jido_home, trusted=False)
    if loaded.broken:
        log.warning("retention sweep off: the settings have errors (%s)", loaded.broken[0].problem)
        return None
    return loaded.settings.conversations.retention_days


def sweep_period_s(env: dict[str, str] | None = None) -> float:
    """How often the sweep runs, from ``JIDO_RETENTION_SWEEP_S`` (default an hour)."""
    raw = (os.environ if env is None else env).get("JIDO_RETENTION_SWEEP_S")
    try:
        period = float(raw) if raw else DEFAULT_PERIOD_S
    except ValueError:
        raise ValueError(f"JIDO_RETENTION_SWEEP_S: not a number of seconds: {raw!r}") from None
    if period <= 0:
        raise ValueError(f"JIDO_RETENTION_SWEEP_S must be positive, not {period}")
    return period


# -- effects -----------------------------------------------------------------------------

#: Prunes one project: (project id, older than days).
PruneProject = Callable[[str, float], Awaitable[object]]


class RetentionSweep:
    """Every ``period_s``, when the user set ``conversations.retention_days``, prune every
    project with it, holding the sweep lease so that one replica sweeps at a time."""

    def __init__(self, bus: Bus, prune: PruneProject, *, jido_home: Path, period_s: float) -> None:
        self.bus = bus
        self.prune = prune
        self.jido_home = jido_home
        self.period_s = period_s
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop(), name="retention-sweep")

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                await self.sweep_once()
            except (*BUS_ERRORS, TimeoutError) as exc:
                log.warning("retention sweep failed, tried again in %g s: %s", self.period_s, exc)

    async def sweep_once(self) -> int:
        """One sweep if retention is on and no other replica sweeps; the projects pruned."""
        days = await asyncio.to_thread(retention_days, self.jido_home)
        if days is None:
            return 0
        leases = await LeaseBucket.open(
            self.bus, SWEEP_BUCKET, ttl_s=self.period_s, history=1, ttl=self.period_s
        )
        held = await leases.take(_SWEEP_KEY, self.bus.source)
        if not isinstance(held, Held):
            return 0
        try:
            records = await self.bus.kv(subjects.BUCKET_CONVERSATIONS)
            projects = project_ids(await kv_keys(records))
            for project_id in projects:
                await self.prune(project_id, days)
            return len(projects)
        finally:
            with contextlib.suppress(*BUS_ERRORS):
                await leases.release(held)
